"""The results store as a pandas frame: one row per cell and metric, with the cell's kept predictions and groups.

A cell's predictions count as kept where the reported split's gold (``knowledge_lm.report.gold``: the store's, else
recomputed from the data directory) has the sha256 its predictions file holds; its example groups (the generated task's
statement families) count where there is one per gold answer. A cell is degenerate where it predicted one class for
every example or was selected at its first evaluation (``degenerate_reason``), or where its knowledge-free family
is at chance while the baseline solves it (``DEGENERATE_RULE``, ``family_at_chance``). The frame's rows are looked up by
method, fraction, task, metric and seed, and ordered for a page: each method followed by its sweep variants.
"""

import json
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pandas as pd

from knowledge_lm.core.backbones import leading_order
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import DATASETS
from knowledge_lm.core.results import CellResult, gold_sha256, predictions_path, read_predictions, warn
from knowledge_lm.report.derived import lookup, recall
from knowledge_lm.report.gold import MissingGold, cell_gold, cell_groups, examples_key

MISSING = "—"

# What tells a cell's rows from another cell's.
CELL_COLUMNS = ["dataset", "method", "task", "fraction", "seed", "backbone", "variant"]

# Why a cell is degenerate: a result of the protocol, not of the method, so it is flagged and never compared.
ONE_CLASS = "one class"  # every prediction of the reported split the same
FIRST_EVALUATION = "first evaluation"  # selected at the first of its evaluations: training never improved on it
FAMILY_AT_CHANCE = "family at chance"  # its knowledge-free family at chance where the baseline solves it


@dataclass(frozen=True)
class DegenerateRule:
    """The degenerate-cell rule, declared before the runs and applied to every method alike, the baseline included:
    a cell is degenerate where it predicted one class (``ONE_CLASS``), was selected at its first evaluation
    (``FIRST_EVALUATION``), or scores at most ``at_most`` on ``family`` (a family answered from the sentence alone)
    while the baseline's mean on it, over its own seeds of the same fraction not degenerate otherwise, is above
    ``solved_above`` (``FAMILY_AT_CHANCE``): training collapsed on what any fine-tuned model learns."""

    family: str = "text"
    metric: str = "accuracy"
    at_most: float = 60.0
    solved_above: float = 60.0

    def text(self) -> str:
        return (
            "A cell is degenerate (declared before the runs, the same rule for every method, the baseline included) "
            "where it predicted one class for every example, or was selected at its first evaluation, or scores "
            f"≤ {self.at_most:g} {self.metric} on the {self.family} family (answered from the sentence alone) while "
            f"the baseline's mean on it at that fraction is > {self.solved_above:g}: a family at chance that the "
            "baseline solves."
        )


DEGENERATE_RULE = DegenerateRule()

# A result without ``protocol`` was recorded before splits and scorers had versions: their first.
FIRST_PROTOCOL = {"split_version": "1", "scorer_version": "1"}


class LazyGold(Sequence):
    """The gold of a cell's kept predictions whose numbers the results store's derived numbers already hold
    (``knowledge_lm.report.derived``): loaded (``knowledge_lm.report.gold.cell_gold``: the store's gold, else the
    data directory) only when a number the store lacks needs it, and checked to have the sha256 the predictions
    file holds; ``knowledge_lm.report.gold.MissingGold`` where neither has it, so no page is written thinner."""

    def __init__(self, path: Path, result: dict, digest: str, data_dir):
        self.where, self.digest, self.data_dir = (path, result), digest, data_dir
        self.loaded: list | None = None

    def answers(self) -> list:
        if self.loaded is None:
            gold = cell_gold(*self.where, self.digest, self.data_dir)
            if gold_sha256(gold) != self.digest:
                raise KlmError(f"{self.where[0]}: its kept predictions are of another gold than the data's")
            self.loaded = gold
        return self.loaded

    def __len__(self):
        return len(self.answers())

    def __getitem__(self, index):
        return self.answers()[index]


def predictions_gold(path: Path, result: dict, stored: dict, data_dir) -> tuple[Sequence, str, int]:
    """``(gold, its sha256, its size)`` of a cell's kept predictions (``stored``). Where the derived numbers know
    the size of the gold of the sha256 the file holds, a ``LazyGold`` of it (never for a dataset whose examples fall
    in groups: those come with the gold alone); else the gold of the reported split
    (``knowledge_lm.report.gold.cell_gold``), its size then kept among the derived numbers."""
    dataset, digest = result["cell"]["dataset"], stored.get("gold_sha256", "")
    size = None if DATASETS.get(dataset).has_example_groups else lookup(dataset, f"gold-size:{digest}")
    if size is not None:
        return LazyGold(path, result, digest, data_dir), digest, size
    gold = cell_gold(path, result, digest, data_dir)
    digest = gold_sha256(gold)
    return gold, digest, recall(dataset, f"gold-size:{digest}", lambda: len(gold))


def kept_predictions(
    files: list[tuple[Path, dict]], data_dir=None
) -> tuple[list[tuple[Path, str] | None], dict[str, list]]:
    """Per result file, its predictions file and their gold's sha256 where that is the sha256 of the reported
    split's gold (``predictions_gold``: once the derived numbers know it, taken from the file; else the store's gold
    of that sha256, else recomputed from ``data_dir``, None: as ``klm bench`` resolves it), else None: no
    predictions file, or a mismatch (a one-line warning names the cell); and those gold answers by their sha256.
    Without the gold a page needs, ``knowledge_lm.report.gold.MissingGold``: no page is written thinner."""
    kept, golds, deferred = [], {}, []
    for path, result in files:
        sidecar = predictions_path(path)
        if not sidecar.is_file():
            kept.append(None)
            continue
        try:
            stored = read_predictions(sidecar)
        except KlmError as error:
            warn(f"{error}; not used")
            kept.append(None)
            continue
        try:
            gold, digest, size = predictions_gold(path, result, stored, data_dir)
        except MissingGold as missing:  # another cell may give the gold of that sha256: ``matched_predictions``
            deferred.append((len(kept), path, result, stored, missing))
            kept.append(None)
            continue
        kept.append(matched_predictions(path, result, stored, digest, size))
        if kept[-1] is not None:
            golds[digest] = gold
    for position, path, result, stored, missing in deferred:
        digest = stored.get("gold_sha256")
        if digest not in golds:
            raise missing
        kept[position] = matched_predictions(path, result, stored, digest, len(golds[digest]))
    return kept, golds


def matched_predictions(path: Path, result: dict, stored: dict, digest: str, size: int) -> tuple[Path, str] | None:
    """``(predictions file, digest)`` where a cell's kept predictions (``stored``) are of the gold of sha256
    ``digest`` and ``size`` answers, of its reported split; else None, a one-line warning naming the cell. A
    deferred cell of ``kept_predictions`` takes the gold another cell's data gave for the sha256 its file holds:
    a gold is named by its content, so the same sha256 is the same answers (say its backbone's tokenizer is not
    installed here, where another backbone's cells of the same examples can be read)."""
    sidecar = predictions_path(path)
    if stored.get("gold_sha256") != digest or stored.get("split") != result["report_split"]:
        warn(
            f"{path}: its kept predictions are of another gold than the data directory's {result['report_split']} "
            "split gives; not used"
        )
        return None
    if len(stored["predicted"]) != size:
        warn(f"{sidecar}: corrupt predictions file ({len(stored['predicted'])} answers for {size} examples); not used")
        return None
    return sidecar, digest


def kept_groups(
    files: list[tuple[Path, dict]], kept: list[tuple[Path, str] | None], golds: dict[str, list], data_dir=None
) -> tuple[list[str], dict[str, list[str]]]:
    """Per result file with kept predictions (``kept_predictions``), the sha256 of its reported split's example
    groups (``knowledge_lm.report.gold.cell_groups``: the generated task's statement families), else "" (no groups,
    or not one per gold answer); and those groups by their sha256."""
    digests, groupings, of_examples, deferred = [], {}, {}, []
    for (path, result), predictions in zip(files, kept):
        grouped = predictions and DATASETS.get(result["cell"]["dataset"]).has_example_groups
        try:
            groups = cell_groups(path, result, predictions[1], data_dir) if grouped else None
        except MissingGold:
            groups = None
        if grouped and groups is None:  # as ``matched_predictions``: another cell's groups of the same examples
            deferred.append((len(digests), (predictions[1], examples_key(result))))
            digests.append("")
            continue
        if not groups or len(groups) != len(golds[predictions[1]]):
            digests.append("")
            continue
        digest = gold_sha256(groups)
        digests.append(digest)
        groupings[digest] = list(groups)
        of_examples[predictions[1], examples_key(result)] = digest
    for position, key in deferred:
        digests[position] = of_examples.get(key, "")
    return digests, groupings


def card_name(device: str) -> str:
    """The model of the card a cell ran on, as comparisons name it: "NVIDIA H100 80GB HBM3" → "H100"; any other
    device as its name."""
    words = str(device).split()
    return words[1] if len(words) > 1 and words[0] == "NVIDIA" else str(device)


def cards_text(cards) -> str:
    """The cards of a comparison's cells: "H100", or "H100 + H200 mixed" where they ran on several models."""
    cards = sorted(set(cards))
    return cards[0] if len(cards) == 1 else " + ".join(cards) + " mixed"


def cards_note(found: dict | None) -> str:
    """Said beside a comparison whose cells ran on several card models (its ``cards``); "" on one."""
    cards = (found or {}).get("cards") or ()
    return f" (cards: {cards_text(cards)})" if len(cards) > 1 else ""


def table_backbone(result: CellResult) -> str:
    """The backbone whose tables a result stands in: its own, or for a cell fine-tuned from a pretraining
    checkpoint (ERICA, KnowBERT) the checkpoint's base backbone."""
    return result["backbone"].get("pretrained_from") or result["cell"]["backbone"]


def backbone_groups(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """``frame``'s cells per backbone, the base size first (``core.backbones.leading_order``)."""
    groups = dict(tuple(frame.groupby("backbone")))
    return [(backbone, groups[backbone]) for backbone in leading_order(groups)]


def degenerate_reason(path: Path, result: CellResult) -> str:
    """Why the cell of ``path`` is degenerate: ``ONE_CLASS`` where its predictions file (read whether or not its gold
    can be checked) holds one prediction for every example, ``FIRST_EVALUATION`` where it was selected at the first
    of several evaluations; both, joined by ", "; "" for neither."""
    reasons = []
    sidecar = predictions_path(path)
    if sidecar.is_file():
        try:
            predicted = kept_run(str(sidecar)).get("predicted") or []
        except KlmError:  # a corrupt predictions file, warned about where predictions are kept
            predicted = []
        # Compared as decoded values, stopping at the first that differs: most cells differ within a few examples.
        if len(predicted) > 1 and all(answer == predicted[0] for answer in predicted[1:]):
            reasons.append(ONE_CLASS)
    evaluations, selection = result.get("evaluations") or [], result.get("selection") or {}
    if len(evaluations) > 1 and selection.get("step") == evaluations[0].get("step"):
        reasons.append(FIRST_EVALUATION)
    return ", ".join(reasons)


def results_frame(
    results: list[CellResult],
    predictions: list[tuple[Path, str] | None] | None = None,
    groups: list[str] | None = None,
    degenerate: list[str] | None = None,
    *,
    runs: dict[str, tuple[str, ...]] | None = None,
) -> pd.DataFrame:
    """One row per result and metric; ``predictions[i]``: result i's kept predictions file and its gold's sha256
    (``kept_predictions``), or None; ``groups[i]``: the sha256 of its examples' groups (``kept_groups``), or "";
    ``degenerate[i]``: why it is degenerate (``degenerate_reason``), or ""; ``runs``: a pretraining checkpoint's
    weights checksum → its runs (``knowledge_lm.report.pretraining.runs_by_checksum``), the ``pretraining`` column
    of a cell fine-tuned from one (() for the others and where no record names it)."""
    runs = runs or {}
    rows = []
    for index, result in enumerate(results):
        kept, digest = predictions[index] if predictions is not None and predictions[index] else (None, "")
        grouping = groups[index] if groups is not None else ""
        protocol = {**FIRST_PROTOCOL, **result.get("protocol", {})}
        cell, split = {"variant": "", **result["cell"]}, result["report_split"]
        if table_backbone(result) != cell["backbone"]:  # a row of its base backbone's table, named by the checkpoint
            cell["method"], cell["backbone"] = f"{cell['method']} ⟨{cell['backbone']}⟩", table_backbone(result)
        for metric, value in result["metrics"][split].items():
            rows.append(
                {
                    **cell,
                    "split": split,
                    "metric": metric,
                    "value": value,
                    "device": result["device"]["name"],
                    "card": card_name(result["device"]["name"]),
                    "checksum": result["backbone"]["checksum"],
                    "pretraining": runs.get(result["backbone"]["checksum"], ()),
                    "parameters": result["backbone"].get("parameters"),
                    "weights": "/".join(Path(result["backbone"].get("path") or "built in").parts[-2:]),
                    "commit": result["git"]["commit"][:10],
                    "config": json.dumps(result.get("config") or {}, sort_keys=True),  # what a declaration compares
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
                    "dev_by_group": result.get("dev_metrics_by_group") or None,
                    "degenerate": degenerate[index] if degenerate is not None else "",
                    "selected_on": (result.get("selection") or {}).get("split", ""),
                    "evaluations": len(result.get("evaluations") or []),
                    "split_version": str(protocol["split_version"]),
                    "scorer_version": str(protocol["scorer_version"]),
                }
            )
    frame = pd.DataFrame(rows)
    # Text as Python strings, not pandas 3's Arrow-backed default: pages take rows of this frame tens of thousands of
    # times, and each take from an Arrow column costs a pyarrow call (a third of the committed pages' build).
    frame = frame.astype({name: object for name, dtype in frame.dtypes.items() if isinstance(dtype, pd.StringDtype)})
    return family_at_chance(frame)


def family_score_of(by_group, rule: DegenerateRule = DEGENERATE_RULE) -> float | None:
    """A cell's ``rule.metric`` on ``rule.family`` from its ``metrics_by_group``; None where not recorded."""
    if not isinstance(by_group, dict):
        return None
    value = by_group.get(rule.family, {}).get(rule.metric)
    return None if value is None else float(value)


def family_at_chance(frame: pd.DataFrame, rule: DegenerateRule = DEGENERATE_RULE) -> pd.DataFrame:
    """``frame`` with ``FAMILY_AT_CHANCE`` added to the ``degenerate`` reasons of each cell whose ``rule.family`` score
    is at most ``rule.at_most`` where the baseline's mean on that family (same dataset, task, backbone, fraction and
    versions; its seeds not degenerate otherwise) is above ``rule.solved_above``."""
    if frame.empty or "by_group" not in frame:
        return frame
    score = pd.to_numeric(frame["by_group"].map(lambda by_group: family_score_of(by_group, rule)), errors="coerce")
    where = ["dataset", "task", "backbone", "fraction", "split_version", "scorer_version"]
    solvers = frame[(frame.method == "baseline") & (frame.variant == "") & (frame.degenerate == "") & score.notna()]
    solved = (
        solvers.drop_duplicates(CELL_COLUMNS)
        .assign(score=score)
        .groupby(where)["score"]
        .mean()
        .rename("baseline_score")
    )
    if solved.empty:
        return frame
    baseline = frame[where].merge(solved.reset_index(), on=where, how="left")["baseline_score"].to_numpy()
    flagged = (score.to_numpy() <= rule.at_most) & (baseline > rule.solved_above)
    frame = frame.copy()
    frame.loc[flagged, "degenerate"] = [
        f"{reason}, {FAMILY_AT_CHANCE}" if reason else FAMILY_AT_CHANCE for reason in frame.loc[flagged, "degenerate"]
    ]
    return frame


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


def by_seed(
    frame: pd.DataFrame, method: str, fraction: float, task: str, metric: str, *, column: str = "value"
) -> pd.Series:
    """``column`` of one method's cells at a fraction, task and metric, indexed by seed."""
    return frame_memo(
        frame,
        ("by_seed", method, fraction, task, metric, column),
        lambda: rows_where(frame, method=method, fraction=fraction, task=task, metric=metric).set_index("seed")[column],
    )


def seed_cells(frame: pd.DataFrame, method: str, variant: str, fraction: float, metric: str) -> pd.DataFrame:
    """``method``'s cells of sweep ``variant`` ("" for none) at ``fraction`` with their ``metric``, one row per seed."""
    rows = rows_where(frame, method=method, variant=variant, fraction=fraction, metric=metric)
    if rows["seed"].is_monotonic_increasing and rows["seed"].is_unique:
        return rows  # already one row per seed in order (as every empty set of rows is)
    key = ("seed_cells", method, variant, fraction, metric)
    return frame_memo(frame, key, lambda: rows.sort_values("seed").drop_duplicates("seed"))


def rows_where(frame: pd.DataFrame, **equal) -> pd.DataFrame:
    """``frame``'s rows whose columns hold ``equal``'s values, in ``frame``'s order: ``frame[(frame.a == a) & ...]``,
    found in an index of ``frame`` by those columns (``frame_memo``)."""
    columns, values = tuple(equal), tuple(equal.values())

    def index() -> dict[tuple, list[int]]:
        found = frame.groupby(list(columns), sort=False).indices  # keyed by the value itself for one column
        return {key if len(columns) > 1 else (key,): positions for key, positions in found.items()}

    positions = frame_memo(frame, ("index", columns), index).get(values)
    if positions is None:
        return frame_memo(frame, ("no rows",), lambda: frame.iloc[:0])
    return frame_memo(frame, ("rows", columns, values), lambda: frame.iloc[positions])


def cell_rows(cells: pd.DataFrame) -> list[tuple]:
    """``cells``' rows as named tuples (``DataFrame.itertuples``), made once per frame (``frame_memo``)."""
    return frame_memo(cells, ("itertuples",), lambda: list(cells.itertuples()))


FRAME_MEMOS: dict[int, dict] = {}  # id(frame) → what was made of it (``frame_memo``)


def frame_memo(frame: pd.DataFrame, key: tuple, make: Callable):
    """``make()``: what ``key`` names of ``frame`` (some of its rows, an index of them), made at the first call and
    kept while ``frame`` lives, since a page asks one frame for the same cells thousands of times. The frames a page
    reads are not modified once read, nor is what this returns."""
    memo = FRAME_MEMOS.get(id(frame))
    if memo is None:
        memo = FRAME_MEMOS[id(frame)] = {}
        weakref.finalize(frame, FRAME_MEMOS.pop, id(frame), None)
    if key not in memo:
        memo[key] = make()
    return memo[key]


def variant_key(name: str):
    """noise10 before noise20 before noise100: the number in a variant's name, then the name."""
    digits = "".join(ch for ch in name if ch.isdigit())
    return (name.rstrip("0123456789."), float(digits) if digits else -1.0, name)


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


def interval_text(interval: list[float]) -> str:
    low, high = interval
    return f"[{low:+.1f}, {high:+.1f}]"


def p_text(value: float | None) -> str:
    """A p or q as the pages print it: three decimals, — where there is none."""
    return MISSING if value is None else f"{value:.3f}"


def fraction_label(fraction: float) -> str:
    return f"{fraction * 100:g}%"
