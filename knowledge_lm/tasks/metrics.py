"""Task metrics by name, on whole evaluation splits, computed in float64 with numpy and scipy.

``compute(spec, predictions, labels)`` takes class ids (classification) or real values (regression)
and returns every metric the task's spec names, as floats in the papers' units (×100 for
accuracy/F1/correlations, as the papers' tables print them). Each metric is the one GLUE's scorer
computes with scikit-learn/scipy:
- ``accuracy``: the share of predictions equal to the label.
- ``f1``: binary F1 of class 1, 2·TP / (2·TP + FP + FN); 0 when there is no positive on either side.
- ``matthews``: the multiclass Matthews correlation of the confusion matrix; 0 when its denominator is 0.
- ``pearson`` / ``spearman``: Pearson's r and Spearman's ρ; NaN when either side is constant (or has
  fewer than two values), where the correlation is undefined.
Regression values are taken at float32, the precision of the model's outputs and of the targets it
trains on (the bootstrap's summed statistics read them the same way); all arithmetic is in float64.
"""

import warnings

import numpy as np
import torch
from scipy import stats

# The version of the metric definitions below: results of different versions are never averaged. Moving the
# arithmetic from float32 to float64 changed stored values only in their last float32 digits, not what any
# metric means, so it kept version 1.
SCORER_VERSION = "1"


def _accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(predictions == labels))


def _binary_f1(predictions: np.ndarray, labels: np.ndarray) -> float:
    predicted, gold = predictions == 1, labels == 1
    true_positives = np.sum(predicted & gold)
    denominator = np.sum(predicted) + np.sum(gold)  # 2·TP + FP + FN
    return float(2 * true_positives / denominator) if denominator else 0.0


def _matthews(predictions: np.ndarray, labels: np.ndarray) -> float:
    classes = int(max(predictions.max(initial=0), labels.max(initial=0))) + 1
    confusion = np.zeros((classes, classes), dtype=np.float64)
    np.add.at(confusion, (labels, predictions), 1)
    gold_counts, predicted_counts = confusion.sum(1), confusion.sum(0)
    total, correct = confusion.sum(), np.trace(confusion)
    covariance = correct * total - predicted_counts @ gold_counts
    spread = (total**2 - predicted_counts @ predicted_counts) * (total**2 - gold_counts @ gold_counts)
    return float(covariance / np.sqrt(spread)) if spread else 0.0


def _correlation(correlate, predictions: np.ndarray, labels: np.ndarray) -> float:
    if len(predictions) < 2:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stats.ConstantInputWarning)  # a constant side: NaN, said in the docstring
        return float(correlate(predictions, labels).statistic)


def _pearson(predictions: np.ndarray, labels: np.ndarray) -> float:
    return _correlation(stats.pearsonr, predictions, labels)


def _spearman(predictions: np.ndarray, labels: np.ndarray) -> float:
    return _correlation(stats.spearmanr, predictions, labels)


METRICS = {
    "accuracy": _accuracy,
    "f1": _binary_f1,
    "matthews": _matthews,
    "pearson": _pearson,
    "spearman": _spearman,
}


def as_array(values) -> np.ndarray:
    """A flat numpy array of a tensor, an array or a list."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu()
        values = (values.double() if values.is_floating_point() else values).numpy()
    return np.asarray(values).reshape(-1)


def compute(spec, predictions, labels) -> dict[str, float]:
    predictions, labels = as_array(predictions), as_array(labels)
    if spec.kind == "regression":
        predictions, labels = (values.astype(np.float32).astype(np.float64) for values in (predictions, labels))
    else:
        predictions, labels = predictions.astype(np.int64), labels.astype(np.int64)
    return {name: 100.0 * METRICS[name](predictions, labels) for name in spec.metrics}
