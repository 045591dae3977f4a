"""What a page says of how its cells were produced: which split selected the model and which is reported, the
versions of the splits and scorers compared, the commits that ran them, and which cells are degenerate.

Within one dataset and task only the cells of the newest ``(split_version, scorer_version)`` are kept
(``current_protocol``): numbers of another split or scorer are never averaged or compared with them. A degenerate
cell (``knowledge_lm.report.frame.DEGENERATE_RULE``: one class predicted, selected at its first evaluation, or its
knowledge-free family at chance where the baseline solves it) is flagged, left out of every mean and comparison
(``comparable``), and named in the list of dropped cells (``dropped_cells``).
"""

import pandas as pd

from knowledge_lm.core.registry import DATASETS
from knowledge_lm.report.frame import (
    CELL_COLUMNS,
    DEGENERATE_RULE,
    FAMILY_AT_CHANCE,
    FIRST_EVALUATION,
    ONE_CLASS,
    fraction_label,
    frame_memo,
    row_label,
)

DEGENERATE_MARK = " ⊘"  # followed by how many of a group's seeds are degenerate

DEGENERATE_LABELS = {
    ONE_CLASS: "one class predicted",
    FIRST_EVALUATION: "selected at the first evaluation",
    FAMILY_AT_CHANCE: f"{DEGENERATE_RULE.family} family at chance where the baseline solves it",
}


def version_key(version: str) -> tuple:
    """ "10" after "9": a version's dot-separated parts, numbers as numbers."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in str(version).split("."))


def current_protocol(frame: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """``frame`` less the cells whose dataset and task have cells of a newer ``(split_version, scorer_version)``,
    and how many cells were left out."""
    if frame.empty:
        return frame, 0
    versions = frame[["split_version", "scorer_version"]].apply(
        lambda row: (version_key(row.split_version), version_key(row.scorer_version)), axis=1
    )
    newest = versions.groupby([frame["dataset"], frame["task"]]).transform("max")
    kept = versions == newest
    return frame[kept], len(frame[~kept].drop_duplicates(CELL_COLUMNS))


def versions_text(frame: pd.DataFrame) -> str:
    """The split and scorer versions of ``frame``'s tasks, tasks of the same versions together."""
    by_versions = frame.drop_duplicates("task").groupby(["split_version", "scorer_version"])["task"].apply(sorted)
    return "; ".join(
        f"{', '.join(tasks)}: split version {split}, scorer version {scorer}"
        for (split, scorer), tasks in by_versions.items()
    )


# A task's recipe where the shared one fails, ``(dataset, task) → (sweep variant, the config that runs it and says
# why)``: the variant's cells stand in for the task's plain cells wherever a dataset's tasks are averaged (the
# README, a page's average over tasks, the papers' GLUE tables). MRPC: under the shared GLUE recipe the methods
# collapsed to one class at 1 % and 10 %.
TASK_RECIPES = {("glue", "mrpc"): ("balanced", "benchmarks/matrix_mrpc.yaml")}


def recipe_text(dataset: str) -> str:
    """The tasks of ``dataset`` run under their own recipe (``TASK_RECIPES``), as a clause; "" where none is."""
    named = [
        f"{task} under its {variant} recipe ({config})"
        for (d, task), (variant, config) in sorted(TASK_RECIPES.items())
        if d == dataset
    ]
    return ", ".join(named)


def recipe_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame``'s cells of each task's recipe: its plain cells (variant ""), or for a task of ``TASK_RECIPES`` its
    recipe variant's cells with the variant's name dropped, so that they read as the task's plain cells."""
    wanted = [TASK_RECIPES.get((dataset, task), ("",))[0] for dataset, task in zip(frame["dataset"], frame["task"])]
    return frame[frame["variant"] == pd.Series(wanted, index=frame.index, dtype=object)].assign(variant="")


def comparable(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` without its degenerate cells: what every comparison uses (one frame for each ``frame``)."""
    return frame_memo(frame, ("comparable",), lambda: frame[frame["degenerate"] == ""])


def summarised(cells: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The cells of one group of seeds whose values its mean and std are of, and how many of its cells are
    degenerate: the non-degenerate ones, or every one where all of them are."""
    degenerate = int((cells["degenerate"] != "").sum())
    return (cells if degenerate == len(cells) else comparable(cells)), degenerate


def degenerate_cells(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["degenerate"] != ""].drop_duplicates(CELL_COLUMNS)


def degenerate_text(frame: pd.DataFrame) -> str:
    """The degenerate rule (``DEGENERATE_RULE``) and how many of ``frame``'s cells it flags, by reason."""
    cells = degenerate_cells(frame)
    if cells.empty:
        return f"{DEGENERATE_RULE.text()} No cell on this page is."
    reasons = [reason for joined in cells["degenerate"] for reason in joined.split(", ")]
    counts = ", ".join(
        f"{reasons.count(reason)} {label}" for reason, label in DEGENERATE_LABELS.items() if reason in reasons
    )
    return (
        f"{DEGENERATE_RULE.text()} {DEGENERATE_MARK.strip()}k = k of the group's seeds are degenerate cells "
        f"({len(cells)} on this page: {counts}; listed below); they are left out of every mean and comparison (Δ, "
        "tests, bootstrap, per-family scores, knowledge used), so every table uses the same seeds per method, "
        "variant and fraction."
    )


def dropped_cells(frame: pd.DataFrame) -> list[str]:
    """The degenerate cells of ``frame`` in a collapsible list, how many per method first, then one line each:
    method [variant] fraction seed (task): reason; nothing where none is."""
    cells = degenerate_cells(frame).sort_values(["method", "variant", "task", "fraction", "seed"])
    if cells.empty:
        return []
    per_method = cells.groupby(["method", "variant"], sort=False).size()
    whose = ", ".join(f"{row_label(method, variant)} {count}" for (method, variant), count in per_method.items())
    lines = [f"<details><summary>Dropped: {len(cells)} degenerate cells ({whose})</summary>", ""]
    lines += [
        f"- {row_label(cell.method, cell.variant)} {fraction_label(cell.fraction)} s{cell.seed} ({cell.task}): "
        + ", ".join(DEGENERATE_LABELS[reason] for reason in cell.degenerate.split(", "))
        for cell in cells.itertuples()
    ]
    return lines + ["", "</details>", ""]


def degenerate_group_text(cells: pd.DataFrame) -> str:
    """A group of seeds all of them degenerate, said so: "degenerate: one class predicted (n=3)"."""
    reasons = sorted({reason for joined in cells["degenerate"] for reason in joined.split(", ")})
    return f"degenerate: {' / '.join(DEGENERATE_LABELS[reason] for reason in reasons)}"


def commits_text(frame: pd.DataFrame) -> str:
    """The commits that ran ``frame``'s cells: one named, or several, said to be mixed, each with its methods."""
    cells = frame.drop_duplicates(CELL_COLUMNS)
    commits = sorted(cells["commit"].unique())
    if len(commits) == 1:
        return f"Cells of commit {commits[0]}."
    parts = [f"{commit} ({', '.join(sorted(cells[cells.commit == commit]['method'].unique()))})" for commit in commits]
    return f"Cells of {len(commits)} commits (mixed): {'; '.join(parts)}."


def split_origin(dataset: str, task: str, split: str, split_version: str) -> str:
    """What ``split`` of ``dataset``'s ``task`` is, under its split version, as its data module says; "" where not
    written down."""
    if dataset not in DATASETS.names():
        return ""
    return DATASETS.get(dataset).split_origin(task, split, split_version)


def named_split(dataset: str, task: str, split: str, split_version: str) -> str:
    origin = split_origin(dataset, task, split, split_version)
    return f"{split} = {origin}" if origin else split


def protocol_text(frame: pd.DataFrame, dataset: str, tasks: list[str]) -> str:
    """``selection_text`` of each of ``tasks``, tasks of the same text named together: "cola, rte: model …"."""
    by_text: dict[str, list[str]] = {}
    for task in tasks:
        by_text.setdefault(selection_text(frame, dataset, task), []).append(task)
    return " ".join(f"{', '.join(named)}: {text}." for text, named in by_text.items())


def selection_text(frame: pd.DataFrame, dataset: str, task: str) -> str:
    """What ``task``'s cells selected their model on and reported: "model selected at the best of 10 evaluations on
    dev = …; reported on test = …", from the results' ``selection`` and ``report_split``."""
    cells = frame[frame.task == task].drop_duplicates(CELL_COLUMNS)
    parts = []
    for (selected, reported, version), group in cells.groupby(["selected_on", "split", "split_version"]):
        counts = sorted(group["evaluations"].unique())
        best_of = f"the best of {'/'.join(map(str, counts))} evaluations" if counts != [0] else "its best evaluation"
        if not selected:
            parts.append(f"reported on {named_split(dataset, task, reported, version)} (selection split not recorded)")
        elif selected == reported:
            parts.append(
                f"model selected at {best_of} on {named_split(dataset, task, reported, version)} and reported on "
                "that same split: the reported score is a maximum over evaluations, optimistic"
            )
        else:
            parts.append(
                f"model selected at {best_of} on {named_split(dataset, task, selected, version)}; reported on "
                f"{named_split(dataset, task, reported, version)}"
            )
    return "; ".join(parts)
