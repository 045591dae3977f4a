"""The leaderboards' tables as data: ``klm export`` writes, per dataset, ``<dataset>.csv`` and ``<dataset>.json``
(and ``all.csv`` / ``all.json`` of every dataset) with one row per backbone, method, variant, task and fraction of
the task's main metric, as the dataset page's main and variants tables show them: the mean, std and n over the
non-degenerate seeds, and against the baseline (sweep variants aside) Δ with its 95 % interval over the paired seeds,
the paired t-test's p, its Benjamini–Hochberg q over the page's tests and the verdict; with the cells' commits.

Built on the pages' own stages (``leaderboard.page_frame``, ``protocol.current_protocol``,
``comparisons.page_tests``), so a row says what its page says.
"""

import csv
import json
import math
from pathlib import Path

import pandas as pd

from knowledge_lm.core.registry import DATASETS
from knowledge_lm.core.results import result_files, write_file_atomic
from knowledge_lm.report.comparisons import page_tests, verdict
from knowledge_lm.report.derived import keeping_derived
from knowledge_lm.report.frame import page_rows, seed_cells
from knowledge_lm.report.leaderboard import DEFAULT_BACKBONES, page_frame, results_by_dataset
from knowledge_lm.report.protocol import current_protocol, summarised

DEFAULT_EXPORT_DIR = Path("leaderboards") / "data"
COLUMNS = (
    "dataset",
    "backbone",
    "task",
    "method",  # as the page names it: a cell of a pretraining checkpoint is "method ⟨checkpoint⟩"
    "variant",  # "" for the main table's rows
    "fraction",
    "metric",  # the task's main metric, on the reported split
    "split",
    "mean",
    "std",  # sample std over the seeds; empty for one seed
    "n",  # seeds in the mean: the non-degenerate ones (all of them where every one is degenerate)
    "degenerate",  # seeds flagged degenerate, left out of the mean unless every one is
    "seeds",
    "delta",  # against the baseline, mean over the paired non-degenerate seeds; empty for the baseline and variants
    "delta_std",
    "interval_low",  # the 95 % t interval of delta over the paired seeds
    "interval_high",
    "n_pairs",
    "p",  # the paired t-test's, two-sided
    "q",  # Benjamini–Hochberg over every test of the page
    "verdict",
    "commits",  # the commits the row's cells ran at (10 characters, as the page shows them)
)


def number(value) -> float | None:
    """A float, or None for a missing or not-a-number value (JSON has no NaN)."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def seeds_summary(cells: pd.DataFrame) -> dict:
    """Mean, std and n of one group of seeds as the page's ``seeds_text`` takes them: over the non-degenerate cells,
    over all of them where every one is degenerate."""
    kept, degenerate = summarised(cells)
    values = kept["value"]
    return {
        "mean": number(values.mean()),
        "std": number(values.std(ddof=1)) if len(values) > 1 else None,
        "n": len(values),
        "degenerate": degenerate,
        "seeds": [int(seed) for seed in cells["seed"]],
    }


def comparison_fields(found: dict | None) -> dict:
    """The baseline comparison of a row (``paired_comparison`` after ``page_tests`` corrected it); empty for none."""
    if found is None:
        return dict.fromkeys(("delta", "delta_std", "interval_low", "interval_high", "n_pairs", "p", "q", "verdict"))
    interval = found["interval"] if found["n"] else None
    return {
        "delta": number(found["delta"]) if found["n"] else None,
        "delta_std": number(found["std"]),
        "interval_low": number(interval[0]) if interval else None,
        "interval_high": number(interval[1]) if interval else None,
        "n_pairs": found["n"],
        "p": number(found["p"]),
        "q": number(found.get("q")),
        "verdict": verdict(found),
    }


def table_rows(
    dataset: str, frame: pd.DataFrame, golds: dict[str, list], groupings: dict[str, list[str]]
) -> list[dict]:
    """The rows of one dataset's page (``frame``: ``page_frame``'s), in the page's order: backbone, task, fraction,
    then method (baseline first) and its variants."""
    frame, _ = current_protocol(frame)
    if frame.empty:
        return []
    dataset_class = DATASETS.get(dataset)
    main_metric = {task: dataset_class.spec(task).main_metric for task in dataset_class.tasks}
    tests = page_tests(frame, main_metric, golds, groupings)
    rows = []
    for backbone, group in frame.groupby("backbone"):
        for task in [task for task in dataset_class.tasks if task in set(group["task"])]:
            metric = main_metric[task]
            task_frame = group[(group.task == task) & (group.metric == metric)]
            for fraction in sorted(task_frame["fraction"].unique()):
                at = task_frame[task_frame.fraction == fraction]
                for method, variant in page_rows(at):
                    cells = seed_cells(at, method, variant, fraction, metric)
                    if cells.empty:
                        continue
                    found = tests.baseline.get((backbone, method, fraction, task)) if variant == "" else None
                    rows.append(
                        {
                            "dataset": dataset,
                            "backbone": backbone,
                            "task": task,
                            "method": method,
                            "variant": variant,
                            "fraction": float(fraction),
                            "metric": metric,
                            "split": cells["split"].iloc[0],
                            **seeds_summary(cells),
                            **comparison_fields(found),
                            "commits": sorted(cells["commit"].unique()),
                        }
                    )
    return [{column: row[column] for column in COLUMNS} for row in rows]


def csv_value(value) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(map(str, value))
    return repr(value) if isinstance(value, float) else str(value)


def write_table(rows: list[dict], stem: Path) -> list[Path]:
    """``rows`` as ``<stem>.csv`` (lists space-separated, missing values empty) and ``<stem>.json`` (a list of
    objects, missing values null), each written atomically."""

    def write_csv(staging):
        with open(staging, "w", newline="") as out:
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(COLUMNS)
            writer.writerows([csv_value(row[column]) for column in COLUMNS] for row in rows)

    def write_json(staging):
        with open(staging, "w") as out:
            json.dump(rows, out, indent=1, ensure_ascii=False, allow_nan=False)
            out.write("\n")

    paths = [stem.with_name(stem.name + ".csv"), stem.with_name(stem.name + ".json")]
    write_file_atomic(paths[0], write_csv)
    write_file_atomic(paths[1], write_json)
    return paths


def export_tables(
    results_dir=Path("results"),
    out_dir=DEFAULT_EXPORT_DIR,
    data_dir=None,
    backbones: tuple[str, ...] | None = DEFAULT_BACKBONES,
) -> list[Path]:
    """Every dataset page's table rows (``table_rows``) from ``results_dir`` under ``out_dir``: ``<dataset>.csv``,
    ``<dataset>.json``, and ``all.csv`` / ``all.json`` of every dataset. ``data_dir`` and ``backbones`` as
    ``write_leaderboards``'. Returns the files written."""
    out_dir = Path(out_dir)
    written, every = [], []
    with keeping_derived(results_dir, store=False):  # the store changes with the committed pages alone
        for dataset, inputs in results_by_dataset(result_files(results_dir), backbones).items():
            rows = table_rows(dataset, *page_frame(inputs, data_dir, results_dir))
            if rows:
                written += write_table(rows, out_dir / dataset)
                every += rows
    if every:
        written += write_table(every, out_dir / "all")
    return written
