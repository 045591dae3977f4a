"""The papers' pages (``knowledge_lm.report.papers``): every reference row renders, ours beside the paper's; their
definitions (``benchmarks/tables/``, ``knowledge_lm.report.paper_tables``) are data, each file checked."""

import ast
from pathlib import Path

import pytest
import yaml
from helpers import write_synthetic_result

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.paths import BENCHMARKS_ENV, benchmarks_dir
from knowledge_lm.core.registry import DATASETS, METHODS
from knowledge_lm.report import papers
from knowledge_lm.report.leaderboard import write_leaderboards
from knowledge_lm.report.paper_tables import paper_tables, read_tables_file, sweep_groups, tables_in
from knowledge_lm.report.papers import other_splits, render_papers, unrendered_references

# Datasets of the papers that are not datasets of the suite: their columns show the paper's numbers only.
NOT_HERE = {"wikihop_masked", "lama"}


def test_every_reference_row_renders_on_a_paper_page():
    assert unrendered_references() == []


def test_reference_metrics_are_those_our_datasets_score():
    for ref in yaml.safe_load((benchmarks_dir() / "references.yaml").read_text()):
        if ref["dataset"] in NOT_HERE:
            continue
        dataset = DATASETS.get(ref["dataset"])
        by_split = ref.get("metrics_by_split", {})
        assert set(by_split) <= other_splits(), (ref["row"], set(by_split))  # a split some page's column shows
        for metrics in (ref["metrics"], *by_split.values()):
            for task, values in metrics.items():
                assert set(values) <= set(dataset.spec(task).metrics), (ref["row"], ref["dataset"], task)


def test_one_page_per_table_and_figure_and_a_status_readme():
    texts, _ = render_papers([])
    tables = paper_tables()
    assert len(tables) == 34 and len({t.slug for t in tables}) == 34
    assert [t.paper for t in tables] == sorted(t.paper for t in tables)  # the papers in the order of their ids
    assert set(texts) == {f"{t.slug}.md" for t in tables} | {"README.md"}
    assert all(f"]({t.slug}.md)" in texts["README.md"] for t in tables)
    assert "MiniLM-L6" in texts["kam-table1.md"] and "What differs from the paper" in texts["kam-table1.md"]
    assert "klm bench --dataset tacred" in texts["erica-table2.md"]  # a table needing the user's data says how
    assert "-NSP" not in texts["erica-table1.md"] and "-NSP" in texts["erica-table10.md"]  # Table 10 is not Table 1


def test_our_rows_stand_beside_the_papers_with_avg_and_params(tmp_path):
    results, out = tmp_path / "results", tmp_path / "leaderboards"
    for method, values in (("baseline", (60.0, 62.0, 67.0)), ("kam", (70.0, 71.0, 72.0))):
        for seed, value in zip((1, 2, 3), values):
            for task in ("rte", "cola"):
                write_synthetic_result(
                    results, method, task, 1.0, seed, value, backbone={"checksum": "a", "parameters": 22565376}
                )
    write_leaderboards(results, out)
    text = (out / "papers" / "kam-table1.md").read_text()
    lines = text.splitlines()
    kam = next(line for line in lines if line.startswith("| kam |"))
    assert "71.0 ± 1.0 (n=3)" in kam and kam.endswith("| 71.0 | 22.6M |")  # Avg over CoLA and RTE, ours alike
    bert = next(line for line in lines if line.startswith("| † BERT-Base "))
    assert bert.endswith("| 77.5 (paper's) | 109.5M |")  # the paper's own Avg, as printed
    assert lines.index(kam) < lines.index(bert)
    write_leaderboards(results, out)
    assert (out / "papers" / "kam-table1.md").read_text() == text  # deterministic


def test_mnli_mismatched_is_a_column_of_its_own_beside_the_papers_mnli_mm(tmp_path):
    results, out = tmp_path / "results", tmp_path / "leaderboards"
    for seed, (matched, mismatched) in zip((1, 2), ((60.0, 70.0), (62.0, 72.0))):
        write_synthetic_result(
            results,
            "kam",
            "mnli",
            1.0,
            seed,
            matched,
            report_split="test",
            metric="accuracy",
            metrics={
                "dev": {"accuracy": 50.0},
                "test": {"accuracy": matched},
                "test_mismatched": {"accuracy": mismatched},
            },
        )
    write_leaderboards(results, out)
    lines = (out / "papers" / "kam-table1.md").read_text().splitlines()
    header = next(line for line in lines if line.startswith("| row |")).split(" | ")
    kam = next(line for line in lines if line.startswith("| kam |")).split(" | ")
    bert = next(line for line in lines if line.startswith("| † BERT-Base ")).split(" | ")
    at = header.index("MNLI-m")
    assert header[at + 1] == "MNLI-mm"
    assert kam[at].startswith("61.0 ± 1.4 (n=2)") and kam[at + 1].startswith("71.0 ± 1.4 (n=2)")
    assert (bert[at], bert[at + 1]) == ("83.6", "83.2")  # the paper's MNLI-m/-mm
    sisr = (out / "papers" / "sisr-table2.md").read_text()
    assert "MNLI-mm" not in sisr and "| MNLI-m |" in sisr  # SI+SR's Table 2 prints one MNLI column


def test_spectra_by_fraction_are_the_seeds_mean_of_each_rank():
    import pandas as pd

    from knowledge_lm.report.papers import spectra_lines

    rows = [
        {
            "dataset": "openentity",
            "task": "main",
            "variant": "",
            "method": "baseline",
            "fraction": fraction,
            "seed": seed,
            "spectrum": [float(2**i) * seed for i in range(10, 0, -1)],
        }
        for fraction in (0.01, 1.0)
        for seed in (1, 3)
    ] + [
        {
            "dataset": "openentity",
            "task": "main",
            "variant": "",
            "method": "kam",
            "fraction": 1.0,
            "seed": 1,
            "spectrum": None,
        }
    ]
    lines = spectra_lines((("openentity", "main", ("baseline", "kam")),), pd.DataFrame(rows))
    assert "| baseline | 1% | 2 | 2.05e+03 | 1.02e+03 | 256 | 16 | — | — | — | — | 4 |" in lines
    assert any(line.startswith("| baseline | 100% | 2 |") for line in lines)
    assert not any(line.startswith("| kam ") for line in lines)  # no spectrum kept: no row


TABLE_FILES = sorted((benchmarks_dir() / "tables").glob("*.yaml"))


def test_papers_py_holds_no_table_definitions():
    """The tables are data (benchmarks/tables/): no literal of ``report/papers.py`` spans over 50 lines."""
    literals = (ast.Dict, ast.List, ast.Tuple, ast.Set, ast.JoinedStr)
    long = [
        f"line {node.lineno}: {type(node).__name__} of {node.end_lineno - node.lineno + 1} lines"
        for node in ast.walk(ast.parse(Path(papers.__file__).read_text(encoding="utf-8")))
        if (isinstance(node, literals) or (isinstance(node, ast.Constant) and isinstance(node.value, str)))
        and node.end_lineno - node.lineno + 1 > 50
    ]
    assert long == []


@pytest.mark.parametrize("path", TABLE_FILES, ids=[path.stem for path in TABLE_FILES])
def test_table_file_validates(path):
    """Each paper's file: its keys and values checked, its sweeps' configs there, its rows methods of the suite and
    its columns of ours scores our datasets compute."""
    tables = read_tables_file(path)
    assert tables and len({table.paper for table in tables}) == 1
    for table in tables:
        for section in table.sections:
            assert all(row.method in METHODS.names() for row in section.rows), (table.slug, section.title)
            for column in section.columns:
                if column.ours is not None:
                    dataset, task, metric = column.ours
                    assert metric in DATASETS.get(dataset).spec(task).metrics, (table.slug, column.label)
        assert all(method in METHODS.names() for _, _, methods in table.spectra for method in methods)


def test_table_files_are_every_paper_table_and_no_sweep_config():
    assert {path.stem for path in TABLE_FILES} == {"sisr", "kam", "erica"}
    assert all("dataset" not in yaml.safe_load(path.read_text()) for path in TABLE_FILES)


GOOD_FILE = """paper: "001"
title: KAM-BERT
tables:
  kam-table6:
    name: Table 6
    caption: Ablation study on GLUE
    status: partial
    why: run on our GLUE tasks
    sweeps: [kam_glue]
    sections:
      - title: GLUE (100%)
        rows: [baseline, kam]
        columns:
          - {label: CoLA, paper: [glue, cola, matthews], ours: [glue, cola, matthews]}
"""


@pytest.mark.parametrize(
    "old, new, error",
    [
        ("    why: run", "    whyy: run", "tables: kam-table6: unknown key(s) whyy (known: name, caption,"),
        ("status: partial", "status: half", "tables: kam-table6.status: 'half' is none of covered, partial,"),
        ("[glue, cola, matthews]}", "[glue, cola]}", "tables: kam-table6.sections[0].columns[0].ours: [dataset, task,"),
        ("[kam_glue]", "[kam_glu]", "tables: kam-table6.sweeps: no sweep config "),
        ("rows: [baseline, kam]", "rows: [{variant: x}]", "tables: kam-table6.sections[0].rows[0]: missing method"),
        ("title: KAM-BERT\n", "", ": missing title"),
        ("CoLA, paper", "CoLA, fraction: 2, paper", "columns[0].fraction: a share of the train set in (0, 1]"),
    ],
)
def test_a_bad_table_entry_is_one_line_naming_the_file_and_key(tmp_path, old, new, error):
    (tmp_path / "kam_glue.yaml").write_text("dataset: glue\n")
    path = tmp_path / "tables" / "kam.yaml"
    path.parent.mkdir()
    path.write_text(GOOD_FILE)
    assert read_tables_file(path)[0].sweeps == {"kam-table6": ("kam_glue",)}
    assert old in GOOD_FILE
    path.write_text(GOOD_FILE.replace(old, new))
    with pytest.raises(KlmError) as raised:
        read_tables_file(path)
    assert str(raised.value).startswith(f"{path}: ") and error in str(raised.value), str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_table_named_twice_is_refused(tmp_path, monkeypatch):
    (tmp_path / "kam_glue.yaml").write_text("dataset: glue\n")
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "kam.yaml").write_text(GOOD_FILE)
    (tmp_path / "tables" / "more.yaml").write_text(GOOD_FILE.replace('"001"', '"002"'))
    with pytest.raises(KlmError, match=r"more.yaml: tables: kam-table6: kam-table6 is a table of .*kam.yaml too"):
        tables_in(tmp_path / "tables")
    (tmp_path / "tables" / "more.yaml").unlink()
    (tmp_path / "tables.yaml").write_text("kam-table6: [kam_glue]\n")
    monkeypatch.setenv(BENCHMARKS_ENV, str(tmp_path))
    with pytest.raises(KlmError, match="tables.yaml: kam-table6: a paper table's sweeps already"):
        sweep_groups()
    (tmp_path / "tables.yaml").write_text("both: [kam_glue]\n")
    assert sweep_groups() == {"kam-table6": ["kam_glue"], "both": ["kam_glue"]}
