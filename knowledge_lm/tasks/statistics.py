"""Per-example statistics whose column sums over any resample of the examples give a task kind's metric: what the
paired bootstrap (``knowledge_lm.report.bootstrap``) resamples instead of calling the scorer. Each function returns
``(columns, value)``: the columns (one value per example) and the function from rows of column sums to the metric
in %. A task kind chooses among them in its ``additive_statistics``."""

import numpy as np


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


def semeval_statistics(undirected_labels: list[str], negative: str, predicted: list, gold: list):
    """SemEval's macro F1 over the undirected relations but the ``negative`` one, from per-relation counts
    (``undirected_labels``: each label index's relation without its direction)."""
    relations = sorted(set(undirected_labels) - {negative})
    guess = np.asarray([undirected_labels[index] for index in predicted])
    answer = np.asarray([undirected_labels[index] for index in gold])
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


def document_relation_statistics(metric: str, counts: list[dict]):
    """Document-level relation F1 (or Ign F1, without the facts seen in train) from per-document fact counts
    (``counts``: each document's predicted, gold, correct and correct_in_train facts)."""
    columns = [[count[name] for count in counts] for name in ("predicted", "gold", "correct", "correct_in_train")]

    def value(sums):
        guessed, answers, correct, in_train = sums.T
        if metric == "ign_f1":
            correct, guessed = correct - in_train, guessed - in_train  # precision without facts seen in train
        precision, recall = rate(correct, guessed), rate(sums[:, 2], answers)
        return 100 * rate(2 * precision * recall, precision + recall)

    return columns, value
