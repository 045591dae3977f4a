"""Paired bootstrap over test examples (Efron & Tibshirani; Berg-Kirkpatrick et al. 2012) from the predictions
each cell keeps beside its result (``<cell>.predictions.json.gz``) and the reported split's gold
(``knowledge_lm.report.gold``: the files keep only its sha256). Outcomes are kept in the results store's derived
numbers (``knowledge_lm.report.derived``), so a page re-renders them without the gold.
"""

import hashlib
import json
from pathlib import Path

import numpy as np

from knowledge_lm.core.results import gold_sha256, read_predictions
from knowledge_lm.report.derived import recall

REPLICATES = 2000  # a p near 0.05 then carries about ±0.005 of simulation error
LEVEL = 0.95
METHOD_VERSION = 3  # part of the cache key: a change to how replicates are scored must not read older numbers


def task_kind(dataset: str, task: str):
    from knowledge_lm.core.registry import DATASETS, TASK_KINDS

    spec = DATASETS.get(dataset).spec(task)
    return TASK_KINDS.get(spec.kind)(spec)


def task_scorer(dataset: str, task: str):
    return task_kind(dataset, task).score


def additive_statistics(kind, metric: str, predicted: list, gold: list):
    """``(statistics, value)``: an examples × k array whose column sums over any resample give the task
    scorer's ``metric`` (in %) through ``value`` (rows of sums → values), as the task kind defines them
    (``TaskKind.additive_statistics``); None where the metric is no such function of sums."""
    found = kind.additive_statistics(metric, predicted, gold)
    if found is None:
        return None
    columns, value = found
    return np.stack([np.asarray(column, float) for column in columns], axis=1), value


def bootstrap_key(paths: list[Path], metric: str, replicates: int, resampled: str = "") -> str:
    """The key of a bootstrap of ``paths`` (24 hex digits) among the derived numbers, which also seeds its
    replicates. ``resampled`` tells apart other resamplings of the same files (a subset of the examples, one side
    alone); it is empty for the paired bootstrap over the whole split."""
    key = hashlib.sha256(f"{metric}:{replicates}:{LEVEL}:{METHOD_VERSION}{resampled}".encode())
    for path in paths:
        key.update(Path(path).read_bytes())
    return key.hexdigest()[:24]


def examples_key(examples: list[int] | None) -> str:
    return "" if examples is None else ":examples:" + hashlib.sha256(json.dumps(list(examples)).encode()).hexdigest()


def resampled_values(
    dataset: str,
    task: str,
    metric: str,
    gold: list,
    *,
    paths: list[Path],
    examples: list[int] | None,
    replicates: int,
    key: str,
) -> np.ndarray | None:
    """replicates × files: each file's ``metric`` on each replicate's draw of the examples (``examples``: the
    indices resampled, None: the whole split), the same draws for every file, seeded by ``key``. None
    when the files' splits differ or a file's ``gold_sha256`` is not ``gold``'s."""
    runs = [read_predictions(path) for path in paths]
    gold = list(gold)  # a lazy gold (knowledge_lm.report.frame.LazyGold) loads here, once
    digest = gold_sha256(gold)
    if any(run["gold_sha256"] != digest or run["split"] != runs[0]["split"] for run in runs):
        return None
    predicted = [run["predicted"] for run in runs]
    if examples is not None:
        gold, predicted = [gold[i] for i in examples], [[labels[i] for i in examples] for labels in predicted]
    kind = task_kind(dataset, task)
    generator = np.random.default_rng(int.from_bytes(bytes.fromhex(key[:16]), "big"))
    size = len(gold)
    draws = generator.integers(0, size, (replicates, size))
    additive = [additive_statistics(kind, metric, labels, gold) for labels in predicted]
    if all(additive):
        # replicates × examples: how often each replicate drew each example, one bincount over all replicates
        offsets = (draws + size * np.arange(replicates)[:, None]).ravel()
        counts = np.bincount(offsets, minlength=replicates * size).reshape(replicates, size).astype(float)
        return np.stack([value(counts @ statistics) for statistics, value in additive], axis=1)  # replicates × runs
    return np.asarray(
        [
            [kind.score([labels[i] for i in draw], [gold[i] for i in draw])[metric] for labels in predicted]
            for draw in draws
        ]
    )


def percentile_interval(values: np.ndarray) -> list[float]:
    tail = (1 - LEVEL) / 2
    return [float(np.quantile(values, tail)), float(np.quantile(values, 1 - tail))]


def paired_bootstrap(
    dataset: str,
    task: str,
    metric: str,
    gold: list,
    *,
    ours: list[Path],
    baseline: list[Path],
    replicates: int = REPLICATES,
    examples: list[int] | None = None,
) -> dict | None:
    """``ours[i]`` and ``baseline[i]`` are one seed's prediction files, ``gold`` the answers they were scored
    against; ``examples``: the indices of the examples resampled (a group of them), None for all. None when their
    splits differ or a file's ``gold_sha256`` is not ``gold``'s.

    A replicate draws the reported split's examples with replacement, the same draw for every seed and for both
    methods, and scores each seed's predictions on it with the task's own scorer; the method's value is the mean
    over seeds, Δ its difference from the baseline's. Reported: the 95 % percentile intervals of both and the
    share of replicates in which Δ ≤ 0 (one-sided p for "better"; ≥ 0 for "worse"). It complements the paired
    t-test over seeds: that one asks whether the gain survives a new seed, this one whether it survives a new
    test set. Replicates are seeded by the inputs' bytes, so the numbers are the same on every regeneration;
    they are kept among the results store's derived numbers (``knowledge_lm.report.derived``), which a later
    build reads without touching ``gold``. Where the metric is a function of sums over examples (accuracy,
    binary F1 and MCC, Pearson's r, SemEval's macro-F1, the typing and document-level RE F1s), each replicate
    sums per-example statistics (:func:`additive_statistics`) instead of calling the scorer: the same values,
    without thousands of scorer calls per comparison; other metrics (Spearman's ρ, QA) run the scorer itself.
    Either resampling may be restricted to a group of the examples (the generated task's statement families), and
    :func:`bootstrap_interval` resamples one method's seeds alone (its interval, without a comparison).
    """
    # The files pin the gold by its sha256; the whole split's paired key has no side counts (see bootstrap_key).
    resampled = "" if examples is None else f":paired:{len(ours)}:{len(baseline)}{examples_key(examples)}"
    key = bootstrap_key(list(ours) + list(baseline), metric, replicates, resampled)

    def compute() -> dict | None:
        values = resampled_values(
            dataset,
            task,
            metric,
            gold,
            paths=list(ours) + list(baseline),
            examples=examples,
            replicates=replicates,
            key=key,
        )
        if values is None:
            return None
        seeds = len(ours)
        means = values[:, :seeds].mean(1)
        deltas = np.round(means - values[:, seeds:].mean(1), 9)  # a tie is 0 whatever the summation order
        return {
            "replicates": replicates,
            "examples": len(gold if examples is None else examples),
            "interval": percentile_interval(means),
            "delta_interval": percentile_interval(deltas),
            "p_not_better": float(np.mean(deltas <= 0)),
            "p_not_worse": float(np.mean(deltas >= 0)),
        }

    return recall(dataset, f"bootstrap:{key}", compute)


def bootstrap_interval(
    dataset: str,
    task: str,
    metric: str,
    gold: list,
    *,
    runs: list[Path],
    replicates: int = REPLICATES,
    examples: list[int] | None = None,
) -> dict | None:
    """The 95 % percentile interval of the mean over ``runs`` (one seed's prediction files each) of ``metric``,
    resampling the examples (``examples``: those indices only; None: the whole split) with the same draw for every
    seed; for accuracy, the interval of the accuracy of each example's correctness averaged over the seeds. None
    as ``paired_bootstrap``."""
    key = bootstrap_key(list(runs), metric, replicates, f":interval:{len(runs)}{examples_key(examples)}")

    def compute() -> dict | None:
        values = resampled_values(
            dataset, task, metric, gold, paths=list(runs), examples=examples, replicates=replicates, key=key
        )
        if values is None:
            return None
        return {
            "replicates": replicates,
            "examples": len(gold if examples is None else examples),
            "interval": percentile_interval(values.mean(1)),
        }

    return recall(dataset, f"bootstrap:{key}", compute)
