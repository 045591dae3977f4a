"""KnowBERT-KAR: the round trip, what δ cuts off, gradients to every new parameter, and cells that train."""

import json
from dataclasses import replace

import pytest
import torch

from knowledge_lm.core.errors import KlmError
from knowledge_lm.data.generated import GeneratedDataModule
from knowledge_lm.knowledge.kg_embeddings import EntityEmbeddings
from knowledge_lm.knowledge.prepare import KnowledgeConfig, prepare
from knowledge_lm.methods.knowbert import (
    KnowBert,
    KnowledgeAttentionRecontextualization,
)

SIZES = {"train_size": 40, "dev_size": 10, "test_size": 10}
QIDS = [f"Q{i}" for i in range(1, 9)]


def table(seed: int = 0, dim: int = 100) -> EntityEmbeddings:
    matrix = torch.nn.functional.normalize(
        torch.randn(len(QIDS), dim, generator=torch.Generator().manual_seed(seed)), dim=1
    )
    return EntityEmbeddings(QIDS, matrix, [], torch.zeros(0, dim), {"dim": dim})


def backbone():
    from knowledge_lm.core.backbones import load_backbone
    from knowledge_lm.data.generated import GeneratedDataModule as data_class

    encoder, tokenizer, _ = load_backbone("tiny", seed=0)
    return encoder, tokenizer, data_class.spec("facts")


def knowbert(**options) -> KnowBert:
    encoder, _, spec = backbone()
    model = KnowBert(encoder, spec, kar_layer=0, **options)
    model.kar.entities.load(table(), {"Q99": "a label only entity"})
    return model


def batch_with_links(tokenizer):
    texts = ["alpha beta gamma delta epsilon", "zeta eta theta iota kappa lambda", "no links here at all"]
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    knowledge = [
        {
            "links": [
                {
                    "segment": 0,
                    "tokens": [1, 2],
                    "candidates": [["Q1", 0.6], ["Q2", 0.3], ["Q3", 0.1]],
                    "df": 1,
                    "close": 0,
                },
                {"segment": 0, "tokens": [4], "candidates": [["Q4", 1.0]], "df": 1, "close": 0},
            ]
        },  # a gold link
        {
            "links": [
                {"segment": 0, "tokens": [2, 3, 4], "candidates": [["Q5", 0.5], ["Q99", 0.5]], "df": 1, "close": 0},
                {
                    "segment": 0,
                    "tokens": [6],
                    "candidates": [["Qunknown", 1.0], ["Qunknown2", 0.0]],
                    "df": 1,
                    "close": 0,
                },
            ]
        },
        {"links": []},
    ]
    return {**encoded, "knowledge": knowledge}


def test_entity_table_moves_with_the_module():
    """The table is a plain tensor (out of the state dict), yet ``.to`` moves it like a buffer, so a compiled
    forward never moves it itself; it stays out of the state dict."""
    model = knowbert()
    model.to(torch.float64)
    assert model.kar.entities.weight.dtype == torch.float64
    assert not any("entities" in name for name in model.state_dict())


def test_under_cuda_graphs_kar_stays_eager():
    """reduce-overhead segfaulted in KAR's compiled backward on an H100: under it only the layers compile."""
    model = knowbert()
    layers = len(model.compiled_modules()) - 1
    model.compile_modules("reduce-overhead")
    assert model.cuda_graph_steps
    assert len(model.compiled_modules()) == layers
    assert model.kar not in model.compiled_modules()


def test_projection_round_trip_is_identity_when_the_entity_dim_is_larger():
    kar = KnowledgeAttentionRecontextualization(32, entity_dim=100)
    hidden = torch.randn(3, 7, 32)
    assert torch.allclose(kar.to_hidden(kar.to_entity(hidden)), hidden, atol=1e-4)
    # Narrower entity space: the round trip is the orthogonal projector onto W1's row space.
    kar = KnowledgeAttentionRecontextualization(32, entity_dim=8, num_heads=2)
    once = kar.to_hidden(kar.to_entity(hidden))
    assert torch.allclose(kar.to_hidden(kar.to_entity(once)), once, atol=1e-4)


def plain_states(model, batch):
    return model.encoder(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"]
    ).last_hidden_state


def test_with_every_candidate_below_delta_the_states_are_the_backbones():
    _, tokenizer, _ = backbone()
    batch = batch_with_links(tokenizer)
    model = knowbert(threshold=1e9).eval()
    with torch.no_grad():
        states = model.encode(batch)
        plain = plain_states(model, batch)
    scores, tensors = model._linking
    assert tensors.candidate_mask.any() and not (scores >= 1e9).any()
    assert torch.equal(states, plain)
    # Once a candidate passes δ, KAR does rewrite the states.
    model.kar.threshold = -1e4
    with torch.no_grad():
        assert not torch.allclose(model.encode(batch)[0], plain[0], atol=1e-3)


def test_null_mode_keeps_unlinked_spans_with_the_null_embedding():
    """``unlinked_spans="null"`` (allenai/kb's behaviour): no entity reaches the states, the spans still do."""
    _, tokenizer, _ = backbone()
    batch = batch_with_links(tokenizer)
    model = knowbert(threshold=1e9, unlinked_spans="null").eval()
    with torch.no_grad():
        first = model.encode(batch)
        model.kar.entities.load(table(seed=1), {"Q99": "another label"})
        shuffled = [
            {"links": [{**link, "candidates": [["Q7", 0.9], ["Q8", 0.1]]} for link in example["links"]]}
            for example in batch["knowledge"]
        ]
        second = model.encode({**batch, "knowledge": shuffled})
        plain = plain_states(model, batch)
    assert torch.equal(first, second)  # independent of the entity table and the candidates
    assert torch.allclose(first[2], plain[2], atol=1e-5)  # a text without spans is untouched
    assert not torch.allclose(first[0], plain[0], atol=1e-3)


@pytest.mark.parametrize("unlinked_spans", ["skip", "null"])
def test_gradients_reach_every_new_parameter(unlinked_spans):
    torch.manual_seed(0)
    _, tokenizer, _ = backbone()
    batch = batch_with_links(tokenizer)
    # δ below every score: the multi-candidate spans mix entities; the span of unknown qids has no
    # candidate at all (skipped, or the null embedding). The margin keeps the gold link's hinge active, the
    # scorer's last bias's only path (a softmax ignores a shift of all scores).
    model = knowbert(threshold=-1e4, linking_margin=2e4, unlinked_spans=unlinked_spans).train()
    hidden = model.encode(batch)
    losses = model.extra_losses(batch, hidden[:, 0])
    ((hidden**2).mean() + losses["linking"]).backward()
    # The span pooling's score bias shifts every logit of a softmax alike: its gradient is zero by mathematics
    # (up to rounding), so it is only required to be reached.
    shift_invariant = {"span_pooling.score.bias"}
    missing = [
        name
        for name, parameter in model.kar.named_parameters()
        if parameter.grad is None or (name not in shift_invariant and not parameter.grad.abs().sum() > 0)
    ]
    assert not missing, missing
    assert (model.kar.null_embedding is None) == (unlinked_spans == "skip")
    assert model.kar.entities.index["Q99"] > len(QIDS)  # the label fallback got its own row
    assert model.kar.entities.index["Qunknown"] == 0  # no vector, no label: masked
    assert not any(isinstance(value, torch.nn.Parameter) for value in vars(model.kar.entities).values())


def test_selective_injection_drops_spans_in_training_only():
    from knowledge_lm.methods.knowbert import KnowBertSI

    encoder, tokenizer, spec = backbone()
    model = KnowBertSI(encoder, spec, kar_layer=0, si_lambda=0.0, si_k_thresh=100, threshold=-1e4)
    model.kar.entities.load(table(), {})
    model.selective_injection = replace(model.selective_injection, sample_ratio=0.0, keep_probability=0.0)
    batch = batch_with_links(tokenizer)
    model.train()
    model.encode(batch)
    assert model._linking[1].span_valid.sum(-1).tolist() == [0, 0, 0]
    model.eval()
    model.encode(batch)
    assert model._linking[1].span_valid.sum(-1).tolist() == [2, 2, 0]
    assert (model.method_stats()["si_kept_links"], model.method_stats()["si_valid_links"]) == (0, 4)


def test_selective_injection_keeps_or_drops_every_span_of_an_entity_together():
    """On the device path the entity is the top candidate's table row: two spans of Q1 share one draw."""
    from knowledge_lm.methods.knowbert import KnowBertSI

    encoder, tokenizer, spec = backbone()
    model = KnowBertSI(encoder, spec, kar_layer=0, si_k_thresh=100, si_seed=3, threshold=-1e4)
    model.kar.entities.load(table(), {})
    batch = batch_with_links(tokenizer)
    q1 = {"segment": 0, "tokens": [3], "candidates": [["Q1", 0.9], ["Q4", 0.1]], "df": 1, "close": 0}
    batch["knowledge"] = [{"links": batch["knowledge"][0]["links"] + [q1]}] + batch["knowledge"][1:]
    model.train()
    draws = []
    with torch.no_grad():
        for _ in range(40):
            model.encode(batch)
            draws.append(model._linking[1].span_valid[0].tolist())
    assert all(kept[0] == kept[2] for kept in draws)  # spans 0 and 2: both Q1
    assert any(kept[0] != kept[1] for kept in draws) and any(not kept[0] for kept in draws)


def test_linking_loss_is_the_margin_ranking_of_gold_links_against_delta():
    from knowledge_lm.methods.knowbert import KnowledgeTensors, linking_loss

    scores = torch.tensor([[[0.5, float("-inf")], [0.1, 0.3]]])  # one text: a gold span, an alias span
    tensors = KnowledgeTensors(
        span_mask=torch.ones(1, 2, 4, dtype=torch.bool),
        span_valid=torch.ones(1, 2, dtype=torch.bool),
        candidate_ids=torch.tensor([[[1, 0], [2, 3]]]),
        priors=torch.tensor([[[1.0, 0], [0.5, 0.5]]]),
        candidate_mask=torch.tensor([[[True, False], [True, True]]]),
        gold=torch.tensor([[True, False]]),
        df=torch.zeros(1, 2, dtype=torch.long),
        close=torch.zeros(1, 2, dtype=torch.long),
    )
    # Only the gold span counts: max(0, 0.2 − (0.5 − δ)) with δ = 0.4.
    assert linking_loss(scores, tensors, threshold=0.4, margin=0.2).item() == pytest.approx(0.1)
    assert linking_loss(scores, tensors, threshold=0.0, margin=0.2).item() == 0.0


@pytest.fixture(scope="module")
def prepared_cache(tmp_path_factory, tokenizer):
    cache = tmp_path_factory.mktemp("knowbert-cache")
    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=cache, max_length=32, **SIZES)
    manifest = prepare(data, tokenizer, KnowledgeConfig(kg_embeddings=True), cache, progress=False)
    assert manifest["kg_embeddings"]
    return cache


@pytest.mark.parametrize("method", ["knowbert", "knowbert+si", "knowbert+si+sr"])
def test_knowbert_trains_as_a_cell(method, prepared_cache, tmp_path):
    from knowledge_lm.core.results import Cell
    from knowledge_lm.run.cell import run_cell
    from knowledge_lm.run.config import TrainConfig

    train = TrainConfig(batch_size=8, max_steps=3, evaluations=1, max_length=32, method_options={"kar_layer": 0})
    result = run_cell(
        Cell(method, "generated", "facts", 1.0, 1, "tiny"),
        train,
        results_dir=tmp_path / "r",
        runs_dir=tmp_path / "runs",
        dataset_options={**SIZES, "cache_dir": str(prepared_cache), "knowledge": {"kg_embeddings": True}},
        progress=False,
    )
    assert result["cell"]["method"] == method and "accuracy" in result["metrics"]["test"]
    assert result["method_stats"]["entity_scale"] > 0  # the scale the TransE rows were read at, as derived
    if method != "knowbert":  # SI's record: the share of links kept, K_thresh from the train split's DF
        stats = result["method_stats"]
        assert 0 < stats["si_kept_share"] <= 1 and stats["si_k_thresh_source"] == "quantile 0.9 of train DF"
    if method == "knowbert":  # a knowledge method keeps its test examples' entity frequencies, in split order
        import gzip

        from knowledge_lm.core.results import predictions_path

        with gzip.open(
            predictions_path(Cell(method, "generated", "facts", 1.0, 1, "tiny").result_path(tmp_path / "r")), "rt"
        ) as kept:
            frequencies = json.load(kept)["entity_frequency"]
        assert len(frequencies) == SIZES["test_size"] and all(f is None or f >= 0 for f in frequencies)


def test_knowledge_pretraining_checkpoint_starts_a_knowbert_cell(prepared_cache, tmp_path):
    import json

    from knowledge_lm.core.backbones import load_backbone
    from knowledge_lm.core.results import Cell
    from knowledge_lm.run.cell import run_cell
    from knowledge_lm.run.config import TrainConfig
    from knowledge_lm.run.knowbert_pretraining import knowbert_checkpoint as pretrain_checkpoint

    out = pretrain_checkpoint(
        "generated",
        tmp_path / "knowbert-tiny",
        backbone="tiny",
        steps=3,
        batch_size=8,
        max_length=32,
        cache_dir=prepared_cache,
        dataset_options=SIZES,
        progress=False,
        kar_layer=0,
        entity_dim=100,
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert (
        manifest["kar"]["kar_layer"] == 0
        and manifest["steps"] == 3
        and set(manifest["final_losses"]) == {"mlm", "linking"}
    )
    saved = torch.load(out / "kar.pt", weights_only=True)
    encoder, _, _ = load_backbone(str(out))
    model = KnowBert(encoder, backbone()[2])  # no KAR options: the checkpoint's shape and weights
    assert model.kar_layer == 0 and all(
        torch.equal(value, model.kar.state_dict()[name]) for name, value in saved.items()
    )
    train = TrainConfig(batch_size=8, max_steps=2, evaluations=1, max_length=32)
    result = run_cell(
        Cell("knowbert", "generated", "facts", 1.0, 1, str(out)),
        train,
        results_dir=tmp_path / "r",
        runs_dir=tmp_path / "runs",
        dataset_options={**SIZES, "cache_dir": str(prepared_cache), "knowledge": {}},
        progress=False,
    )
    assert "accuracy" in result["metrics"]["test"] and result["backbone"]["pretrained_from"] == "tiny"


def test_pretraining_refuses_bad_input(tmp_path):
    from knowledge_lm.run.knowbert_pretraining import knowbert_checkpoint as pretrain_checkpoint

    with pytest.raises(KlmError, match="steps > 0"):
        pretrain_checkpoint("generated", tmp_path / "x", backbone="tiny", steps=0)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "file").write_text("x")
    with pytest.raises(KlmError, match="already exists"):
        pretrain_checkpoint("generated", tmp_path / "full", backbone="tiny", steps=1)


def test_entity_rows_read_at_the_span_norm_and_zero_knowledge_zeroes_them():
    from knowledge_lm.knowledge.kg_embeddings import EntityEmbeddings
    from knowledge_lm.methods.knowbert import EntityTable

    matrix = torch.nn.functional.normalize(torch.randn(5, 16), dim=-1)
    embeddings = EntityEmbeddings([f"Q{i}" for i in range(5)], matrix, ["P1"], torch.randn(1, 16), {})
    table = EntityTable(16)
    table.load(embeddings)
    rows = table(torch.tensor([1, 2, 3]))
    assert torch.allclose(rows.norm(dim=-1), torch.full((3,), 4.0), atol=1e-4)  # √16
    fixed = EntityTable(16)
    fixed.scale = 1.0
    fixed.load(embeddings)
    assert torch.allclose(fixed(torch.tensor([1])).norm(), torch.tensor(1.0), atol=1e-4)
    table.zeroed = True
    assert table(torch.tensor([1, 2])).abs().max() == 0
