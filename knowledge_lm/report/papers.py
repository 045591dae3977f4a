"""The papers' tables and figures as pages, ``leaderboards/papers/<slug>.md``, and their status, ``README.md``.

One page per table or figure of the seed papers (``benchmarks/tables/``, read by ``paper_tables``), in the paper's
layout: the paper's columns (dataset, metric, train fraction), our methods' rows (mean ± sample std over seeds, from
the results store only) beside the paper's own rows, marked †, from ``benchmarks/references.yaml``. A column the
suite cannot fill (a dataset that is not here, the GLUE test server) still shows the paper's numbers; our cells
there are "—". A page whose table needs data or compute the suite lacks lists the paper's rows, says what is missing
and gives the command that would run it with the user's data. Every reference row renders on some page
(``unrendered_references``). Output is deterministic: the same results give the same bytes.
"""

from pathlib import Path

import pandas as pd

from knowledge_lm.core.backbones import leading_order
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import read_yaml
from knowledge_lm.core.paths import benchmarks_dir
from knowledge_lm.core.registry import METHODS, cannot_run
from knowledge_lm.core.results import predictions_path
from knowledge_lm.report.claims import Judged, claim_rows, claims_of_table
from knowledge_lm.report.frame import (
    MISSING,
    degenerate_reason,
    fraction_label,
    frame_memo,
    kept_run,
    results_frame,
    rows_where,
    table_backbone,
)
from knowledge_lm.report.pages import seeds_text
from knowledge_lm.report.paper_tables import (
    COVERED,
    NOT_RUN,
    NOT_RUNNABLE,
    PARTIAL,
    Column,
    PaperTable,
    Row,
    Section,
    paper_tables,
)
from knowledge_lm.report.protocol import current_protocol

BACKBONE = "MiniLM-L6 (nreimers/MiniLM-L6-H384-uncased: 6 layers, hidden 384)"
# Why a paper's dataset has no column of ours, by the paper's dataset name (``Column.paper``).
ABSENT_DATASETS = {
    "tacred": "TACRED is LDC-licensed (needs the user's data)",
    "squad_format": "SearchQA / Quasar-T need the user's data",
    "figer": "FIGER needs the user's data",
    "wikihop_masked": "WikiHop is not a dataset of the suite",
    "lama": "no LAMA probe of ours is recorded",
}
ABSENT_METHOD = "no such method in the suite"  # a paper row (ERNIE, MTB, …) with no method of ours beside it
ABSENT_METHODS = ("ERNIE",)  # a paper row named so is of a method the suite lacks, whatever its backbone
FRACTIONS = (0.01, 0.1, 1.0)  # the train fractions a spectrum is drawn at (the SI+SR paper's fine-tuning ratios)


def other_splits() -> frozenset[str]:
    """The evaluation splits other than the report split that some column shows (their cells are rows of their
    own)."""
    return frozenset(c.split for t in paper_tables() for section in t.sections for c in section.columns if c.split)


def load_all_references() -> list[dict]:
    path = benchmarks_dir() / "references.yaml"
    return read_yaml(path) if path.is_file() else []


def page_references(table: PaperTable, references: list[dict]) -> list[tuple[int, dict]]:
    """``(index, reference)`` of the rows ``table`` shows: all of its first source's, of its other sources those of
    a method the page has a row for (a reference's source up to its first " (" names the table)."""
    methods = {row.method for section in table.sections for row in section.rows}
    chosen = []
    for index, ref in enumerate(references):
        source = ref["source"].split(" (")[0]  # "ERICA, Table 10 (Full results ...)": not Table 1's
        primary = bool(table.sources) and source == table.sources[0]
        secondary = source in table.sources[1:] and ref.get("method") in methods
        if primary or secondary:
            chosen.append((index, ref))
    return chosen


def reference_value(refs: list[dict], column: Column):
    if column.paper is None:
        return None
    dataset, task, metric = column.paper
    for ref in refs:
        if ref["dataset"] == dataset and ref.get("fraction") == column.fraction:
            metrics = ref.get("metrics_by_split", {}).get(column.split, {}) if column.split else ref["metrics"]
            value = metrics.get(task, {}).get(metric)
            if value is not None:
                return value
    return None


def average_text(values: list, averaged: list[int]) -> str:
    """The mean of ``values`` at the ``averaged`` columns, "—" where one is missing."""
    picked = [values[i] for i in averaged]
    return f"{sum(picked) / len(picked):.1f}" if picked and None not in picked else MISSING


def reference_rows(
    section: Section, chosen: list[tuple[int, dict]], averaged: list[int]
) -> tuple[list[list[str]], set[int]]:
    """The section's † rows (one per paper row: a method's rows of several sources together) and the indices of
    the references that gave one of their cells."""
    groups: dict[tuple, list[tuple[int, dict]]] = {}
    for index, ref in chosen:
        # A method's rows of several tables together (ERICA's Table 10 beside Table 6's 10% column); a sweep's by
        # the paper's row name (Table 4's α on CoLA and on Google-RE).
        on_page = any(row.method == ref.get("method") for row in section.rows)
        key = ("method", ref["method"]) if on_page and not ref.get("variant") else ("row", ref["row"], ref["backbone"])
        groups.setdefault(key, []).append((index, ref))
    lines, used = [], set()
    for members in groups.values():
        refs = [ref for _, ref in members]
        values = [reference_value(refs, column) for column in section.columns]
        if all(value is None for value in values):
            continue
        for index, ref in members:
            if any(reference_value([ref], column) is not None for column in section.columns):
                used.add(index)
        first = refs[0]
        label = f"† {first['row']} [{first['backbone']}, {splits_text(refs, section)}]"
        cells = [MISSING if value is None else f"{value:.1f}" for value in values]
        if section.average:  # the paper's own Avg as printed where it has one, else over the columns shown
            printed = next((ref["average"] for ref in refs if ref.get("average") is not None), None)
            cells.append(f"{printed:.1f} (paper's)" if printed is not None else average_text(values, averaged))
        if section.params:
            cells.append(str(first.get("params", MISSING)))
        lines.append([label] + cells)
    return lines, used


def splits_text(refs: list[dict], section: Section) -> str:
    """The split a † row's numbers are on, as the paper reports them: one, or each dataset's where its columns
    mix them (ERICA's ablations: DocRED and FIGER test, WikiHop dev)."""
    shown = [ref for ref in refs if any(reference_value([ref], column) is not None for column in section.columns)]
    splits = {ref["dataset"]: ref.get("split") or "split not stated" for ref in shown or refs}
    if len(set(splits.values())) == 1:
        return next(iter(splits.values()))
    return ", ".join(f"{dataset} {split}" for dataset, split in sorted(splits.items()))


def column_cells(frame: pd.DataFrame, name: str, row: Row, column: Column) -> pd.DataFrame:
    """The cells of method ``name`` (a checkpoint of ``row``'s method) in ``column``; none where the column has no
    data of ours."""
    if column.ours is None or not len(frame):
        return frame.iloc[:0]
    dataset, task, metric = column.ours
    variant = column.variant if row.variant is None else row.variant
    cells = rows_where(
        frame, method=name, variant=variant, dataset=dataset, task=task, metric=metric, fraction=column.fraction
    )
    if column.split:
        return rows_where(cells, split=column.split)
    return frame_memo(cells, ("not other splits",), lambda: cells[~cells.split.isin(other_splits())])


def section_has_results(section: Section, frame: pd.DataFrame, name: str, row: Row) -> bool:
    """Whether method ``name`` (a checkpoint of ``row``'s method) has a cell in any of ``section``'s columns."""
    return any(len(column_cells(frame, name, row, column)) for column in section.columns)


def our_rows(section: Section, frame: pd.DataFrame) -> tuple[list[list[str]], list[list]]:
    """Our rows of ``section``: per row, each checkpoint of its method ("erica ⟨erica-minilm⟩") with a result in
    the section a row, mean ± std over seeds per column (a method with no result in any column is still shown, all
    "—"); and their means (None: no result), without the Avg and #Params cells."""
    lines, all_means = [], []
    for row in section.rows:
        names = sorted({m for m in frame["method"].unique() if m.split(" ⟨")[0] == row.method}) if len(frame) else []
        names = [name for name in names if section_has_results(section, frame, name, row)]
        for name in names or [row.method]:
            cells, means, params = [], [], None
            for column in section.columns:
                text, mean = MISSING, None
                cells_of = column_cells(frame, name, row, column)
                if len(cells_of):
                    mean, text, _ = seeds_text(cells_of.sort_values("seed"))
                    params = params or cells_of["parameters"].iloc[0]
                cells.append(text)
                means.append(mean)
            all_means.append(means)
            if section.params:
                cells.append(f"{params / 1e6:.1f}M" if params else MISSING)
            label = row.label or name
            if row.label and name != row.method:
                label = f"{row.label} {name[len(row.method) :].strip()}"
            lines.append([label] + cells)
    return lines, all_means


def table_lines(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def row_names(frame: pd.DataFrame, row: Row) -> list[str]:
    """The method labels of ``row``'s method in ``frame`` (each pretraining checkpoint its own), or the method."""
    names = sorted({m for m in frame["method"].unique() if m.split(" ⟨")[0] == row.method}) if len(frame) else []
    return names or [row.method]


def missing_cells(section: Section, frame: pd.DataFrame) -> tuple[int, list[str]]:
    """How many of ``section``'s (row, column of ours) pairs have cells, and each row's columns that have none,
    named with the reason: the method cannot run on the dataset, or it has not run there."""
    filled, missing = 0, []
    for row in section.rows:
        empty = []
        for column in section.columns:
            if column.ours is None:
                continue
            if any(len(column_cells(frame, name, row, column)) for name in row_names(frame, row)):
                filled += 1
            else:
                empty.append(column)
        if empty:
            reason = cannot_run(row.method, empty[0].ours[0]) if row.method in METHODS.names() else None
            label = row.label or row.method
            missing.append(f"{label} in {', '.join(c.label for c in empty)}: {reason or 'not run yet'}")
    return filled, missing


def table_status(table: PaperTable, frame: pd.DataFrame, references: list[dict]) -> tuple[str, list[str]]:
    """``table``'s status as its cells give it, and everything of the paper's table that has none of ours, each
    with its reason: a column of a dataset the suite lacks (``ABSENT_DATASETS``), a row of ours without cells, a
    paper row with no method of ours (``ABSENT_METHOD``). Covered: every runnable row and column has cells and no
    column is missing; partial: some; not run: none. A table without sections, or one not runnable here, keeps
    its declared status."""
    if not table.sections or table.status == NOT_RUNNABLE:
        return table.status, []
    filled, missing, absent = 0, [], {}
    for section in table.sections:
        section_filled, section_missing = missing_cells(section, frame)
        filled += section_filled
        missing += section_missing
        for column in section.columns:
            if column.ours is None and column.paper is not None:
                reason = ABSENT_DATASETS.get(column.paper[0], "not a dataset of ours")
                absent.setdefault(reason, []).append(column.label)
    columns = "; ".join(f"{', '.join(labels)} ({reason})" for reason, labels in absent.items())
    named = [f"columns without ours: {columns}"] if absent else []
    named += [f"rows without cells: {'; '.join(missing)}"] if missing else []
    named += unmatched_rows(table, references)
    if not filled:
        return NOT_RUN, named
    return (COVERED if not absent and not missing else PARTIAL), named


def unmatched_rows(table: PaperTable, references: list[dict]) -> list[str]:
    """The paper's rows on ``table``'s page with no row of ours beside them, with why: another backbone than the
    paper's BERT-base (ours is one backbone), or no such method in the suite (``unrecorded_rows`` too: rows
    references.yaml does not record). A row name that stands beside ours in another column (KAM's α) is none."""
    chosen = [ref for _, ref in page_references(table, references)]
    matched = {str(ref["row"]) for ref in chosen if ref.get("method")}
    other_backbone, no_method = set(), set(table.unrecorded_rows)
    for ref in chosen:
        if not ref.get("method") and str(ref["row"]) not in matched:
            lacking = str(ref["row"]).startswith(ABSENT_METHODS) or ref["backbone"] == "bert-base"
            (no_method if lacking else other_backbone).add(str(ref["row"]))
    said = (
        [f"paper rows of another backbone (ours is one): {', '.join(sorted(other_backbone))}"] if other_backbone else []
    )
    return said + ([f"paper rows without ours ({ABSENT_METHOD}): {', '.join(sorted(no_method))}"] if no_method else [])


def claims_lines(table: PaperTable, judged: list[Judged]) -> list[str]:
    """The rows of leaderboards/claims.md of the claims that rest on ``table`` (none: nothing)."""
    mine = claims_of_table(judged, table.paper, table.name)
    if not mine:
        return []
    return [
        "## The paper's claims on this table, tested",
        "",
        *claim_rows(mine),
        "",
        "Verdicts and their rule: [claims.md](../claims.md), where every claim is corrected together.",
        "",
    ]


def render_paper_table(
    table: PaperTable, frame: pd.DataFrame, references: list[dict], judged: list[Judged] = ()
) -> tuple[str, set[int]]:
    """``table``'s page, opening with its claims' rows (``judged``), then its status as its cells give it
    (``table_status``), and the indices of the reference rows it renders."""
    chosen = page_references(table, references)
    status, missing = table_status(table, frame, references)
    lines = [
        f"# {table.name} of {table.paper_title}",
        "",
        *claims_lines(table, list(judged)),
        f"*{table.caption}.* Status: **{status}** ({table.why}).",
        "",
        *[f"- {named}." for named in missing],
        *([""] if missing else []),
        f"Our backbone: {BACKBONE}{backbone_parameters(frame)}; the paper's rows are marked †, copied from "
        "benchmarks/references.yaml, and never compared with ours.",
    ]
    if table.differs:
        lines += ["", f"What differs from the paper: {table.differs}"]
    if table.command:
        lines += ["", f"Run: `{table.command}`"]
    used: set[int] = set()
    for section in table.sections:
        header = ["row"] + [column.label for column in section.columns]
        header += ["Avg"] if section.average else []
        header += ["#Params"] if section.params else []
        ours, means = our_rows(section, frame)
        # Avg over the columns every one of our rows has (all columns where we have none), so that it compares
        averaged = [i for i in range(len(section.columns)) if all(m[i] is not None for m in means)]
        averaged = averaged or list(range(len(section.columns)))
        if section.average:
            ours = [
                row[: len(section.columns) + 1] + [average_text(m, averaged)] + row[len(section.columns) + 1 :]
                for row, m in zip(ours, means)
            ]
        refs, section_used = reference_rows(section, chosen, averaged)
        used |= section_used
        lines += ["", f"## {section.title}", ""] + table_lines(header, ours + refs)
        if section.average:
            names = ", ".join(section.columns[i].label for i in averaged)
            lines += [
                "",
                f"Avg: the mean over {names} (the columns all our rows have), for every row of ours and each † row "
                "without one; \"(paper's)\": the paper's own Avg column as printed, over its own tasks and metrics.",
            ]
        if section.params:
            lines += ["", "#Params: ours counts the backbone (the method's added modules are not recorded)."]
    if table.spectra:
        lines += spectra_lines(table.spectra, frame)
    if not table.sections and chosen:
        lines += ["", "## The paper's rows", ""]
        lines += [f"- † {ref['row']} ({ref['dataset']}): {ref['metrics']}" for _, ref in chosen]
        used |= {index for index, _ in chosen}
    if not table.sections and not table.spectra:
        lines += ["", "Nothing of this table or figure is rendered here: " + table.why + "."]
    return "\n".join(lines) + "\n", used


SPECTRUM_RANKS = (1, 2, 4, 8, 16, 32, 64, 128)


def spectra_lines(spectra: tuple[tuple[str, str, tuple[str, ...]], ...], frame: pd.DataFrame) -> list[str]:
    """Per dataset, a table of the singular values (descending) of the head's features on the reported split that
    each method's cells kept with their predictions: the i-th largest, mean over the seeds that kept one, per
    train fraction (the SI+SR paper's Fig. 3 draws them by fine-tuning ratio)."""
    lines = []
    for dataset, task, methods in spectra:
        header = ["method", "fraction", "n"] + [f"σ{rank}" for rank in SPECTRUM_RANKS] + ["σ last"]
        rows = []
        cells = (
            frame[(frame.dataset == dataset) & (frame.task == task) & (frame.variant == "")] if len(frame) else frame
        )
        for method in methods:
            for fraction in FRACTIONS:
                chosen = cells[(cells.method == method) & (cells.fraction == fraction)] if len(cells) else cells
                found = (
                    [s for s in chosen.drop_duplicates("seed").sort_values("seed")["spectrum"] if s]
                    if len(chosen)
                    else []
                )
                if not found:
                    continue
                width = min(len(s) for s in found)
                mean = [sum(s[i] for s in found) / len(found) for i in range(width)]
                values = [f"{mean[rank - 1]:.3g}" if rank <= width else MISSING for rank in SPECTRUM_RANKS]
                rows.append([method, fraction_label(fraction), str(len(found))] + values + [f"{mean[-1]:.3g}"])
        lines += ["", f"## {dataset} {task}: singular values of the features", ""]
        lines += table_lines(header, rows) if rows else ["No cell of these methods kept its spectrum yet."]
    return lines


def backbone_parameters(frame: pd.DataFrame) -> str:
    if not len(frame) or "parameters" not in frame:
        return ""
    counts = sorted(set(frame["parameters"].dropna()))
    return f", {counts[0] / 1e6:.1f}M parameters" if counts else ""


def render_readme(pages: dict[str, PaperTable], statuses: dict[str, tuple[str, list[str]]]) -> str:
    """The papers' README: each table's page, its status and what is missing (``statuses``: ``table_status`` by
    slug), with the reasons."""
    lines = [
        "# The papers' tables and figures",
        "",
        "One page per table or figure of the seed papers (`klm leaderboard` writes them from the results store): "
        "our rows beside the paper's, marked †. Status, from the cells: covered (every row and column of the paper "
        "that the suite can run has our cells, and no column is missing), partial (some do: what is missing is "
        "named with its reason), not run (none has cells yet); declared: not runnable here (data or compute the "
        "suite lacks), not covered (an analysis the suite does not make), no numbers (an illustration). The papers' "
        "claims, tested: [claims.md](../claims.md).",
        "",
        "| paper | table | what | status | why; what is missing |",
        "|---|---|---|---|---|",
    ]
    for slug, table in pages.items():
        status, missing = statuses[slug]
        why = "; ".join([table.why, *missing])
        lines.append(f"| {table.paper} | [{table.name}]({slug}.md) | {table.caption} | {status} | {why} |")
    counts = pd.Series([status for status, _ in statuses.values()]).value_counts().sort_index()
    lines += ["", "; ".join(f"{status}: {n}" for status, n in counts.items())]
    return "\n".join(lines) + "\n"


def papers_frame(files: list[tuple[Path, dict]], runs: dict[str, tuple[str, ...]] | None = None) -> pd.DataFrame:
    """The results of ``files`` as a frame of the current split and scorer versions, with each cell's backbone
    parameter count and (``runs``: ``results_frame``'s) the pretraining runs of its checkpoint."""
    if not files:
        return pd.DataFrame()
    results = [result for _, result in files]
    degenerate = [degenerate_reason(path, result) for path, result in files]
    # A cell's scores on another evaluation split (MNLI mismatched) as rows of that split, the cell's verdict kept.
    others = [
        ({**result, "report_split": split}, reason)
        for result, reason in zip(results, degenerate)
        for split in sorted(other_splits())
        if split in result["metrics"]
    ]
    frame = results_frame(
        results + [result for result, _ in others], None, None, degenerate + [reason for _, reason in others], runs=runs
    )
    counts = {}
    for result in results:
        counts[(result["cell"]["method"], table_backbone(result))] = result["backbone"].get("parameters")
    frame["parameters"] = [
        counts.get((cell_method, backbone)) for cell_method, backbone in zip(frame["cell_method"], frame["backbone"])
    ]
    wanted = {(dataset, task) for table in paper_tables() for dataset, task, _ in table.spectra}
    spectra = {
        cell_key(result): kept_spectrum(path)
        for path, result in files
        if (result["cell"]["dataset"], result["cell"]["task"]) in wanted
    }
    keys = zip(frame.dataset, frame.task, frame.cell_method, frame.variant, frame.fraction, frame.seed, frame.backbone)
    frame["spectrum"] = [spectra.get(key) for key in keys]
    return current_protocol(frame)[0]


def cell_key(result: dict) -> tuple:
    cell = result["cell"]
    return (
        cell["dataset"],
        cell["task"],
        cell["method"],
        cell.get("variant", ""),
        cell["fraction"],
        cell["seed"],
        table_backbone(result),
    )


def kept_spectrum(path: Path) -> list[float] | None:
    """The singular values a cell's predictions file holds (they do not depend on the gold: read unchecked)."""
    sidecar = predictions_path(path)
    if not sidecar.is_file():
        return None
    try:
        return kept_run(str(sidecar)).get("singular_values") or None
    except KlmError:
        return None


def one_backbone(frame: pd.DataFrame) -> pd.DataFrame:
    """The cells the paper pages show, of one backbone (their text names MiniLM-L6: ``BACKBONE``): MiniLM's where
    ``frame`` has some, else the first of ``core.backbones.leading_order``; the base size leads on the dataset
    pages, the README and the claims page instead."""
    if not len(frame):
        return frame
    backbones = leading_order(frame["backbone"].unique())
    return frame[frame.backbone == ("minilm" if "minilm" in backbones else backbones[0])]


def render_papers(
    files: list[tuple[Path, dict]], judged: list[Judged] = (), frame: pd.DataFrame | None = None
) -> tuple[dict[str, str], set[int]]:
    """Every paper page's text by file name (``README.md`` among them), each opening with its claims (``judged``),
    and the indices of the reference rows they render; ``frame``: ``papers_frame(files)`` where already made."""
    frame = one_backbone(papers_frame(files) if frame is None else frame)
    references = load_all_references()
    texts, used = {}, set()
    for table in paper_tables():
        texts[f"{table.slug}.md"], page_used = render_paper_table(table, frame, references, judged)
        used |= page_used
    statuses = {table.slug: table_status(table, frame, references) for table in paper_tables()}
    texts["README.md"] = render_readme({table.slug: table for table in paper_tables()}, statuses)
    return texts, used


def unrendered_references(files: list[tuple[Path, dict]] = ()) -> list[str]:
    """The reference rows no paper page renders, as ``paper source: row (dataset)``."""
    _, used = render_papers(list(files))
    return [
        f"{ref['paper']} {ref['source']}: {ref['row']} ({ref['dataset']})"
        for index, ref in enumerate(load_all_references())
        if index not in used
    ]


def report_split_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """``papers_frame``'s cells on the report split alone (MNLI's mismatched rows aside): what a claim compares."""
    return frame[~frame.split.isin(other_splits())] if len(frame) else frame


def write_papers(
    files: list[tuple[Path, dict]], out_dir: Path, judged: list[Judged] = (), frame: pd.DataFrame | None = None
) -> list[Path]:
    """Write ``out_dir``/``<slug>.md`` and its README (``render_papers``); returns the pages whose text changed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    texts, _ = render_papers(files, judged, frame)
    written = []
    for name, text in texts.items():
        path = out_dir / name
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written
