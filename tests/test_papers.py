"""The papers' pages (``knowledge_lm.report.papers``): every reference row renders, ours beside the paper's."""

import yaml
from helpers import write_synthetic_result

from knowledge_lm.core.paths import benchmarks_dir
from knowledge_lm.core.registry import DATASETS
from knowledge_lm.report.leaderboard import write_leaderboards
from knowledge_lm.report.papers import OTHER_SPLITS, PAPER_TABLES, render_papers, unrendered_references

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
        assert set(by_split) <= OTHER_SPLITS, (ref["row"], set(by_split))  # a split some page's column shows
        for metrics in (ref["metrics"], *by_split.values()):
            for task, values in metrics.items():
                assert set(values) <= set(dataset.spec(task).metrics), (ref["row"], ref["dataset"], task)


def test_one_page_per_table_and_figure_and_a_status_readme():
    texts, _ = render_papers([])
    assert len(PAPER_TABLES) == 34 and len({t.slug for t in PAPER_TABLES}) == 34
    assert set(texts) == {f"{t.slug}.md" for t in PAPER_TABLES} | {"README.md"}
    assert all(f"]({t.slug}.md)" in texts["README.md"] for t in PAPER_TABLES)
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
