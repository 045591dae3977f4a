"""The task scorers against scikit-learn and scipy on random inputs: the same values to 1e-9 (in %)."""

import math

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef
from sklearn.preprocessing import MultiLabelBinarizer

from knowledge_lm.data.base import TaskSpec
from knowledge_lm.tasks.metrics import compute
from knowledge_lm.tasks.relation import macro_f1
from knowledge_lm.tasks.typing import typing_scores

CLASSIFICATION = ("accuracy", "f1", "matthews")
TOLERANCE = 1e-9


def spec(kind: str, num_labels: int, metrics: tuple[str, ...]) -> TaskSpec:
    return TaskSpec("main", kind, tuple(str(label) for label in range(num_labels)), metrics, metrics[0])


def reference(name: str, predictions: np.ndarray, labels: np.ndarray) -> float:
    if name == "accuracy":
        return 100 * accuracy_score(labels, predictions)
    if name == "f1":
        return 100 * f1_score(labels, predictions, pos_label=1, average="binary", zero_division=0)
    if name == "matthews":
        return 100 * matthews_corrcoef(labels, predictions)
    if name == "pearson":
        return 100 * pearsonr(predictions, labels)[0]
    return 100 * spearmanr(predictions, labels)[0]


def noisy_classes(generator, size: int, num_labels: int) -> tuple[np.ndarray, np.ndarray]:
    labels = generator.integers(0, num_labels, size)
    predictions = np.where(generator.random(size) < 0.6, labels, generator.integers(0, num_labels, size))
    return predictions, labels


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("size", [3, 17, 250])
@pytest.mark.parametrize("num_labels", [2, 3, 5])
def test_classification_metrics_match_sklearn(seed, size, num_labels):
    metrics = CLASSIFICATION if num_labels == 2 else ("accuracy", "matthews")
    generator = np.random.default_rng([seed, size, num_labels])
    predictions, labels = noisy_classes(generator, size, num_labels)
    values = compute(spec("classification", num_labels, metrics), predictions.tolist(), labels.tolist())
    for name in metrics:
        assert values[name] == pytest.approx(reference(name, predictions, labels), abs=TOLERANCE), name


@pytest.mark.parametrize("num_labels", [2, 4])
def test_constant_predictions_match_sklearn(num_labels):
    metrics = CLASSIFICATION if num_labels == 2 else ("accuracy", "matthews")
    labels = np.random.default_rng(num_labels).integers(0, num_labels, 40)
    for constant in range(num_labels):
        predictions = np.full(40, constant)
        values = compute(spec("classification", num_labels, metrics), predictions, labels)
        for name in metrics:
            assert values[name] == pytest.approx(reference(name, predictions, labels), abs=TOLERANCE), name


def test_accuracy_is_exact_in_float64():
    values = compute(spec("classification", 2, ("accuracy",)), [1, 0, 1], [1, 1, 1])
    assert values["accuracy"] == pytest.approx(200 / 3, abs=1e-12)


def float32_values(values: np.ndarray) -> np.ndarray:
    # The scorer reads regression values at float32 (the model's precision); the reference gets the same values.
    return values.astype(np.float32).astype(np.float64)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("size", [2, 9, 300])
@pytest.mark.parametrize("ties", [False, True])
def test_correlations_match_scipy(seed, size, ties):
    generator = np.random.default_rng([seed, size, ties])
    labels = generator.uniform(0, 5, size)
    predictions = labels + generator.normal(0, 1.5, size)
    if ties:  # STS-B style: many equal gold scores and many equal predictions
        labels, predictions = np.round(labels), np.round(predictions)
    labels, predictions = float32_values(labels), float32_values(predictions)
    if np.ptp(labels) == 0 or np.ptp(predictions) == 0:
        labels[0], predictions[-1] = labels[0] + 1, predictions[-1] - 1  # keep both sides varying
    values = compute(spec("regression", 1, ("pearson", "spearman")), predictions, labels)
    for name in ("pearson", "spearman"):
        assert values[name] == pytest.approx(reference(name, predictions, labels), abs=TOLERANCE), name


def test_constant_side_gives_nan_for_both_correlations():
    regression = spec("regression", 1, ("pearson", "spearman"))
    varying = np.linspace(0, 5, 12)
    for predictions, labels in ((np.full(12, 2.5), varying), (varying, np.full(12, 2.5))):
        values = compute(regression, predictions, labels)
        assert math.isnan(values["pearson"]) and math.isnan(values["spearman"])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("num_labels", [2, 4, 7])
def test_relation_macro_f1_matches_sklearn(seed, num_labels):
    generator = np.random.default_rng([seed, num_labels])
    predictions, labels = noisy_classes(generator, 150, num_labels)
    negative = 0
    kept = sorted((set(predictions.tolist()) | set(labels.tolist())) - {negative})
    expected = f1_score(labels, predictions, labels=kept, average="macro", zero_division=0)
    assert macro_f1(predictions.tolist(), labels.tolist(), negative) == pytest.approx(expected, abs=TOLERANCE)
    assert macro_f1(predictions.tolist(), labels.tolist()) == pytest.approx(
        f1_score(labels, predictions, average="macro", zero_division=0), abs=TOLERANCE
    )


@pytest.mark.parametrize("seed", range(4))
def test_typing_micro_matches_sklearn(seed):
    generator = np.random.default_rng(seed)

    def type_set():
        return sorted(set(generator.integers(0, 6, generator.integers(0, 4)).tolist()))

    predicted, gold = [type_set() for _ in range(80)], [type_set() for _ in range(80)]
    binarizer = MultiLabelBinarizer(classes=range(6)).fit([])
    predicted_matrix, gold_matrix = binarizer.transform(predicted), binarizer.transform(gold)
    scores = typing_scores(predicted, gold)
    expected = 100 * f1_score(gold_matrix, predicted_matrix, average="micro", zero_division=0)
    assert scores["micro_f1"] == pytest.approx(expected, abs=TOLERANCE)
    assert scores["loose_micro_f1"] == pytest.approx(expected, abs=TOLERANCE)


@pytest.mark.parametrize("seed", range(4))
def test_typing_loose_macro_definitions(seed):
    generator = np.random.default_rng(seed)

    def type_set():
        return set(generator.integers(0, 6, generator.integers(0, 4)).tolist())

    predicted, gold = [type_set() for _ in range(80)], [type_set() for _ in range(80)]
    overlap = np.array([len(p & g) for p, g in zip(predicted, gold)], float)
    guessed, answers = np.array([len(p) for p in predicted], float), np.array([len(g) for g in gold], float)
    precisions = overlap[guessed > 0] / guessed[guessed > 0]
    recalls = overlap[answers > 0] / answers[answers > 0]
    scores = typing_scores([sorted(p) for p in predicted], [sorted(g) for g in gold])
    assert scores["loose_macro_precision"] == pytest.approx(100 * precisions.sum() / 80, abs=TOLERANCE)
    assert scores["loose_macro_recall"] == pytest.approx(100 * recalls.sum() / 80, abs=TOLERANCE)
    assert scores["ling_weld_loose_macro_precision"] == pytest.approx(100 * precisions.mean(), abs=TOLERANCE)
    assert scores["ling_weld_loose_macro_recall"] == pytest.approx(100 * recalls.mean(), abs=TOLERANCE)
