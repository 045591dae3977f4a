"""SR equals the smallest squared singular values; SI draws links as Eq. 4 says."""

import itertools
import math
import random

import pytest
import torch

from knowledge_lm.methods.sisr import SelectiveInjection, smallest_eigenvectors, spectral_penalty


@pytest.mark.parametrize("shape", [(8, 32), (32, 8), (16, 16), (2, 2), (3, 5), (7, 2)])
@pytest.mark.parametrize("k_from_rank", [None, -1, 0, 2])  # None: k = 1 and k = 3; else k = min(b, d) + k_from_rank
def test_spectral_penalty_matches_svd(shape, k_from_rank):
    torch.manual_seed(0)
    features = torch.randn(*shape, dtype=torch.float64).float()
    singular = torch.linalg.svdvals(features.double())
    for k in ((1, 3) if k_from_rank is None else (min(shape) + k_from_rank,)):
        expected = (singular.flip(0)[:k] ** 2).sum()
        assert spectral_penalty(features, k).double().item() == pytest.approx(expected.item(), rel=1e-3, abs=1e-3)


def test_spectral_penalty_with_k_at_least_the_rank_is_the_squared_frobenius_norm():
    features = torch.diag(torch.tensor([2.0, 1.0]))
    assert spectral_penalty(features, 1).item() == pytest.approx(1.0, rel=1e-5)
    assert spectral_penalty(features, 2).item() == pytest.approx(5.0, rel=1e-5)
    assert spectral_penalty(features, 3).item() == pytest.approx(5.0, rel=1e-5)


@pytest.mark.parametrize("size", [1, 2, 3, 9])
def test_smallest_eigenvectors_up_to_and_past_the_size(size):
    """Every k, the last vectors included: orthonormal, and their Rayleigh quotients are the k smallest eigenvalues."""
    features = torch.randn(size, size + 4, generator=torch.Generator().manual_seed(size), dtype=torch.float64)
    gram = features @ features.T
    eigenvalues = torch.linalg.eigvalsh(gram)
    for k in range(1, size + 2):
        vectors = smallest_eigenvectors(gram, k)
        found = min(k, size)
        assert vectors.shape == (size, found)
        assert torch.allclose(vectors.T @ vectors, torch.eye(found, dtype=torch.float64), atol=1e-9)
        quotients = (vectors.T @ gram @ vectors).diagonal().sort().values
        assert torch.allclose(quotients, eigenvalues[:found], rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("shape", [(32, 384), (64, 48), (16, 16)])
def test_spectral_penalty_over_wide_spectra(shape):
    """Singular values spread over 1e-2..1e2 (λ over 1e8, what float32 features can hold): still the k smallest."""
    generator = torch.Generator().manual_seed(1)
    b, d = shape
    rank = min(b, d)
    left = torch.linalg.qr(torch.randn(b, b, generator=generator, dtype=torch.float64)).Q[:, :rank]
    right = torch.linalg.qr(torch.randn(d, d, generator=generator, dtype=torch.float64)).Q[:, :rank]
    singular = torch.logspace(-2, 2, rank, dtype=torch.float64)[torch.randperm(rank, generator=generator)]
    features = ((left * singular) @ right.T).float()
    exact = torch.linalg.svdvals(features.double()).flip(0) ** 2
    for k in (1, 2, rank - 2, rank - 1, rank):
        assert spectral_penalty(features, k).item() == pytest.approx(exact[:k].sum().item(), rel=1e-3)


def test_spectral_penalty_gradient_is_eigvalsh_s():
    torch.manual_seed(0)
    features = torch.randn(16, 40, dtype=torch.float64).float().requires_grad_()
    spectral_penalty(features, 2).backward()
    reference = features.detach().double().requires_grad_()
    torch.linalg.eigvalsh(reference @ reference.T)[:2].sum().backward()
    assert torch.allclose(features.grad.double(), reference.grad, rtol=1e-3, atol=1e-4)


def test_spectral_penalty_of_one_row_is_its_squared_norm():
    features = torch.tensor([[3.0, 4.0]])
    assert spectral_penalty(features).item() == pytest.approx(25.0)


def test_spectral_penalty_has_gradients_and_shrinks_the_smallest_direction():
    torch.manual_seed(0)
    features = torch.randn(16, 32, requires_grad=True)
    spectral_penalty(features).backward()
    assert features.grad is not None and features.grad.abs().sum() > 0


def exact_leftover_probabilities(weights, draws):
    """P(entity i is not among the ``draws`` sequential weighted draws without replacement), by enumeration."""
    n = len(weights)
    missing = [0.0] * n
    for order in itertools.permutations(range(n), draws):
        probability, pool = 1.0, set(range(n))
        for index in order:
            probability *= weights[index] / sum(weights[j] for j in pool)
            pool.remove(index)
        for index in pool:
            missing[index] += probability
    return missing


def test_selective_injection_frequencies_follow_eq4():
    si = SelectiveInjection()
    # A hand-built text: rare and frequent entities, some close to the others in the KG, some isolated.
    links = [{"df": 3, "close": 25}, {"df": 500, "close": 0}, {"df": 50, "close": 8},
             {"df": 1000, "close": 12}, {"df": 10, "close": 1}, {"df": 250, "close": 19}, {"df": 99, "close": 6}]
    df, close = (torch.tensor([link[key] for link in links]) for key in ("df", "close"))
    weights = si.score(df, close).tolist()
    assert weights == [1 + 0.5 * 20, 0.5 * 5, 1 + 0.5 * 8, 0.5 * 12, 1 + 0.5 * 5, 0.5 * 19, 1 + 0.5 * 6]
    draws = math.ceil(0.85 * len(links))
    expected = [1 - missing * (1 - si.keep_probability) for missing in exact_leftover_probabilities(weights, draws)]
    # The hand-built text twice in each of many batches, padded with a link slot that must never be kept.
    trials = 20000
    valid = torch.ones(trials, len(links) + 1, dtype=torch.bool)
    valid[:, 3] = False
    padded = lambda values: torch.cat([values[:3], values.new_zeros(1), values[3:]]).expand(trials, -1)  # noqa: E731
    kept = si.keep_mask(padded(df), padded(close), valid, torch.Generator().manual_seed(0))
    assert not kept[:, 3].any()
    frequencies = torch.cat([kept[:, :3], kept[:, 4:]], dim=1).double().mean(0).tolist()
    for frequency, probability in zip(frequencies, expected):
        sigma = math.sqrt(probability * (1 - probability) / trials)
        assert abs(frequency - probability) < 4 * sigma + 1e-9


def test_selective_injection_draws_ceil_of_85_percent():
    si = SelectiveInjection(keep_probability=0.0)
    for n in (1, 2, 6, 7, 20, 40):
        valid = torch.ones(50, n, dtype=torch.bool)
        kept = si.keep_mask(torch.zeros(50, n, dtype=torch.long), torch.full((50, n), 7), valid)
        assert (kept.sum(-1) == math.ceil(0.85 * n)).all()


def test_filter_batch_keeps_other_features():
    si = SelectiveInjection(sample_ratio=0.5, keep_probability=0.0)
    knowledge = [{"links": [{"df": 1, "close": 5}] * 4, "ner": ["x"]}, {"links": [], "ner": []}]
    filtered = si.filter_batch(knowledge, random.Random(0))
    assert [len(example["links"]) for example in filtered] == [2, 0] and filtered[0]["ner"] == ["x"]


def test_bert_sr_trains_as_a_cell(tmp_path):
    from knowledge_lm.cell import run_cell
    from knowledge_lm.config import TrainConfig
    from knowledge_lm.results import Cell

    train = TrainConfig(batch_size=8, max_steps=3, evaluations=1, max_length=32, method_options={"sr_weight": 0.01})
    result = run_cell(Cell("bert+sr", "generated", "facts", 1.0, 1, "tiny"), train, results_dir=tmp_path / "r",
                      runs_dir=tmp_path / "runs", dataset_options={"train_size": 40, "dev_size": 10, "test_size": 10},
                      progress=False)
    assert result["cell"]["method"] == "bert+sr" and "accuracy" in result["metrics"]["test"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_replayed_eigenvectors_match_the_eager_ones_for_every_new_input():
    from knowledge_lm.methods.sisr import replayed_smallest_eigenvectors

    for k in (2, 15, 16):
        for seed in (0, 1):  # the second call replays the graph captured by the first, on a new input
            features = torch.randn(16, 40, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).cuda()
            gram = features @ features.T
            eager, replayed = smallest_eigenvectors(gram, k), replayed_smallest_eigenvectors(gram, k)
            assert torch.allclose((eager.T @ replayed).abs(), torch.eye(k, dtype=torch.float64, device="cuda"), atol=1e-6)
