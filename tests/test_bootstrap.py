"""The bootstrap's summed per-example statistics give exactly what each task's scorer gives on a resample."""

import numpy as np
import pytest

from knowledge_lm.report.bootstrap import additive_statistics, task_kind

CASES = [
    ("glue", "cola", "matthews"),
    ("glue", "mrpc", "f1"),
    ("glue", "mrpc", "accuracy"),
    ("glue", "stsb", "pearson"),
    ("glue", "sst2", "accuracy"),
    ("semeval2010", "main", "semeval_macro_f1"),
    ("semeval2010", "mean_pool", "accuracy"),
    ("fewrel", "main", "accuracy"),
    ("openentity", "main", "micro_f1"),
    ("openentity", "main", "loose_macro_f1"),
    ("openentity", "main", "strict_accuracy"),
    ("redocred", "revised", "f1"),
    ("redocred", "revised", "ign_f1"),
]


def random_outputs(kind, size: int, generator):
    from knowledge_lm.tasks.sequence import SequenceTask
    from knowledge_lm.tasks.typing import TypingTask

    if isinstance(kind, SequenceTask) and kind.regression:
        gold = generator.uniform(0, 5, size)
        return list(gold + generator.normal(0, 1.5, size)), list(gold)
    from knowledge_lm.tasks.docre import DocumentRelationTask

    if isinstance(kind, DocumentRelationTask):

        def facts(count):
            return [[int(h), int(t), int(r)] for h, t, r in generator.integers(0, 4, (count, 3))]

        gold = [
            {
                "facts": (answer := [list(f) for f in {tuple(f) for f in facts(generator.integers(0, 5))}]),
                "in_train": [bool(flag) for flag in generator.random(len(answer)) < 0.3],
            }
            for _ in range(size)
        ]
        predicted = [facts(generator.integers(0, 5)) + answer["facts"][: generator.integers(0, 3)] for answer in gold]
        return predicted, gold
    labels = len(kind.spec.labels)
    if isinstance(kind, TypingTask):

        def type_set():
            return sorted(set(generator.integers(0, 6, generator.integers(0, 3)).tolist()))

        return [type_set() for _ in range(size)], [type_set() for _ in range(size)]
    gold = generator.integers(0, labels, size)
    predicted = np.where(generator.random(size) < 0.6, gold, generator.integers(0, labels, size))
    return predicted.tolist(), gold.tolist()


@pytest.mark.parametrize("dataset,task,metric", CASES)
def test_summed_statistics_equal_the_scorer_on_resamples(dataset, task, metric):
    kind = task_kind(dataset, task)
    generator = np.random.default_rng(0)
    predicted, gold = random_outputs(kind, 120, generator)
    statistics, value = additive_statistics(kind, metric, predicted, gold)
    draws = [generator.integers(0, 120, 120) for _ in range(20)] + [np.zeros(120, dtype=int)]  # the last: one example
    counts = np.stack([np.bincount(draw, minlength=120) for draw in draws]).astype(float)
    expected = [kind.score([predicted[i] for i in draw], [gold[i] for i in draw])[metric] for draw in draws]
    np.testing.assert_allclose(value(counts @ statistics), expected, atol=1e-9)


def test_metrics_without_sums_run_the_scorer():
    kind = task_kind("glue", "stsb")
    assert additive_statistics(kind, "spearman", [1.0, 2.0], [1.0, 3.0]) is None


def test_a_predictions_file_is_the_same_bytes_whenever_written(tmp_path):
    """The bootstrap seeds its replicates by the files' bytes: no time or name in the gzip header."""
    import time

    from knowledge_lm.core.results import read_predictions, write_predictions

    payload = {"split": "test", "predicted": [0, 1, 1], "gold_sha256": "0" * 64}
    write_predictions(tmp_path / "a.predictions.json.gz", payload)
    time.sleep(1.1)  # gzip headers keep whole seconds
    write_predictions(tmp_path / "b.predictions.json.gz", payload)
    assert (tmp_path / "a.predictions.json.gz").read_bytes() == (tmp_path / "b.predictions.json.gz").read_bytes()
    assert read_predictions(tmp_path / "b.predictions.json.gz") == payload
