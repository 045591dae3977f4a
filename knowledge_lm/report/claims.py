"""The seed papers' headline claims (``benchmarks/claims.yaml``) judged from the results store, and their page,
``leaderboards/claims.md``.

A claim names the paper's rows whose difference is its effect (read from ``benchmarks/references.yaml``; or, where
that file has no number, what the paper says and the direction it claims) and our comparison that tests it: method A
against B, paired by seed (``comparisons.seed_deltas``, degenerate cells aside), averaged over the named tasks per
seed, tested by ``comparisons.delta_test`` and corrected by Benjamini–Hochberg over every claim of the page
(``comparisons.corrected``). Its verdict follows ``VERDICT_RULE`` (``claim_verdict``), the one rule the page prints.
"""

from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
import yaml

from knowledge_lm.core.backbones import BACKBONE_NAMES, leading_order
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import parse_yaml
from knowledge_lm.core.paths import benchmarks_dir
from knowledge_lm.core.registry import DATASETS, METHODS, cannot_run
from knowledge_lm.report import coverage
from knowledge_lm.report.comparisons import (
    NO_DIFFERENCE,
    SIGNIFICANCE,
    corrected,
    delta_test,
    seed_cards,
    seed_deltas,
    settle_text,
)
from knowledge_lm.report.frame import MISSING, cards_note, fraction_label, interval_text, rows_where
from knowledge_lm.report.pretraining import own_run_label
from knowledge_lm.report.protocol import TASK_RECIPES, comparable

PAPER_NAMES = {"000": "SI+SR", "001": "KAM-BERT", "003": "ERICA", "004": "KnowBERT"}
# How references.yaml's ``source`` names each paper (KnowBERT prints no table of its own: its claims name theirs).
SOURCE_NAMES = {"000": "SI+SR", "001": "KAM-BERT", "003": "ERICA"}

REPRODUCES, OPPOSITE, NO_EFFECT, INCONCLUSIVE, UNTESTABLE, NOT_RUN = (
    "reproduces",
    "opposite",
    "no effect",
    "inconclusive",
    "untestable with this KG",
    "not run",
)
VERDICTS = (REPRODUCES, OPPOSITE, NO_EFFECT, INCONCLUSIVE, UNTESTABLE, NOT_RUN)
VERDICT_RULE = (
    f"**{REPRODUCES}**: Δ has the paper's sign and is significant after this page's Benjamini–Hochberg correction "
    f"(q < {SIGNIFICANCE}); **{OPPOSITE}**: significant, of the other sign; **{NO_EFFECT}**: not significant and its "
    f"95 % interval within ±{NO_DIFFERENCE:g} point; **{INCONCLUSIVE}**: not significant and a wider interval "
    "(with the seed pairs that the observed mean and spread say would settle it: an interval excluding 0 or within "
    f"±{NO_DIFFERENCE:g}); **{UNTESTABLE}**: a knowledge method on a dataset whose knowledge coverage is below the "
    "gate (the method got too little knowledge for any verdict; Δ is still shown); **not run**: no cells to compare, "
    "with the one-line reason."
)
CLAIM_KEYS = {
    "id",
    "paper",
    "table",
    "claim",
    "paper_rows",
    "reference",
    "printed",
    "sign",
    "ours",
    "not_run",
    "differs",
    "note",
}
OURS_KEYS = {"a", "b", "dataset", "tasks", "fraction", "metric", "backbone", "a_variant", "b_variant"}
REFERENCE_KEYS = {"sources", "dataset", "fraction", "metrics"}


@dataclass(frozen=True)
class Comparison:
    """Ours: ``a`` minus ``b`` per seed on ``dataset``'s ``tasks`` (averaged over them) at ``fraction``, in ``metric``
    (None: each task's main metric), on ``backbone`` (None: every backbone with cells, the base size leading); a
    variant None is each task's recipe (``TASK_RECIPES``)."""

    a: str
    b: str
    dataset: str
    tasks: tuple[str, ...]
    fraction: float
    metric: str | None = None
    backbone: str | None = None
    a_variant: str | None = None
    b_variant: str | None = None

    def metric_of(self, task: str) -> str:
        return self.metric or main_metric(self.dataset, task)

    def variant_of(self, side: str, task: str) -> str:
        chosen = self.a_variant if side == "a" else self.b_variant
        return TASK_RECIPES.get((self.dataset, task), ("",))[0] if chosen is None else chosen


@dataclass(frozen=True)
class Claim:
    """One headline claim of a paper (``benchmarks/claims.yaml``; its header says what each field holds)."""

    id: str
    paper: str
    table: str
    claim: str
    ours: Comparison | None
    paper_rows: tuple[str, str] | None = None
    reference: dict = field(default_factory=dict)
    printed: str = ""
    sign: int = 0
    not_run: str = ""
    differs: str = ""
    note: str = ""


def main_metric(dataset: str, task: str) -> str:
    return DATASETS.get(dataset).spec(task).main_metric


def claims_path() -> Path:
    return benchmarks_dir() / "claims.yaml"


def load_claims(path: Path | None = None, references: list[dict] | None = None) -> list[Claim]:
    """The claims of ``path`` (``benchmarks/claims.yaml``), each checked: known fields, a known paper, methods,
    datasets and tasks that exist, and a paper's effect that ``references`` (``references.yaml``'s rows) gives;
    a one-line ``KlmError`` naming the claim otherwise."""
    path = path or claims_path()
    try:
        entries = parse_yaml(path.read_text(), unique_keys=False) if path.is_file() else None
    except yaml.YAMLError as error:
        raise KlmError(f"{path}: not YAML ({' '.join(str(error).split())})") from None
    if not isinstance(entries, list):
        raise KlmError(f"{path}: a list of claims is expected")
    if references is None:
        references = parse_yaml((benchmarks_dir() / "references.yaml").read_text(), unique_keys=False)
    claims, seen = [], set()
    for index, entry in enumerate(entries):
        name = entry.get("id", f"#{index + 1}") if isinstance(entry, dict) else f"#{index + 1}"
        try:
            claim = parsed_claim(entry)
            if claim.id in seen:
                raise KlmError("its id is used twice")
            seen.add(claim.id)
            paper_effect(claim, references)
        except KlmError as error:
            raise KlmError(f"{path}: claim {name}: {error}") from None
        claims.append(claim)
    return claims


def parsed_claim(entry) -> Claim:
    """A claim from its YAML mapping, checked (``load_claims``) but for its paper's effect."""
    if not isinstance(entry, dict):
        raise KlmError("a mapping is expected")
    unknown = sorted(set(entry) - CLAIM_KEYS)
    missing = sorted({"id", "paper", "table", "claim"} - set(entry))
    if unknown or missing:
        raise KlmError(f"unknown fields {unknown}" if unknown else f"missing fields {missing}")
    if str(entry["paper"]) not in PAPER_NAMES:
        raise KlmError(f"paper {entry['paper']!r} is none of {sorted(PAPER_NAMES)}")
    if ("paper_rows" in entry) == ("printed" in entry):
        raise KlmError("give either paper_rows (read from references.yaml) or printed with sign, not both")
    if ("printed" in entry or "sign" in entry) and entry.get("sign") not in (1, -1):
        raise KlmError("sign: 1 or -1 (the direction the paper claims) is expected, and printed needs it")
    rows = entry.get("paper_rows")
    if rows is not None and (not isinstance(rows, list) or len(rows) != 2):
        raise KlmError("paper_rows: two rows of references.yaml, [A, B], are expected")
    reference = entry.get("reference") or {}
    if set(reference) - REFERENCE_KEYS:
        raise KlmError(f"reference: unknown fields {sorted(set(reference) - REFERENCE_KEYS)}")
    ours = parsed_comparison(entry.get("ours"))
    if ours is None and not entry.get("not_run"):
        raise KlmError("ours: null needs not_run, the reason the suite cannot run it")
    return Claim(
        id=str(entry["id"]),
        paper=str(entry["paper"]),
        table=str(entry["table"]),
        claim=str(entry["claim"]),
        ours=ours,
        paper_rows=tuple(str(row) for row in rows) if rows else None,
        reference=reference,
        printed=str(entry.get("printed", "")),
        sign=int(entry.get("sign", 0)),
        not_run=str(entry.get("not_run", "")),
        differs=str(entry.get("differs", "")),
        note=str(entry.get("note", "")),
    )


def parsed_comparison(ours) -> Comparison | None:
    """``ours`` of a claim, its methods, dataset and tasks checked against the registries."""
    if ours is None:
        return None
    if not isinstance(ours, dict) or set(ours) - OURS_KEYS or {"a", "b", "dataset", "tasks", "fraction"} - set(ours):
        raise KlmError(f"ours: a mapping of {sorted(OURS_KEYS)} (a, b, dataset, tasks, fraction required) is expected")
    for side in ("a", "b"):
        if ours[side] not in METHODS.names():
            raise KlmError(f"ours.{side}: no method {ours[side]!r} is registered")
    if ours["dataset"] not in DATASETS.names():
        raise KlmError(f"ours.dataset: no dataset {ours['dataset']!r} is registered")
    tasks = DATASETS.entry(ours["dataset"]).tasks
    if not ours["tasks"] or any(task not in tasks for task in ours["tasks"]):
        raise KlmError(f"ours.tasks: {ours['tasks']} are not tasks of {ours['dataset']} ({', '.join(tasks)})")
    fraction = ours["fraction"]
    if not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise KlmError(f"ours.fraction: {fraction!r} is not a train fraction in (0, 1]")
    return Comparison(
        a=ours["a"],
        b=ours["b"],
        dataset=ours["dataset"],
        tasks=tuple(ours["tasks"]),
        fraction=float(fraction),
        metric=ours.get("metric"),
        backbone=ours.get("backbone"),
        a_variant=ours.get("a_variant"),
        b_variant=ours.get("b_variant"),
    )


def reference_metrics(claim: Claim) -> dict[str, str]:
    """``task: metric`` of the paper's effect: the claim's ``reference.metrics``, else our tasks' metrics."""
    if claim.reference.get("metrics"):
        return dict(claim.reference["metrics"])
    if claim.ours is None:
        raise KlmError("reference.metrics is needed where ours is null")
    return {task: claim.ours.metric_of(task) for task in claim.ours.tasks}


def reference_value(claim: Claim, references: list[dict], row: str, task: str, metric: str) -> float:
    """The paper's ``metric`` on ``task`` for its row ``row``, from ``references`` (the claim's sources, dataset and
    fraction); a one-line error where none is there."""
    sources = claim.reference.get("sources") or [f"{SOURCE_NAMES.get(claim.paper, '?')}, {claim.table}"]
    dataset = claim.reference.get("dataset") or (claim.ours.dataset if claim.ours else None)
    fraction = claim.reference.get("fraction") or (claim.ours.fraction if claim.ours else 1.0)
    for ref in references:
        if (
            ref["source"].split(" (")[0] in sources
            and str(ref["row"]) == row
            and ref["dataset"] == dataset
            and ref.get("fraction") == fraction
            and ref["metrics"].get(task, {}).get(metric) is not None
        ):
            return float(ref["metrics"][task][metric])
    raise KlmError(
        f"references.yaml has no row {row!r} of {' or '.join(sources)} with {dataset} {task} {metric} at "
        f"{fraction_label(fraction)}"
    )


def paper_effect(claim: Claim, references: list[dict]) -> float | None:
    """The paper's A minus B (``paper_rows``) averaged over the tasks of ``reference_metrics``, from
    ``references``; None where the claim gives what the paper printed instead."""
    if claim.paper_rows is None:
        return None
    first, second = claim.paper_rows
    differences = [
        reference_value(claim, references, first, task, metric)
        - reference_value(claim, references, second, task, metric)
        for task, metric in reference_metrics(claim).items()
    ]
    return sum(differences) / len(differences)


def claimed_sign(claim: Claim, effect: float | None) -> int:
    """The direction the paper claims: the claim's ``sign`` where it gives one (a claim of no loss, whose printed
    effect is about 0; a paper that printed no number), else its effect's sign."""
    if claim.sign or effect is None:
        return claim.sign
    return -1 if effect < 0 else 1


def side_cells(
    frame: pd.DataFrame, comparison: Comparison, side: str, task: str, *, paired: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One side's (``a`` / ``b``) cells of ``comparison`` on ``task``, labelled by the side's name: the method's
    checkpoint with the most cells where it has several (ERICA pretrained more than once); where ``paired`` (the
    other side's cells) comes from a pretraining run, the checkpoint of that same run (``own_run_label``: ERICA's
    MLM-only control is its own run's), none where no record pairs them."""
    method = getattr(comparison, side)
    mine = rows_where(frame, cell_method=method, backbone=comparison.backbone)
    if mine.empty:
        return mine
    label = mine["method"].value_counts().sort_index().idxmax()
    if paired is not None and not paired.empty and any(paired["pretraining"]) and any(mine["pretraining"]):
        label = own_run_label(frame, method, paired)
        if label is None:
            return mine.iloc[:0]
    return mine[
        (mine.method == label)
        & (mine.dataset == comparison.dataset)
        & (mine.task == task)
        & (mine.variant == comparison.variant_of(side, task))
        & (mine.fraction == comparison.fraction)
        & (mine.metric == comparison.metric_of(task))
    ].assign(method=side)


def measured(frame: pd.DataFrame, comparison: Comparison) -> dict | None:
    """``delta_test`` of A minus B per seed (``seed_deltas``, degenerate cells aside) averaged over the tasks both ran
    on every seed pair, with ``tasks`` (those tasks), ``excluded`` (seed pairs left out for a degenerate cell) and
    ``cards``; None where they share no task."""
    per_task, every, cards = {}, {}, set()
    for task in comparison.tasks:
        first = side_cells(frame, comparison, "a", task)
        second = side_cells(frame, comparison, "b", task, paired=first)
        if first.empty or second.empty:
            continue  # no seed pair
        cells = pd.concat([first, second])
        metric = comparison.metric_of(task)
        all_pairs = seed_deltas(cells, "a", comparison.fraction, task, metric, against="b")
        if all_pairs.empty:
            continue
        every[task] = all_pairs
        per_task[task] = seed_deltas(comparable(cells), "a", comparison.fraction, task, metric, against="b")
        cards |= set(seed_cards(comparable(cells), per_task[task].index))
    if not every:
        return None
    seeds = pd.DataFrame(per_task).dropna()
    all_seeds = pd.DataFrame(every).dropna()
    return {
        **delta_test(seeds.mean(axis=1)),
        "tasks": list(every),
        "excluded": len(all_seeds) - len(seeds),
        "cards": sorted(cards),
    }


def claim_verdict(found: dict | None, sign: int) -> str:
    """``VERDICT_RULE`` for a corrected measurement (``measured`` then ``corrected``); a claim with no measurement or
    no seed pair is ``NOT_RUN`` (the gate of ``UNTESTABLE`` is applied by ``judged_claims`` before this)."""
    if found is None or not found["n"]:
        return NOT_RUN
    if found["q"] is not None and found["q"] < SIGNIFICANCE:
        return REPRODUCES if (found["delta"] > 0) == (sign > 0) else OPPOSITE
    if found["interval"] is not None:
        low, high = found["interval"]
        if -NO_DIFFERENCE <= low and high <= NO_DIFFERENCE:
            return NO_EFFECT
    return INCONCLUSIVE


def not_run_reason(claim: Claim, found: dict | None) -> str:
    """Why a claim has no verdict from cells: the claim's own reason, a method that cannot run on the dataset, every
    pair degenerate, or the command that would run it."""
    if claim.not_run:
        return claim.not_run
    ours = claim.ours
    reason = cannot_run(ours.a, ours.dataset) or cannot_run(ours.b, ours.dataset)
    if reason:
        return reason
    if found is not None:
        return f"every seed pair has a degenerate cell ({found['excluded']} left out)"
    return (
        f"no cells yet: `klm bench --dataset {ours.dataset} --tasks {','.join(ours.tasks)} --method "
        f"{ours.a},{ours.b} --fractions {ours.fraction:g}`"
    )


def uses_knowledge(comparison: Comparison) -> bool:
    return any(METHODS.entry(method).needs_knowledge for method in (comparison.a, comparison.b))


@dataclass
class Judged:
    """A claim with the paper's effect, our measurement (``measured``, corrected), its verdict and the reason
    beside it (not run, untestable, the seeds that would settle it)."""

    claim: Claim
    effect: float | None
    found: dict | None
    verdict: str
    reason: str = ""
    backbone: str = ""  # the backbone ``found`` is measured on: the base size where it has cells
    beside: list[tuple[str, dict]] = field(default_factory=list)  # the other backbones' measurements, uncorrected


def measured_by_backbone(frame: pd.DataFrame, comparison: Comparison) -> list[tuple[str, dict]]:
    """``(backbone, measured)`` of ``comparison`` on its backbone, or where it names none on every backbone of
    ``frame`` with seed pairs, the base size first (``core.backbones.leading_order``)."""
    backbones = [comparison.backbone] if comparison.backbone else leading_order(frame["backbone"].unique())
    found = [(backbone, measured(frame, replace(comparison, backbone=backbone))) for backbone in backbones]
    with_pairs = [(backbone, test) for backbone, test in found if test is not None and test["n"]]
    return with_pairs or [(backbone, test) for backbone, test in found if test is not None][:1]


def judged_claims(frame: pd.DataFrame, results_dir: Path, claims: list[Claim] | None = None) -> list[Judged]:
    """Every claim (``load_claims``) judged from ``frame`` (the store's cells of the current protocol, as the paper
    pages read them): measured, corrected together over the claims, and given ``claim_verdict``; a knowledge method
    on a dataset whose coverage is below the gate (``coverage.untestable_reason``) is ``UNTESTABLE``."""
    references = parse_yaml((benchmarks_dir() / "references.yaml").read_text(), unique_keys=False)
    claims = load_claims(references=references) if claims is None else claims
    judged = []
    for claim in claims:
        found = measured_by_backbone(frame, claim.ours) if claim.ours is not None and not claim.not_run else []
        lead, test = found[0] if found else ("", None)
        judged.append(Judged(claim, paper_effect(claim, references), test, NOT_RUN, backbone=lead, beside=found[1:]))
    corrected([entry.found for entry in judged if entry.found is not None])
    for entry in judged:
        entry.verdict = claim_verdict(entry.found, claimed_sign(entry.claim, entry.effect))
        ours = entry.claim.ours
        gate = (
            coverage.untestable_reason(Path(results_dir), ours.dataset)
            if ours is not None and uses_knowledge(ours) and entry.verdict != NOT_RUN
            else None
        )
        if gate:
            entry.verdict, entry.reason = UNTESTABLE, gate
        elif entry.verdict == NOT_RUN:
            entry.reason = not_run_reason(entry.claim, entry.found)
        elif entry.verdict == INCONCLUSIVE:
            entry.reason = inconclusive_reason(entry.found, len([e for e in judged if e.found is not None]))
    return judged


def inconclusive_reason(found: dict, tests: int) -> str:
    """Why a claim's comparison (one of ``tests`` corrected together) is inconclusive and what would settle it."""
    if found["p"] is not None and found["p"] < SIGNIFICANCE:
        return f"its interval excludes 0 (p={found['p']:.3f}), but not after the correction over {tests} tests"
    return settle_text(found)


def verdict_counts(judged: list[Judged]) -> dict[str, int]:
    """How many claims got each verdict, in ``VERDICTS``' order."""
    return {verdict: sum(entry.verdict == verdict for entry in judged) for verdict in VERDICTS}


def effect_text(entry: Judged) -> str:
    """The paper's effect as a row says it: A − B in points (its table and rows), or what it printed."""
    claim = entry.claim
    if entry.effect is None:
        return f"{claim.table}: {claim.printed}"
    first, second = claim.paper_rows
    metrics = ", ".join(sorted(set(reference_metrics(claim).values())))
    over = f" (mean of {len(reference_metrics(claim))} tasks)" if len(reference_metrics(claim)) > 1 else ""
    return f"{entry.effect:+.1f} {metrics}{over}: {claim.table}, {first} − {second}"


def ours_text(entry: Judged) -> str:
    """Our comparison as a row says it: A − B, where, Δ [95 % interval], n (and the tasks and cards it rests on)."""
    ours = entry.claim.ours
    if ours is None:
        return MISSING
    variant = {side: ours.a_variant if side == "a" else ours.b_variant for side in ("a", "b")}
    names = [f"{getattr(ours, side)}{f' [{variant[side]}]' if variant[side] else ''}" for side in ("a", "b")]
    metric = ours.metric or ", ".join(sorted({ours.metric_of(task) for task in ours.tasks}))
    tasks = ", ".join(ours.tasks) if len(ours.tasks) <= 2 else f"{len(ours.tasks)} tasks"
    where = f"{names[0]} − {names[1]}, {ours.dataset} {tasks}, {metric}, {fraction_label(ours.fraction)} train"
    found = entry.found
    if found is None or not found["n"]:
        return where
    interval = "" if found["interval"] is None else f" {interval_text(found['interval'])}"
    text = f"**{found['delta']:+.1f}**{interval}, n={found['n']}: {where}"
    if len(found["tasks"]) < len(ours.tasks):
        text += f" ({len(found['tasks'])} of {len(ours.tasks)} tasks ran)"
    text += cards_note(found)
    if not entry.beside:
        return text
    beside = [f"{BACKBONE_NAMES.get(backbone, backbone)}: {beside_text(test)}" for backbone, test in entry.beside]
    return f"{BACKBONE_NAMES.get(entry.backbone, entry.backbone)}: {text}<br>" + "<br>".join(beside)


def beside_text(found: dict) -> str:
    """Another backbone's measurement of a claim, beside the leading one: Δ, its interval and n, uncorrected (the
    page's correction and verdict are the leading backbone's)."""
    interval = "" if found["interval"] is None else f" {interval_text(found['interval'])}"
    return f"{found['delta']:+.1f}{interval}, n={found['n']} (uncorrected, no verdict)"


def verdict_text(entry: Judged) -> str:
    """The verdict cell: the verdict, its reason, and where our setting is far from the paper's."""
    text = f"**{entry.verdict}**" + (f": {entry.reason}" if entry.reason else "")
    if entry.found is not None and entry.found.get("q") is not None and entry.verdict != NOT_RUN:
        text += f" (q={entry.found['q']:.3f})"
    if entry.claim.differs:
        text += f"<br>setting: {entry.claim.differs}"
    if entry.claim.note:
        text += f"<br>{entry.claim.note}"
    return text


CLAIMS_HEADER = "| claim | the paper's effect | ours: Δ [95 % interval], n | verdict |"


def claim_rows(judged: list[Judged]) -> list[str]:
    """The claims' table (``CLAIMS_HEADER``), one row a claim."""
    return [CLAIMS_HEADER, "|---|---|---|---|"] + [
        f"| {entry.claim.claim} | {effect_text(entry)} | {ours_text(entry)} | {verdict_text(entry)} |"
        for entry in judged
    ]


def claims_of_table(judged: list[Judged], paper: str, name: str) -> list[Judged]:
    """The claims resting on ``paper``'s table or figure ``name`` ("Figure 5" holds "Figure 5(c)"); a claim of a
    paper that prints its numbers in another's table ("Table 1 of paper 000") stands on that table too."""
    found = []
    for entry in judged:
        table, _, other = entry.claim.table.partition(" of paper ")
        if (other or entry.claim.paper) == paper and (table == name or table.startswith(f"{name}(")):
            found.append(entry)
    return found


def counts_text(judged: list[Judged]) -> str:
    """``reproduces: n, …`` over the claims (the verdicts no claim got left out)."""
    counts = verdict_counts(judged)
    return ", ".join(f"{verdict}: {count}" for verdict, count in counts.items() if count)


def backbones_text(judged: list[Judged]) -> str:
    """On which backbones our comparisons ran: MiniLM alone, or the base size leading with MiniLM's beside it."""
    if not any(entry.beside for entry in judged):
        return "Ours run on MiniLM-L6 (6 layers, hidden 384: its size is on the [README](README.md))"
    return (
        "Ours run on MPNet-base (12 layers, hidden 768, the papers' scale) and on MiniLM-L6 (6 layers, hidden 384; "
        "sizes on the [README](README.md)): where a claim has cells on both, the base size leads (its Δ is the one "
        "corrected and judged, its backbone named) and MiniLM-L6's Δ stands below it, uncorrected and without a "
        "verdict"
    )


def render_claims(judged: list[Judged]) -> str:
    """``leaderboards/claims.md``: the rule, the counts, then one table per paper."""
    lines = [
        "# The papers' claims, tested",
        "",
        "Generated by `klm leaderboard` from `results/` and `benchmarks/claims.yaml`; do not edit by hand.",
        "",
        f"{len(judged)} headline claims of the seed papers, each set against the comparison of ours that tests it: "
        "method A minus B paired by seed (same seeds and train subsets, degenerate cells left out), averaged over "
        "the named tasks per seed, with its 95 % interval over seed pairs and n = seed pairs; every claim's p "
        f"corrected together by Benjamini–Hochberg over this page's {sum(e.found is not None for e in judged)} "
        "tests (a comparison against the baseline can therefore read otherwise on its dataset page, whose correction "
        "holds that page's tests instead). The paper's effect is A minus B in its own rows "
        "(benchmarks/references.yaml), in points. " + backbones_text(judged) + ", the papers on BERT-base (BERT-Large "
        "for KAM's Tables 2 and 3): what compares is the direction and rough size of each Δ; where our setting is "
        'farther from the paper\'s in a way that bears on the claim, the verdict cell says how ("setting").',
        "",
        f"Verdicts: {VERDICT_RULE}",
        "",
        f"Counts: {counts_text(judged)}.",
    ]
    for paper, name in PAPER_NAMES.items():
        mine = [entry for entry in judged if entry.claim.paper == paper]
        if mine:
            lines += ["", f"## {name} (paper {paper})", "", *claim_rows(mine)]
    return "\n".join(lines) + "\n"
