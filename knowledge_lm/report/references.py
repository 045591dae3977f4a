"""The papers' own numbers as reference rows of the pages, marked †, from ``benchmarks/references.yaml``.

A reference row stands beside ours for the methods we ran, in the main table (per fraction and task) or in a task's
sweep-variants table (a reference with a ``variant``); it is never averaged with ours nor compared with it.
"""

import pandas as pd

from knowledge_lm.core.io import read_yaml
from knowledge_lm.core.paths import benchmarks_dir
from knowledge_lm.report.frame import MISSING, fraction_label


def load_references(dataset: str) -> list[dict]:
    """The reference rows of ``dataset``'s pages: its own, and those of a dataset that is not here that a
    reference says to show with it (``shown_with``: FIGER's rows beside OpenEntity), their row names saying so."""
    path = benchmarks_dir() / "references.yaml"
    if not path.is_file():
        return []
    refs = [ref for ref in read_yaml(path) if ref.get("method")]
    return [ref for ref in refs if ref.get("dataset") == dataset] + [
        {**ref, "row": f"{ref['row']} on {ref['dataset']}"} for ref in refs if ref.get("shown_with") == dataset
    ]


def reference_label(name: str, paper: str, source: str, backbone: str, split) -> str:
    """``† name [paper 001 Table 4, bert-base, test]``: a paper's row, marked as such."""
    table = source.split(",")[1].split("(")[0].strip() if "," in source else source
    return f"† {name} [paper {paper} {table}, {backbone}, {split or 'split not stated'}]"


def method_names(rows) -> set[str]:
    """The methods of our rows as the papers' rows name them: "erica ⟨erica-minilm⟩" is erica."""
    return {row.split(" ⟨")[0] for row in rows}


def paper_only_tasks(dataset_class, tasks: list[str], frame: pd.DataFrame, references: list[dict]) -> list[str]:
    """Tasks of the dataset without results that a paper's table reports for methods we ran, where that table
    has no number on any task we ran (ERICA's DocRED tables beside our Re-DocRED): the main table gives them
    columns, so that those tables show at all."""
    ours = method_names(frame["method"].unique())
    by_table = {}
    for ref in references:
        if ref["method"] in ours and not ref.get("variant"):
            by_table.setdefault((ref["paper"], ref["source"]), set()).update(ref["metrics"])
    wanted = {task for reported in by_table.values() if not reported & set(tasks) for task in reported}
    return [task for task in dataset_class.tasks if task in wanted and task not in tasks]


def main_table_references(
    references: list[dict], methods: list[str], columns: list[tuple[float, str]], main_metric: dict
) -> list[str]:
    """The main table's † rows: each paper row of a method we ran (``methods``), with its number for each
    ``(fraction, task)`` of ``columns`` (the task's main metric, else the one it reports, named); a row with no
    number in any column is left out."""
    groups, lines = {}, []
    ours = method_names(methods)
    for ref in references:
        if ref["method"] in ours and not ref.get("variant"):
            groups.setdefault((ref["paper"], ref["source"], ref["row"], ref["backbone"], ref.get("split")), []).append(
                ref
            )
    for (paper, source, row_name, backbone, split), refs in groups.items():
        row = [reference_label(row_name, paper, source, backbone, split)]
        for fraction, task in columns:
            reported = [ref["metrics"].get(task, {}) for ref in refs if ref.get("fraction") == fraction]
            value = next((m[main_metric[task]] for m in reported if m.get(main_metric[task]) is not None), None)
            # A paper table without the column's metric (ERICA's Table 6 gives only IgF1) shows what it has, named:
            # first its kind of the metric (FIGER's loose_micro_f1 in OpenEntity's micro_f1 column).
            found = [(name, v) for m in reported for name, v in m.items() if v is not None]
            other = next((f for f in found if f[0].endswith(main_metric[task])), found[0] if found else None)
            row.append(f"{value:.1f}" if value is not None else f"{other[1]:.1f} ({other[0]})" if other else MISSING)
        if any(cell != MISSING for cell in row[1:]):
            lines.append("| " + " | ".join(row) + " |")
    return lines


def variant_references(references: list[dict], task: str, main_metric: str, variants: list[str]) -> list[str]:
    """A sweep-variants table's † rows: papers' numbers of ``task``'s ``main_metric`` for the same ``variants``, one
    row per paper row and fraction."""
    groups, lines = {}, []
    for ref in references:
        if ref.get("variant") in variants and main_metric in ref["metrics"].get(task, {}):
            groups.setdefault(
                (ref["paper"], ref["source"], ref["method"], ref["backbone"], ref.get("split"), ref["fraction"]), {}
            )[ref["variant"]] = ref["metrics"][task][main_metric]
    for (paper, source, method, backbone, split, fraction), values in groups.items():
        cells = [MISSING if values.get(v) is None else f"{values[v]:.1f}" for v in variants]
        lines.append(
            f"| {reference_label(method, paper, source, backbone, split)} | {fraction_label(fraction)} | "
            + " | ".join(cells)
            + " |"
        )
    return lines
