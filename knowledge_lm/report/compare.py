"""``klm compare A B``: two methods (or sweep variants of them) compared directly, on the cells both ran.

Per dataset, backbone, task and fraction, on the task's main metric: A minus B seed by seed, over the seeds where
neither cell is degenerate, tested as the pages test a method against the baseline (``delta_test``), every p
corrected together by Benjamini–Hochberg (``corrected``), with the pages' verdict (``verdict``) of A against B.
"""

import pandas as pd

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import DATASETS, METHODS
from knowledge_lm.core.results import result_files
from knowledge_lm.report.comparisons import corrected, delta_test, verdict
from knowledge_lm.report.frame import degenerate_reason, results_frame, table_backbone
from knowledge_lm.report.protocol import comparable, current_protocol


def parse_side(text: str) -> tuple[str, str]:
    """``method`` or ``method/variant`` as ``(method, variant)``; an unknown method is a one-line error."""
    method, _, variant = text.partition("/")
    METHODS.check(method)
    return method, variant


def side_values(frame: pd.DataFrame, side: tuple[str, str]) -> pd.Series:
    """The side's metric values indexed by seed (one cell per seed)."""
    method, variant = side
    rows = frame[(frame.cell_method == method) & (frame.variant == variant)]
    return rows.drop_duplicates("seed").set_index("seed")["value"]


def compare(
    results_dir, first: str, second: str, datasets: list[str] | None = None, backbones: tuple[str, ...] | None = None
) -> list[dict]:
    """One row per dataset, backbone, task and fraction both sides ran (``backbones``: those shown; None: all):
    the seeds both ran, each side's mean, and ``delta_test``'s Δ (first minus second), interval and p, with ``q``
    (corrected over every row) and ``verdict`` of the first against the second."""
    sides = parse_side(first), parse_side(second)
    if sides[0] == sides[1]:
        raise KlmError(f"klm compare: {first} against itself; name two methods or variants")
    for dataset in datasets or []:
        DATASETS.check(dataset)
    files = [
        (path, result)
        for path, result in result_files(results_dir)
        if (backbones is None or table_backbone(result) in backbones)
        and (not datasets or result["cell"]["dataset"] in datasets)
        and (result["cell"]["method"], result["cell"].get("variant", "")) in sides
    ]
    if not files:
        return []
    frame = results_frame(
        [result for _, result in files], degenerate=[degenerate_reason(path, result) for path, result in files]
    )
    frame, _ = current_protocol(frame)
    rows = []
    for (dataset, backbone, task, fraction), cells in frame.groupby(["dataset", "backbone", "task", "fraction"]):
        metric = DATASETS.get(dataset).spec(task).main_metric
        cells = cells[cells.metric == metric]
        every = [side_values(cells, side) for side in sides]
        seeds = sorted(set(every[0].index) & set(every[1].index))
        if not seeds:
            continue
        kept = [side_values(comparable(cells), side) for side in sides]
        kept_seeds = sorted(set(kept[0].index) & set(kept[1].index))
        deltas = pd.Series([kept[0][s] - kept[1][s] for s in kept_seeds], index=kept_seeds, dtype=float)
        found = delta_test(deltas) if kept_seeds else {"n": 0, "delta": None, "std": None, "p": None, "interval": None}
        rows.append(
            {
                "dataset": dataset,
                "backbone": backbone,
                "task": task,
                "fraction": float(fraction),
                "metric": metric,
                "seeds": len(seeds),
                "excluded": len(seeds) - len(kept_seeds),
                "first": float(every[0][seeds].mean()),
                "second": float(every[1][seeds].mean()),
                **found,
            }
        )
    corrected(rows)
    for row in rows:
        row["verdict"] = verdict(row)
    return rows
