"""Leaderboards regenerated from the results store alone: ``leaderboards/<dataset>.md``.

Paper-style tables: rows are methods, one column group per train fraction, each cell the mean ±
sample std over seeds of the task's main metric on the reported split, with n. Best mean per column
in bold. A cell with no result is "—", never averaged over. Each method is compared with the baseline
seed by seed (same seed, same train subset): a paired t-test over the seeds both ran; ↑ / ↓ after a
cell mark a difference with p < 0.05 (with 3 seeds only a large, consistent one qualifies), and a
table per task gives Δ, n and p, and, where both kept their predictions, the paired bootstrap over test
examples (``knowledge_lm.report.bootstrap``: 95 % interval of Δ and its p). A cell's predictions count as kept where
the reported split's gold, recomputed from the data directory (``knowledge_lm.report.gold``), has the sha256 its
predictions file holds. The papers' own numbers appear only as reference rows marked †, from
``benchmarks/references.yaml``. Output is deterministic: the same results and data give the same bytes.

A page whose examples fall in groups (the generated task's statement families: text, answered from the sentence
alone, and type, one_hop, two_hop, which need the knowledge graph) opens with each method's score per family, a
bootstrap interval over the family's examples, marked where it lies above chance: does a method use the graph at
all? Each method also stands against its counterfactual controls (``KNOWLEDGE_CONTROLS``: the same cells with the
knowledge shuffled or zeroed, or ERICA's MLM-only checkpoint): Δ with a paired bootstrap interval over the examples,
in the family table where there is one, else in a table per task where a control was run.
"""

import json
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import yaml

from knowledge_lm.registry import DATASETS
from knowledge_lm.results import PROBES_DIR, CellResult, gold_sha256, predictions_path, read_predictions, result_files
from knowledge_lm.run.config import BENCHMARKS_DIR

MISSING = "—"
SIGNIFICANCE = 0.05
ABOVE = " ✓"  # a 95 % interval wholly above chance (a family's score) or above 0 (a Δ)

# The generated task's statement families in the order of the page. Text statements are answered from the sentence
# alone; the others need the graph, and "uses the KG" asks which of those a method scores above chance on.
GROUP_ORDER = ("text", "type", "one_hop", "two_hop")
KNOWLEDGE_FREE_GROUPS = ("text",)


class Control(NamedTuple):
    """A method's counterfactual control: cells like its own but for the knowledge they get."""

    variant: str  # the control cells' sweep variant ("" for none)
    methods: dict[str, str] | None  # method → the method whose cells are its control; None: the method's own cells
    what: str


# The controls, found by convention, in the order a method's knowledge-used cell lists them.
KNOWLEDGE_CONTROLS = {
    "shuffled": Control("shuffled", None, "every entity link re-linked to a random entity of the same type"),
    "shuffled50": Control("shuffled50", None, "half of the links re-linked so"),
    "zeroed": Control(
        "zeroed", None, "the method's knowledge zeroed (KnowBERT's entity table, KAM's maps, kg-text's facts)"
    ),
    "mlm-only": Control(
        "", {"erica": "erica-mlm-only"}, "for ERICA, its MLM-only checkpoint pretrained on the same corpus"
    ),
}


def by_seed(
    frame: pd.DataFrame, method: str, fraction: float, task: str, metric: str, column: str = "value"
) -> pd.Series:
    """``column`` of one method's cells at a fraction, task and metric, indexed by seed."""
    rows = frame[
        (frame.method == method) & (frame.fraction == fraction) & (frame.task == task) & (frame.metric == metric)
    ]
    return rows.set_index("seed")[column]


def paired_comparison(frame: pd.DataFrame, method: str, fraction: float, task: str, metric: str) -> dict | None:
    """The method minus the baseline, seed by seed: n pairs, mean Δ, its std, the paired t-test's p (None for n < 2)."""
    ours, baseline = (by_seed(frame, name, fraction, task, metric) for name in (method, "baseline"))
    seeds = sorted(set(ours.index) & set(baseline.index))
    if not seeds or method == "baseline":
        return None
    deltas = pd.Series([ours[s] - baseline[s] for s in seeds])
    p_value = None
    if len(seeds) > 1:
        from scipy.stats import ttest_rel

        p_value = float(ttest_rel([ours[s] for s in seeds], [baseline[s] for s in seeds]).pvalue)
        if p_value != p_value:  # identical differences: no spread, the test is undefined
            p_value = 0.0 if deltas.abs().min() > 0 else 1.0
    return {
        "n": len(seeds),
        "delta": float(deltas.mean()),
        "std": float(deltas.std(ddof=1)) if len(seeds) > 1 else None,
        "p": p_value,
    }


def mark(comparison: dict | None) -> str:
    if comparison is None or comparison["p"] is None or comparison["p"] >= SIGNIFICANCE:
        return ""
    return " ↑" if comparison["delta"] > 0 else " ↓"


def bootstrap_comparison(
    frame: pd.DataFrame, method: str, fraction: float, task: str, metric: str, golds: dict[str, list]
) -> dict | None:
    """The paired bootstrap over test examples (``knowledge_lm.report.bootstrap``) of the seeds where the method and the
    baseline both kept predictions of the same gold (``golds``: gold answers by their sha256); None unless every
    paired seed has them."""
    ours, baseline = (by_seed(frame, name, fraction, task, metric, "predictions") for name in (method, "baseline"))
    seeds = sorted(set(ours.index) & set(baseline.index))
    if not seeds or not all(ours[s] and baseline[s] for s in seeds):
        return None
    hashes = {
        digest
        for name in (method, "baseline")
        for digest in by_seed(frame, name, fraction, task, metric, "gold_sha256")[seeds]
    }
    if len(hashes) != 1:
        return None
    from knowledge_lm.report.bootstrap import paired_bootstrap

    dataset = frame["dataset"].iloc[0]
    return paired_bootstrap(
        dataset, task, metric, golds[hashes.pop()], [Path(ours[s]) for s in seeds], [Path(baseline[s]) for s in seeds]
    )


@lru_cache(maxsize=None)
def kept_run(path: str) -> dict:
    """A kept predictions file, read once per regeneration (``write_leaderboards`` empties this cache)."""
    return read_predictions(Path(path))


def full_data_spectra(frame: pd.DataFrame) -> dict[str, list[list[float]]]:
    """Method → the singular-value spectra its 100 % cells kept with their predictions (one per seed)."""
    spectra: dict[str, list[list[float]]] = {}
    rows = frame[(frame.fraction == 1.0) & (frame.predictions != "")].drop_duplicates(["method", "seed"])
    for method, seed_rows in rows.groupby("method"):
        found = [kept_run(path).get("singular_values") for path in seed_rows.sort_values("seed")["predictions"]]
        if found and all(found):
            spectra[method] = found
    return spectra


def frequency_buckets(
    frame: pd.DataFrame, dataset: str, task: str, metric: str, golds: dict[str, list]
) -> tuple[list[str], dict] | None:
    """``(bucket labels, method → metric per bucket)`` at 100 %: the reported split's examples grouped by the highest
    train-split document frequency of their linked entities (no entity; then quartiles of that frequency), each
    method scored on every bucket per seed with the task's scorer and averaged over seeds. The frequencies come
    from any cell that kept them (knowledge methods do); every method with kept predictions of the same split
    and gold (``golds``: gold answers by their sha256) is scored, the baseline included. None when no cell kept
    frequencies."""
    from knowledge_lm.report.bootstrap import task_scorer

    rows = frame[(frame.fraction == 1.0) & (frame.metric == metric) & (frame.predictions != "")].sort_values(
        ["method", "seed"]
    )
    kept = {(row.method, row.seed): kept_run(row.predictions) for row in rows.itertuples()}
    reference = next((run for run in kept.values() if run.get("entity_frequency")), None)
    if reference is None:
        return None
    frequency = pd.Series(reference["entity_frequency"], dtype="float")
    linked = frequency.dropna()
    if linked.nunique() < 2:
        return None
    quartiles = pd.qcut(linked, 4, duplicates="drop")
    members = [list(frequency.index[frequency.isna()])] + [
        list(quartiles.index[quartiles == interval]) for interval in quartiles.cat.categories
    ]
    # Each quartile by the DFs it holds (qcut's own left edge lies just below the smallest).
    labels = ["no entity"] + [f"DF {linked[indices].min():.0f}–{linked[indices].max():.0f}" for indices in members[1:]]
    score = task_scorer(dataset, task)
    gold = golds[reference["gold_sha256"]]
    per_method: dict[str, list[float | None]] = {}
    for method in sorted({method for method, _ in kept}):
        runs = [run for (name, _), run in kept.items() if name == method]
        if any(run["gold_sha256"] != reference["gold_sha256"] or run["split"] != reference["split"] for run in runs):
            continue
        per_method[method] = [
            None
            if not indices
            else float(
                sum(score([run["predicted"][i] for i in indices], [gold[i] for i in indices])[metric] for run in runs)
                / len(runs)
            )
            for indices in members
        ]
    return [f"{label} ({len(indices)})" for label, indices in zip(labels, members)], per_method


def comparison_table(frame: pd.DataFrame, task: str, metric: str, golds: dict[str, list]) -> list[str]:
    """Each method against the baseline per fraction: Δ (mean ± std over paired seeds), n, the paired t-test's p,
    the paired bootstrap's 95 % interval of Δ and p over test examples (where predictions were kept), and
    what the t-test says."""
    lines = [
        "| method | fraction | Δ vs baseline | n pairs | p (paired t) | Δ 95% CI (bootstrap over examples) | "
        "p (bootstrap) | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    task_frame = frame[frame.task == task]
    for fraction in sorted(task_frame["fraction"].unique()):
        for method in sorted(m for m in task_frame["method"].unique() if m != "baseline"):
            found = paired_comparison(task_frame, method, fraction, task, metric)
            if found is None:
                continue
            spread = f" ± {found['std']:.1f}" if found["std"] is not None else ""
            p_text = MISSING if found["p"] is None else f"{found['p']:.3f}"
            verdict = (
                "too few seeds"
                if found["p"] is None
                else "no significant difference"
                if found["p"] >= SIGNIFICANCE
                else "better"
                if found["delta"] > 0
                else "worse"
            )
            resampled = bootstrap_comparison(task_frame, method, fraction, task, metric, golds)
            interval, p_boot = MISSING, MISSING
            if resampled is not None:
                low, high = resampled["delta_interval"]
                interval = f"[{low:+.1f}, {high:+.1f}]"
                p_boot = f"{resampled['p_not_better' if found['delta'] > 0 else 'p_not_worse']:.3f}"
            lines.append(
                f"| {method} | {fraction_label(fraction)} | {found['delta']:+.1f}{spread} | {found['n']} | {p_text} | "
                f"{interval} | {p_boot} | {verdict} |"
            )
    return lines if len(lines) > 2 else []


def seed_cells(frame: pd.DataFrame, method: str, variant: str, fraction: float, metric: str) -> pd.DataFrame:
    """``method``'s cells of sweep ``variant`` ("" for none) at ``fraction`` with their ``metric``, one row per seed."""
    rows = frame[
        (frame.method == method) & (frame.variant == variant) & (frame.fraction == fraction) & (frame.metric == metric)
    ]
    return rows.sort_values("seed").drop_duplicates("seed")


def page_rows(frame: pd.DataFrame) -> list[tuple[str, str]]:
    """``(method, variant)`` in the page's order: the main table's methods, each followed by its sweep variants."""
    methods = sorted(frame["method"].unique(), key=lambda m: (m != "baseline", m))
    return [
        (method, variant)
        for method in methods
        for variant in sorted(frame[frame.method == method]["variant"].unique(), key=variant_key)
    ]


def row_label(method: str, variant: str) -> str:
    return f"{method} [{variant}]" if variant else method


def members_of(groups: list[str], wanted) -> list[int]:
    """The indices of the examples whose group is in ``wanted``."""
    return [index for index, group in enumerate(groups) if group in wanted]


def subset_score(dataset: str, task: str, metric: str, predictions: str, gold: list, members: list[int]) -> float:
    """A kept predictions file's ``metric`` on the examples ``members``, by the task's own scorer."""
    from knowledge_lm.report.bootstrap import task_scorer

    predicted = kept_run(predictions)["predicted"]
    return task_scorer(dataset, task)([predicted[i] for i in members], [gold[i] for i in members])[metric]


def shared_kept(cells: pd.DataFrame, grouped: bool) -> tuple[str, str] | None:
    """``(gold sha256, groups sha256)`` where every cell kept predictions of that same gold (and, ``grouped``, the
    same example groups), else None."""
    if cells.empty or not all(cells["predictions"]) or (grouped and not all(cells["groups_sha256"])):
        return None
    keys = set(zip(cells["gold_sha256"], cells["groups_sha256"]))
    return keys.pop() if len(keys) == 1 else None


def family_score(
    cells: pd.DataFrame,
    group: str,
    dataset: str,
    task: str,
    metric: str,
    golds: dict[str, list],
    groupings: dict[str, list[str]],
) -> dict | None:
    """One method's ``metric`` on one example group (a statement family): ``mean`` over the seeds of ``cells`` (their
    ``metrics_by_group`` where recorded, else their kept predictions scored on the group); where every seed kept
    predictions of the same gold and groups, ``interval``: the 95 % bootstrap interval over the group's examples,
    the same draw for every seed (``knowledge_lm.report.bootstrap.bootstrap_interval``), and for accuracy
    ``chance``: the share of the group's most frequent gold label. None where a seed has neither."""
    from collections import Counter

    from knowledge_lm.report.bootstrap import bootstrap_interval

    values = []
    for cell in cells.itertuples():
        if isinstance(cell.by_group, dict) and metric in cell.by_group.get(group, {}):
            values.append(cell.by_group[group][metric])
        elif cell.predictions and cell.groups_sha256 and group in groupings[cell.groups_sha256]:
            members = members_of(groupings[cell.groups_sha256], {group})
            values.append(subset_score(dataset, task, metric, cell.predictions, golds[cell.gold_sha256], members))
        else:
            return None
    if not values:
        return None
    found = {"mean": sum(values) / len(values), "interval": None, "chance": None}
    kept = shared_kept(cells, grouped=True)
    if kept is not None:
        gold, members = golds[kept[0]], members_of(groupings[kept[1]], {group})
        resampled = bootstrap_interval(
            dataset, task, metric, gold, [Path(path) for path in cells["predictions"]], examples=members
        )
        found["interval"] = resampled["interval"] if resampled else None
        if metric == "accuracy":
            labels = Counter(json.dumps(gold[i], sort_keys=True) for i in members)
            found["chance"] = 100 * max(labels.values()) / len(members)
    return found


def family_text(score: dict | None) -> str:
    if score is None:
        return MISSING
    if score["interval"] is None:
        return f"{score['mean']:.1f}"
    low, high = score["interval"]
    above = ABOVE if score["chance"] is not None and low > score["chance"] else ""
    return f"{score['mean']:.1f} [{low:.1f}, {high:.1f}]{above}"


def kg_verdict(scores: dict[str, dict | None]) -> str:
    """ "yes" where a method is above chance on every family that needs the graph, "only …" naming those it is
    above chance on, "no" on none; — where a family has no interval or chance."""
    knowledge = [group for group in scores if group not in KNOWLEDGE_FREE_GROUPS]
    if not knowledge or any(
        scores[group] is None or scores[group]["interval"] is None or scores[group]["chance"] is None
        for group in knowledge
    ):
        return MISSING
    above = [group for group in knowledge if scores[group]["interval"][0] > scores[group]["chance"]]
    return "yes" if len(above) == len(knowledge) else f"only {', '.join(above)}" if above else "no"


def control_variant(variant: str, control: Control) -> str:
    """The sweep variant holding ``control``'s cells for a method's cells of ``variant``: the control's own name,
    after the variant's where the method's cells are a variant themselves (``t20k`` → ``t20k-shuffled``)."""
    if not control.variant:
        return variant
    return f"{variant}-{control.variant}" if variant else control.variant


def is_control(cell_method: str, variant: str) -> bool:
    """Whether cells of ``cell_method`` and ``variant`` are some method's counterfactual control."""
    return any(
        (variant == control.variant or (control.variant and variant.endswith(f"-{control.variant}")))
        and (control.methods is None or cell_method in control.methods.values())
        for control in KNOWLEDGE_CONTROLS.values()
    )


def control_cells(
    frame: pd.DataFrame, method: str, fraction: float, metric: str, variant: str = ""
) -> list[tuple[str, pd.DataFrame]]:
    """``(control name, its cells)`` for each of the counterfactual controls (``KNOWLEDGE_CONTROLS``) of ``method``'s
    cells of ``variant`` with cells at ``fraction``."""
    ours = seed_cells(frame, method, variant, fraction, metric)
    if ours.empty:
        return []
    found = []
    for name, control in KNOWLEDGE_CONTROLS.items():
        if control.methods is None:
            cells = seed_cells(frame, method, control_variant(variant, control), fraction, metric)
        else:
            other = control.methods.get(ours["cell_method"].iloc[0])
            labels = sorted(frame[frame.cell_method == other]["method"].unique()) if other else []
            cells = (
                seed_cells(frame, labels[0], control_variant(variant, control), fraction, metric)
                if labels
                else ours.iloc[:0]
            )
        if not cells.empty:
            found.append((name, cells))
    return found


def knowledge_delta(
    ours: pd.DataFrame,
    control: pd.DataFrame,
    dataset: str,
    task: str,
    metric: str,
    golds: dict[str, list],
    groupings: dict[str, list[str]],
    groups=None,
) -> dict | None:
    """The method's ``metric`` minus its control's over the seeds both ran: ``delta``, the mean over those seeds,
    and where both kept predictions of the same gold, ``interval``: the paired bootstrap's 95 % interval of Δ over
    the examples (``knowledge_lm.report.bootstrap.paired_bootstrap``). ``groups``: only the examples of those groups
    (then None without kept predictions); None: the whole split. None where they share no seed."""
    from knowledge_lm.report.bootstrap import paired_bootstrap

    seeds = sorted(set(ours["seed"]) & set(control["seed"]))
    if not seeds:
        return None
    ours, control = (cells.set_index("seed").loc[seeds].reset_index() for cells in (ours, control))
    kept = shared_kept(pd.concat([ours, control]), grouped=groups is not None)
    if kept is None:
        return (
            None
            if groups is not None
            else {"delta": float((ours["value"] - control["value"]).mean()), "interval": None}
        )
    gold = golds[kept[0]]
    members = None if groups is None else members_of(groupings[kept[1]], groups)
    if groups is None:
        delta = float((ours["value"] - control["value"]).mean())
    else:
        delta = sum(
            subset_score(dataset, task, metric, mine, gold, members)
            - subset_score(dataset, task, metric, theirs, gold, members)
            for mine, theirs in zip(ours["predictions"], control["predictions"])
        ) / len(seeds)
    resampled = paired_bootstrap(
        dataset,
        task,
        metric,
        gold,
        [Path(path) for path in ours["predictions"]],
        [Path(path) for path in control["predictions"]],
        examples=members,
    )
    return {"delta": delta, "interval": resampled["delta_interval"] if resampled else None}


def knowledge_used(
    frame: pd.DataFrame,
    method: str,
    variant: str,
    fraction: float,
    dataset: str,
    task: str,
    metric: str,
    golds: dict[str, list],
    groupings: dict[str, list[str]],
    groups=None,
) -> str:
    """A row's knowledge-used cell: Δ against each of its controls, "(control)" on a control's own row, — where
    it has no control cells."""
    cells = seed_cells(frame, method, variant, fraction, metric)
    if cells.empty:
        return MISSING
    if is_control(cells["cell_method"].iloc[0], variant):
        return "(control)"
    parts = []
    for name, control in control_cells(frame, method, fraction, metric, variant):
        found = knowledge_delta(cells, control, dataset, task, metric, golds, groupings, groups)
        if found is None:
            continue
        if found["interval"] is None:
            parts.append(f"{name}: {found['delta']:+.1f} (no kept predictions)")
            continue
        low, high = found["interval"]
        parts.append(f"{name}: {found['delta']:+.1f} [{low:+.1f}, {high:+.1f}]{ABOVE if low > 0 else ''}")
    return "<br>".join(parts) or MISSING


def page_groups(frame: pd.DataFrame, groupings: dict[str, list[str]]) -> list[str]:
    """The example groups of ``frame``'s cells (from their kept predictions or their ``metrics_by_group``), in
    ``GROUP_ORDER``, others after it by name."""
    found = {group for digest in set(frame["groups_sha256"]) if digest for group in groupings[digest]}
    found |= {group for by_group in frame["by_group"] if isinstance(by_group, dict) for group in by_group}
    return sorted(
        found, key=lambda group: (GROUP_ORDER.index(group) if group in GROUP_ORDER else len(GROUP_ORDER), group)
    )


def family_table(
    frame: pd.DataFrame,
    dataset: str,
    task: str,
    metric: str,
    fraction: float,
    groups: list[str],
    golds: dict[str, list],
    groupings: dict[str, list[str]],
) -> list[str]:
    """At ``fraction``: one row per method and sweep variant; the mean and bootstrap interval of ``metric`` on each
    example group, which groups that need the graph are above chance, and Δ against the method's counterfactual
    controls on those groups pooled and on the whole split."""
    at = frame[frame.fraction == fraction]
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
        "| method | seeds | " + " | ".join(names) + f" | uses the KG | knowledge used: {'+'.join(knowledge)} | "
        f"knowledge used: whole {split} split |",
        "|---|---|" + "---|" * (len(groups) + 3),
    ]
    for method, variant in page_rows(at):
        cells = seed_cells(at, method, variant, fraction, metric)
        scores = {group: family_score(cells, group, dataset, task, metric, golds, groupings) for group in groups}
        used = [
            knowledge_used(at, method, variant, fraction, dataset, task, metric, golds, groupings, pooled)
            for pooled in (set(knowledge), None)
        ]
        lines.append(
            f"| {row_label(method, variant)} | {len(cells)} | "
            + " | ".join(family_text(scores[g]) for g in groups)
            + f" | {kg_verdict(scores)} | {used[0]} | {used[1]} |"
        )
    return lines


def controls_text(metric: str) -> str:
    controls = "; ".join(f"{name}: {control.what}" for name, control in KNOWLEDGE_CONTROLS.items())
    return (
        f"Knowledge used = the method's {metric} minus that of its counterfactual control (cells run like the "
        f"method's but for the knowledge they get; {controls}), over the seeds both ran, with the 95 % interval of "
        "a paired bootstrap over the examples. A positive Δ (✓: the interval above 0) means the method does better "
        "with the right knowledge than with wrong or none: it uses it; a Δ near 0 means what it gains comes from "
        "elsewhere (more parameters, more training). — = no control cells yet; (control) = the row is a control."
    )


def family_section(
    frame: pd.DataFrame,
    dataset: str,
    task: str,
    metric: str,
    backbone: str,
    golds: dict[str, list],
    groupings: dict[str, list[str]],
) -> list[str]:
    """The per-family check of ``task`` (the generated task's statement families), at 100 % (else the largest
    fraction), the other fractions folded below it; nothing where the cells have no example groups."""
    task_frame = frame[(frame.task == task) & (frame.metric == metric)]
    groups = page_groups(task_frame, groupings)
    if not groups:
        return []
    fractions = sorted(task_frame["fraction"].unique())
    shown, others = fractions[-1], fractions[:-1]
    out = [f"## {task}: {metric} per statement family ({backbone}, {fraction_label(shown)})", ""]
    out += family_table(task_frame, dataset, task, metric, shown, groups, golds, groupings)
    out += ["", controls_text(metric), ""]
    if others:
        out += [f"<details><summary>Other fractions: {', '.join(fraction_label(f) for f in others)}</summary>", ""]
        for fraction in others:
            out += [f"**{fraction_label(fraction)}**", ""]
            out += family_table(task_frame, dataset, task, metric, fraction, groups, golds, groupings) + [""]
        out += ["</details>", ""]
    return out


def knowledge_used_table(
    frame: pd.DataFrame, dataset: str, task: str, metric: str, golds: dict[str, list]
) -> list[str]:
    """Each method with a counterfactual control, per fraction: Δ against it on the whole split; empty where no
    method of ``task`` has control cells."""
    task_frame = frame[(frame.task == task) & (frame.metric == metric)]
    lines = [f"| method | fraction | knowledge used: Δ vs control ({metric}, whole split) |", "|---|---|---|"]
    for fraction in sorted(task_frame["fraction"].unique()):
        for method, variant in page_rows(task_frame[(task_frame.fraction == fraction) & (task_frame.variant == "")]):
            cell = knowledge_used(task_frame, method, variant, fraction, dataset, task, metric, golds, {})
            if cell not in (MISSING, "(control)"):
                lines.append(f"| {method} | {fraction_label(fraction)} | {cell} |")
    return lines if len(lines) > 2 else []


def results_frame(
    results: list[CellResult], predictions: list[tuple[Path, str] | None] | None = None, groups: list[str] | None = None
) -> pd.DataFrame:
    """One row per result and metric; ``predictions[i]``: result i's kept predictions file and its gold's sha256
    (``kept_predictions``), or None; ``groups[i]``: the sha256 of its examples' groups (``kept_groups``), or ""."""
    rows = []
    for index, result in enumerate(results):
        kept, digest = predictions[index] if predictions is not None and predictions[index] else (None, "")
        grouping = groups[index] if groups is not None else ""
        cell, split = {"variant": "", **result["cell"]}, result["report_split"]
        base = result["backbone"].get("pretrained_from")
        if base:  # from a pretraining checkpoint: a row of its base backbone's table, named by the checkpoint
            cell["method"], cell["backbone"] = f"{cell['method']} ⟨{cell['backbone']}⟩", base
        for metric, value in result["metrics"][split].items():
            rows.append(
                {
                    **cell,
                    "split": split,
                    "metric": metric,
                    "value": value,
                    "device": result["device"]["name"],
                    "checksum": result["backbone"]["checksum"],
                    "weights": "/".join(Path(result["backbone"].get("path") or "built in").parts[-2:]),
                    "commit": result["git"]["commit"][:10],
                    "wall_time_s": result["wall_time_s"],
                    "subset_hash": result["data"]["subset_hash"],
                    "train_size": result["data"]["train_size"],
                    "steps": result["budget"]["max_steps"],
                    "batch": result["budget"]["per_device_batch_size"],
                    "predictions": str(kept) if kept else "",
                    "gold_sha256": digest,
                    "groups_sha256": grouping,
                    "cell_method": result["cell"]["method"],
                    "by_group": result.get("metrics_by_group") or None,
                }
            )
    return pd.DataFrame(rows)


def fraction_label(fraction: float) -> str:
    return f"{fraction * 100:g}%"


def summary(values: pd.Series) -> tuple[float, str]:
    n = len(values)
    mean = values.mean()
    spread = f" ± {values.std(ddof=1):.1f}" if n > 1 else ""
    return mean, f"{mean:.1f}{spread} (n={n})"


def load_references(dataset: str) -> list[dict]:
    """The reference rows of ``dataset``'s pages: its own, and those of a dataset that is not here that a
    reference says to show with it (``shown_with``: FIGER's rows beside OpenEntity), their row names saying so."""
    path = BENCHMARKS_DIR / "references.yaml"
    if not path.is_file():
        return []
    refs = [ref for ref in yaml.safe_load(path.read_text()) if ref.get("method")]
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


def main_table(frame: pd.DataFrame, tasks: list[str], main_metric: dict, references: list[dict]) -> list[str]:
    fractions = sorted(frame["fraction"].unique())
    methods = sorted(frame["method"].unique(), key=lambda m: (m != "baseline", m))
    columns = [(fraction, task) for fraction in fractions for task in tasks]
    header = ["method"] + [f"{fraction_label(f)} {task} ({main_metric[task]})" for f, task in columns]
    cells, means = {}, {}
    for method in methods:
        for fraction, task in columns:
            values = frame[
                (frame.method == method)
                & (frame.fraction == fraction)
                & (frame.task == task)
                & (frame.metric == main_metric[task])
            ]["value"]
            if len(values):
                means[method, fraction, task], cells[method, fraction, task] = summary(values)
    best = {}
    for key, mean in means.items():
        column = key[1:]
        best[column] = max(best.get(column, mean), mean)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
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
            if (method, fraction, task) in means:
                text += mark(paired_comparison(frame, method, fraction, task, main_metric[task]))
            row.append(text)
        lines.append("| " + " | ".join(row) + " |")
    groups = {}
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
            # A paper table without the column's metric (ERICA's Table 6 gives only IgF1) shows what it has, named.
            other = next(((name, v) for m in reported for name, v in m.items() if v is not None), None)
            row.append(f"{value:.1f}" if value is not None else f"{other[1]:.1f} ({other[0]})" if other else MISSING)
        if any(cell != MISSING for cell in row[1:]):
            lines.append("| " + " | ".join(row) + " |")
    return lines


def variant_key(name: str):
    """noise10 before noise20 before noise100: the number in a variant's name, then the name."""
    digits = "".join(ch for ch in name if ch.isdigit())
    return (name.rstrip("0123456789."), float(digits) if digits else -1.0, name)


def variants_table(frame: pd.DataFrame, task: str, main_metric: str, references: list[dict]) -> list[str]:
    """Sweep variants (e.g. link-noise levels, KAM's α) of a task: one row per method and fraction, one column
    per variant; † rows: papers' numbers for the same variants (a reference with a ``variant``)."""
    task_frame = frame[(frame.task == task) & (frame.metric == main_metric)]
    variants = sorted(task_frame["variant"].unique(), key=variant_key)
    lines = ["| method | fraction | " + " | ".join(variants) + " |", "|---|---|" + "---|" * len(variants)]
    for (fraction, method), group in task_frame.groupby(["fraction", "method"]):
        cells = [
            summary(group[group.variant == v]["value"])[1] if (group.variant == v).any() else MISSING for v in variants
        ]
        lines.append(f"| {method} | {fraction_label(fraction)} | " + " | ".join(cells) + " |")
    groups = {}
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


def detail_table(frame: pd.DataFrame, task: str) -> list[str]:
    task_frame = frame[frame.task == task]
    metrics = list(dict.fromkeys(task_frame["metric"]))
    header = ["method", "fraction", "split"] + metrics + ["train size", "steps", "subset hash"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    keys = (
        task_frame[["method", "fraction"]].drop_duplicates().sort_values(["fraction", "method"]).itertuples(index=False)
    )
    for method, fraction in keys:
        group = task_frame[(task_frame.method == method) & (task_frame.fraction == fraction)]
        row = [method, fraction_label(fraction), group["split"].iloc[0]]
        row += [
            summary(group[group.metric == metric]["value"])[1] if (group.metric == metric).any() else MISSING
            for metric in metrics
        ]
        first = group.drop_duplicates("seed")
        row += [
            str(int(first["train_size"].iloc[0])),
            "/".join(map(str, sorted(first["steps"].unique()))),
            ", ".join(sorted(first["subset_hash"].unique())),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def provenance(frame: pd.DataFrame) -> list[str]:
    seeds = frame.drop_duplicates(["method", "task", "fraction", "seed", "backbone", "variant"])
    lines = [
        "| backbone | weights from | weights sha256 | device | commits | cells | per-device batch | summed cell time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (backbone, weights, checksum, device), group in seeds.groupby(
        ["backbone", "weights", "checksum", "device"], dropna=False
    ):
        commits = ", ".join(sorted(group["commit"].unique()))
        batches = ", ".join(map(str, sorted(group["batch"].unique())))
        lines.append(
            f"| {backbone} | {weights} | {str(checksum)[:16]} | {device} | {commits} | "
            f"{len(group)} | {batches} | {group['wall_time_s'].sum() / 60:.1f} min |"
        )
    return lines


def figure_link(path: Path | None, caption: str) -> list[str]:
    return [f"![{caption}](figures/{path.name})", ""] if path is not None else []


def families_text() -> str:
    from knowledge_lm.report.bootstrap import REPLICATES

    return (
        "The per-family tables come first: each cell is the mean over seeds of a method's score on one statement "
        "family of the test split (text: answered from the sentence alone; the others need the knowledge graph), "
        f"with the 95 % interval of a bootstrap over that family's examples ({REPLICATES} replicates, each drawing "
        "the family's examples with replacement, the same draw for every seed, and averaging the seeds' scores on "
        "it: the seeds are pooled by averaging each example's correctness over them). ✓ = the interval lies above "
        "chance, the share of the family's most frequent label (50: every family is balanced true/false). "
        '"uses the KG": yes where every family that needs the graph is above chance, else which are.'
    )


def dataset_notes(dataset: str) -> list[str]:
    """``benchmarks/notes/<dataset>.md``, where there is one: what the tables cannot say (how a method was tried,
    why a design was chosen), written by hand and free of our numbers, which come from the results only."""
    path = BENCHMARKS_DIR / "notes" / f"{dataset}.md"
    if not path.is_file():
        return []
    return [
        "## Notes",
        "",
        f"Written by hand in `benchmarks/notes/{dataset}.md`; every number is in the tables.",
        "",
        *path.read_text(encoding="utf-8").strip().splitlines(),
        "",
    ]


def render_dataset(
    dataset: str,
    frame: pd.DataFrame,
    figures_dir: Path | None = None,
    golds: dict[str, list] | None = None,
    groupings: dict[str, list[str]] | None = None,
) -> str:
    """``dataset``'s page; ``golds``: the gold answers of the kept predictions in ``frame``, by their sha256;
    ``groupings``: their examples' groups (``kept_groups``), by their sha256."""
    golds, groupings = golds or {}, groupings or {}
    dataset_class = DATASETS.get(dataset)
    tasks = [task for task in dataset_class.tasks if task in set(frame["task"])]
    main_metric = {task: dataset_class.spec(task).main_metric for task in dataset_class.tasks}
    references = load_references(dataset)
    families = {
        (backbone, task): family_section(group, dataset, task, main_metric[task], backbone, golds, groupings)
        for backbone, group in frame.groupby("backbone")
        for task in tasks
    }
    out = [
        f"# {dataset}",
        "",
        "Generated by `klm leaderboard` from `results/`; do not edit by hand.",
        "Mean ± sample std over training seeds (n = seeds), main metric of each task, on the reported split "
        "(test where a labelled test split exists, else dev; model selection on dev). "
        "Best mean per column in bold; — = no result; ↑ / ↓ = above / below the baseline in a paired t-test over "
        "seeds (p < 0.05; the per-task tables give Δ, n and p, and a paired bootstrap over the test examples where "
        "both kept predictions). † = the paper's own number, for reference only "
        "(different backbone and protocol: not comparable one to one)."
        + (" " + families_text() if any(families.values()) else ""),
        "",
    ]
    out += [line for section in families.values() for line in section]
    out += dataset_notes(dataset)
    for backbone, group in frame.groupby("backbone"):
        out += [f"## Backbone: {backbone}", ""]
        plain, varied = group[group.variant == ""], group[group.variant != ""]
        if not plain.empty:
            shown = paper_only_tasks(dataset_class, tasks, plain, references)
            out += main_table(plain, tasks + shown, main_metric, references)
            out.append("")
            if shown:
                out += [
                    f"Columns of {', '.join(shown)} hold only the papers' numbers: we have no results on that task "
                    "(its data is not here), and they stand beside ours on the task next to it for reference.",
                    "",
                ]
        for task in tasks:
            if figures_dir is not None:
                from knowledge_lm.report.figures import fraction_curves

                curves = plain[(plain.task == task) & (plain.metric == main_metric[task])]
                out += figure_link(
                    fraction_curves(
                        curves,
                        f"{dataset} / {task} ({backbone})",
                        main_metric[task],
                        figures_dir / f"{dataset}-{task}-{backbone}-fractions.png",
                    ),
                    f"{task}: {main_metric[task]} against the train fraction",
                )
            if (varied.task == task).any():
                out += [
                    f"### {task}: sweep variants ({main_metric[task]})",
                    "",
                    "Each column is a variant of a sweep (its own prepared features, e.g. a share of wrong entity "
                    "links); the configs under benchmarks/ name what each variant changes.",
                    "",
                ]
                out += variants_table(varied, task, main_metric[task], references) + [""]
                if figures_dir is not None:
                    from knowledge_lm.report.figures import variant_curves

                    metric = main_metric[task]
                    curves = varied[(varied.task == task) & (varied.metric == metric)]
                    baseline = plain[(plain.task == task) & (plain.metric == metric) & (plain.method == "baseline")]
                    out += figure_link(
                        variant_curves(
                            curves,
                            f"{dataset} / {task} ({backbone})",
                            metric,
                            figures_dir / f"{dataset}-{task}-{backbone}-variants.png",
                            baseline,
                        ),
                        f"{task}: {metric} against the sweep variant",
                    )
            if figures_dir is not None:
                spectra = full_data_spectra(plain[plain.task == task])
                if spectra:
                    from knowledge_lm.report.figures import spectrum_curves

                    out += figure_link(
                        spectrum_curves(
                            spectra,
                            f"{dataset} / {task} ({backbone}), 100%, head features' singular values",
                            figures_dir / f"{dataset}-{task}-{backbone}-spectrum.png",
                        ),
                        f"{task}: singular values of the head's features, with (dotted) and without SR",
                    )
            buckets = frequency_buckets(plain[plain.task == task], dataset, task, main_metric[task], golds)
            if buckets is not None:
                labels, per_method = buckets
                out += [
                    f"### {task}: {main_metric[task]} by entity frequency (100%, mean over seeds)",
                    "",
                    "The reported split's examples grouped by the highest train-split document frequency among "
                    "their linked entities (examples per bucket in brackets), as papers/000 Fig. 1a/5a group them by "
                    "their entities' Wikipedia frequency.",
                    "",
                    "| method | " + " | ".join(labels) + " |",
                    "|---" * (len(labels) + 1) + "|",
                ]
                out += [
                    f"| {method} | " + " | ".join(MISSING if v is None else f"{v:.1f}" for v in values) + " |"
                    for method, values in sorted(per_method.items(), key=lambda item: (item[0] != "baseline", item[0]))
                ]
                out.append("")
                if figures_dir is not None:
                    from knowledge_lm.report.figures import bucket_bars

                    out += figure_link(
                        bucket_bars(
                            per_method,
                            labels,
                            f"{dataset} / {task} ({backbone}), 100%",
                            main_metric[task],
                            figures_dir / f"{dataset}-{task}-{backbone}-frequency.png",
                        ),
                        f"{task}: {main_metric[task]} by entity frequency",
                    )
            if (plain.task == task).any():
                compared = comparison_table(plain, task, main_metric[task], golds)
                if compared:
                    out += (
                        [f"### {task}: against the baseline ({main_metric[task]}, paired by seed)", ""]
                        + compared
                        + [""]
                    )
                used = (
                    []
                    if families[backbone, task]
                    else knowledge_used_table(group, dataset, task, main_metric[task], golds)
                )
                if used:
                    out += [
                        f"### {task}: knowledge used ({main_metric[task]}, against each method's control)",
                        "",
                    ] + used
                    out += ["", controls_text(main_metric[task]), ""]
                out += [f"### {task}: all metrics", ""] + detail_table(plain, task) + [""]
    out += ["## Provenance", ""] + provenance(frame) + [""]
    return "\n".join(out)


def kept_predictions(
    files: list[tuple[Path, dict]], data_dir=None
) -> tuple[list[tuple[Path, str] | None], dict[str, list]]:
    """Per result file, its predictions file and their gold's sha256 where that is the sha256 of the reported
    split's gold recomputed from ``data_dir`` (``knowledge_lm.report.gold``; None: as ``klm bench`` resolves it), else
    None: no predictions file, no data, or a mismatch (a one-line warning names the cell); and those gold answers
    by their sha256."""
    from knowledge_lm.report.gold import report_gold, warn

    kept, golds = [], {}
    for path, result in files:
        sidecar = predictions_path(path)
        gold = report_gold(result, data_dir) if sidecar.is_file() else None
        if gold is None:
            kept.append(None)
            continue
        digest, stored = gold_sha256(gold), read_predictions(sidecar)
        if stored.get("gold_sha256") != digest or stored.get("split") != result["report_split"]:
            warn(
                f"{path}: its kept predictions are of another gold than the data directory's {result['report_split']} "
                "split gives; not used"
            )
            kept.append(None)
            continue
        kept.append((sidecar, digest))
        golds[digest] = gold
    return kept, golds


def kept_groups(
    files: list[tuple[Path, dict]], kept: list[tuple[Path, str] | None], golds: dict[str, list], data_dir=None
) -> tuple[list[str], dict[str, list[str]]]:
    """Per result file with kept predictions (``kept_predictions``), the sha256 of its reported split's example
    groups (``knowledge_lm.report.gold.report_groups``: the generated task's statement families), else "" (no groups, or
    not one per gold answer); and those groups by their sha256."""
    from knowledge_lm.report.gold import report_groups

    digests, groupings = [], {}
    for (_, result), predictions in zip(files, kept):
        groups = report_groups(result, data_dir) if predictions else None
        if not groups or len(groups) != len(golds[predictions[1]]):
            digests.append("")
            continue
        digest = gold_sha256(groups)
        digests.append(digest)
        groupings[digest] = list(groups)
    return digests, groupings


def write_leaderboards(results_dir=Path("results"), out_dir=Path("leaderboards"), data_dir=None) -> list[Path]:
    """Every dataset's page (and the speed and LAMA pages) from ``results_dir``; ``data_dir`` gives the gold
    that kept predictions are checked against and scored with, and their examples' groups."""
    kept_run.cache_clear()  # predictions files may have changed since the last regeneration in this process
    files = result_files(results_dir)
    predictions, golds = kept_predictions(files, data_dir)
    groups, groupings = kept_groups(files, predictions, golds, data_dir)
    frame = results_frame([result for _, result in files], predictions, groups)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for dataset, group in [] if frame.empty else frame.groupby("dataset"):
        path = out_dir / f"{dataset}.md"
        path.write_text(render_dataset(dataset, group, out_dir / "figures", golds, groupings))
        written.append(path)
    speed_records = sorted((Path(results_dir) / "speed").glob("*.json"))
    if speed_records:
        from knowledge_lm.tools.speed import render_speed

        path = out_dir / "speed.md"
        path.write_text(render_speed([json.loads(p.read_text()) for p in speed_records]))
        written.append(path)
    probes = sorted((Path(results_dir) / PROBES_DIR).glob("lama-*.json"))
    if probes:
        path = out_dir / "lama.md"
        path.write_text(render_probes([json.loads(p.read_text()) for p in probes]))
        written.append(path)
    return written


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
