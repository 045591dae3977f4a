"""The answer at a glance, ``leaderboards/README.md``: does knowledge injection help, and by how much?

It opens with the answer (``answer_lines``: at most six generated sentences, the claims' verdicts from
``report.claims``, the largest real-data effect, what the synthetic task's controls show; a forest plot of each main
method's Δ per dataset). Then one row per main method (``MAIN_METHODS``), one column per dataset: the method's
mean at 100 % train with n, its Δ against the baseline as the dataset's page tests it (``comparisons.page_tests``,
corrected with that page) and its verdict (gated by the dataset's knowledge coverage), knowledge used against its
controls; a text that would repeat across cells (a card note, a reason a method cannot run) is a footnote
(``Footnotes``). It computes no test of its own, so it and the pages agree, the section "Does a method use
relational facts?" included. Degenerate cells and older split or scorer versions are left out as on the pages;
other methods with results get the same cells in a second table.
"""

from pathlib import Path
from typing import NamedTuple

import pandas as pd

from knowledge_lm.core.backbones import BACKBONE_NAMES, base_size_first, leading_order
from knowledge_lm.core.registry import DATASETS, METHODS, cannot_run
from knowledge_lm.report.claims import Judged, counts_text
from knowledge_lm.report.comparisons import (
    CANNOT_CARRY,
    CEILING_FLOOR,
    FRACTION,
    LINKS_ONLY,
    MIN_SEEDS,
    NO_CEILINGS,
    NO_DIFFERENCE,
    NO_VERDICT,
    SIGNIFICANCE,
    TYPES_ONLY,
    UNTOLD,
    WHOLE,
    WORLDS,
    PageTests,
    knowledge_verdict,
    page_tests,
    relational_verdicts,
    significance_mark,
    significant,
    verdict,
)
from knowledge_lm.report.coverage import dataset_untestable, gate_text, gated, glance_coverage
from knowledge_lm.report.figures import forest_plot
from knowledge_lm.report.frame import backbone_groups, cards_text, interval_text
from knowledge_lm.report.preregistration import PREREGISTERED_DIR, WorldStatus, world_statuses
from knowledge_lm.report.protocol import (
    DEGENERATE_MARK,
    current_protocol,
    degenerate_cells,
    recipe_cells,
    recipe_text,
    summarised,
)
from knowledge_lm.report.sanity import RELATION_BLIND_LIMIT


def glance_cells(page: pd.DataFrame, tests: PageTests) -> dict[tuple[str, str], dict]:
    """``(backbone, method)`` → the page's test of the method against the baseline at ``FRACTION`` (``page``: one
    dataset's cells of the current protocol, ``tests``: its ``page_tests``), with ``tasks``, ``all_tasks`` (the tasks
    the baseline ran there) and ``used``: its knowledge-used tests on the whole split, by task and control."""
    tasks = sorted(page["task"].unique())
    cells = {}
    for backbone, group in page.groupby("backbone"):
        all_tasks = group[(group.method == "baseline") & (group.fraction == FRACTION)]["task"].nunique()
        for method in sorted(set(group["method"]) - {"baseline"}):
            if len(tasks) == 1:
                found = tests.baseline.get((backbone, method, FRACTION, tasks[0]))
                found = None if found is None or not found["n"] else {**found, "tasks": tasks}
            else:
                found = tests.overall.get((backbone, method))
            if found is None:
                continue
            used = {
                (task, control): test
                for (b, task, m, variant, fraction, control, scope), test in tests.used.items()
                if (b, m, variant, fraction, scope) == (backbone, method, "", FRACTION, WHOLE)
                and task in found["tasks"]
            }
            cells[backbone, method] = {**found, "all_tasks": all_tasks, "used": used}
    return cells


# The methods the README always has a row for, filled or not: the matrix of issue 27 (``benchmarks/tables.yaml``).
MAIN_METHODS = ("baseline", "kam", "kam+si", "knowbert", "knowbert+si", "knowbert+si+sr", "bert+sr", "erica")
# The datasets the README always has a column for, whether or not any cell ran there.
MAIN_DATASETS = ("cosmosqa", "fewrel", "generated", "glue", "openentity", "redocred", "semeval2010")
BERT_BASE_PARAMETERS = 110e6
NOT_RUN = "not run yet"
SYNTHETIC = ("generated",)  # datasets whose examples are synthetic: their column is marked so
FOREST = "glance-forest.png"  # the README's forest plot, under leaderboards/figures/


class Footnotes:
    """Texts that would repeat across the README's cells (a reason a method cannot run, the cards of a
    comparison), each said once under the table and marked ``[^k]`` where it applies."""

    def __init__(self):
        self.texts: dict[str, int] = {}

    def mark(self, text: str) -> str:
        """The marker of ``text``'s footnote (made on its first use)."""
        number = self.texts.setdefault(text, len(self.texts) + 1)
        return f"[^{number}]"

    def cards(self, found: dict | None) -> str:
        """The marker of the cards' footnote of a comparison whose cells ran on several card models; "" on one."""
        cards = (found or {}).get("cards") or ()
        if len(cards) < 2:
            return ""
        return self.mark(f"cards: {cards_text(cards)}: the comparison's cells ran on more than one GPU model")

    def lines(self) -> list[str]:
        return [f"[^{number}]: {text}" for text, number in self.texts.items()]


def backbone_text(frame: pd.DataFrame) -> str:
    """The backbones of ``frame``'s cells, each named with its size as its results record it (``parameters``)."""
    named = []
    for backbone, group in backbone_groups(frame):
        counts = sorted({int(count) for count in group["parameters"].dropna()}) if "parameters" in group else []
        size = (
            " and ".join(f"{count / 1e6:.1f}M" for count in counts) + " parameters"
            if counts
            else "parameters not recorded"
        )
        name = BACKBONE_NAMES.get(backbone, backbone)
        named.append(f"{name} (`{backbone}`, {size})" if name != backbone else f"`{backbone}` ({size})")
    return (
        f"Backbone: {', '.join(named)}, against BERT-base's {BERT_BASE_PARAMETERS / 1e6:.0f}M in the papers "
        "(sizes from the results' `backbone.parameters`). The papers' numbers cannot be compared with these cells' "
        "scores: a smaller backbone, several datasets sub-sampled (GLUE's MNLI, QNLI and QQP from samples, Cosmos QA "
        "from its dev set), and our protocol (train fraction, model selected on our dev split, test reported). What "
        "can be compared with the papers is the direction and rough size of each method's Δ against its own "
        "baseline, measured here under one backbone, data and protocol."
    )


def method_means(page: pd.DataFrame, backbone: str, label: str, metrics: dict[str, str]) -> dict | None:
    """``label``'s mean at ``FRACTION`` on a page (each task's recipe cells, ``recipe_cells``; other sweep variants
    aside): its seeds' mean per task (``summarised``: degenerate cells left out), averaged over the tasks it ran;
    ``n`` the fewest seeds of a task, ``tasks`` those tasks, ``degenerate`` true where every cell was, ``left_out``
    how many of its cells were. None where it has no such cell."""
    cells = recipe_cells(page[(page.backbone == backbone) & (page.method == label) & (page.fraction == FRACTION)])
    per_task, counts, degenerate, dropped = [], [], True, 0
    for task, group in cells.groupby("task"):
        rows = group[group.metric == metrics[task]].drop_duplicates("seed")
        if rows.empty:
            continue
        kept, left_out = summarised(rows)
        degenerate &= left_out == len(rows)
        dropped += left_out
        per_task.append(float(kept["value"].mean()))
        counts.append(len(kept))
    if not per_task:
        return None
    return {
        "mean": sum(per_task) / len(per_task),
        "n": min(counts),
        "tasks": len(per_task),
        "degenerate": degenerate,
        "left_out": dropped,
    }


def glance_rows(frame: pd.DataFrame, methods) -> list[tuple[str, str, str]]:
    """``(backbone, label, method)`` of each row: every label ``frame`` gives each of ``methods`` (a checkpoint's
    ``method ⟨backbone⟩`` too), per backbone, the base size's row first and MiniLM's after it; a method without cells
    gets a row on the first backbone all the same when it is a main method."""
    rows = []
    backbones = leading_order(frame["backbone"].unique()) or ["minilm"]
    for method in methods:
        found = sorted(
            {(b, label) for b, label in frame[frame.cell_method == method][["backbone", "method"]].itertuples(False)},
            key=lambda row: (base_size_first(row[0]), row),
        )
        if not found and method in MAIN_METHODS:
            found = [(backbones[0], method)]
        rows += [(backbone, label, method) for backbone, label in found]
    return rows


def primary_rows(rows: list[tuple[str, str, str]], frame: pd.DataFrame) -> tuple[list, list]:
    """``rows`` (``glance_rows``) split in two: one row per backbone and method, its label with results on the most
    datasets at ``FRACTION`` (a method pretrained more than once, ERICA, has a label per checkpoint), and the rest."""
    at = frame[frame.fraction == FRACTION]
    reach = {label: at[at.method == label]["dataset"].nunique() for _, label, _ in rows}
    best = {}
    for backbone, label, method in rows:
        key = (backbone, method)
        if key not in best or (reach[label], label) > (reach[best[key]], best[key]):
            best[key] = label
    kept = [row for row in rows if best[row[0], row[2]] == row[1]]
    return kept, [row for row in rows if row not in kept]


def reason_not_run(method: str, dataset: str) -> str | None:
    """``cannot_run``'s reason for a registered method; None for a name no class registers (a test's, an old one's)."""
    return cannot_run(method, dataset) if method in METHODS.names() else None


def glance_cell_text(
    page: pd.DataFrame | None,
    backbone: str,
    label: str,
    *,
    method: str,
    dataset: str,
    metrics,
    found: dict | None,
    notes: Footnotes,
    untestable: str | None = None,
) -> str:
    """One README cell: the 100 % mean (n) and its Δ against the baseline with the page's verdict (a knowledge
    method's "no difference" reads ``untestable``, the dataset's coverage gate, where there is one); else the
    one-line reason the method cannot run on the dataset (a footnote of ``notes``), or that it has not run there
    (yet, or at 100 %)."""
    reason = reason_not_run(method, dataset)
    if reason:
        return f"cannot run{notes.mark(reason)}"
    ran = page is not None and not page[(page.backbone == backbone) & (page.method == label)].empty
    means = method_means(page, backbone, label, metrics) if ran else None
    if means is None:
        return f"{NOT_RUN} at {FRACTION:.0%} train" if ran else NOT_RUN
    text = f"{means['mean']:.1f} (n={means['n']})"
    if means["degenerate"]:
        text += " every cell degenerate"
    elif means["left_out"]:
        text += f"{DEGENERATE_MARK}{means['left_out']}"
    if means["tasks"] < page[page.method == "baseline"]["task"].nunique():
        text += f", {means['tasks']} of {page[page.method == 'baseline']['task'].nunique()} tasks"
    if method == "baseline":
        return text
    compared = delta_text(found, notes, method, untestable) if found is not None else "no baseline cell to compare with"
    return text + "<br>" + compared


def reading_lines(frame: pd.DataFrame, degenerate: int, left_out: int) -> list[str]:
    """How to read the README's tables: the backbones, what a cell holds, what its verdicts mean, the cells left
    out."""
    return [
        backbone_text(frame),
        "",
        f"Each cell: the method's mean score at {FRACTION:.0%} train in points of each task's main metric, over its "
        "seeds (n = seeds; on a dataset of several tasks, GLUE's included, the unweighted mean of its tasks' means "
        'and n the fewest seeds of a task; "k of K tasks" where the method ran fewer tasks than the baseline, so '
        "its mean is of other tasks). Below it, Δ: the method's score minus the plain fine-tuned baseline's (same "
        "backbone, seeds and train subsets; averaged over the tasks both ran, per seed), with its 95 % interval over "
        "seeds, n = seed pairs and the dataset page's verdict: ↑ / ↓ = significant (q < "
        f"{SIGNIFICANCE}) after the Benjamini–Hochberg correction of the dataset's own page, which holds every test "
        "that page marks: the README reads each verdict from its page and gives the same one. "
        f'"no difference": an interval within ±{NO_DIFFERENCE:g} point; a wider one across 0 is "too few seeds to '
        f'tell" under {MIN_SEEDS} seed pairs and "inconclusive" from {MIN_SEEDS} on, with the seed pairs that the '
        'observed mean and spread say would settle it. Why an interval that excludes 0 can still read "not '
        'significant after correction": the interval is of that comparison alone, while q corrects its p for '
        "every other test of its page (Benjamini–Hochberg), so a p just under "
        f"{SIGNIFICANCE} among many tests does not survive. "
        "Below it, where the method ran beside a counterfactual control (its knowledge shuffled, zeroed or its "
        "relations permuted, its test links shuffled, or ERICA's MLM-only checkpoint): knowledge used, the method "
        "minus its control paired by seed, with its 95 % interval over seeds, n and the page's verdict (✓: above 0 "
        f"after the page's correction; a verdict needs n ≥ {MIN_SEEDS}): a gain over the baseline without knowledge "
        "used does not come from the knowledge. A footnote number after a comparison or a cell: a note said once "
        "under the tables (the cards a comparison ran on where they mix GPU models; the one-line reason a method "
        "cannot run on a dataset, the one `klm bench` gives when asked for it). "
        f'A cell without results says why: "cannot run" with its reason\'s footnote, "{NOT_RUN}", or "{NOT_RUN} at '
        f'{FRACTION:.0%} train" where it ran only other fractions or variants. '
        + "".join(
            f"On {dataset}: {recipe_text(dataset)}, the recipe every method ran there. "
            for dataset in sorted(set(frame["dataset"]))
            if recipe_text(dataset)
        )
        + "A method pretrained more than once (ERICA) has one row in the first table, its checkpoint with results "
        "on the most datasets; its other checkpoints are in the second. Each dataset's page (click its name) has "
        "every fraction, task, test, the bootstrap over examples, the protocol (what was selected on which split) "
        "and the cards.",
        "",
        f"Left out: {degenerate} degenerate cells (one class predicted, selected at their first evaluation, or their "
        "knowledge-free family at chance where the baseline solves it; each page lists its own; ⊘k beside a cell: k "
        "of its cells were)" + (f" and {left_out} cells of an older split or scorer version" if left_out else "") + ".",
        "",
    ]


class GlanceResults(NamedTuple):
    """What the README reads from every dataset's page: the pages' cells of the current protocol, each main
    metric, the comparisons against the baseline (``glance_cells``) and the relational verdicts, and how many cells
    were left out (degenerate, of an older split or scorer version)."""

    pages: dict[str, pd.DataFrame]
    metrics: dict[str, dict[str, str]]
    cells: dict[tuple[str, str, str], dict]
    relational: dict[str, dict[tuple, str]]
    degenerate: int
    left_out: int


def glance_results(frame: pd.DataFrame, golds: dict[str, list], groupings: dict[str, list[str]]) -> GlanceResults:
    """``GlanceResults`` of ``frame``: each dataset's page tests (``page_tests``), read as the pages read them."""
    pages, left_out, degenerate = {}, 0, 0
    for dataset, group in frame.groupby("dataset"):
        pages[dataset], older = current_protocol(group)
        left_out += older
        degenerate += len(degenerate_cells(pages[dataset]))
    cells: dict[tuple[str, str, str], dict] = {}
    relational: dict[str, dict[tuple, str]] = {}
    metrics: dict[str, dict[str, str]] = {}
    for dataset, page in pages.items():
        metrics[dataset] = {task: DATASETS.get(dataset).spec(task).main_metric for task in page["task"].unique()}
        tests = page_tests(page, metrics[dataset], golds, groupings)
        for (backbone, method), found in glance_cells(page, tests).items():
            cells[backbone, method, dataset] = found
        relational[dataset] = relational_verdicts(page, tests)
    return GlanceResults(pages, metrics, cells, relational, degenerate, left_out)


def effect_text(test: dict) -> str:
    """A comparison against the baseline as the answer says it: Δ, its interval, n and the page's verdict."""
    interval = "" if test["interval"] is None else f" {interval_text(test['interval'])}"
    return f"Δ {test['delta']:+.1f}{interval} (n={test['n']}), {verdict(test)}"


def largest_effect(results: GlanceResults, rows: list[tuple[str, str, str]]) -> str:
    """The sentence naming the largest real-data Δ against the baseline of any of ``rows``' methods at
    ``FRACTION`` (the significant ones first, then those of ``MIN_SEEDS`` seed pairs: a large Δ of one seed is
    noise), with the page's verdict: on the base size where it has comparisons (the papers' scale), the same
    method's Δ on every other backbone beside it."""
    method_of = {row[:2]: row[2] for row in rows}
    found = [
        ((significant(test), test["n"] >= MIN_SEEDS), abs(test["delta"]), label, dataset, test, backbone)
        for (backbone, label, dataset), test in results.cells.items()
        if dataset not in SYNTHETIC and test["n"] and (backbone, label) in method_of
    ]
    if not found:
        return "No method has a comparison with the baseline on a real dataset yet."
    lead = leading_order(item[5] for item in found)[0]
    is_significant, _, label, dataset, test, _ = max(
        (item for item in found if item[5] == lead), key=lambda item: (item[0], item[1], item[2], item[3])
    )
    said = f"{label} on {dataset}, {effect_text(test)}"
    beside = [
        f"on {BACKBONE_NAMES.get(backbone, backbone)} {effect_text(other)}"
        for backbone in leading_order(item[5] for item in found)[1:]
        for (b, other_label, other_dataset), other in results.cells.items()
        if (b, other_dataset) == (backbone, dataset)
        and method_of.get((b, other_label)) == method_of[lead, label]
        and other["n"]
    ]
    if len({item[5] for item in found}) > 1:  # several backbones: each named, the base size first
        said = f"{label} on {dataset} ({BACKBONE_NAMES.get(lead, lead)}), {effect_text(test)}"
        said += f"; {'; '.join(beside)}" if beside else ""
    if is_significant[0]:
        return f"The largest real-data effect of any method against the baseline at {FRACTION:.0%} train: {said}."
    return (
        f"No method differs from the baseline on a real dataset at {FRACTION:.0%} train after correction; the "
        f"largest Δ: {said}."
    )


def controls_sentence(results: GlanceResults) -> str | None:
    """What the synthetic task's counterfactual controls show, per relational verdict, in one sentence: for each
    backbone, the verdicts of its worlds ``sentence_worlds`` gives, each named where it is not the 2k world; on the
    base size where it has verdicts, each other backbone's beside it, named where there are several; None where no
    synthetic page gives one."""
    by_world: dict[str, dict[str, dict[str, list[str]]]] = {}  # backbone → world → verdict → methods
    for dataset in SYNTHETIC:
        for (backbone, _, method, world), said in sorted(results.relational.get(dataset, {}).items()):
            by_world.setdefault(backbone, {}).setdefault(world, {}).setdefault(said, []).append(method)
    if not by_world:
        return None
    backbones = leading_order(by_world)
    segments = {
        backbone: [
            (
                world_label(world),
                "; ".join(
                    f"{said}: {', '.join(sorted(set(methods)))}"
                    for said, methods in sorted(by_world[backbone][world].items())
                ),
            )
            for world in sentence_worlds(by_world[backbone])
        ]
        for backbone in backbones
    }
    (first_label, first_part), *first_rest = segments[backbones[0]]
    lead = [BACKBONE_NAMES.get(backbones[0], backbones[0])] if len(backbones) > 1 else []
    on = ", ".join(lead + ([first_label] if first_label else []))
    told = first_part + "".join(f"; ({label}) {part}" for label, part in first_rest)
    for backbone in backbones[1:]:
        (label, part), *rest = segments[backbone]
        told += f"; on {BACKBONE_NAMES.get(backbone, backbone)}{f' ({label})' if label else ''}, {part}"
        told += "".join(f"; ({label}) {part}" for label, part in rest)
    return (
        f"On the synthetic generated task{f' ({on})' if on else ''}, each method against its counterfactual controls "
        f"(does it use the relational facts, its links alone, or nothing?): {told}."
    )


def world_label(world: str) -> str:
    """How the README's opening names a world: "" for the 2k world (variant ""), ``WORLDS``' label for another of
    them, else "pre-registered …"."""
    if not world:
        return ""
    label = WORLDS.get(world)
    return f"pre-registered {world}" if label is None else label


def sentence_worlds(verdicts: dict[str, dict[str, list[str]]]) -> list[str]:
    """Of one backbone's verdicts by world (world → verdict → methods), the worlds the README's opening gives: every
    pre-registered world where some verdict is drawn (not withheld for a relation-blind cue; by name: declared
    before they ran); where none is, the first of ``WORLDS`` in order where one is; else the first world."""
    order = sorted(set(verdicts) - set(WORLDS)) + [world for world in WORLDS if world in verdicts]
    drawn = [world for world in order if any(not said.startswith(NO_VERDICT) for said in verdicts[world])]
    declared = [world for world in drawn if world not in WORLDS]
    return declared or (drawn or order)[:1]


def answer_lines(results: GlanceResults, rows: list, judged: list[Judged], figure: str | None) -> list[str]:
    """The README's opening: at most six generated sentences (the claims' verdicts, the largest real-data effect,
    what the synthetic task's controls show), then the forest plot ``figure``."""
    sentences = []
    if judged:
        sentences.append(
            f"Of the seed papers' {len(judged)} headline claims tested here ([claims.md](claims.md)): "
            f"{counts_text(judged)}."
        )
    sentences.append(largest_effect(results, rows))
    controls = controls_sentence(results)
    if controls:
        sentences.append(controls)
    lines = ["## The answer", "", " ".join(sentences), ""]
    if figure:
        lines += [
            f"![Each main method's Δ against the baseline per dataset, 95 % interval over seeds](figures/{figure})",
            "",
            f"Each main method's Δ against the baseline at {FRACTION:.0%} train per dataset, with its 95 % interval "
            "over seeds (a dataset of several tasks: the per-seed Δ averaged over them), as the table below gives it.",
            "",
        ]
    return lines


def forest_rows(results: GlanceResults, rows: list[tuple[str, str, str]], by_backbone: bool = False) -> list[tuple]:
    """``(dataset, method, Δ, interval)`` of each of ``rows``' comparisons against the baseline, by dataset (the
    method named with its backbone ``by_backbone``)."""
    return [
        (
            dataset + (" (synthetic)" if dataset in SYNTHETIC else ""),
            f"{label} ({backbone})" if by_backbone else label,
            test["delta"],
            test["interval"],
        )
        for dataset in sorted(results.pages)
        for backbone, label, method in rows
        if method != "baseline" and (test := results.cells.get((backbone, label, dataset))) is not None and test["n"]
    ]


def glance_table(
    results: GlanceResults,
    rows: list[tuple[str, str, str]],
    datasets: list[str],
    coverage: dict,
    notes: Footnotes,
    *,
    by_backbone: bool,
) -> list[str]:
    """The README's table of ``rows`` (backbone, label, method) over ``datasets``: a KG coverage row where
    ``coverage`` holds some, then a row per method (``glance_cell_text``), repeated texts as footnotes of ``notes``."""
    header = " | ".join(
        (f"[{dataset}]({dataset}.md)" if dataset in results.pages else dataset)
        + (" (synthetic)" if dataset in SYNTHETIC else "")
        for dataset in datasets
    )
    lines = [f"| method | {header} |", "|---|" + "---|" * len(datasets)]
    if coverage:
        lines.append(
            "| KG coverage (reported split: examples with a triple, asked pairs joined) | "
            + " | ".join(glance_coverage(coverage.get(dataset)) for dataset in datasets)
            + " |"
        )
    for backbone, label, method in rows:
        texts = [
            glance_cell_text(
                results.pages.get(dataset),
                backbone,
                label,
                method=method,
                dataset=dataset,
                metrics=results.metrics.get(dataset, {}),
                found=results.cells.get((backbone, label, dataset)),
                notes=notes,
                untestable=dataset_untestable(coverage.get(dataset)),
            )
            for dataset in datasets
        ]
        name = f"{label} ({backbone})" if by_backbone else label
        lines.append(f"| {name} | " + " | ".join(texts) + " |")
    return lines


def render_glance(
    frame: pd.DataFrame,
    golds: dict[str, list],
    groupings: dict[str, list[str]],
    coverage: dict | None = None,
    *,
    judged: list[Judged] = (),
    figures: Path | None = None,
) -> str:
    """``leaderboards/README.md`` from every dataset's cells in ``frame``: the answer (``answer_lines``, the claims'
    verdicts ``judged``; the forest plot drawn under ``figures`` where given), then the tables; ``coverage``: each
    dataset's measured knowledge coverage (``knowledge_lm.report.coverage``), shown in a row of its own and gating
    the verdicts."""
    coverage = coverage or {}
    results = glance_results(frame, golds, groupings)
    backbones = leading_order(frame["backbone"].unique())
    datasets = sorted(set(results.pages) | set(MAIN_DATASETS))
    main_rows, other_checkpoints = primary_rows(glance_rows(frame, MAIN_METHODS), frame)
    others = other_checkpoints + glance_rows(frame, sorted(set(frame["cell_method"]) - set(MAIN_METHODS)))
    notes = Footnotes()

    def table(rows: list[tuple[str, str, str]]) -> list[str]:
        return glance_table(results, rows, datasets, coverage, notes, by_backbone=len(backbones) > 1)

    drawn = None
    if figures is not None:
        drawn = forest_plot(
            forest_rows(results, main_rows, by_backbone=len(backbones) > 1),
            "Δ against the baseline",
            Path(figures) / FOREST,
        )
    lines = [
        "# At a glance: does knowledge injection help, and by how much?",
        "",
        "Generated by `klm leaderboard` from `results/`; do not edit by hand.",
        "",
        *answer_lines(results, main_rows, list(judged), drawn.name if drawn else None),
        "## The table",
        "",
        *reading_lines(frame, results.degenerate, results.left_out),
        *(
            [
                "KG coverage: what of the knowledge graph reached the knowledge methods (each page has the table). "
                + gate_text(),
                "",
            ]
            if coverage
            else []
        ),
        *table(main_rows),
    ]
    if others:
        lines += [
            "",
            "## Other methods: ablations, extensions, controls and other checkpoints",
            "",
            "The same cells for every other method and checkpoint that has results.",
            "",
            *table(others),
        ]
    lines += ["", *notes.lines()] if notes.texts else []
    for dataset in sorted(results.pages):
        statuses = world_statuses(results.pages[dataset])
        lines += relational_section(dataset, results.relational[dataset], len(backbones) > 1, statuses)
    return "\n".join(lines) + "\n"


# What the relational verdicts rest on, said wherever they are given.
RELATIONAL_CAVEATS = (
    "Every method reads the gold entity links of each statement (no entity linker): the question is what a method "
    "does with the linked entities' facts, not whether it finds them.",
    "kam+kg is this suite's extension of KAM's Eq. 8 (a KG map: 1 where two tokens' entities share an edge); the "
    "paper proposes it and never evaluates it.",
    "KnowBERT's KAR (its knowledge attention and recontextualization) is not knowledge-pretrained here: it is "
    "newly initialised and trained on the task alone.",
    "kg-text (the linked entities' KG facts as a second text segment) is the positive control: a method that reads "
    "the facts as text.",
    "ERICA's knowledge is its contrastive pretraining (here 800 steps of 8 documents from a corpus of about 4,000, "
    "against the paper's 2,500 steps of 2,048 from about 1M); its only control is the MLM-only checkpoint pretrained "
    "on the same corpus, so no verdict of it can "
    "say relational facts.",
)


def relational_section(
    dataset: str, verdicts: dict[tuple, str], by_backbone: bool, statuses: dict[str, WorldStatus] | None = None
) -> list[str]:
    """ "Does a method use relational facts?" on ``dataset``: per method and world (``WORLDS``, then each
    pre-registered world), the verdict its page gives (``relational_verdicts`` of the page's own tests), a
    pre-registered world's verdicts marked with its status (``statuses``: ``world_statuses``; confirmed only where
    it allows), then each declaration's status and the caveats; nothing where the page gives none."""
    statuses = statuses or {}
    if not verdicts and not statuses:
        return []
    declared = sorted(set(statuses) | {key[3] for key in verdicts if key[3] not in WORLDS})
    worlds = [world for world in WORLDS if any(key[3] == world for key in verdicts)] + declared
    tasks = {key[1] for key in verdicts}
    rows: dict[str, dict[str, str]] = {}
    for (backbone, task, method, world), said in sorted(
        verdicts.items(), key=lambda item: (base_size_first(item[0][0]), item[0])
    ):
        label = method + (f" ({backbone})" if by_backbone else "") + (f", {task}" if len(tasks) > 1 else "")
        status = statuses.get(world)
        rows.setdefault(label, {})[world] = said + (f" ({status.word})" if status and world in declared else "")
    headers = {**WORLDS, **{world: f"pre-registered {world}" for world in declared}}
    return [
        "",
        "## Does a method use relational facts?",
        "",
        f"On the [{dataset}]({dataset}.md) task at {FRACTION:.0%} train, per world, the verdict of its page's column "
        '"uses relational facts", read from that page\'s tests (each over the seeds and over the test examples, '
        "corrected with the page): "
        '"relational facts" = knowledge used against the relations-permuted control (the same edges, relation labels '
        "permuted) is ✓ on one_hop and two_hop pooled (not on the type family: permuting the labels also retrains "
        "TransE, which can blur the entities' types) and one_hop or two_hop is above chance; where not (or the "
        f'method reads no relation label): "{LINKS_ONLY}" = knowledge used against shuffled or test-shuffled links '
        "(each entity re-linked to one of its type) is ✓: it uses which entity is linked, beyond its type; "
        f'"{TYPES_ONLY}" = only against zeroed knowledge is ✓, though a shuffle ran: what it uses, the shuffles keep; '
        f'"{UNTOLD}" = zeroed is ✓ and no shuffle ran; '
        '"pretraining only" = a method whose control is its MLM-only checkpoint (ERICA) is ✓ against '
        'it (no control of it isolates relations); "too few seeds" = a deciding test has n < '
        f'{MIN_SEEDS}; "no" otherwise, or "{CANNOT_CARRY}" where the feature ceiling of the knowledge input the '
        f"method reads (its generated page's sanity table) is under {CEILING_FLOOR:.0f} on the hop families "
        f'("{NO_CEILINGS}" where that table lacks its world); "{NO_VERDICT} (…)": the world\'s relation-blind '
        f"regression (that sanity table) is above {RELATION_BLIND_LIMIT:.0f} on one_hop or two_hop, so no verdict "
        'is drawn from it; "not run": the method has no cells of that world. '
        'A pre-registered world\'s verdicts carry its status: "confirmed" only from cells run after its '
        "declaration was committed, with the declared settings (benchmarks/preregistered/); the confirmation "
        "world of generator seed 20261127 is exploratory: no declaration preceded it, and its sixth seed was "
        "added after results were seen.",
        "",
        "| method | " + " | ".join(headers[world] for world in worlds) + " |",
        "|---|" + "---|" * len(worlds),
        *(
            f"| {label} | " + " | ".join(said.get(world, "not run") for world in worlds) + " |"
            for label, said in rows.items()
        ),
        "",
        *(f"- `{world}` ({PREREGISTERED_DIR}): {status.text()}" for world, status in sorted(statuses.items())),
        *(f"- {caveat}" for caveat in RELATIONAL_CAVEATS),
    ]


def used_text(found: dict, notes: Footnotes) -> str:
    """A knowledge-used test as the README says it: Δ, its interval over seeds, n and the page's verdict."""
    interval = "" if found["interval"] is None else f" {interval_text(found['interval'])}"
    return f"{found['delta']:+.1f}{interval} (n={found['n']}) {knowledge_verdict(found)}{notes.cards(found)}"


def delta_text(found: dict, notes: Footnotes, method: str = "", untestable: str | None = None) -> str:
    """The Δ against the baseline as the README says it: Δ, its interval over seeds, n, the page's mark and verdict
    (``method``'s "no difference" gated by ``untestable``: ``report.coverage.gated``), the cards where they mix, and
    knowledge used against each control below."""
    text = f"Δ {found['delta']:+.1f}"
    if found["interval"] is not None:
        text += f" {interval_text(found['interval'])}"
    text += (
        f" (n={found['n']}){significance_mark(found)} {gated(verdict(found), method, untestable)}{notes.cards(found)}"
    )
    if len(found["tasks"]) < found["all_tasks"]:
        text += f", {len(found['tasks'])} of {found['all_tasks']} tasks"
    several = len(found["tasks"]) > 1
    used = [
        f"{task + ': ' if several else ''}{control}: {used_text(test, notes)}"
        for (task, control), test in found["used"].items()
    ]
    return text + (f"<br>knowledge used: {'<br>'.join(used)}" if used else "")
