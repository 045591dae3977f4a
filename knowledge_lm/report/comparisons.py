"""Each method compared: with the baseline seed by seed, on each example group, and with its counterfactual controls.

Against the baseline: a paired t-test over the seeds both ran, neither cell degenerate, with the interval of Δ, its p
corrected by Benjamini–Hochberg over a page's comparisons (``SIGNIFICANCE`` on q), a verdict that tells "no
difference" (±``NO_DIFFERENCE``) from "too few seeds to tell", and the paired bootstrap over test examples where both
kept predictions (``knowledge_lm.report.bootstrap``). Per statement family (the generated task's): a method's score
with a bootstrap interval over the family's examples, tested over the seeds and over the examples above the family's
chance (on one_hop and two_hop, no lower than the world's relation-blind regression, nor kg-text's than its
input-order oracle: ``hop_chance``; ``family_test``). Against its controls (``KNOWLEDGE_CONTROLS``): Δ paired by seed,
tested like Δ against the baseline (``knowledge_test``; a verdict needs ``MIN_SEEDS``), with the examples' bootstrap.
Every p whose mark a page shows is corrected together, once per page (``page_tests``). At 100 %, each method scored
per entity-frequency bucket; a control's cells pair with the method's of the same world (``split_variant``); from
the tests, whether a method uses relational facts in each world without a relation-blind cue (``relational_verdict``).
"""

import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy.stats import false_discovery_control, ttest_1samp
from scipy.stats import t as t_distribution

from knowledge_lm.report.bootstrap import LEVEL, bootstrap_interval, paired_bootstrap, task_scorer
from knowledge_lm.report.derived import recall
from knowledge_lm.report.frame import (
    MISSING,
    by_seed,
    cards_note,
    cell_rows,
    interval_text,
    kept_run,
    p_text,
    page_rows,
    rows_where,
    seed_cells,
)
from knowledge_lm.report.preregistration import PREFIX
from knowledge_lm.report.pretraining import own_run_label
from knowledge_lm.report.protocol import comparable, recipe_cells
from knowledge_lm.report.sanity import (
    CONFIRM_SEED,
    DATASET,
    RELATION_BLIND_LIMIT,
    TEMPLATE_FAMILIES,
    current_numbers,
    read_sanity_numbers,
    relation_blind_cue,
    stored_method_ceiling,
    stored_relation_blind,
    world_knobs,
)

SIGNIFICANCE = 0.05  # of a Benjamini–Hochberg q: the false discovery rate among a page's ↑ / ↓

NO_DIFFERENCE = 1.0  # points of the metric: an interval of Δ within ±this says the methods do not differ


ABOVE = " ✓"  # significant after the page's correction: above chance (a family's score) or above 0 (knowledge used)

MIN_SEEDS = 5  # seed pairs a knowledge-used verdict needs; fewer: "too few seeds"

FRACTION = 1.0  # the fraction of the answer at a glance (``knowledge_lm.report.glance``)


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
    "relations-permuted": Control(
        "relations-permuted",
        None,
        "the same edges with their relation labels permuted (TransE retrained on that graph; kg-text's facts carry "
        "the permuted relations)",
    ),
    "test-shuffled": Control(
        "test-shuffled", None, "trained and selected with the right links, evaluated with every test link shuffled"
    ),
    "mlm-only": Control(
        "",
        {"erica": "erica-mlm-only"},
        "for ERICA, the MLM-only checkpoint of its own pretraining run (same corpus, steps, batch size and commit)",
    ),
}


class VariantTable(NamedTuple):
    """One table of the generated page: which rows it holds and its heading."""

    pattern: str  # a regular expression the world of a row's variant matches in whole
    heading: str | None  # None: the page's main per-family table


TUNING = "tuning"
PREREGISTERED = "preregistered"
CONFIRM = "confirm"
MAIN = "main"
# The generated page's tables, by the world of a row's variant (``split_variant``: a control stands with its world's
# rows): the first whose pattern the whole world matches. Tuning variants are settings tried on dev: shown on dev
# beside the default, tested nothing (``page_tests`` leaves them out).
VARIANT_TABLES = {
    TUNING: VariantTable(r"lr[0-9.e+-]+|scale[0-9.]+", "Settings chosen on dev"),
    PREREGISTERED: VariantTable(
        f"{PREFIX}.+", "Pre-registered worlds (declared in benchmarks/preregistered/ before any of their cells ran)"
    ),
    CONFIRM: VariantTable(
        r"confirm",
        f"Confirmation world (generator seed {CONFIRM_SEED}): exploratory, not pre-registered (no declaration was "
        "committed before it ran, and its sixth seed was added after results of the first five were seen)",
    ),
    MAIN: VariantTable(r".*", None),
}

# The worlds whose relational verdict a page and the README give (``relational_verdict``): a method's own variant.
# A pre-registered world (``knowledge_lm.report.preregistration``: its variant starts with ``PREFIX``) is one too.
WORLDS = {"": "2k world", "t20k": "20k statements", "confirm": "confirmation world (exploratory)"}

RELATION_BLIND = ("kam", "kam+kg")  # their maps read no relation label: the relations-permuted control is not run
# Knowledge used against these: the method uses its linked entities' knowledge (zeroed: any of it; the shuffled
# controls keep each entity's type, so only zeroed shows a method that reads types alone).
LINK_CONTROLS = ("shuffled", "test-shuffled", "zeroed")
SHUFFLE_CONTROLS = ("shuffled", "test-shuffled")  # re-link each entity to one of its type: they keep the types
# What beating the link controls shows (``controls_verdict``): the linked entities beyond their types (a shuffle ✓),
# their types alone (zeroed ✓ but no shuffle), or knowledge of some kind where no shuffle ran to tell which.
LINKS_ONLY, TYPES_ONLY, UNTOLD = "links only", "entity types only", "linked knowledge (no shuffle run)"
# Where a verdict would be "no": the method's knowledge inputs could not have carried the relations of a hop family
# (their feature ceiling on the sanity table, ``knowledge_lm.report.sanity.feature_ceilings``, is below
# ``CEILING_FLOOR`` there), so "no" would say more about its inputs than about the method; or that ceiling is not
# stored for the world's current code, which the verdict says rather than a bare "no".
CANNOT_CARRY, NO_CEILINGS = "its features cannot carry relations", "no (feature ceilings not stored)"
CEILING_FLOOR = 90.0
RELATION_CONTROL = "relations-permuted"  # knowledge used against it: the method uses the relation labels
# Knowledge used against it: the method's knowledge pretraining helps (ERICA); no control of it isolates relations.
PRETRAINING_CONTROL = "mlm-only"
HOP_GROUPS = ("one_hop", "two_hop")  # one of them above chance: the method answers relational claims


def delta_test(deltas: pd.Series) -> dict:
    """Paired differences (one per seed) tested against 0: n, their mean Δ, std, the t-test's two-sided p and the
    ``LEVEL`` interval of Δ (p and std None for n < 2; interval None too). Identical differences have no spread:
    p is then 0 (all ≠ 0) or 1 (all 0), the interval Δ itself."""
    n, delta = len(deltas), float(deltas.mean())
    if n < 2:
        return {"n": n, "delta": delta, "std": None, "p": None, "interval": None}
    std = float(deltas.std(ddof=1))
    if std == 0:
        return {"n": n, "delta": delta, "std": std, "p": 0.0 if delta != 0 else 1.0, "interval": [delta, delta]}
    test = ttest_1samp(deltas, 0.0)
    interval = test.confidence_interval(LEVEL)
    return {"n": n, "delta": delta, "std": std, "p": float(test.pvalue), "interval": [interval.low, interval.high]}


def above_chance_test(values: pd.Series, chance: float) -> dict:
    """Seed scores tested above ``chance``: a one-sided one-sample t-test (``delta_test``'s fields for the scores
    minus chance, its p one-sided). Identical scores have no spread: p is 0 above chance, else 1."""
    found = delta_test(values - chance)
    if found["p"] is None or not found["std"]:
        return {**found, "p": None if found["p"] is None else (0.0 if found["delta"] > 0 else 1.0)}
    return {**found, "p": float(ttest_1samp(values - chance, 0.0, alternative="greater").pvalue)}


def seed_deltas(
    frame: pd.DataFrame, method: str, fraction: float, task: str, metric: str, *, against: str = "baseline"
) -> pd.Series:
    """The method minus ``against`` (the baseline) per seed both ran, indexed by seed."""
    ours, baseline = (by_seed(frame, name, fraction, task, metric) for name in (method, against))
    seeds = sorted(set(ours.index) & set(baseline.index))
    return pd.Series([ours[s] - baseline[s] for s in seeds], index=seeds, dtype=float)


def seed_cards(cells: pd.DataFrame, seeds) -> list[str]:
    """The card models (``card``) ``cells`` ran on at ``seeds``: what a comparison of them was measured on."""
    if "card" not in cells:
        return []
    return sorted(set(cells[cells["seed"].isin(list(seeds))]["card"]))


def baseline_cards(frame: pd.DataFrame, method: str, fraction: float, *, task: str, metric: str, seeds) -> list[str]:
    """``seed_cards`` of the method's and the baseline's cells at ``fraction``, ``task`` and ``metric``."""
    rows = frame[
        frame["method"].isin([method, "baseline"])
        & (frame.fraction == fraction)
        & (frame.task == task)
        & (frame.metric == metric)
    ]
    return seed_cards(rows, seeds)


def paired_comparison(frame: pd.DataFrame, method: str, fraction: float, task: str, metric: str) -> dict | None:
    """The method minus the baseline, seed by seed, over the seeds where neither cell is degenerate
    (``delta_test``), with ``excluded``: the pairs left out for a degenerate cell, and ``cards``: the card models
    the compared cells ran on. None for the baseline itself or where no seed was run by both."""
    if method == "baseline":
        return None
    every = seed_deltas(frame, method, fraction, task, metric)
    if every.empty:
        return None
    kept = seed_deltas(comparable(frame), method, fraction, task, metric)
    cards = baseline_cards(comparable(frame), method, fraction, task=task, metric=metric, seeds=kept.index)
    return {**delta_test(kept), "excluded": len(every) - len(kept), "cards": cards}


def corrected(comparisons: list[dict]):
    """Sets each comparison's ``q``: its p adjusted by Benjamini–Hochberg over ``comparisons``, one family (those
    without a p get None)."""
    tested = [found for found in comparisons if found["p"] is not None]
    adjusted = false_discovery_control([found["p"] for found in tested]) if tested else []
    for found in comparisons:
        found["q"] = None
    for found, q in zip(tested, adjusted):
        found["q"] = float(q)


def verdict(found: dict) -> str:
    """What a comparison says (``corrected`` first): better / worse where q < ``SIGNIFICANCE``; "not significant
    after correction" where only the raw p is; else "no difference" where the interval of Δ lies within
    ±``NO_DIFFERENCE``; where it is wider, "too few seeds to tell" under ``MIN_SEEDS`` seed pairs, else
    "inconclusive" with the seed pairs that would settle it (``settle_text``)."""
    if not found["n"]:
        return "every pair degenerate"
    if found["p"] is None:
        return "too few seeds"
    if found["q"] < SIGNIFICANCE:
        return "better" if found["delta"] > 0 else "worse"
    if found["p"] < SIGNIFICANCE:
        return "not significant after correction"
    low, high = found["interval"]
    if -NO_DIFFERENCE <= low and high <= NO_DIFFERENCE:
        return "no difference"
    return "too few seeds to tell" if found["n"] < MIN_SEEDS else f"inconclusive: {settle_text(found)}"


def seeds_to_settle(found: dict, most: int = 100) -> int | None:
    """The fewest seed pairs above its n at which a comparison's observed mean Δ and spread (``delta_test``) would
    give an interval that excludes 0 or lies within ±``NO_DIFFERENCE``: what would settle an inconclusive one
    (before any correction); None where no count up to ``most`` would, or where there is no spread (n < 2)."""
    if found["std"] is None:
        return None
    delta = abs(found["delta"])
    for n in range(max(found["n"] + 1, 2), most + 1):
        half = float(t_distribution.ppf(0.5 + LEVEL / 2, n - 1)) * found["std"] / n**0.5
        if half < delta or delta + half <= NO_DIFFERENCE:
            return n
    return None


def settle_text(found: dict) -> str:
    """What would settle a comparison whose interval is wide and across 0 (``seeds_to_settle``), in words."""
    if found["std"] is None:
        return f"n={found['n']}, no spread to judge from"
    needed = seeds_to_settle(found)
    if needed is None:
        return "over 100 seed pairs would be needed"
    return f"about {needed} seed pairs would settle it"


def significance_mark(found: dict | None) -> str:
    """↑ / ↓ where the corrected comparison is significant; "" otherwise."""
    if found is None or found.get("q") is None or found["q"] >= SIGNIFICANCE:
        return ""
    return " ↑" if found["delta"] > 0 else " ↓"


def page_comparisons(frame: pd.DataFrame, metrics: dict[str, str], correct: bool = True) -> dict[tuple, dict]:
    """Every method against the baseline on a page, ``(backbone, method, fraction, task)`` → ``paired_comparison``
    of the task's metric (``metrics``), sweep variants aside, corrected as one family where ``correct`` (else left
    to ``page_tests``, which corrects them with the page's other tests)."""
    found = {}
    plain = frame[frame.variant == ""]
    for (backbone, method, fraction, task), _ in plain.groupby(["backbone", "method", "fraction", "task"]):
        compared = paired_comparison(rows_where(plain, backbone=backbone), method, fraction, task, metrics[task])
        if compared is not None:
            found[backbone, method, fraction, task] = compared
    if correct:
        corrected(list(found.values()))
    return found


def dataset_delta(frame: pd.DataFrame, method: str, metrics: dict[str, str]) -> dict | None:
    """``delta_test`` of ``method``'s per-seed Δ against the baseline at ``FRACTION``, averaged over the tasks of
    ``frame`` (one dataset and backbone; each task's recipe cells, ``recipe_cells``; degenerate cells aside) that
    both ran, with ``tasks``: those tasks and ``cards``: the card models of the cells compared; None where they share
    no seed on every such task."""
    plain = comparable(recipe_cells(frame[frame.fraction == FRACTION]))
    per_task = {
        task: seed_deltas(plain, method, FRACTION, task, metrics[task])
        for task in sorted(plain[plain.method == method]["task"].unique())
    }
    per_task = {task: deltas for task, deltas in per_task.items() if not deltas.empty}
    seeds = pd.DataFrame(per_task).dropna()
    if seeds.empty:
        return None
    cards = {
        card
        for task in per_task
        for card in baseline_cards(plain, method, FRACTION, task=task, metric=metrics[task], seeds=seeds.index)
    }
    return {**delta_test(seeds.mean(axis=1)), "tasks": list(per_task), "cards": sorted(cards)}


class PageTests(NamedTuple):
    """Every test whose mark a page shows, corrected as one Benjamini–Hochberg family (``page_tests``)."""

    baseline: dict[tuple, dict]  # (backbone, method, fraction, task) → ``paired_comparison``
    overall: dict[tuple, dict]  # (backbone, method) → ``dataset_delta`` at ``FRACTION``: a page of several tasks
    used: dict[tuple, dict]  # (backbone, task, method, variant, fraction, control, scope) → ``knowledge_test``
    chance: dict[tuple, dict]  # (backbone, task, method, variant, fraction, group) → ``above_chance_test``

    def size(self) -> int:
        """How many comparisons the family holds: those with a p."""
        return sum(found["p"] is not None for tests in self for found in tests.values())


WHOLE = "whole"  # the scope of a knowledge-used test on the whole split; else on the families that need the graph
GRAPH = "graph"  # ... on the families that need the graph, pooled
# ... on one_hop and two_hop pooled, against the relations-permuted control alone: that control retrains TransE on
# the permuted graph, which can blur the entities' types, so a gain on the type family says nothing of relations.
RELATIONAL = "relational"


def page_tests(
    frame: pd.DataFrame,
    metrics: dict[str, str],
    golds: dict[str, list],
    groupings: dict[str, list[str]],
    results_dir: Path | None = None,
) -> PageTests:
    """The tests of one dataset's page (``frame``: its cells of the current protocol), ``metrics``: each task's main
    metric: every method against the baseline; on a page of several tasks, each method against it averaged over the
    tasks at ``FRACTION`` (the answer at a glance); knowledge used against each control per method, variant and
    fraction (on a task with statement families: on the whole split and on the families that need the graph
    pooled; else on the whole split, variants aside); and each family's score above chance (on one_hop and two_hop,
    above the relation-blind reach stored under ``results_dir``: ``row_chance_reach``). Their p's
    corrected together (``corrected``)."""
    baseline = page_comparisons(frame, metrics, correct=False)
    overall, used, chance = {}, {}, {}
    tasks = sorted(frame["task"].unique())
    dataset = frame["dataset"].iloc[0]
    for backbone, group in frame.groupby("backbone"):
        if len(tasks) > 1:
            for method in sorted(set(group["method"]) - {"baseline"}):
                found = dataset_delta(group, method, metrics)
                if found is not None:
                    overall[backbone, method] = found
        for task in tasks:
            metric = metrics[task]
            task_frame = group[(group.task == task) & (group.metric == metric)]
            groups = page_groups(task_frame, groupings)
            knowledge = {g for g in groups if g not in KNOWLEDGE_FREE_GROUPS}
            hops = {g for g in groups if g in HOP_GROUPS}
            scopes = {WHOLE: None, **({GRAPH: knowledge} if knowledge else {}), **({RELATIONAL: hops} if hops else {})}
            kept = comparable(task_frame)
            for fraction in sorted(task_frame["fraction"].unique()):
                at = kept[kept.fraction == fraction]
                rows = page_rows(at if groups else at[at.variant == ""])
                for method, variant in rows:
                    if variant_table(variant) == TUNING:
                        continue  # shown on dev, marked nothing
                    cells = seed_cells(at, method, variant, fraction, metric)
                    controls = (
                        []
                        if is_control(cells["cell_method"].iloc[0], variant)
                        else control_cells(at, method, fraction, metric, variant)
                    )
                    for name, control in controls:
                        for scope, pooled in scopes.items():
                            if scope == RELATIONAL and name != RELATION_CONTROL:
                                continue
                            found = knowledge_test(
                                cells,
                                control,
                                dataset,
                                task=task,
                                metric=metric,
                                golds=golds,
                                groupings=groupings,
                                groups=pooled,
                            )
                            if found is not None:
                                used[backbone, task, method, variant, fraction, name, scope] = found
                    reach = row_chance_reach(cells, results_dir)
                    for family in groups:
                        found = family_test(
                            cells,
                            family,
                            dataset,
                            task=task,
                            metric=metric,
                            golds=golds,
                            groupings=groupings,
                            relation_blind=reach,
                        )
                        if found is not None:
                            chance[backbone, task, method, variant, fraction, family] = found
    tests = PageTests(baseline, overall, used, chance)
    corrected([found for found_by_key in tests for found in found_by_key.values()])
    return tests


def bootstrap_comparison(
    frame: pd.DataFrame, method: str, fraction: float, *, task: str, metric: str, golds: dict[str, list]
) -> dict | None:
    """The paired bootstrap over test examples (``knowledge_lm.report.bootstrap``) of the seeds where the method and the
    baseline both kept predictions of the same gold (``golds``: gold answers by their sha256); None unless every
    paired seed has them."""
    ours, baseline = (
        by_seed(frame, name, fraction, task, metric, column="predictions") for name in (method, "baseline")
    )
    seeds = sorted(set(ours.index) & set(baseline.index))
    if not seeds or not all(ours[s] and baseline[s] for s in seeds):
        return None
    hashes = {
        digest
        for name in (method, "baseline")
        for digest in by_seed(frame, name, fraction, task, metric, column="gold_sha256")[seeds]
    }
    if len(hashes) != 1:
        return None
    dataset = frame["dataset"].iloc[0]
    return paired_bootstrap(
        dataset,
        task,
        metric,
        golds[hashes.pop()],
        ours=[Path(ours[s]) for s in seeds],
        baseline=[Path(baseline[s]) for s in seeds],
    )


def frequency_buckets(
    frame: pd.DataFrame, dataset: str, task: str, metric: str, golds: dict[str, list]
) -> tuple[list[str], dict] | None:
    """``(bucket labels, method → metric per bucket)`` at 100 %: the reported split's examples grouped by the highest
    train-split document frequency of their linked entities (no entity; then quartiles of that frequency), each
    method scored on every bucket per seed with the task's scorer and averaged over seeds. The frequencies come
    from any cell that kept them (knowledge methods do); every method with kept predictions of the same split
    and gold (``golds``: gold answers by their sha256) is scored, the baseline included. None when no cell kept
    frequencies. Kept among the derived numbers (``knowledge_lm.report.derived``), keyed by the predictions files'
    bytes: a later build reads them without the gold."""
    rows = frame[(frame.fraction == 1.0) & (frame.metric == metric) & (frame.predictions != "")].sort_values(
        ["method", "seed"]
    )
    key = hashlib.sha256(f"buckets:{task}:{metric}".encode())
    for row in rows.itertuples():
        key.update(f"{row.method}:{row.seed}:".encode() + Path(row.predictions).read_bytes())
    found = recall(
        dataset, f"buckets:{key.hexdigest()[:24]}", lambda: scored_buckets(rows, dataset, task, metric, golds)
    )
    return None if found is None else (found[0], found[1])


def scored_buckets(
    rows: pd.DataFrame, dataset: str, task: str, metric: str, golds: dict[str, list]
) -> tuple[list[str], dict] | None:
    """``frequency_buckets`` of the 100 % rows with kept predictions ``rows``, scored against their gold."""
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
    gold = list(golds[reference["gold_sha256"]])  # a lazy gold loads here, once
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


def members_of(groups: list[str], wanted) -> list[int]:
    """The indices of the examples whose group is in ``wanted``."""
    return [index for index, group in enumerate(groups) if group in wanted]


def subset_score(dataset: str, task: str, metric: str, *, predictions: str, gold: list, members: list[int]) -> float:
    """A kept predictions file's ``metric`` on the examples ``members``, by the task's own scorer."""
    predicted = kept_run(predictions)["predicted"]
    return task_scorer(dataset, task)([predicted[i] for i in members], [gold[i] for i in members])[metric]


def shared_kept(cells: pd.DataFrame, grouped: bool) -> tuple[str, str] | None:
    """``(gold sha256, groups sha256)`` where every cell kept predictions of that same gold (and, ``grouped``, the
    same example groups), else None."""
    if cells.empty or not all(cells["predictions"]) or (grouped and not all(cells["groups_sha256"])):
        return None
    keys = set(zip(cells["gold_sha256"], cells["groups_sha256"]))
    return keys.pop() if len(keys) == 1 else None


def page_groups(frame: pd.DataFrame, groupings: dict[str, list[str]]) -> list[str]:
    """The example groups of ``frame``'s cells (from their kept predictions or their ``metrics_by_group``), in
    ``GROUP_ORDER``, others after it by name."""
    found = {group for digest in set(frame["groups_sha256"]) if digest for group in groupings[digest]}
    found |= {group for by_group in frame["by_group"] if isinstance(by_group, dict) for group in by_group}
    return sorted(
        found, key=lambda group: (GROUP_ORDER.index(group) if group in GROUP_ORDER else len(GROUP_ORDER), group)
    )


def family_score(
    cells: pd.DataFrame,
    group: str,
    dataset: str,
    *,
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
    values = []
    for cell in cell_rows(cells):
        if isinstance(cell.by_group, dict) and metric in cell.by_group.get(group, {}):
            values.append(cell.by_group[group][metric])
        elif cell.predictions and cell.groups_sha256 and group in groupings[cell.groups_sha256]:
            members = members_of(groupings[cell.groups_sha256], {group})
            values.append(
                subset_score(
                    dataset, task, metric, predictions=cell.predictions, gold=golds[cell.gold_sha256], members=members
                )
            )
        else:
            return None
    if not values:
        return None
    found = {"mean": sum(values) / len(values), "interval": None, "chance": None}
    kept = shared_kept(cells, grouped=True)
    if kept is not None:
        gold, members = golds[kept[0]], members_of(groupings[kept[1]], {group})
        resampled = bootstrap_interval(
            dataset, task, metric, gold, runs=[Path(path) for path in cells["predictions"]], examples=members
        )
        found["interval"] = resampled["interval"] if resampled else None
        if metric == "accuracy":
            found["chance"] = 100 * max(label_counts(gold, members).values()) / len(members)
    return found


def seed_score(
    cell, groups, *, dataset: str, task: str, metric: str, golds: dict[str, list], groupings: dict[str, list[str]]
) -> float | None:
    """One cell's ``metric`` on the examples of ``groups`` pooled (None: its value on the whole split): from its
    ``metrics_by_group`` (weighted by each group's examples), else its kept predictions scored on those examples;
    None where it has neither."""
    if groups is None:
        return float(cell.value)
    groups = sorted(groups)  # a fixed order of summation: a set's order changes with the process's hash seed
    by_group = cell.by_group if isinstance(cell.by_group, dict) else {}
    if all(metric in by_group.get(group, {}) for group in groups):
        if len(groups) == 1:
            return float(by_group[groups[0]][metric])
        weights = [by_group[group].get("examples") for group in groups]
        if all(weights):
            return sum(by_group[g][metric] * w for g, w in zip(groups, weights)) / sum(weights)
    if cell.predictions and cell.groups_sha256 and set(groups) & set(groupings[cell.groups_sha256]):
        members = members_of(groupings[cell.groups_sha256], set(groups))
        return subset_score(
            dataset, task, metric, predictions=cell.predictions, gold=golds[cell.gold_sha256], members=members
        )
    return None


def seed_scores(cells: pd.DataFrame, groups, **scoring) -> pd.Series | None:
    """``seed_score`` of each of ``cells`` (``scoring``: its keyword arguments), indexed by seed; None where a cell
    has none."""
    values = [seed_score(cell, groups, **scoring) for cell in cell_rows(cells)]
    if any(value is None for value in values):
        return None
    return pd.Series(values, index=list(cells["seed"]), dtype=float)


def family_chance(cells: pd.DataFrame, group: str, golds: dict[str, list], groupings: dict[str, list[str]]):
    """The share of ``group``'s most frequent gold label (× 100), from the first of ``cells`` that kept predictions
    and groups; None where none did."""
    for cell in cell_rows(cells):
        if cell.predictions and cell.groups_sha256 and group in groupings[cell.groups_sha256]:
            gold, members = golds[cell.gold_sha256], members_of(groupings[cell.groups_sha256], {group})
            labels = label_counts(gold, members)
            return 100 * max(labels.values()) / sum(labels.values())
    return None


def label_counts(gold: list, members) -> Counter:
    """How often each gold label occurs among the examples ``members``; a label that is a list or a dict counted by
    its JSON (a label of numbers or words, by itself: most pages' labels, read often)."""
    return Counter(
        label if isinstance(label, (str, int, float)) else json.dumps(label, sort_keys=True)
        for label in (gold[i] for i in members)
    )


def family_test(
    cells: pd.DataFrame,
    group: str,
    dataset: str,
    *,
    task: str,
    metric: str,
    golds: dict[str, list],
    groupings: dict[str, list[str]],
    relation_blind: dict[str, float] | None = None,
) -> dict | None:
    """``above_chance_test`` of the seeds' accuracy on ``group`` (``cells``: one method's non-degenerate seeds), with
    ``chance``: the share of its most frequent label, on one_hop and two_hop raised to the world's relation-blind
    reach (``relation_blind``: ``row_chance_reach``; ``hop_chance``); None for another metric, or where chance or
    a seed's score is unknown."""
    chance = family_chance(cells, group, golds, groupings) if metric == "accuracy" else None
    chance = None if chance is None else hop_chance(chance, group, relation_blind)
    scores = (
        seed_scores(cells, {group}, dataset=dataset, task=task, metric=metric, golds=golds, groupings=groupings)
        if chance is not None
        else None
    )
    if scores is None:
        return None
    correct = example_correctness(cells, group, golds, groupings)
    # The same test over the examples, each one's correctness averaged over the seeds: would a new test set agree?
    over_examples = None if correct is None else above_chance_test(pd.Series(correct), chance)["p"]
    return {**over_seeds_and_examples(above_chance_test(scores, chance), over_examples), "chance": chance}


def hop_chance(chance: float, group: str, relation_blind: dict[str, float] | None) -> float:
    """The level a family's score is tested above: ``chance`` (its most frequent label's share), on one_hop and
    two_hop the larger of it and the relation-blind reach there (``relation_blind``; none stored: ``chance``): a
    score the graph's shape, or the places of a method's facts in its input, alone reach is no sign of relational
    facts."""
    if group not in HOP_GROUPS or not relation_blind or group not in relation_blind:
        return chance
    return max(chance, relation_blind[group])


def example_correctness(
    cells: pd.DataFrame, group: str, golds: dict[str, list], groupings: dict[str, list[str]]
) -> np.ndarray | None:
    """Each example of ``group``: whether a seed's prediction is right, averaged over the seeds of ``cells`` (× 100);
    None unless every seed kept predictions of the same gold and groups."""
    kept = shared_kept(cells, grouped=True)
    if kept is None:
        return None
    gold, members = golds[kept[0]], members_of(groupings[kept[1]], {group})
    answers = [gold[i] for i in members]
    right = [
        [kept_run(path)["predicted"][i] == answer for i, answer in zip(members, answers)]
        for path in cells["predictions"]
    ]
    return 100 * np.asarray(right, dtype=float).mean(axis=0)


def over_seeds_and_examples(found: dict, over_examples: float | None) -> dict:
    """A seed-level test (``found``: ``delta_test``'s fields) that must also hold over the test examples: ``p_seeds``
    its p, ``p_examples`` the p of the same question over the examples with the seeds averaged (None: no kept
    predictions to ask it of), and ``p`` the larger of the two, the p the page corrects: significant only where both
    are (an intersection-union test, valid at the level of each), so a seed-consistent bias on one small test set
    passes neither alone. None where either is None. A test that already has ``p_seeds`` keeps it."""
    over_seeds = found.get("p_seeds", found["p"])
    p = None if over_seeds is None or over_examples is None else max(over_seeds, over_examples)
    return {**found, "p_seeds": over_seeds, "p_examples": over_examples, "p": p}


def significant(found: dict | None) -> bool:
    """Whether a corrected test (``corrected``) has q < ``SIGNIFICANCE``."""
    return found is not None and found.get("q") is not None and found["q"] < SIGNIFICANCE


def kg_verdict(tests: dict[str, dict | None]) -> str:
    """From each family's ``family_test`` (``tests``, corrected): "yes" where a method is above chance on every family
    that needs the graph, "only …" naming those it is above chance on, "no" on none; — where a family has no test."""
    knowledge = [group for group in tests if group not in KNOWLEDGE_FREE_GROUPS]
    if not knowledge or any(tests[group] is None or tests[group]["p"] is None for group in knowledge):
        return MISSING
    above = [group for group in knowledge if significant(tests[group]) and tests[group]["delta"] > 0]
    return "yes" if len(above) == len(knowledge) else f"only {', '.join(above)}" if above else "no"


def control_variant(variant: str, control: Control) -> str:
    """The sweep variant holding ``control``'s cells for a method's cells of ``variant``: the control's own name,
    after the variant's where the method's cells are a variant themselves (``t20k`` → ``t20k-shuffled``)."""
    if not control.variant:
        return variant
    return f"{variant}-{control.variant}" if variant else control.variant


def split_variant(variant: str) -> tuple[str, str | None]:
    """``(world, control)``: the variant of the method's own cells that a control variant stands beside, and the
    control's name (``KNOWLEDGE_CONTROLS``); ``(variant, None)`` for a variant that is no control. The longest control
    name that ends the variant wins: ``t20k-test-shuffled`` → ``("t20k", "test-shuffled")``, ``test-shuffled`` →
    ``("", "test-shuffled")``."""
    named = [(name, control.variant) for name, control in KNOWLEDGE_CONTROLS.items() if control.variant]
    for name, suffix in sorted(named, key=lambda item: -len(item[1])):
        if variant == suffix:
            return "", name
        if variant.endswith(f"-{suffix}"):
            return variant[: -len(suffix) - 1], name
    return variant, None


def variant_table(variant: str) -> str:
    """The name of the ``VARIANT_TABLES`` table whose rows cells of ``variant`` stand in."""
    world = split_variant(variant)[0]
    return next(name for name, table in VARIANT_TABLES.items() if re.fullmatch(table.pattern, world))


def is_control(cell_method: str, variant: str) -> bool:
    """Whether cells of ``cell_method`` and ``variant`` are some method's counterfactual control: a control variant
    (``split_variant``) or, in any variant, a method that is another's control (ERICA's MLM-only checkpoint)."""
    return split_variant(variant)[1] is not None or any(
        control.methods is not None and cell_method in control.methods.values()
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
        paired = control_variant(variant, control)
        if control.variant and split_variant(paired) != (variant, name):
            continue  # the name belongs to another world's control: ``test`` + ``shuffled`` is the 2k world's
        if control.methods is None:
            cells = seed_cells(frame, method, paired, fraction, metric)
        else:
            other = control.methods.get(ours["cell_method"].iloc[0])
            label = own_run_label(frame, other, ours) if other else None
            cells = seed_cells(frame, label, paired, fraction, metric) if label else ours.iloc[:0]
        if not cells.empty:
            found.append((name, cells))
    return found


def knowledge_bootstrap(
    ours: pd.DataFrame,
    control: pd.DataFrame,
    dataset: str,
    *,
    task: str,
    metric: str,
    golds: dict[str, list],
    groupings: dict[str, list[str]],
    groups=None,
) -> dict | None:
    """The paired bootstrap over the examples (``knowledge_lm.report.bootstrap.paired_bootstrap``: its interval of Δ
    and one-sided p's) of the method's ``metric`` minus its control's, over the seeds both ran, where all of them
    kept predictions of the same gold; ``groups``: only the examples of those groups; None: the whole split. None
    where they share no seed or did not keep such predictions."""
    seeds = sorted(set(ours["seed"]) & set(control["seed"]))
    if not seeds:
        return None
    ours, control = (cells.set_index("seed").loc[seeds].reset_index() for cells in (ours, control))
    kept = shared_kept(pd.concat([ours, control]), grouped=groups is not None)
    if kept is None:
        return None
    resampled = paired_bootstrap(
        dataset,
        task,
        metric,
        golds[kept[0]],
        ours=[Path(path) for path in ours["predictions"]],
        baseline=[Path(path) for path in control["predictions"]],
        examples=None if groups is None else members_of(groupings[kept[1]], groups),
    )
    return resampled or None


def two_sided(resampled: dict | None) -> float | None:
    """A paired bootstrap's two-sided p that Δ ≠ 0 (twice its smaller one-sided p); None without one."""
    if resampled is None:
        return None
    return min(1.0, 2 * min(resampled["p_not_better"], resampled["p_not_worse"]))


def knowledge_test(
    ours: pd.DataFrame,
    control: pd.DataFrame,
    dataset: str,
    *,
    task: str,
    metric: str,
    golds: dict[str, list],
    groupings: dict[str, list[str]],
    groups=None,
) -> dict | None:
    """The method's ``metric`` minus its control's, paired by seed over the seeds both ran (``ours``, ``control``:
    their non-degenerate cells), tested as against the baseline (``delta_test``) and over the test examples with the
    seeds averaged (``knowledge_bootstrap``, two-sided; ``over_seeds_and_examples``: its p needs both), with
    ``examples_interval``: the bootstrap's interval of Δ, and ``cards``: the card models they ran on; ``groups``: on
    the examples of those groups pooled (``seed_score``). None where they share no seed or a seed has no score."""
    seeds = sorted(set(ours["seed"]) & set(control["seed"]))
    if not seeds:
        return None
    scoring = {"dataset": dataset, "task": task, "metric": metric, "golds": golds, "groupings": groupings}
    mine, theirs = (seed_scores(at_seeds(cells, seeds), groups, **scoring) for cells in (ours, control))
    if mine is None or theirs is None:
        return None
    resampled = knowledge_bootstrap(ours, control, groups=groups, **scoring)
    return {
        **over_seeds_and_examples(delta_test(mine - theirs), two_sided(resampled)),
        "examples_interval": resampled["delta_interval"] if resampled else None,
        "cards": seed_cards(pd.concat([ours, control]), seeds),
    }


def at_seeds(cells: pd.DataFrame, seeds: list) -> pd.DataFrame:
    """``cells`` (one row per seed) at ``seeds``, in their order: ``cells`` itself where those are its seeds."""
    return cells if list(cells["seed"]) == list(seeds) else cells.set_index("seed").loc[seeds].reset_index()


NO_EXAMPLES_TEST = "no test over examples"  # a verdict where the cells kept no predictions to resample


def knowledge_verdict(found: dict) -> str:
    """What a corrected ``knowledge_test`` says: ✓ (uses it) or "below its control" where q < ``SIGNIFICANCE`` (over
    the seeds and over the examples: ``over_seeds_and_examples``) over at least ``MIN_SEEDS`` seed pairs; "too few
    seeds" under them; ``NO_EXAMPLES_TEST`` where no predictions were kept; else "not significant"."""
    if found["n"] < MIN_SEEDS or found["p_seeds"] is None:
        return "too few seeds"
    if found["p"] is None:
        return NO_EXAMPLES_TEST
    if significant(found):
        return ABOVE.strip() if found["delta"] > 0 else "below its control"
    return "not significant"


def knowledge_used_text(found: dict) -> str:
    """A knowledge-used test as a page says it: Δ, its interval over seeds, n, q, the verdict, and the paired bootstrap
    over the examples (its interval of Δ and two-sided p) beside it."""
    seeds = MISSING if found["interval"] is None else interval_text(found["interval"])
    q = p_text(found["q"])
    examples = (
        "no kept predictions"
        if found["examples_interval"] is None
        else f"examples {interval_text(found['examples_interval'])} p={p_text(found['p_examples'])}"
    )
    said = f"{found['delta']:+.1f} {seeds} (n={found['n']}, q={q}) {knowledge_verdict(found)}; {examples}"
    return said + cards_note(found)


def knowledge_used(
    frame: pd.DataFrame,
    method: str,
    variant: str,
    *,
    fraction: float,
    dataset: str,
    task: str,
    metric: str,
    golds: dict[str, list],
    groupings: dict[str, list[str]],
    used: dict[tuple, dict],
    groups=None,
) -> str:
    """A row's knowledge-used cell: against each of its controls, the seed-level test of ``used`` (``PageTests.used``,
    corrected with the page) and the bootstrap over the examples beside it; "(control)" on a control's own row, —
    where it has no control cells."""
    cells = seed_cells(comparable(frame), method, variant, fraction, metric)
    if cells.empty:
        return MISSING
    if is_control(cells["cell_method"].iloc[0], variant):
        return "(control)"
    backbone = cells["backbone"].iloc[0]
    scope = WHOLE if groups is None else GRAPH
    parts = []
    for name, control in control_cells(comparable(frame), method, fraction, metric, variant):
        found = used.get((backbone, task, method, variant, fraction, name, scope))
        if found is None:
            continue
        parts.append(f"{name}: {knowledge_used_text(found)}")
        relational = used.get((backbone, task, method, variant, fraction, name, RELATIONAL))
        if scope == GRAPH and relational is not None:
            parts.append(f"{name} on {' + '.join(HOP_GROUPS)}: {knowledge_used_text(relational)}")
    if relation_blind_here(frame, cells["cell_method"].iloc[0], variant):
        parts.append(f"{RELATION_CONTROL}: relation-blind by construction")
    return "<br>".join(parts) or MISSING


def relation_blind_here(frame: pd.DataFrame, cell_method: str, variant: str) -> bool:
    """Whether a row of ``cell_method`` and ``variant`` stands where others ran the relations-permuted control (some
    method's cells of its world in ``frame``) but the method reads no relation label (``RELATION_BLIND``)."""
    permuted = control_variant(variant, KNOWLEDGE_CONTROLS[RELATION_CONTROL])
    return cell_method in RELATION_BLIND and bool((frame["variant"] == permuted).any())


def row_ceiling(cells: pd.DataFrame, results_dir: Path | None = None) -> dict[str, float] | None:
    """Family → the feature ceiling of the knowledge inputs the method of ``cells`` (one row's) reads, in their world
    and with their KG embedding kind (``sanity.stored_method_ceiling``), as stored under ``results_dir`` (default:
    the project's results/, what the page's sanity table shows); {} off the generated task or for a method whose
    inputs have no ceiling; None where their world has none stored for its current code."""
    if cells["dataset"].iloc[0] != DATASET:
        return {}
    return stored_method_ceiling(cells["cell_method"].iloc[0], row_options(cells), sanity_store(results_dir))


def row_relation_blind(cells: pd.DataFrame, results_dir: Path | None = None) -> dict[str, float] | None:
    """Family → the relation-blind regression of the world of ``cells`` (one row's) on one_hop and two_hop
    (``sanity.stored_relation_blind``), as stored under ``results_dir`` (default: as ``row_ceiling``); None off the
    generated task or where their world has none stored for its current code."""
    if cells["dataset"].iloc[0] != DATASET:
        return None
    return stored_relation_blind(row_options(cells), sanity_store(results_dir))


# Relation-blind oracles over a method's own input, beside its world's regression in the chance its hop families are
# tested against: kg-text reads where its facts sit in its input, which the order oracle reads with their words hidden.
METHOD_BLIND_ORACLES = {"kg-text": ("kg_text_order",)}


def stored_method_reach(method: str, dataset_options: dict, results_dir: Path) -> dict[str, float] | None:
    """Family (one_hop, two_hop) → how far a relation-blind reading reaches for ``method`` in the world of a cell's
    ``dataset_options``: the larger of the world's relation-blind regression and the oracles over the method's own
    input (``METHOD_BLIND_ORACLES``), as stored under ``results_dir``; None where none is stored for its current
    code."""
    numbers = current_numbers(read_sanity_numbers(results_dir), world_knobs(dataset_options))
    if numbers is None:
        return None
    reach = dict(numbers.get("relation_blind_regression") or {})
    for oracle in METHOD_BLIND_ORACLES.get(method, ()):
        for family, score in numbers["oracles"].get(oracle, {}).items():
            if family in TEMPLATE_FAMILIES:
                reach[family] = max(reach.get(family, score), score)
    return reach


def row_chance_reach(cells: pd.DataFrame, results_dir: Path | None = None) -> dict[str, float] | None:
    """Family → the relation-blind reach the one_hop and two_hop scores of ``cells`` (one row's) are tested above:
    their world's relation-blind regression, or the relation-blind oracle over their method's own input where that
    reaches further (``stored_method_reach``: kg-text's input order), as stored under ``results_dir``; None
    off the generated task or where their world has none stored for its current code."""
    if cells["dataset"].iloc[0] != DATASET:
        return None
    return stored_method_reach(cells["cell_method"].iloc[0], row_options(cells), sanity_store(results_dir))


def row_options(cells: pd.DataFrame) -> dict:
    """The dataset options of ``cells`` (one row's): their world's knobs and their knowledge options."""
    return json.loads(cells["config"].iloc[0] or "{}").get("dataset_options") or {}


def sanity_store(results_dir: Path | None) -> Path:
    """Where the sanity numbers are read from: ``results_dir``, default the project's results/ (what the page's
    sanity table shows, whichever results store the page is built from)."""
    from knowledge_lm.core.paths import project_path

    return results_dir or project_path("results")


def no_verdict(ceiling: dict[str, float] | None) -> str:
    """What a relational verdict of "no" says, given the method's feature ceiling (``row_ceiling``): ``CANNOT_CARRY``
    where it is below ``CEILING_FLOOR`` on every hop family, "no" beside it where on some of them only,
    ``NO_CEILINGS`` where none is stored, else "no"."""
    if ceiling is None:
        return NO_CEILINGS
    low = [family for family in HOP_GROUPS if family in ceiling and ceiling[family] < CEILING_FLOOR]
    if not low:
        return "no"
    return CANNOT_CARRY if len(low) == len(HOP_GROUPS) else f"no; {CANNOT_CARRY} on {', '.join(low)}"


def relational_verdict(
    tests: PageTests,
    row: tuple,
    cell_method: str,
    *,
    ceiling: dict[str, float] | None,
    relation_blind: dict[str, float] | None = None,
) -> str:
    """``controls_verdict``, drawn only from a world without a relation-blind cue: where its relation-blind
    regression (``relation_blind``: ``row_relation_blind``) is above ``RELATION_BLIND_LIMIT`` on a hop family
    (``sanity.relation_blind_cue``), ``no_verdict_text`` in its place; — stays —."""
    said = controls_verdict(tests, row, cell_method, ceiling=ceiling)
    cue = relation_blind_cue(relation_blind)
    return no_verdict_text(cue) if cue and said != MISSING else said


NO_VERDICT = "no verdict: relation-blind cue"  # a verdict withheld: the world's graph shape alone reaches its labels


def no_verdict_text(cue: dict[str, float]) -> str:
    """A verdict withheld for a relation-blind cue (``cue``: family → the world's relation-blind regression there),
    with the scores above the limit: "no verdict: relation-blind cue (two_hop 62.1 > 55)"."""
    scores = ", ".join(f"{family} {score:.1f}" for family, score in cue.items())
    return f"{NO_VERDICT} ({scores} > {RELATION_BLIND_LIMIT:.0f})"


def controls_verdict(tests: PageTests, row: tuple, cell_method: str, *, ceiling: dict[str, float] | None) -> str:
    """Whether a method uses relational facts, by its controls: from the page's corrected tests (``tests``) of its row
    ``row`` = ``(backbone, task, method, variant, fraction)``, "relational facts" where knowledge used against the
    relations-permuted control on one_hop and two_hop pooled (``RELATIONAL``) is ✓ and one_hop or two_hop is above
    chance; where not (also for a method relation-blind by construction, ``RELATION_BLIND``): ``LINKS_ONLY`` where
    knowledge used against a type-preserving shuffle (``SHUFFLE_CONTROLS``) is ✓, ``TYPES_ONLY`` where only against
    zeroed knowledge, though a shuffle ran, ``UNTOLD`` where zeroed is ✓ and no shuffle ran; for a method whose
    only control is its MLM-only pretraining (``PRETRAINING_CONTROL``, ERICA): "pretraining only" where knowledge
    used against it is ✓; "too few seeds" where a test that decides has fewer than ``MIN_SEEDS`` seed pairs;
    otherwise "no", or ``CANNOT_CARRY`` where the method's feature ceiling (``ceiling``: ``row_ceiling``) is below
    ``CEILING_FLOOR`` (``no_verdict``): it replaces "no" alone, since a finding of the controls stands whatever the
    inputs could carry, and with too few seeds a finding of links or types may still come; — where none of those
    controls ran."""
    blind = cell_method in RELATION_BLIND
    relations = None if blind else tests.used.get((*row, RELATION_CONTROL, RELATIONAL))
    links = [found for name in LINK_CONTROLS if (found := tests.used.get((*row, name, GRAPH))) is not None]
    pretraining = tests.used.get((*row, PRETRAINING_CONTROL, GRAPH))
    if relations is None and not links and pretraining is not None:
        said = knowledge_verdict(pretraining)
        return "pretraining only" if said == ABOVE.strip() else "too few seeds" if said == "too few seeds" else "no"
    if relations is None and not links:
        return MISSING
    hops = any(
        significant(found) and found["delta"] > 0
        for group in HOP_GROUPS
        if (found := tests.chance.get((*row, group))) is not None
    )
    used = ABOVE.strip()
    if relations is not None and knowledge_verdict(relations) == used and hops:
        return "relational facts"
    # Too few seeds against the relations-permuted control: relational use can be neither shown nor ruled out.
    if relations is not None and knowledge_verdict(relations) == "too few seeds":
        return "too few seeds"
    said = {name: knowledge_verdict(found) for name in LINK_CONTROLS if (found := tests.used.get((*row, name, GRAPH)))}
    shuffles = [said[name] for name in SHUFFLE_CONTROLS if name in said]
    if used in shuffles:
        return LINKS_ONLY
    if "too few seeds" in shuffles:
        return "too few seeds"
    if said.get("zeroed") == used:
        return TYPES_ONLY if shuffles else UNTOLD
    return "too few seeds" if said.get("zeroed") == "too few seeds" else no_verdict(ceiling)


def relational_verdicts(
    frame: pd.DataFrame, tests: PageTests, results_dir: Path | None = None
) -> dict[tuple[str, str, str, str], str]:
    """``(backbone, task, method, world)`` → ``relational_verdict`` of each method's own cells of each world
    (``WORLDS``, and each pre-registered world) at ``FRACTION`` on a page (``frame``: its cells, ``tests``: its
    ``page_tests``; ``results_dir``: where the sanity numbers are stored, ``row_ceiling``); rows whose verdict is
    — left out."""
    found = {}
    worlds = frame["variant"].isin(list(WORLDS)) | frame["variant"].str.startswith(PREFIX)
    rows = frame[(frame.fraction == FRACTION) & worlds]
    for (backbone, task, method, variant), cells in rows.groupby(["backbone", "task", "method", "variant"]):
        cell_method = cells["cell_method"].iloc[0]
        if is_control(cell_method, variant):
            continue
        row = (backbone, task, method, variant, FRACTION)
        said = relational_verdict(
            tests,
            row,
            cell_method,
            ceiling=row_ceiling(cells, results_dir),
            relation_blind=row_relation_blind(cells, results_dir),
        )
        if said != MISSING:
            found[backbone, task, method, variant] = said
    return found
