"""Task metrics by name, on whole evaluation splits (torchmetrics' functional forms).

``compute(spec, predictions, labels)`` takes class ids (classification) or real values (regression)
and returns every metric the task's spec names, as floats in the papers' units (×100 for
accuracy/F1/correlations, as the papers' tables print them).
"""

import torch
from torchmetrics.functional import accuracy, f1_score, matthews_corrcoef, pearson_corrcoef, spearman_corrcoef


def _accuracy(predictions, labels, num_labels):
    return accuracy(predictions, labels, task="multiclass", num_classes=max(num_labels, 2))


def _binary_f1(predictions, labels, num_labels):
    return f1_score(predictions, labels, task="binary")


def _matthews(predictions, labels, num_labels):
    # torchmetrics smooths a zero denominator with eps; GLUE's scorer (sklearn) defines it as 0.
    if predictions.unique().numel() == 1 or labels.unique().numel() == 1:
        return torch.tensor(0.0)
    return matthews_corrcoef(predictions, labels, task="multiclass", num_classes=max(num_labels, 2))


def _pearson(predictions, labels, num_labels):
    return pearson_corrcoef(predictions.double(), labels.double())


def _spearman(predictions, labels, num_labels):
    return spearman_corrcoef(predictions.double(), labels.double())


METRICS = {
    "accuracy": _accuracy,
    "f1": _binary_f1,
    "matthews": _matthews,
    "pearson": _pearson,
    "spearman": _spearman,
}


def compute(spec, predictions: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    predictions, labels = predictions.detach().cpu(), labels.detach().cpu()
    if spec.kind != "regression":
        predictions, labels = predictions.long(), labels.long()
    else:
        predictions, labels = predictions.float().reshape(-1), labels.float().reshape(-1)
    return {name: 100.0 * float(METRICS[name](predictions, labels, spec.num_labels)) for name in spec.metrics}
