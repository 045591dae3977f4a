"""SR equals the smallest squared singular values; SI draws entities as the SI+SR paper's Eq. 4 says."""

import math
from types import SimpleNamespace

import pytest
import torch

from knowledge_lm.core.errors import KlmError
from knowledge_lm.methods.sisr import SelectiveInjection, smallest_eigenvectors, spectral_penalty, train_knowledge_rows


@pytest.mark.parametrize("shape", [(8, 32), (32, 8), (16, 16), (2, 2), (3, 5), (7, 2)])
@pytest.mark.parametrize("k_from_rank", [None, -1, 0, 2])  # None: k = 1 and k = 3; else k = min(b, d) + k_from_rank
def test_spectral_penalty_matches_svd(shape, k_from_rank):
    torch.manual_seed(0)
    features = torch.randn(*shape, dtype=torch.float64).float()
    singular = torch.linalg.svdvals(features.double())
    for k in (1, 3) if k_from_rank is None else (min(shape) + k_from_rank,):
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


def rank_deficient(b, d, rank, generator):
    """A float64 b × d matrix of the given rank: a product of random b × rank and rank × d factors."""
    left = torch.randn(b, rank, generator=generator, dtype=torch.float64)
    return left @ torch.randn(rank, d, generator=generator, dtype=torch.float64)


def test_spectral_penalty_of_rank_deficient_features_matches_svdvals():
    """Repeated zero singular values, k below, at and past their count, float32 and float64 features: exact to
    1e-6 σ_max² (a rank-one 5 × 6 matrix at k = 4 has penalty 0)."""
    generator = torch.Generator().manual_seed(28)
    features = rank_deficient(5, 6, 1, generator)  # the example: rank 1, k = 4, exact penalty 0
    singular = torch.linalg.svdvals(features)
    assert spectral_penalty(features, 4).item() == pytest.approx(0.0, abs=1e-6 * singular[0].item() ** 2)
    for shape in [(5, 6), (6, 5), (12, 40), (40, 12), (9, 9)]:
        for rank in range(1, min(shape)):
            features = rank_deficient(*shape, rank, generator)
            singular = torch.linalg.svdvals(features)
            scale = singular[0].item() ** 2
            for dtype in (torch.float32, torch.float64):
                for k in range(1, min(shape)):
                    expected = (singular.flip(0)[:k] ** 2).sum().item()
                    got = spectral_penalty(features.to(dtype), k).item()
                    assert got == pytest.approx(expected, abs=1e-6 * scale), (shape, rank, dtype, k)


def test_spectral_penalty_gradient_is_finite_on_rank_deficient_features():
    """Zero singular values repeat; the gradient has no 1 / (λᵢ − λⱼ) term, so it stays finite, and it is
    ``eigvalsh``'s: 0 while k covers only zero singular values, else that of the smallest nonzero ones."""
    generator = torch.Generator().manual_seed(5)
    for shape, rank in [((5, 6), 1), ((8, 20), 3), ((20, 8), 3)]:
        base = rank_deficient(*shape, rank, generator)
        zeros = min(shape) - rank
        for k in (1, zeros, zeros + 1):
            features = base.float().requires_grad_()
            spectral_penalty(features, k).backward()
            assert torch.isfinite(features.grad).all()
            reference = features.detach().double().requires_grad_()
            gram = reference @ reference.T if shape[0] <= shape[1] else reference.T @ reference
            torch.linalg.eigvalsh(gram)[:k].sum().backward()
            tolerance = 1e-4 * base.norm().item()
            assert torch.allclose(features.grad.double(), reference.grad, atol=tolerance), (shape, k)
            if k <= zeros:
                assert features.grad.abs().max().item() < tolerance


def test_spectral_penalty_for_k_1_keeps_the_old_implementation_s_values():
    """k = 1 on full-rank features: the values SR trained with so far (from a power iteration, right there)."""
    old = {(32, 64): 7.320533752441406, (16, 384): 262.71124267578125, (64, 16): 18.509620666503906}
    for shape, value in old.items():
        features = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
        assert spectral_penalty(features, 1).item() == pytest.approx(value, rel=1e-5)


def test_spectral_penalty_of_one_row_is_its_squared_norm():
    features = torch.tensor([[3.0, 4.0]])
    assert spectral_penalty(features).item() == pytest.approx(25.0)


def test_spectral_penalty_has_gradients_and_shrinks_the_smallest_direction():
    torch.manual_seed(0)
    features = torch.randn(16, 32, requires_grad=True)
    spectral_penalty(features).backward()
    assert features.grad is not None and features.grad.abs().sum() > 0


KEPT_AT_EQUAL_SCORES = 0.85 + 0.15 * 0.15


def within(frequency: float, probability: float, trials: int, sigmas: float = 4.0) -> bool:
    return abs(frequency - probability) < sigmas * math.sqrt(probability * (1 - probability) / trials) + 1e-9


def draw(si, links, trials, seed=0, entities=None):
    """``trials`` copies of one text (``links``: dicts with df and close) through ``keep_mask``: trials × S."""
    df, close = (torch.tensor([link[key] for link in links]).expand(trials, -1) for key in ("df", "close"))
    entities = torch.arange(1, len(links) + 1) if entities is None else torch.tensor(entities)
    valid = torch.ones(trials, len(links), dtype=torch.bool)
    return si.keep_mask(df, close, valid, entities.expand(trials, -1), torch.Generator().manual_seed(seed))


def test_selective_injection_frequencies_follow_eq4():
    si = SelectiveInjection(k_thresh=100)
    # A hand-built text: rare and frequent entities, some close to the others in the KG, some isolated.
    links = [
        {"df": 3, "close": 25},
        {"df": 500, "close": 0},
        {"df": 50, "close": 8},
        {"df": 1000, "close": 12},
        {"df": 10, "close": 1},
        {"df": 250, "close": 19},
        {"df": 99, "close": 6},
    ]
    df, close = (torch.tensor([link[key] for link in links]) for key in ("df", "close"))
    scores = si.score(df, close).tolist()
    assert scores == [1 + 0.5 * 20, 0.5 * 5, 1 + 0.5 * 8, 0.5 * 12, 1 + 0.5 * 5, 0.5 * 19, 1 + 0.5 * 6]
    injected = [0.85 * score / max(scores) for score in scores]
    expected = [p + (1 - p) * 0.15 for p in injected]
    # The hand-built text in each of many batches, with a padding slot (index 3) that must never be kept.
    trials = 20000
    valid = torch.ones(trials, len(links) + 1, dtype=torch.bool)
    valid[:, 3] = False
    padded = lambda values: torch.cat([values[:3], values.new_zeros(1), values[3:]]).expand(trials, -1)  # noqa: E731
    entities = padded(torch.arange(1, len(links) + 1))
    kept = si.keep_mask(padded(df), padded(close), valid, entities, torch.Generator().manual_seed(0))
    assert not kept[:, 3].any()
    frequencies = torch.cat([kept[:, :3], kept[:, 4:]], dim=1).double().mean(0).tolist()
    assert all(within(frequency, probability, trials) for frequency, probability in zip(frequencies, expected))


@pytest.mark.parametrize("entities", [1, 3, 8])
def test_equal_scores_keep_each_entity_with_probability_0_87(entities):
    """Even a text of one or three entities loses some: the draw is per entity, not ⌈0.85·n⌉ per text."""
    trials = 8000
    kept = draw(SelectiveInjection(k_thresh=100), [{"df": 1, "close": 7}] * entities, trials)
    assert within(kept.double().mean().item(), KEPT_AT_EQUAL_SCORES, trials * entities)
    fully_kept = kept.all(-1).double().mean().item()
    assert within(fully_kept, KEPT_AT_EQUAL_SCORES**entities, trials)


def test_the_entity_is_the_unit():
    """Every mention of an entity shares one draw; unknown entities (id 0) draw on their own."""
    trials = 4000
    kept = draw(SelectiveInjection(k_thresh=100), [{"df": 1, "close": 7}] * 7, trials, entities=[4, 9, 4, 0, 0, 9, 4])
    assert (kept[:, 0] == kept[:, 2]).all() and (kept[:, 0] == kept[:, 6]).all() and (kept[:, 1] == kept[:, 5]).all()
    assert within(
        (kept[:, 0] != kept[:, 1]).double().mean().item(), 2 * KEPT_AT_EQUAL_SCORES * (1 - KEPT_AT_EQUAL_SCORES), trials
    )
    assert within(
        (kept[:, 3] != kept[:, 4]).double().mean().item(), 2 * KEPT_AT_EQUAL_SCORES * (1 - KEPT_AT_EQUAL_SCORES), trials
    )
    assert within(kept[:, 0].double().mean().item(), KEPT_AT_EQUAL_SCORES, trials)


def test_the_score_ratio_is_over_the_text_s_entities():
    """Two mentions of a low-score entity do not change max s; a rare entity alone in its text is a sure candidate."""
    si = SelectiveInjection(k_thresh=100, keep_probability=0.0)
    trials = 8000
    links = [{"df": 1, "close": 20}, {"df": 500, "close": 5}, {"df": 500, "close": 5}]
    kept = si.keep_mask(
        torch.tensor([[1, 500, 500], [500, 0, 0]]).repeat(trials, 1),
        torch.tensor([[20, 5, 5], [5, 0, 0]]).repeat(trials, 1),
        torch.tensor([[True, True, True], [True, False, False]]).repeat(trials, 1),
        torch.tensor([[1, 2, 2], [2, 0, 0]]).repeat(trials, 1),
        torch.Generator().manual_seed(3),
    )
    first, second = kept[0::2], kept[1::2]
    scores = si.score(torch.tensor([link["df"] for link in links]), torch.tensor([link["close"] for link in links]))
    assert within(first[:, 1].double().mean().item(), 0.85 * (scores[1] / scores[0]).item(), trials)
    assert within(second[:, 0].double().mean().item(), 0.85, trials)


def test_same_seed_same_draws_and_the_global_rng_untouched():
    knowledge = [{"links": [{"df": 1, "close": 7, "candidates": [[f"Q{i % 5}", 1.0]]} for i in range(12)]}] * 40
    state = torch.get_rng_state()
    first, second, other = (SelectiveInjection(k_thresh=100, seed=seed) for seed in (7, 7, 8))
    for _ in range(3):
        draws = [[len(example["links"]) for example in si.filter_batch(knowledge)] for si in (first, second, other)]
        assert draws[0] == draws[1] and draws[0] != draws[2]
    assert torch.equal(torch.get_rng_state(), state)
    assert first.stats() == second.stats()


def test_a_restored_state_draws_on_where_the_saved_one_stopped():
    knowledge = [{"links": [{"df": 1, "close": 7, "candidates": [[f"Q{i}", 1.0]]} for i in range(12)]}] * 20
    running = SelectiveInjection(k_thresh=100, seed=7)
    running.filter_batch(knowledge)
    restored = SelectiveInjection(k_thresh=100, seed=7)
    holder = restored.generator("cpu")  # as KamSI holds it
    restored.load_state_dict(running.state_dict())
    assert restored.filter_batch(knowledge, holder) == running.filter_batch(knowledge)
    assert restored.stats() == running.stats()


def test_filter_batch_keeps_every_mention_of_an_entity_together_and_other_features():
    si = SelectiveInjection(k_thresh=100)
    links = [
        {"df": 1, "close": 5, "tokens": [t], "candidates": [[qid, 1.0]]}
        for t, qid in enumerate(["Q1", "Q2", "Q1", "Q3"])
    ]
    knowledge = [{"links": links, "ner": ["x"]}, {"links": [], "ner": []}] * 300
    filtered = si.filter_batch(knowledge, torch.Generator().manual_seed(0))
    assert filtered[0]["ner"] == ["x"] and all(not example["links"] for example in filtered[1::2])
    mentions = [[link["tokens"][0] for link in example["links"]] for example in filtered[0::2]]
    assert all((0 in kept) == (2 in kept) for kept in mentions)
    assert any(0 not in kept for kept in mentions) and any(0 in kept for kept in mentions)


def test_kept_share_counts_links_over_every_batch():
    si = SelectiveInjection(k_thresh=100)
    valid = torch.tensor([[True, True, False], [True, False, False]])
    total_kept = 0
    for _ in range(50):
        kept = si.keep_mask(
            torch.ones(2, 3, dtype=torch.long),
            torch.ones(2, 3, dtype=torch.long),
            valid,
            torch.tensor([[1, 2, 0], [1, 0, 0]]),
        )
        total_kept += int(kept.sum())
    stats = si.stats()
    assert stats["si_valid_links"] == 150 and stats["si_kept_links"] == total_kept
    assert stats["si_kept_share"] == pytest.approx(total_kept / 150)
    assert within(stats["si_kept_share"], KEPT_AT_EQUAL_SCORES, 150, sigmas=5)
    assert stats["si_k_thresh"] == 100 and stats["si_k_thresh_source"] == "given"


def test_k_thresh_auto_is_the_90th_percentile_of_the_train_split_s_entity_df():
    def row(*entities):
        return {"links": [{"df": df, "close": 0, "candidates": [[qid, 1.0]]} for qid, df in entities]}

    train = [
        row(("Q1", 1), ("Q2", 2), ("Q1", 1)),
        row(("Q3", 3), ("Q4", 4), ("Q5", 5)),
        row(("Q6", 6), ("Q7", 7), ("Q8", 8)),
        row(("Q9", 40), ("Q10", 100)),
        {"links": []},
    ]
    dev = [row(("Q11", 10000))]
    data = SimpleNamespace(knowledge_features=dev + train + dev, knowledge_spans={"dev": (0, 1), "train": (1, 6)})
    si = SelectiveInjection()
    with pytest.raises(KlmError, match="auto"):
        si.score(torch.ones(1), torch.ones(1))
    si.set_k_thresh_from(train_knowledge_rows(data))
    expected = torch.quantile(
        torch.tensor([1, 2, 3, 4, 5, 6, 7, 8, 40, 100], dtype=torch.float64), 0.9
    ).item()  # each entity once
    assert si.k_thresh == pytest.approx(expected) and si.k_thresh_source == "quantile 0.9 of train DF"
    assert si.stats()["si_rare_share"] == pytest.approx(0.9)
    given = SelectiveInjection(k_thresh=250)
    given.set_k_thresh_from(train)
    assert given.k_thresh == 250 and given.stats()["si_k_thresh_source"] == "given"
    with pytest.raises(KlmError, match="prepared knowledge"):
        train_knowledge_rows(SimpleNamespace(knowledge_features=None, knowledge_spans={}))
    with pytest.raises(KlmError, match="si_k_thresh"):
        SelectiveInjection(k_thresh="high")


def test_bert_sr_trains_as_a_cell(tmp_path):
    from knowledge_lm.core.results import Cell
    from knowledge_lm.run.cell import run_cell
    from knowledge_lm.run.config import TrainConfig

    train = TrainConfig(batch_size=8, max_steps=3, evaluations=1, max_length=32, method_options={"sr_weight": 0.01})
    result = run_cell(
        Cell("bert+sr", "generated", "facts", 1.0, 1, "tiny"),
        train,
        results_dir=tmp_path / "r",
        runs_dir=tmp_path / "runs",
        dataset_options={"train_size": 40, "dev_size": 10, "test_size": 10},
        progress=False,
    )
    assert result["cell"]["method"] == "bert+sr" and "accuracy" in result["metrics"]["test"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_spectral_penalty_on_the_device_matches_svdvals_under_autocast():
    generator = torch.Generator().manual_seed(0)
    for shape, rank in [((32, 384), 32), ((32, 384), 5), ((5, 6), 1), ((64, 16), 10)]:
        features = rank_deficient(*shape, rank, generator).float().cuda().requires_grad_()
        singular = torch.linalg.svdvals(features.detach().double())
        for k in (1, 4):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                penalty = spectral_penalty(features, k)
            assert penalty.dtype == torch.float32
            expected = (singular.flip(0)[:k] ** 2).sum().item()
            assert penalty.item() == pytest.approx(expected, rel=1e-4, abs=1e-6 * singular[0].item() ** 2)
            (gradient,) = torch.autograd.grad(penalty, features)
            assert torch.isfinite(gradient).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_keep_mask_on_the_device_draws_from_the_generator_there():
    trials = 4000
    entities = torch.tensor([4, 9, 4, 0]).expand(trials, -1).cuda()
    ones = torch.ones(trials, 4, dtype=torch.long, device="cuda")
    valid = torch.ones(trials, 4, dtype=torch.bool, device="cuda")
    first, second = SelectiveInjection(k_thresh=100, seed=5), SelectiveInjection(k_thresh=100, seed=5)
    kept = first.keep_mask(ones, ones * 7, valid, entities)
    assert kept.is_cuda and torch.equal(kept, second.keep_mask(ones, ones * 7, valid, entities))
    assert first.generators[torch.device("cuda", torch.cuda.current_device())].device.type == "cuda"
    assert (kept[:, 0] == kept[:, 2]).all() and within(kept[:, 1].double().mean().item(), KEPT_AT_EQUAL_SCORES, trials)
    assert first.stats()["si_valid_links"] == 4 * trials
