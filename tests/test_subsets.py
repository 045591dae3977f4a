import random
from collections import Counter

import numpy as np
import pytest

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.subsets import check_fraction, fraction_subset, quantile_bins, subset_hash


def make_rows(n=5000, classes=(0, 1, 2), weights=(0.6, 0.3, 0.1), seed=0):
    rng = random.Random(seed)
    ids = [f"ex-{i}" for i in range(n)]
    labels = rng.choices(classes, weights=weights, k=n)
    return ids, labels


def selected_ids(ids, labels, fraction, seed=0):
    return {ids[i] for i in fraction_subset(ids, labels, fraction, seed)}


def test_fractions_are_nested():
    ids, labels = make_rows()
    one, ten, full = (selected_ids(ids, labels, f) for f in (0.01, 0.1, 1.0))
    assert one < ten < full
    assert full == set(ids)


def test_stratified_by_label():
    ids, labels = make_rows()
    total = Counter(labels)
    for fraction in (0.01, 0.1):
        chosen = Counter(labels[i] for i in fraction_subset(ids, labels, fraction, 0))
        for label, count in total.items():
            assert chosen[label] == max(1, int(np.floor(fraction * count + 0.5)))


def test_every_label_kept_even_when_rare():
    ids, labels = make_rows(n=300, weights=(0.98, 0.015, 0.005))
    chosen = {labels[i] for i in fraction_subset(ids, labels, 0.01, 0)}
    assert chosen == set(labels)


def test_stable_across_runs_and_row_order():
    ids, labels = make_rows()
    first = selected_ids(ids, labels, 0.1, seed=3)
    assert first == selected_ids(ids, labels, 0.1, seed=3)
    rows = list(zip(ids, labels))
    random.Random(1).shuffle(rows)
    shuffled_ids, shuffled_labels = map(list, zip(*rows))
    assert selected_ids(shuffled_ids, shuffled_labels, 0.1, seed=3) == first
    assert selected_ids(ids, labels, 0.1, seed=4) != first


def test_not_the_first_rows():
    ids, labels = make_rows()
    indices = fraction_subset(ids, labels, 0.1, 0)
    assert indices.max() > len(ids) * 0.5


def test_hash_names_the_subset():
    ids, labels = make_rows()
    a = fraction_subset(ids, labels, 0.1, 0)
    b = fraction_subset(ids, labels, 0.1, 1)
    assert subset_hash(ids, a) == subset_hash(ids, a) and subset_hash(ids, a) != subset_hash(ids, b)
    # A known value: the draw must not change silently between versions (it names results on disk).
    assert subset_hash(ids, a) == "d5282f35b0e1c662"


def test_regression_stratified_by_quantile_bins():
    rng = np.random.default_rng(0)
    ids = [f"r{i}" for i in range(1000)]
    scores = rng.uniform(0, 5, size=1000).tolist()
    chosen = sorted(scores[i] for i in fraction_subset(ids, quantile_bins(scores), 0.1, 0))
    assert len(chosen) == 100
    assert chosen[0] < 0.6 and chosen[-1] > 4.4


@pytest.mark.parametrize("fraction", [0, -0.1, 1.5, 2])
def test_fraction_out_of_range(fraction):
    with pytest.raises(KlmError, match="outside"):
        check_fraction(fraction)


def test_real_rte_subsets(shared_data, tokenizer):
    from knowledge_lm.data.glue import GlueDataModule

    sizes = {}
    for fraction in (0.01, 0.1, 1.0):
        data = GlueDataModule(task="rte", tokenizer=tokenizer, data_dir=shared_data, fraction=fraction)
        data.setup()
        sizes[fraction] = data.train_size
        labels = Counter(int(label) for label in data.encoded["train"]["labels"])
        assert abs(labels[0] - labels[1]) <= 1 + 0.01 * data.train_size
    assert sizes == {0.01: 22, 0.1: 224, 1.0: 2241}  # the train file less its held-out dev (249 rows)
