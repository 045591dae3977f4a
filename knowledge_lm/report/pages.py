"""The markdown of the pages: a dataset's page of tables (and its figures), and the LAMA probing page.

A dataset's page opens with its protocol (what selected the model, what is reported, the split and scorer versions)
and how to read it, then the per-family tables where its examples fall in groups (the confirmation world's rows and
the settings tried on dev, on dev, in tables of their own: ``comparisons.VARIANT_TABLES``), then per backbone the
main table (mean ± std over the non-degenerate seeds per method, fraction and task, best in bold, ⊘ degenerate cells
left out, ↑ / ↓ from the paired t-test corrected with every other mark of the page, † reference rows), each table
headed by the commits of its cells, and per task its sweep variants, figures, entity-frequency buckets, comparison
with the baseline, knowledge used against the controls and all metrics; provenance last.
"""

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from knowledge_lm.core.paths import benchmarks_dir
from knowledge_lm.core.registry import DATASETS
from knowledge_lm.report.bootstrap import REPLICATES
from knowledge_lm.report.comparisons import (
    ABOVE,
    CANNOT_CARRY,
    CEILING_FLOOR,
    CONFIRM,
    HOP_GROUPS,
    KNOWLEDGE_CONTROLS,
    KNOWLEDGE_FREE_GROUPS,
    LINKS_ONLY,
    MAIN,
    MIN_SEEDS,
    NO_CEILINGS,
    NO_DIFFERENCE,
    NO_EXAMPLES_TEST,
    NO_VERDICT,
    PREREGISTERED,
    RELATION_BLIND,
    RELATION_CONTROL,
    SHUFFLE_CONTROLS,
    SIGNIFICANCE,
    TUNING,
    TYPES_ONLY,
    UNTOLD,
    VARIANT_TABLES,
    PageTests,
    bootstrap_comparison,
    family_score,
    frequency_buckets,
    is_control,
    kg_verdict,
    knowledge_used,
    page_groups,
    page_tests,
    relational_verdict,
    row_ceiling,
    row_relation_blind,
    significance_mark,
    significant,
    variant_table,
    verdict,
)
from knowledge_lm.report.coverage import coverage_section, dataset_untestable, gated, task_untestable
from knowledge_lm.report.figures import bucket_bars, fraction_curves, spectrum_curves, variant_curves
from knowledge_lm.report.frame import (
    CELL_COLUMNS,
    MISSING,
    backbone_groups,
    cards_note,
    cards_text,
    fraction_label,
    full_data_spectra,
    interval_text,
    p_text,
    page_rows,
    row_label,
    seed_cells,
    variant_key,
)
from knowledge_lm.report.preregistration import world_statuses
from knowledge_lm.report.protocol import (
    DEGENERATE_MARK,
    commits_text,
    comparable,
    current_protocol,
    degenerate_cells,
    degenerate_group_text,
    degenerate_text,
    dropped_cells,
    protocol_text,
    recipe_text,
    summarised,
    versions_text,
)
from knowledge_lm.report.references import (
    load_references,
    main_table_references,
    paper_only_tasks,
    variant_references,
)
from knowledge_lm.report.sanity import RELATION_BLIND_LIMIT, sanity_section


def summary(values: pd.Series) -> tuple[float, str]:
    n = len(values)
    mean = values.mean()
    spread = f" ± {values.std(ddof=1):.1f}" if n > 1 else ""
    return mean, f"{mean:.1f}{spread} (n={n})"


def seeds_text(cells: pd.DataFrame) -> tuple[float, str, bool]:
    """``(mean, text, counts for best)`` of one group of seeds (rows of one metric): ``summary`` of the values of its
    non-degenerate cells, then ⊘k where k degenerate cells were left out; a group all of them degenerate says so
    (with their values) and is never the best."""
    kept, degenerate = summarised(cells)
    mean, text = summary(kept["value"])
    if degenerate == len(cells):
        return mean, f"{degenerate_group_text(cells)}: {text}", False
    return mean, text + (f"{DEGENERATE_MARK}{degenerate}" if degenerate else ""), True


def main_table(
    frame: pd.DataFrame, tasks: list[str], main_metric: dict, references: list[dict], comparisons: dict[tuple, dict]
) -> list[str]:
    """Mean ± std per method, fraction and task; ↑ / ↓ from ``comparisons`` (``page_comparisons``)."""
    fractions = sorted(frame["fraction"].unique())
    methods = sorted(frame["method"].unique(), key=lambda m: (m != "baseline", m))
    columns = [(fraction, task) for fraction in fractions for task in tasks]
    header = ["method"] + [f"{fraction_label(f)} {task} ({main_metric[task]})" for f, task in columns]
    cells, means = {}, {}
    for method in methods:
        for fraction, task in columns:
            rows = frame[
                (frame.method == method)
                & (frame.fraction == fraction)
                & (frame.task == task)
                & (frame.metric == main_metric[task])
            ]
            if len(rows):
                mean, cells[method, fraction, task], counts = seeds_text(rows)
                if counts:
                    means[method, fraction, task] = mean
    best = {}
    for key, mean in means.items():
        column = key[1:]
        best[column] = max(best.get(column, mean), mean)
    backbone = frame["backbone"].iloc[0]
    lines = [commits_text(frame), "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method in methods:
        row = [method]
        for fraction, task in columns:
            text = cells.get((method, fraction, task), MISSING)
            if (
                (method, fraction, task) in means
                and means[method, fraction, task] == best[fraction, task]
                and len(methods) > 1
            ):
                text = f"**{text}**"
            if (method, fraction, task) in cells:
                text += significance_mark(comparisons.get((backbone, method, fraction, task)))
            row.append(text)
        lines.append("| " + " | ".join(row) + " |")
    return lines + main_table_references(references, methods, columns, main_metric)


def variants_table(frame: pd.DataFrame, task: str, main_metric: str, references: list[dict]) -> list[str]:
    """Sweep variants (e.g. link-noise levels, KAM's α) of a task: one row per method and fraction, one column
    per variant; † rows: papers' numbers for the same variants (a reference with a ``variant``)."""
    task_frame = frame[(frame.task == task) & (frame.metric == main_metric)]
    variants = sorted(task_frame["variant"].unique(), key=variant_key)
    lines = [
        commits_text(task_frame),
        "",
        "| method | fraction | " + " | ".join(variants) + " |",
        "|---|---|" + "---|" * len(variants),
    ]
    for (fraction, method), group in task_frame.groupby(["fraction", "method"]):
        cells = [seeds_text(group[group.variant == v])[1] if (group.variant == v).any() else MISSING for v in variants]
        lines.append(f"| {method} | {fraction_label(fraction)} | " + " | ".join(cells) + " |")
    return lines + variant_references(references, task, main_metric, variants)


# Metrics whose name alone does not say which of two definitions in use it is (knowledge_lm/tasks/typing.py).
METRIC_DEFINITIONS = {
    "loose_macro_f1": "loose macro-F1 as ERNIE's code computes it: precision and recall each averaged over all "
    "mentions",
    "ling_weld_loose_macro_f1": "loose macro-F1 as Ling & Weld (2012) define it: precision averaged over the mentions "
    "with a predicted type, recall over those with a gold type",
}


def metric_definitions(metrics: list[str]) -> list[str]:
    """A line naming the definition of each of ``metrics`` that has two (``METRIC_DEFINITIONS``); none if none."""
    named = [f"{metric} = {METRIC_DEFINITIONS[metric]}" for metric in metrics if metric in METRIC_DEFINITIONS]
    return ["", "; ".join(named) + "."] if named else []


def detail_table(frame: pd.DataFrame, task: str) -> list[str]:
    task_frame = frame[frame.task == task]
    metrics = list(dict.fromkeys(task_frame["metric"]))
    header = ["method", "fraction", "split"] + metrics + ["degenerate cells", "train size", "steps", "subset hash"]
    lines = [commits_text(task_frame), "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    keys = (
        task_frame[["method", "fraction"]].drop_duplicates().sort_values(["fraction", "method"]).itertuples(index=False)
    )
    for method, fraction in keys:
        group = task_frame[(task_frame.method == method) & (task_frame.fraction == fraction)]
        row = [method, fraction_label(fraction), group["split"].iloc[0]]
        row += [
            seeds_text(group[group.metric == metric])[1] if (group.metric == metric).any() else MISSING
            for metric in metrics
        ]
        first = group.drop_duplicates("seed")
        degenerate = degenerate_cells(first)
        row += [
            ", ".join(f"s{cell.seed}: {cell.degenerate}" for cell in degenerate.itertuples()) or "0",
            str(int(first["train_size"].iloc[0])),
            "/".join(map(str, sorted(first["steps"].unique()))),
            ", ".join(sorted(first["subset_hash"].unique())),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return lines + metric_definitions(metrics)


def comparison_table(
    frame: pd.DataFrame,
    task: str,
    metric: str,
    golds: dict[str, list],
    comparisons: dict[tuple, dict],
    *,
    untestable: str | None = None,
) -> list[str]:
    """Each method against the baseline per fraction (``comparisons``: ``page_comparisons``): Δ (mean ± std over
    paired seeds) with its 95 % interval, n, the pairs left out as degenerate, the paired t-test's raw p and its
    Benjamini–Hochberg q, the paired bootstrap's 95 % interval of Δ and (raw, one-sided) p over the test examples
    (where predictions were kept), and the verdict (a knowledge method's "no difference" reads ``untestable``, the
    coverage gate's reason, where there is one)."""
    lines = [
        commits_text(frame[frame.task == task]),
        "",
        "| method | fraction | Δ vs baseline | Δ 95% CI (t, over seeds) | n pairs | degenerate pairs left out | "
        "p (paired t) | q (BH, page) | Δ 95% CI (bootstrap over examples) | p (bootstrap) | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    task_frame = frame[frame.task == task]
    backbone = frame["backbone"].iloc[0]
    for fraction in sorted(task_frame["fraction"].unique()):
        for method in sorted(m for m in task_frame["method"].unique() if m != "baseline"):
            found = comparisons.get((backbone, method, fraction, task))
            if found is None:
                continue
            if not found["n"]:
                lines.append(
                    f"| {method} | {fraction_label(fraction)} | {MISSING} | {MISSING} | 0 | {found['excluded']} | "
                    f"{MISSING} | {MISSING} | {MISSING} | {MISSING} | {verdict(found)} |"
                )
                continue
            spread = f" ± {found['std']:.1f}" if found["std"] is not None else ""
            seeds_interval = MISSING if found["interval"] is None else interval_text(found["interval"])
            resampled = bootstrap_comparison(
                comparable(task_frame), method, fraction, task=task, metric=metric, golds=golds
            )
            interval, p_boot = MISSING, MISSING
            if resampled is not None:
                interval = interval_text(resampled["delta_interval"])
                p_boot = f"{resampled['p_not_better' if found['delta'] > 0 else 'p_not_worse']:.4f}"
            lines.append(
                f"| {method} | {fraction_label(fraction)} | {found['delta']:+.1f}{spread} | {seeds_interval} | "
                f"{found['n']} | {found['excluded']} | {p_text(found['p'])} | {p_text(found['q'])} | {interval} | "
                f"{p_boot} | {gated(verdict(found), method, untestable)}{cards_note(found)} |"
            )
    return lines if len(lines) > 4 else []


def family_text(score: dict | None, test: dict | None) -> str:
    """A family's mean with its bootstrap interval over the examples; ✓ where its ``family_test`` is above chance
    after the page's correction."""
    if score is None:
        return MISSING
    above = ABOVE if significant(test) and test["delta"] > 0 else ""
    if score["interval"] is None:
        return f"{score['mean']:.1f}{above}"
    low, high = score["interval"]
    return f"{score['mean']:.1f} [{low:.1f}, {high:.1f}]{above}"


def family_table(
    frame: pd.DataFrame,
    dataset: str,
    task: str,
    *,
    metric: str,
    fraction: float,
    groups: list[str],
    golds: dict[str, list],
    groupings: dict[str, list[str]],
    tests: PageTests,
    table: str = MAIN,
) -> list[str]:
    """At ``fraction``: one row per method and sweep variant of ``table`` (``VARIANT_TABLES``), over its
    non-degenerate seeds; the mean and bootstrap interval of ``metric`` on each example group, which groups that need
    the graph are above chance (``tests``), Δ against the method's counterfactual controls on those groups pooled and
    on the whole split, and whether it uses relational facts (``relational_verdict``); empty without such rows."""
    at = comparable(frame[frame.fraction == fraction])
    rows = [(method, variant) for method, variant in page_rows(at) if variant_table(variant) == table]
    if not rows:
        return []
    backbone = frame["backbone"].iloc[0]
    knowledge = [group for group in groups if group not in KNOWLEDGE_FREE_GROUPS]
    counts = {group: set() for group in groups}
    for cell in at.drop_duplicates(["method", "variant", "seed"]).itertuples():
        if cell.groups_sha256:
            for group in groups:
                counts[group].add(groupings[cell.groups_sha256].count(group))
        elif isinstance(cell.by_group, dict):
            for group in groups:
                counts[group].add(cell.by_group.get(group, {}).get("examples", 0))
    names = [f"{group} ({counts[group].pop()})" if len(counts[group]) == 1 else group for group in groups]
    split = at["split"].iloc[0]
    lines = [
        commits_text(at),
        "",
        "| method | seeds | " + " | ".join(names) + f" | uses the KG | knowledge used: {'+'.join(knowledge)} | "
        f"knowledge used: whole {split} split | uses relational facts |",
        "|---|---|" + "---|" * (len(groups) + 4),
    ]
    for method, variant in rows:
        cells = seed_cells(at, method, variant, fraction, metric)
        relational = row_relational(tests, (backbone, task, method, variant, fraction), cells)
        scores = {
            group: family_score(cells, group, dataset, task=task, metric=metric, golds=golds, groupings=groupings)
            for group in groups
        }
        above = {group: tests.chance.get((backbone, task, method, variant, fraction, group)) for group in groups}
        used = [
            knowledge_used(
                at,
                method,
                variant,
                fraction=fraction,
                dataset=dataset,
                task=task,
                metric=metric,
                golds=golds,
                groupings=groupings,
                used=tests.used,
                groups=pooled,
            )
            for pooled in (set(knowledge), None)
        ]
        lines.append(
            f"| {row_label(method, variant)} | {len(cells)} | "
            + " | ".join(family_text(scores[g], above[g]) for g in groups)
            + f" | {kg_verdict(above)} | {used[0]} | {used[1]} | {relational} |"
        )
    return lines


def row_relational(tests: PageTests, row: tuple, cells: pd.DataFrame) -> str:
    """A family table's "uses relational facts" of ``row`` (backbone, task, method, variant, fraction), whose seeds
    are ``cells``: "(control)" for a control, else its ``relational_verdict``."""
    cell_method, variant = cells["cell_method"].iloc[0], row[3]
    if is_control(cell_method, variant):
        return "(control)"
    return relational_verdict(
        tests, row, cell_method, ceiling=row_ceiling(cells), relation_blind=row_relation_blind(cells)
    )


def dev_family_text(cells: pd.DataFrame, group: str, metric: str) -> str:
    """Mean ± std over ``cells``' seeds of ``metric`` on ``group`` of the dev split (their ``dev_metrics_by_group``);
    — where a seed did not record it."""
    values = [
        by_group[group][metric]
        for by_group in cells["dev_by_group"]
        if isinstance(by_group, dict) and metric in by_group.get(group, {})
    ]
    if not values or len(values) < len(cells):
        return MISSING
    return summary(pd.Series(values, dtype=float))[1]


def tuning_table(frame: pd.DataFrame, metric: str, fraction: float, groups: list[str]) -> list[str]:
    """The settings tried on dev (``VARIANT_TABLES[TUNING]``) at ``fraction``: per method, its default cells (variant
    "") of the seeds its tried settings ran beside each tried setting, each with its ``metric`` per family of the dev
    split (mean ± std over non-degenerate seeds); empty where none was tried."""
    at = comparable(frame[frame.fraction == fraction])
    tried = [(method, variant) for method, variant in page_rows(at) if variant_table(variant) == TUNING]
    if not tried:
        return []
    lines = [
        commits_text(at[at.variant.isin({variant for _, variant in tried} | {""})]),
        "",
        "| method | setting | seeds | " + " | ".join(f"dev {group}" for group in groups) + " |",
        "|---|---|---|" + "---|" * len(groups),
    ]
    for method in dict.fromkeys(method for method, _ in tried):
        variants = [variant for name, variant in tried if name == method]
        seeds = set(at[(at.method == method) & at.variant.isin(variants)]["seed"])
        default = seed_cells(at, method, "", fraction, metric)
        for variant, cells in [("", default[default.seed.isin(seeds)])] + [
            (variant, seed_cells(at, method, variant, fraction, metric)) for variant in variants
        ]:
            if cells.empty:
                continue
            row = [method, variant or "default", ", ".join(str(seed) for seed in cells["seed"])]
            lines.append("| " + " | ".join(row + [dev_family_text(cells, g, metric) for g in groups]) + " |")
    return lines


def tuning_text(metric: str) -> str:
    return (
        f'Each setting tried on dev beside the configs\' default (variant ""), on the same seeds: {metric} per '
        "statement family of the dev split, mean ± std over seeds, the split the settings were chosen on. These rows "
        "are tested nothing and their test scores are kept off this page; benchmarks/notes/generated.md says which "
        "setting was kept."
    )


def relational_text() -> str:
    """What the column "uses relational facts" says (``relational_verdict``)."""
    return (
        '"uses relational facts", per world: "relational facts" where knowledge used against '
        f"{RELATION_CONTROL} on {' and '.join(HOP_GROUPS)} pooled is ✓ (not on the type family: permuting the labels "
        f"also retrains TransE, which can blur the entities' types) and {' or '.join(HOP_GROUPS)} is above "
        f"chance; where not, whether or not it reads relation labels ({', '.join(RELATION_BLIND)}: relation-blind by "
        f'construction, {RELATION_CONTROL} not run): "{LINKS_ONLY}" where knowledge used against '
        f"{' or '.join(SHUFFLE_CONTROLS)} (each link re-linked to an entity of the same type) is ✓: the method uses "
        f'which entity is linked, beyond its type; "{TYPES_ONLY}" where only against zeroed knowledge is ✓ though a '
        f'shuffle ran: what it uses, the shuffles keep; "{UNTOLD}" where zeroed is ✓ and no shuffle ran; "too few '
        f'seeds" where a test that decides has fewer than {MIN_SEEDS} seed pairs; "no" otherwise, or "{CANNOT_CARRY}" '
        f"where the feature ceiling of the knowledge input the method reads (the sanity table below) is under "
        f'{CEILING_FLOOR:.0f} on the hop families ("{NO_CEILINGS}" where the table lacks its world); — where none of '
        "those controls ran. In a world whose relation-blind regression (the sanity table) is above "
        f'{RELATION_BLIND_LIMIT:.0f} on a hop family no verdict is drawn: "{NO_VERDICT} (its score > '
        f"{RELATION_BLIND_LIMIT:.0f})\". Every test is the page's own, corrected with it."
    )


def controls_text(metric: str) -> str:
    controls = "; ".join(f"{name}: {control.what}" for name, control in KNOWLEDGE_CONTROLS.items())
    return (
        f"Knowledge used = the method's {metric} minus that of its counterfactual control (cells run like the "
        f"method's but for the knowledge they get; {controls}), paired by seed over the seeds both ran, neither "
        'degenerate: Δ, its 95 % interval over seeds, n = seed pairs and q; beside it, "examples": the 95 % '
        "interval of Δ in a paired bootstrap over the test examples (the same draw for every seed, the seeds "
        "averaged) and its two-sided p. Each test asks both: a paired t-test over the seeds (does the gain survive a "
        "new seed?) and that bootstrap (does it survive a new test set?); its p is the larger of the two, corrected "
        "with every other mark of this page (Benjamini–Hochberg), so a gain that holds on every seed of one small "
        f"test set alone is no ✓. ✓ = q < {SIGNIFICANCE} with Δ > 0: the method does better with the right "
        f'knowledge than with wrong or none, it uses it; a verdict needs n ≥ {MIN_SEEDS} seed pairs (else "too few '
        f'seeds"), and kept predictions (else "{NO_EXAMPLES_TEST}"); "not significant" '
        "= what it gains may come from elsewhere (more parameters, more training). — = no control cells yet; "
        "(control) = the row is a control."
    )


def preregistered_lines(frame: pd.DataFrame) -> list[str]:
    """What each pre-registered world of the page's dataset (``knowledge_lm.report.preregistration``) allows: its
    verdicts confirmed, or exploratory and why, or declared and not run yet; nothing where none is declared."""
    statuses = world_statuses(frame)
    if not statuses:
        return []
    return [
        "",
        "**Pre-registration.** A world declared in a committed file before its first cell: its verdicts are "
        '"confirmed" only where every cell ran at or after that file\'s first commit with the declared settings and '
        "the file was not changed after a cell ran; otherwise exploratory.",
        "",
        *(f"- `{world}`: {status.text()}" for world, status in sorted(statuses.items())),
    ]


def families_text() -> str:
    return (
        "The per-family tables come first: each cell is the mean over seeds of a method's score on one statement "
        "family of the test split (text: answered from the sentence alone; the others need the knowledge graph), "
        f"with the 95 % interval of a bootstrap over that family's examples ({REPLICATES} replicates, each drawing "
        "the family's examples with replacement, the same draw for every seed, and averaging the seeds' scores on "
        "it: the seeds are pooled by averaging each example's correctness over them). ✓ = above chance, the share "
        "of the family's most frequent label (50: every family is balanced true/false), on one_hop and two_hop the "
        "world's relation-blind regression where it is higher (the sanity table: what the graph's shape alone "
        "reaches), and for kg-text its input-order oracle where that is higher still (where its facts sit, their "
        "words hidden), in two one-sided tests that "
        "must both hold: a one-sample t-test of the seeds' scores on the family against chance (over seeds: does it "
        "survive a new seed?), and the same t-test of the family's examples, each one's correctness averaged over "
        "the seeds (over test examples: does it survive a new test set?); the larger p, significant after the "
        "page's correction. "
        '"uses the KG": yes where every family that needs the graph is above chance, else which are.'
    )


def family_section(
    frame: pd.DataFrame,
    dataset: str,
    task: str,
    *,
    metric: str,
    backbone: str,
    golds: dict[str, list],
    groupings: dict[str, list[str]],
    tests: PageTests,
) -> list[str]:
    """The per-family check of ``task`` (the generated task's statement families), at 100 % (else the largest
    fraction), the other fractions folded below it; nothing where the cells have no example groups."""
    task_frame = frame[(frame.task == task) & (frame.metric == metric)]
    groups = page_groups(task_frame, groupings)
    if not groups:
        return []
    fractions = sorted(task_frame["fraction"].unique())
    shown, others = fractions[-1], fractions[:-1]

    def tables(fraction: float) -> list[str]:
        shared = dict(metric=metric, fraction=fraction, groups=groups, golds=golds, groupings=groupings, tests=tests)
        lines = family_table(task_frame, dataset, task, **shared)
        for table in (PREREGISTERED, CONFIRM):
            rows = family_table(task_frame, dataset, task, **shared, table=table)
            if rows:
                lines += ["", f"**{VARIANT_TABLES[table].heading}**", "", *rows]
        return lines

    out = [f"## {task}: {metric} per statement family ({backbone}, {fraction_label(shown)})", ""]
    out += tables(shown)
    out += preregistered_lines(task_frame)
    out += ["", controls_text(metric), "", relational_text(), ""]
    tuned = tuning_table(task_frame, metric, shown, groups)
    if tuned:
        out += [f"### {VARIANT_TABLES[TUNING].heading}", "", *tuned, "", tuning_text(metric), ""]
    if others:
        out += [f"<details><summary>Other fractions: {', '.join(fraction_label(f) for f in others)}</summary>", ""]
        for fraction in others:
            out += [f"**{fraction_label(fraction)}**", ""]
            out += tables(fraction) + [""]
        out += ["</details>", ""]
    return out


def knowledge_used_table(
    frame: pd.DataFrame, dataset: str, task: str, *, metric: str, golds: dict[str, list], tests: PageTests
) -> list[str]:
    """Each method with a counterfactual control, per fraction: Δ against it on the whole split; empty where no
    method of ``task`` has control cells."""
    task_frame = frame[(frame.task == task) & (frame.metric == metric)]
    lines = [f"| method | fraction | knowledge used: Δ vs control ({metric}, whole split) |", "|---|---|---|"]
    for fraction in sorted(task_frame["fraction"].unique()):
        for method, variant in page_rows(task_frame[(task_frame.fraction == fraction) & (task_frame.variant == "")]):
            cell = knowledge_used(
                task_frame,
                method,
                variant,
                fraction=fraction,
                dataset=dataset,
                task=task,
                metric=metric,
                golds=golds,
                groupings={},
                used=tests.used,
            )
            if cell not in (MISSING, "(control)"):
                lines.append(f"| {method} | {fraction_label(fraction)} | {cell} |")
    return lines if len(lines) > 2 else []


def overall_table(tests: PageTests, backbone: str, dataset: str, untestable: str | None = None) -> list[str]:
    """Each method against the baseline at 100 %, averaged over the page's tasks per seed (the answer at a glance
    reads it from here); nothing on a page of one task, where the glance reads the task's own comparison. A knowledge
    method's "no difference" reads ``untestable`` (the coverage gate's reason for the dataset) where there is one."""
    found_by_method = {method: found for (b, method), found in sorted(tests.overall.items()) if b == backbone}
    if not found_by_method:
        return []
    recipes = recipe_text(dataset)
    lines = [
        "Against the baseline at 100 %, averaged over the tasks both ran (per seed, then tested over seeds; corrected "
        f"with the page; the README shows these){f'; {recipes}' if recipes else ''}:",
        "",
        "| method | tasks | Δ vs baseline | Δ 95% CI (t, over seeds) | n | p (paired t) | q (BH, page) | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for method, found in found_by_method.items():
        interval = MISSING if found["interval"] is None else interval_text(found["interval"])
        lines.append(
            f"| {method} | {', '.join(found['tasks'])} | {found['delta']:+.1f}{significance_mark(found)} | "
            f"{interval} | {found['n']} | {p_text(found['p'])} | {p_text(found['q'])} | "
            f"{gated(verdict(found), method, untestable)}{cards_note(found)} |"
        )
    return lines + [""]


def provenance(frame: pd.DataFrame) -> list[str]:
    """Where the page's cells ran: per backbone, weights and card (its model and the device's full name), the
    commits, cells, batch and time; first, the cards of the page, and whether its comparisons mix them."""
    seeds = frame.drop_duplicates(CELL_COLUMNS)
    cards = sorted(seeds["card"].unique())
    lines = [
        f"Cards: {cards_text(cards)}"
        + (
            ". Each comparison whose cells ran on more than one card model says so beside its verdict "
            '("cards: …"); the others compare cells of one model.'
            if len(cards) > 1
            else ": every comparison on this page compares cells of one card model."
        ),
        "",
        "| backbone | weights from | weights sha256 | card | device | commits | cells | per-device batch | "
        "summed cell time |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (backbone, weights, checksum, card, device), group in seeds.groupby(
        ["backbone", "weights", "checksum", "card", "device"], dropna=False
    ):
        commits = ", ".join(sorted(group["commit"].unique()))
        batches = ", ".join(map(str, sorted(group["batch"].unique())))
        lines.append(
            f"| {backbone} | {weights} | {str(checksum)[:16]} | {card} | {device} | {commits} | "
            f"{len(group)} | {batches} | {group['wall_time_s'].sum() / 60:.1f} min |"
        )
    return lines


def pretraining_runs(frame: pd.DataFrame) -> list[str]:
    """The header line naming the pretraining run each ERICA row (``erica`` and its ablations) comes from: its
    cells' checkpoint and weights checksum (``checkpoint_checksum`` of the run's record in ``results/pretraining/``);
    a method whose cells come from more than one run is said to mix them. Nothing on a page without ERICA rows."""
    erica = frame[frame["cell_method"].str.startswith("erica")].drop_duplicates(["cell_method", "checksum"])
    if erica.empty:
        return []
    named, mixed = [], []
    for method, runs in erica.groupby("cell_method", sort=True):
        sources = [
            f"`{weights}` ({str(checksum)[:12]})" for weights, checksum in zip(runs["weights"], runs["checksum"])
        ]
        named.append(f"{method} ← {' and '.join(sources)}")
        if len(runs) > 1:
            mixed.append(method)
    return [
        "**ERICA pretraining runs.** Each ERICA row comes from the checkpoint named here (weights sha256, as "
        "`checkpoint_checksum` in its record under results/pretraining/): "
        + "; ".join(named)
        + "."
        + (f" Mixed: the cells of {', '.join(mixed)} come from more than one pretraining run." if mixed else ""),
        "",
    ]


def figure_link(path: Path | None, caption: str) -> list[str]:
    return [f"![{caption}](figures/{path.name})", ""] if path is not None else []


def dataset_notes(dataset: str) -> list[str]:
    """``benchmarks/notes/<dataset>.md``, where there is one: what the tables cannot say (how a method was tried,
    why a design was chosen), written by hand; its numbers come from the results only (the tables, or a log
    under ``results/`` that it names)."""
    path = benchmarks_dir() / "notes" / f"{dataset}.md"
    if not path.is_file():
        return []
    return [
        "## Notes",
        "",
        f"Written by hand in `benchmarks/notes/{dataset}.md`; every number is in the tables, "
        "or in a log under `results/` that the note names.",
        "",
        *path.read_text(encoding="utf-8").strip().splitlines(),
        "",
    ]


def family_text_of(tests: PageTests) -> str:
    """What the page's one Benjamini–Hochberg family holds, by kind of test."""
    kinds = [
        (tests.baseline, "against the baseline"),
        (tests.overall, "against the baseline over the tasks at 100 %"),
        (tests.used, "knowledge used"),
        (tests.chance, "a family above chance"),
    ]
    counts = [(sum(found["p"] is not None for found in found_by_key.values()), what) for found_by_key, what in kinds]
    return ", ".join(f"{count} {what}" for count, what in counts if count)


def reading_text(tests: PageTests, degenerate: str) -> str:
    """How to read a page's tables: what a cell is, what marks it, what a verdict means."""
    return (
        "Mean ± sample std over training seeds (n = seeds, degenerate cells left out) of each task's main metric on "
        "the reported split. Best mean per column in bold; — = no result. ↑ / ↓ = above / below the baseline in a "
        f"paired t-test over seeds, significant after Benjamini–Hochberg correction (q < {SIGNIFICANCE}) over one "
        "family per page that holds every test whose mark (↑ / ↓ / ✓) the page shows: "
        f"{tests.size()} comparisons ({family_text_of(tests) or 'none'}). The per-task tables give Δ with its 95 % "
        f"interval over seeds, n, the raw p and q, and a paired bootstrap over the test examples ({REPLICATES} "
        "replicates; its p one-sided and uncorrected) where both kept predictions. Verdicts: better / worse "
        f"(q < {SIGNIFICANCE}); not significant after correction (p < {SIGNIFICANCE} ≤ q); no difference (the "
        f"interval of Δ over seeds lies within ±{NO_DIFFERENCE:g} point); too few seeds to tell (a wider interval "
        f"that does not exclude 0 after correction, n < {MIN_SEEDS}); inconclusive (the same at n ≥ {MIN_SEEDS}, "
        "with the seed pairs that the observed mean and spread say would settle it). "
        + (degenerate + " " if degenerate else "")
        + "† = the paper's own number, for reference only (different backbone and protocol: not comparable one to "
        "one)."
    )


@dataclass
class DatasetPage:
    """What every section of a dataset's page reads: the current-protocol cells, the tasks shown with their main
    metrics, the papers' references, the page's one family of tests and the relational family sections."""

    dataset: str
    frame: pd.DataFrame
    older: int
    figures_dir: Path | None
    golds: dict[str, list]
    groupings: dict[str, list[str]]
    dataset_class: type
    tasks: list[str]
    main_metric: dict[str, str]
    references: list[dict]
    tests: PageTests
    families: dict[tuple[str, str], list[str]]
    coverage: dict | None = None  # results/coverage/<dataset>.json (``knowledge_lm.report.coverage``)

    def untestable(self, task: str | None = None) -> str | None:
        """The coverage gate's reason for the dataset (or ``task``), None where it passes or was not measured."""
        if task is None:
            return dataset_untestable(self.coverage)
        measured = ((self.coverage or {}).get("tasks") or {}).get(task)
        return task_untestable(measured) if measured else None


@dataclass
class TaskCells:
    """One backbone's cells of one task: ``group`` all of the backbone's cells, ``plain`` those of no variant,
    ``varied`` those of sweep variants (the settings tried on dev left out)."""

    backbone: str
    task: str
    metric: str
    group: pd.DataFrame
    plain: pd.DataFrame
    varied: pd.DataFrame


def dataset_page(dataset, frame, figures_dir, golds, groupings, *, coverage=None) -> DatasetPage:
    """The page's cells of the current protocol and the tests they take part in; ``coverage``: the dataset's
    measured knowledge coverage, where there is one."""
    frame, older = current_protocol(frame)
    dataset_class = DATASETS.get(dataset)
    tasks = [task for task in dataset_class.tasks if task in set(frame["task"])]
    main_metric = {task: dataset_class.spec(task).main_metric for task in dataset_class.tasks}
    tests = page_tests(frame, main_metric, golds, groupings)
    families = {
        (backbone, task): family_section(
            group,
            dataset,
            task,
            metric=main_metric[task],
            backbone=backbone,
            golds=golds,
            groupings=groupings,
            tests=tests,
        )
        for backbone, group in backbone_groups(frame)
        for task in tasks
    }
    return DatasetPage(
        dataset,
        frame,
        older,
        figures_dir,
        golds,
        groupings,
        dataset_class,
        tasks,
        main_metric,
        load_references(dataset),
        tests,
        families,
        coverage,
    )


def header_section(page: DatasetPage) -> list[str]:
    """The title, the protocol, the versions and how to read the tables, then the cells left out and the
    pretraining runs the page's checkpoints come from."""
    frame, older = page.frame, page.older
    return [
        f"# {page.dataset}",
        "",
        "Generated by `klm leaderboard` from `results/`; do not edit by hand.",
        "",
        "**Protocol.** " + protocol_text(frame, page.dataset, page.tasks),
        f"Versions: {versions_text(frame)}."
        + (f" Left out: {older} cells of an older split or scorer version of their task." if older else ""),
        "",
        *(sanity_section() if page.dataset == "generated" else []),
        "**Reading the tables.** "
        + reading_text(page.tests, degenerate_text(frame))
        + (" " + families_text() if any(page.families.values()) else ""),
        "",
        *dropped_cells(frame),
        *pretraining_runs(frame),
    ]


def coverage_page_section(page: DatasetPage) -> list[str]:
    """What of the KG reached the knowledge methods on each task, and the gate their verdicts pass or not."""
    return coverage_section(page.coverage)


def family_sections(page: DatasetPage) -> list[str]:
    """The relational families' sections, each backbone's tasks in turn."""
    return [line for section in page.families.values() for line in section]


def notes_section(page: DatasetPage) -> list[str]:
    return dataset_notes(page.dataset)


def backbone_sections(page: DatasetPage) -> list[str]:
    """Per backbone: its main table and overall tests, then each task's sections (``TASK_SECTIONS``)."""
    out = []
    for backbone, group in backbone_groups(page.frame):
        out += [f"## Backbone: {backbone}", ""]
        # Settings tried on dev show their dev scores only (``tuning_table``): their test scores are kept off the page.
        tried = group["variant"].map(variant_table) == TUNING
        plain, varied = group[group.variant == ""], group[(group.variant != "") & ~tried]
        out += main_tables(page, backbone, plain)
        for task in page.tasks:
            cells = TaskCells(backbone, task, page.main_metric[task], group, plain, varied)
            out += [line for section in TASK_SECTIONS for line in section(page, cells)]
    return out


def main_tables(page: DatasetPage, backbone: str, plain: pd.DataFrame) -> list[str]:
    """The backbone's main table (with the papers' numbers of tasks we have no data for) and its overall tests."""
    if plain.empty:
        return []
    shown = paper_only_tasks(page.dataset_class, page.tasks, plain, page.references)
    out = main_table(plain, page.tasks + shown, page.main_metric, page.references, page.tests.baseline)
    out.append("")
    out += overall_table(page.tests, backbone, page.dataset, page.untestable())
    if shown:
        out += [
            f"Columns of {', '.join(shown)} hold only the papers' numbers: we have no results on that task "
            "(its data is not here), and they stand beside ours on the task next to it for reference.",
            "",
        ]
    return out


def figure_title(page: DatasetPage, cells: TaskCells) -> str:
    return f"{page.dataset} / {cells.task} ({cells.backbone})"


def figure_path(page: DatasetPage, cells: TaskCells, kind: str) -> Path:
    return page.figures_dir / f"{page.dataset}-{cells.task}-{cells.backbone}-{kind}.png"


def fractions_figure(page: DatasetPage, cells: TaskCells) -> list[str]:
    """The main metric against the train fraction, where figures are drawn."""
    if page.figures_dir is None:
        return []
    plain, task, metric = cells.plain, cells.task, cells.metric
    curves = comparable(plain[(plain.task == task) & (plain.metric == metric)])
    return figure_link(
        fraction_curves(curves, figure_title(page, cells), metric, figure_path(page, cells, "fractions")),
        f"{task}: {metric} against the train fraction",
    )


def variants_section(page: DatasetPage, cells: TaskCells) -> list[str]:
    """The sweep variants' table, and their figure where figures are drawn."""
    plain, varied, task, metric = cells.plain, cells.varied, cells.task, cells.metric
    if not (varied.task == task).any():
        return []
    out = [
        f"### {task}: sweep variants ({metric})",
        "",
        "Each column is a variant of a sweep (its own prepared features, e.g. a share of wrong entity "
        "links); the configs under benchmarks/ name what each variant changes.",
        "",
    ]
    out += variants_table(varied, task, metric, page.references) + [""]
    if page.figures_dir is not None:
        curves = comparable(varied[(varied.task == task) & (varied.metric == metric)])
        baseline = comparable(plain[(plain.task == task) & (plain.metric == metric) & (plain.method == "baseline")])
        out += figure_link(
            variant_curves(curves, figure_title(page, cells), metric, figure_path(page, cells, "variants"), baseline),
            f"{task}: {metric} against the sweep variant",
        )
    return out


def spectrum_figure(page: DatasetPage, cells: TaskCells) -> list[str]:
    """The singular values of the head's features at 100 %, where figures are drawn and cells kept them."""
    if page.figures_dir is None:
        return []
    spectra = full_data_spectra(comparable(cells.plain[cells.plain.task == cells.task]))
    if not spectra:
        return []
    return figure_link(
        spectrum_curves(
            spectra,
            f"{figure_title(page, cells)}, 100%, head features' singular values",
            figure_path(page, cells, "spectrum"),
        ),
        f"{cells.task}: singular values of the head's features, with (dotted) and without SR",
    )


def frequency_section(page: DatasetPage, cells: TaskCells) -> list[str]:
    """The main metric by entity frequency bucket, and its bars where figures are drawn."""
    task, metric = cells.task, cells.metric
    buckets = frequency_buckets(
        comparable(cells.plain[cells.plain.task == task]), page.dataset, task, metric, page.golds
    )
    if buckets is None:
        return []
    labels, per_method = buckets
    out = [
        f"### {task}: {metric} by entity frequency (100%, mean over seeds)",
        "",
        "The reported split's examples grouped by the highest train-split document frequency among "
        "their linked entities (examples per bucket in brackets), as the SI+SR paper's Fig. 1a/5a group "
        "them by their entities' Wikipedia frequency.",
        "",
        "| method | " + " | ".join(labels) + " |",
        "|---" * (len(labels) + 1) + "|",
    ]
    out += [
        f"| {method} | " + " | ".join(MISSING if v is None else f"{v:.1f}" for v in values) + " |"
        for method, values in sorted(per_method.items(), key=lambda item: (item[0] != "baseline", item[0]))
    ]
    out.append("")
    if page.figures_dir is not None:
        out += figure_link(
            bucket_bars(
                per_method, labels, f"{figure_title(page, cells)}, 100%", metric, figure_path(page, cells, "frequency")
            ),
            f"{task}: {metric} by entity frequency",
        )
    return out


def baseline_section(page: DatasetPage, cells: TaskCells) -> list[str]:
    """Each method against the baseline, paired by seed."""
    if not (cells.plain.task == cells.task).any():
        return []
    compared = comparison_table(
        cells.plain, cells.task, cells.metric, page.golds, page.tests.baseline, untestable=page.untestable(cells.task)
    )
    if not compared:
        return []
    return [f"### {cells.task}: against the baseline ({cells.metric}, paired by seed)", ""] + compared + [""]


def knowledge_used_section(page: DatasetPage, cells: TaskCells) -> list[str]:
    """Each method against its control, where the task has no relational family section."""
    if not (cells.plain.task == cells.task).any() or page.families[cells.backbone, cells.task]:
        return []
    used = knowledge_used_table(
        cells.group, page.dataset, cells.task, metric=cells.metric, golds=page.golds, tests=page.tests
    )
    if not used:
        return []
    return (
        [f"### {cells.task}: knowledge used ({cells.metric}, against each method's control)", ""]
        + used
        + ["", controls_text(cells.metric), ""]
    )


def all_metrics_section(page: DatasetPage, cells: TaskCells) -> list[str]:
    if not (cells.plain.task == cells.task).any():
        return []
    return [f"### {cells.task}: all metrics", ""] + detail_table(cells.plain, cells.task) + [""]


def provenance_section(page: DatasetPage) -> list[str]:
    return ["## Provenance", ""] + provenance(page.frame) + [""]


# A task's sections on a backbone, in page order.
TASK_SECTIONS = (
    fractions_figure,
    variants_section,
    spectrum_figure,
    frequency_section,
    baseline_section,
    knowledge_used_section,
    all_metrics_section,
)
# A dataset page's sections, in order.
PAGE_SECTIONS = (
    header_section,
    coverage_page_section,
    family_sections,
    notes_section,
    backbone_sections,
    provenance_section,
)


def render_dataset(
    dataset: str,
    frame: pd.DataFrame,
    figures_dir: Path | None = None,
    golds: dict[str, list] | None = None,
    groupings: dict[str, list[str]] | None = None,
    *,
    coverage: dict | None = None,
) -> str:
    """``dataset``'s page, its sections (``PAGE_SECTIONS``) in order; ``golds``: the gold answers of the kept
    predictions in ``frame``, by their sha256; ``groupings``: their examples' groups (``kept_groups``), by their
    sha256; ``coverage``: its measured knowledge coverage (``knowledge_lm.report.coverage``)."""
    page = dataset_page(dataset, frame, figures_dir, golds or {}, groupings or {}, coverage=coverage)
    return "\n".join(line for section in PAGE_SECTIONS for line in section(page))


def render_probes(probes: list[dict]) -> str:
    """LAMA precision@1 (zero-shot) per probed checkpoint: which backbone, and the means per corpus."""
    corpora = sorted({corpus for probe in probes for corpus in probe["corpus_means"]})
    lines = [
        "# LAMA probing",
        "",
        "Generated by `klm leaderboard` from `results/probes/`; precision@1 (×100), zero-shot, "
        "facts whose object is one token of the probed backbone's vocabulary.",
        "",
        "| probed checkpoint | weights sha256 | " + " | ".join(corpora) + " | mean over relations | facts kept |",
        "|---|---|" + "---|" * (len(corpora) + 2),
    ]
    for probe in probes:
        backbone = probe["backbone"]
        means = [probe["corpus_means"].get(corpus) for corpus in corpora]
        lines.append(
            f"| {backbone.get('name')} ({backbone.get('path')}) | {str(backbone.get('checksum'))[:16]} | "
            + " | ".join(MISSING if m is None else f"{m:.1f}" for m in means)
            + f" | {probe['mean_precision_at_1']:.1f} | {probe['kept']} of {probe['facts']} |"
        )
    return "\n".join(lines) + "\n"
