"""``klm export``: the leaderboard tables as CSV and JSON, read back and checked against the markdown pages."""

import csv
import json
import re

from knowledge_lm.core.results import Cell, result_files, write_json_atomic
from knowledge_lm.report.export import COLUMNS
from knowledge_lm.report.frame import fraction_label, interval_text
from knowledge_lm.report.leaderboard import page_frame
from knowledge_lm.report.pages import render_dataset

METRICS = {"rte": "accuracy", "cola": "matthews"}
BASE, OTHER = "aaaaaaaaaa11", "bbbbbbbbbb22"


def glue_result(results, method, task, fraction, seed, value, commit=BASE, variant="", degenerate=False):
    """A glue cell's result; ``degenerate``: selected at its first of two evaluations."""
    cell = Cell(method, "glue", task, fraction, seed, "minilm", variant)
    evaluations = [{"step": 5}, {"step": 10}]
    write_json_atomic(
        cell.result_path(results),
        {
            "cell": {**cell.__dict__},
            "report_split": "dev",
            "metrics": {"dev": {METRICS[task]: value}},
            "device": {"name": "Test GPU"},
            "backbone": {"checksum": "abc", "path": None},
            "git": {"commit": commit + "cdef0123"},
            "wall_time_s": 60.0,
            "data": {"subset_hash": "h", "train_size": 100},
            "budget": {"max_steps": 10, "per_device_batch_size": 32},
            "config": {},
            "versions": {},
            "evaluations": evaluations,
            "selection": {"split": "dev", "step": 5 if degenerate else 10},
        },
    )


def small_store(results):
    for seed, base, steady, noisy in ((1, 60.0, 65.0, 70.0), (2, 62.0, 67.1, 55.0), (3, 61.0, 66.2, 64.0)):
        glue_result(results, "baseline", "rte", 1.0, seed, base)
        glue_result(results, "steady", "rte", 1.0, seed, steady, commit=OTHER)
        glue_result(results, "noisy", "rte", 1.0, seed, noisy)
    glue_result(results, "baseline", "rte", 0.1, 1, 50.0)
    glue_result(results, "baseline", "rte", 0.1, 2, 52.0)
    glue_result(results, "steady", "rte", 0.1, 1, 40.0, commit=OTHER, degenerate=True)  # left out: n=1 ⊘1
    glue_result(results, "steady", "rte", 0.1, 2, 55.0, commit=OTHER)
    glue_result(results, "noisy", "rte", 0.1, 1, 30.0, degenerate=True)  # every seed degenerate
    glue_result(results, "baseline", "cola", 1.0, 1, 20.0)
    glue_result(results, "baseline", "rte", 1.0, 1, 58.0, variant="noise10")
    glue_result(results, "baseline", "rte", 1.0, 2, 59.5, variant="noise10")


def read_csv(path) -> list[dict]:
    """The CSV's rows with the JSON's types: numbers as floats (n, seeds, counts as integers), empty as None."""
    integers = {"n", "degenerate", "n_pairs"}
    texts = {"dataset", "backbone", "task", "method", "variant", "metric", "split", "verdict"}
    rows = []
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        assert tuple(reader.fieldnames) == COLUMNS
        for raw in reader:
            row = {}
            for column, text in raw.items():
                if column in texts:
                    row[column] = None if column == "verdict" and text == "" else text
                elif column == "seeds":
                    row[column] = [int(seed) for seed in text.split()]
                elif column == "commits":
                    row[column] = text.split()
                elif text == "":
                    row[column] = None
                else:
                    row[column] = int(text) if column in integers else float(text)
            rows.append(row)
    return rows


def table_after(lines: list[str], header_start: str, start: int = 0) -> tuple[list[str], list[list[str]], int]:
    """The first markdown table from ``start`` whose header begins with ``header_start``: its header cells, its
    rows' cells and the index of the line before it (its commits line sits two lines above the header)."""
    at = next(i for i in range(start, len(lines)) if lines[i].startswith(header_start))
    rows = []
    for line in lines[at + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return [cell.strip() for cell in lines[at].strip("|").split("|")], rows, at


def seeds_text(row: dict) -> str:
    spread = f" ± {row['std']:.1f}" if row["std"] is not None else ""
    text = f"{row['mean']:.1f}{spread} (n={row['n']})"
    if row["degenerate"] == len(row["seeds"]):
        return text  # every seed degenerate: the page says so before it
    return text + (f" ⊘{row['degenerate']}" if row["degenerate"] else "")


def test_export_reads_back_as_the_markdown_says(tmp_path):
    from knowledge_lm.cli import main

    results, data = tmp_path / "results", tmp_path / "leaderboards" / "data"
    small_store(results)
    frame, golds, groupings = page_frame(result_files(results), None)
    page = render_dataset("glue", frame, None, golds, groupings)  # glue.md as klm leaderboard writes it
    assert main(["export", "--results-dir", str(results), "--out", str(data)]) == 0
    assert sorted(path.name for path in data.iterdir()) == ["all.csv", "all.json", "glue.csv", "glue.json"]
    rows = json.loads((data / "glue.json").read_text())
    assert read_csv(data / "glue.csv") == rows
    assert json.loads((data / "all.json").read_text()) == rows and read_csv(data / "all.csv") == rows
    assert len({(r["method"], r["variant"], r["dataset"], r["task"], r["fraction"]) for r in rows}) == len(rows) == 8

    lines = page.splitlines()
    header, table, at = table_after(lines, "| method | 10% cola")
    commits_line = lines[at - 2]
    assert commits_line.startswith("Cells of 2 commits (mixed)")
    compared, comparisons, _ = table_after(lines, "| method | fraction | Δ vs baseline")
    variant_header, variants, _ = table_after(lines, "| method | fraction | noise10")
    checked = {"main": 0, "compared": 0, "variant": 0}
    for row in rows:
        assert row["dataset"] == "glue" and row["backbone"] == "minilm" and row["metric"] == METRICS[row["task"]]
        for commit in row["commits"]:  # each of the row's commits named with its method on the table's line
            assert re.search(rf"{commit} \([^)]*\b{re.escape(row['method'])}\b", commits_line)
        if row["variant"]:
            [cells] = [cells for cells in variants if cells[:2] == [row["method"], fraction_label(row["fraction"])]]
            assert cells[variant_header.index(row["variant"])] == seeds_text(row)
            assert row["verdict"] is None
            checked["variant"] += 1
            continue
        column = header.index(f"{fraction_label(row['fraction'])} {row['task']} ({row['metric']})")
        [cells] = [cells for cells in table if cells[0] == row["method"]]
        shown = cells[column].replace("**", "").removesuffix(" ↑").removesuffix(" ↓")
        assert shown.endswith(seeds_text(row)), (shown, row)
        checked["main"] += 1
        if row["method"] == "baseline":
            assert row["verdict"] is None and row["delta"] is None
            continue
        [line] = [c for c in comparisons if c[:2] == [row["method"], fraction_label(row["fraction"])]]
        assert line[compared.index("verdict")] == row["verdict"]
        assert line[compared.index("n pairs")] == str(row["n_pairs"])
        if row["delta"] is not None:
            assert line[2].startswith(f"{row['delta']:+.1f}")
        if row["interval_low"] is not None:
            assert line[3] == interval_text([row["interval_low"], row["interval_high"]])
        if row["q"] is not None:
            assert line[compared.index("q (BH, page)")] == f"{row['q']:.3f}"
        checked["compared"] += 1
    assert checked == {"main": 7, "compared": 4, "variant": 1}
    by_key = {(r["method"], r["variant"], r["task"], r["fraction"]): r for r in rows}
    steady = by_key["steady", "", "rte", 1.0]
    assert steady["verdict"] == "better" and steady["n"] == 3 and steady["commits"] == [OTHER[:10]]
    assert by_key["steady", "", "rte", 0.1]["degenerate"] == 1 and by_key["steady", "", "rte", 0.1]["n"] == 1
    assert by_key["noisy", "", "rte", 0.1]["verdict"] == "every pair degenerate"
