"""Paired bootstrap over test examples (Efron & Tibshirani; Berg-Kirkpatrick et al. 2012) from the predictions
each cell keeps beside its result (``<cell>.predictions.json.gz``) and the reported split's gold, recomputed
from the data directory (``knowledge_lm.report.gold``: the files keep only its sha256).
"""

import hashlib
import json
from pathlib import Path

import numpy as np

from knowledge_lm.core.results import gold_sha256, read_predictions

REPLICATES = 2000  # a p near 0.05 then carries about ±0.005 of simulation error
LEVEL = 0.95
METHOD_VERSION = 3  # part of the cache key: a change to how replicates are scored must not read older numbers


def task_kind(dataset: str, task: str):
    from knowledge_lm.core.registry import DATASETS
    from knowledge_lm.tasks.base import TASK_KINDS

    spec = DATASETS.get(dataset).spec(task)
    return TASK_KINDS.get(spec.kind)(spec)


def task_scorer(dataset: str, task: str):
    return task_kind(dataset, task).score


def rate(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, 0 where the denominator is 0 (as every scorer here defines it)."""
    numerator, denominator = np.broadcast_arrays(np.asarray(numerator, float), np.asarray(denominator, float))
    return np.divide(numerator, denominator, out=np.zeros_like(numerator), where=denominator != 0)


def pearson_statistics(predicted: list, gold: list):
    """Pearson's r from the sums of 1, x, y, x², y², xy; float32 values, as metrics.compute passes them; a constant
    side gives NaN, as torchmetrics does."""
    x, y = (np.asarray(values, np.float32).astype(float) for values in (predicted, gold))

    def value(sums):
        n, sx, sy, sxx, syy, sxy = sums.T
        spread = np.clip(n * sxx - sx * sx, 0, None) * np.clip(n * syy - sy * sy, 0, None)
        return np.where(spread > 0, 100 * rate(n * sxy - sx * sy, np.sqrt(spread)), np.nan)

    return [np.ones_like(x), x, y, x * x, y * y, x * y], value


def accuracy_statistics(predicted: list, gold: list):
    def value(sums):
        return 100 * rate(sums[:, 0], sums[:, 1])

    return [np.asarray(predicted) == np.asarray(gold), np.ones(len(gold))], value


def binary_statistics(metric: str, predicted: list, gold: list):
    """F1 or Matthews' correlation of the positive class from the confusion counts."""
    p, g = np.asarray(predicted) == 1, np.asarray(gold) == 1

    def value(sums):
        tp, fp, fn, tn = sums.T
        if metric == "f1":
            return 100 * rate(2 * tp, 2 * tp + fp + fn)
        return 100 * rate(tp * tn - fp * fn, np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)))

    return [p & g, p & ~g, ~p & g, ~p & ~g], value  # tp, fp, fn, tn


def semeval_statistics(kind, predicted: list, gold: list):
    """SemEval's macro F1 over the undirected relations but the negative one, from per-relation counts."""
    from knowledge_lm.tasks.relation import undirected

    labels = kind.spec.labels
    relations = sorted({undirected(label) for label in labels} - {undirected(kind.negative_label or "Other")})
    guess = np.asarray([undirected(labels[index]) for index in predicted])
    answer = np.asarray([undirected(labels[index]) for index in gold])
    right = np.asarray(predicted) == np.asarray(gold)
    columns = [
        column
        for relation in relations
        for column in ((answer == relation) & right, guess == relation, answer == relation)
    ]

    def value(sums):
        correct, guessed, answers = sums[:, 0::3], sums[:, 1::3], sums[:, 2::3]
        present = answers > 0  # the scorer averages over the relations in the (resampled) gold only
        f1 = rate(2 * correct, guessed + answers)
        return 100 * rate((f1 * present).sum(1), present.sum(1))

    return columns, value


def typing_statistics(metric: str, predicted: list, gold: list):
    """Entity typing's micro, loose-macro F1 and strict accuracy from per-example overlaps and sizes."""
    overlap = np.asarray([len(set(p) & set(g)) for p, g in zip(predicted, gold)], float)
    sizes = np.asarray([[len(set(p)), len(set(g))] for p, g in zip(predicted, gold)], float).reshape(-1, 2)
    exact = [set(p) == set(g) for p, g in zip(predicted, gold)]
    columns = [
        overlap,
        sizes[:, 0],
        sizes[:, 1],
        rate(overlap, sizes[:, 0]),
        rate(overlap, sizes[:, 1]),
        exact,
        np.ones(len(gold)),
    ]

    def value(sums):
        overlap, guessed, answers, precision, recall, exact, n = sums.T
        if metric == "strict_accuracy":
            return 100 * rate(exact, n)
        if metric == "loose_macro_f1":
            precision, recall = rate(precision, n), rate(recall, n)
            return 100 * rate(2 * precision * recall, precision + recall)
        return 100 * rate(2 * overlap, guessed + answers)

    return columns, value


def document_relation_statistics(metric: str, predicted: list, gold: list):
    """Document-level relation F1 (or Ign F1, without the facts seen in train) from per-document fact counts."""
    from knowledge_lm.tasks.docre import fact_counts

    counts = [fact_counts([facts], [answer]) for facts, answer in zip(predicted, gold)]
    columns = [[count[name] for count in counts] for name in ("predicted", "gold", "correct", "correct_in_train")]

    def value(sums):
        guessed, answers, correct, in_train = sums.T
        if metric == "ign_f1":
            correct, guessed = correct - in_train, guessed - in_train  # precision without facts seen in train
        precision, recall = rate(correct, guessed), rate(sums[:, 2], answers)
        return 100 * rate(2 * precision * recall, precision + recall)

    return columns, value


def additive_statistics(kind, metric: str, predicted: list, gold: list):
    """``(statistics, value)``: an examples × k array whose column sums over any resample give the task
    scorer's ``metric`` (in %) through ``value`` (rows of sums → values); None where the metric is no such
    function of sums."""
    from knowledge_lm.tasks.docre import DocumentRelationTask
    from knowledge_lm.tasks.relation import RelationTask
    from knowledge_lm.tasks.sequence import SequenceTask
    from knowledge_lm.tasks.typing import TypingTask

    found = None
    if isinstance(kind, SequenceTask) and kind.regression:
        if metric == "pearson":
            found = pearson_statistics(predicted, gold)
    elif isinstance(kind, (SequenceTask, RelationTask)) and metric == "accuracy":
        found = accuracy_statistics(predicted, gold)
    elif isinstance(kind, SequenceTask) and metric in ("f1", "matthews") and set(gold) | set(predicted) <= {0, 1}:
        found = binary_statistics(metric, predicted, gold)
    elif isinstance(kind, RelationTask) and metric == "semeval_macro_f1":
        found = semeval_statistics(kind, predicted, gold)
    elif isinstance(kind, TypingTask) and metric in ("micro_f1", "loose_micro_f1", "loose_macro_f1", "strict_accuracy"):
        found = typing_statistics(metric, predicted, gold)
    elif isinstance(kind, DocumentRelationTask) and metric in ("f1", "ign_f1"):
        found = document_relation_statistics(metric, predicted, gold)
    if found is None:
        return None
    columns, value = found
    return np.stack([np.asarray(column, float) for column in columns], axis=1), value


def cache_file(paths: list[Path], metric: str, replicates: int, resampled: str = "") -> Path:
    """Where a bootstrap of ``paths`` is cached. ``resampled`` tells apart other resamplings of the same files (a
    subset of the examples, one side alone); it is empty for the paired bootstrap over the whole split, whose key,
    which also seeds its replicates, stays what it always was."""
    from knowledge_lm.data.base import default_cache_dir

    key = hashlib.sha256(f"{metric}:{replicates}:{LEVEL}:{METHOD_VERSION}{resampled}".encode())
    for path in paths:
        key.update(Path(path).read_bytes())
    return default_cache_dir() / "bootstrap" / f"{key.hexdigest()[:24]}.json"


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
    cached: Path,
) -> np.ndarray | None:
    """replicates × files: each file's ``metric`` on each replicate's draw of the examples (``examples``: the
    indices resampled, None: the whole split), the same draws for every file, seeded by ``cached``'s name. None
    when the files' splits differ or a file's ``gold_sha256`` is not ``gold``'s."""
    runs = [read_predictions(path) for path in paths]
    digest = gold_sha256(gold)
    if any(run["gold_sha256"] != digest or run["split"] != runs[0]["split"] for run in runs):
        return None
    predicted = [run["predicted"] for run in runs]
    if examples is not None:
        gold, predicted = [gold[i] for i in examples], [[labels[i] for i in examples] for labels in predicted]
    kind = task_kind(dataset, task)
    generator = np.random.default_rng(int.from_bytes(bytes.fromhex(cached.stem[:16]), "big"))
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
    they are cached under the cache directory. Where the metric is a function of sums over examples (accuracy,
    binary F1 and MCC, Pearson's r, SemEval's macro-F1, the typing and document-level RE F1s), each replicate
    sums per-example statistics (:func:`additive_statistics`) instead of calling the scorer: the same values,
    without thousands of scorer calls per comparison; other metrics (Spearman's ρ, QA) run the scorer itself.
    Either resampling may be restricted to a group of the examples (the generated task's statement families), and
    :func:`bootstrap_interval` resamples one method's seeds alone (its interval, without a comparison).
    """
    # The files pin the gold by its sha256; the whole split's paired key has no side counts (see cache_file).
    resampled = "" if examples is None else f":paired:{len(ours)}:{len(baseline)}{examples_key(examples)}"
    cached = cache_file(list(ours) + list(baseline), metric, replicates, resampled)
    if cached.is_file():
        return json.loads(cached.read_text())
    values = resampled_values(
        dataset,
        task,
        metric,
        gold,
        paths=list(ours) + list(baseline),
        examples=examples,
        replicates=replicates,
        cached=cached,
    )
    if values is None:
        return None
    seeds = len(ours)
    means = values[:, :seeds].mean(1)
    deltas = np.round(means - values[:, seeds:].mean(1), 9)  # a tie is 0 whatever the summation order
    found = {
        "replicates": replicates,
        "examples": len(gold if examples is None else examples),
        "interval": percentile_interval(means),
        "delta_interval": percentile_interval(deltas),
        "p_not_better": float(np.mean(deltas <= 0)),
        "p_not_worse": float(np.mean(deltas >= 0)),
    }
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(found))
    return found


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
    cached = cache_file(list(runs), metric, replicates, f":interval:{len(runs)}{examples_key(examples)}")
    if cached.is_file():
        return json.loads(cached.read_text())
    values = resampled_values(
        dataset, task, metric, gold, paths=list(runs), examples=examples, replicates=replicates, cached=cached
    )
    if values is None:
        return None
    found = {
        "replicates": replicates,
        "examples": len(gold if examples is None else examples),
        "interval": percentile_interval(values.mean(1)),
    }
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(found))
    return found
