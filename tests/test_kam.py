"""KAM-BERT: the α = 0 invariant, the conv's channels, the maps, gradients, and cells that train."""

import pytest
import torch

from knowledge_lm.data.generated import GeneratedDataModule
from knowledge_lm.errors import KlmError
from knowledge_lm.knowledge.prepare import KnowledgeConfig, prepare
from knowledge_lm.methods.kam import Kam, KamSelfAttention, knowledge_maps

SIZES = {"train_size": 40, "dev_size": 10, "test_size": 10}


def kam(**options) -> Kam:
    from knowledge_lm.backbones import load_backbone

    encoder, _, _ = load_backbone("tiny", attn_implementation="eager", seed=0)
    return Kam(encoder, GeneratedDataModule.spec("facts"), **options)


def plain_encoder():
    from knowledge_lm.backbones import load_backbone

    return load_backbone("tiny", attn_implementation="eager", seed=0)[0].eval()


def features():
    """Hand-made features: text 0 has a 3-piece entity (tokens 2-4), a phrase (1-4) and PMI between words."""
    return [
        {"links": [{"segment": 0, "tokens": [2, 3, 4], "candidates": [["Q1", 1.0]]}],
         "phrases": [{"segment": 0, "tokens": [1, 2, 3, 4]}],
         "words": [{"tokens": [1]}, {"tokens": [2, 3, 4]}, {"tokens": [5]}],
         "pmi_pairs": [[0, 2, 0.5]]},
        {"links": [{"segment": 0, "tokens": [1, 40], "candidates": [["Q2", 1.0]]}],  # 40: truncated away
         "phrases": [], "words": [{"tokens": [1]}]},
    ]


def batch(tokenizer):
    encoded = tokenizer(["alpha beta gamma delta epsilon", "zeta eta"], padding=True, return_tensors="pt")
    return {**encoded, "knowledge": features()}


def test_alpha_zero_without_skip_is_the_backbone_exactly(tokenizer):
    model = kam(alpha=0.0, skip=False).eval()
    inputs = batch(tokenizer)
    plain = plain_encoder()
    with torch.no_grad():
        expected = plain(**{k: inputs[k] for k in ("input_ids", "attention_mask", "token_type_ids")}).last_hidden_state
        assert torch.allclose(model.encode(inputs), expected, atol=1e-5)
        # With the mix on (α = 1 for a visible effect on the tiny, near-uniform attention), the states change.
        for layer in model.kam_layers:
            layer.alpha = 1.0
        assert (model.encode(inputs) - expected).abs().max() > 1e-3


def test_padding_does_not_leak_through_the_conv(tokenizer):
    """An example's states are the same alone and padded in a batch with a longer text (conv on, α = 1)."""
    model = kam(alpha=1.0).eval()
    example = {"links": [], "phrases": [], "words": [], "pmi_pairs": []}
    alone = tokenizer(["alpha beta"], return_tensors="pt")
    padded = tokenizer(["alpha beta", "gamma delta epsilon zeta eta"], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = model.encode({**alone, "knowledge": [example]})[0]
        states = model.encode({**padded, "knowledge": [example, example]})[0, :len(expected)]
    assert torch.allclose(states, expected, atol=1e-6)


def test_every_layer_is_wrapped_and_the_conv_reads_heads_plus_maps():
    model = kam()
    heads = model.encoder.config.num_attention_heads
    assert len(model.kam_layers) == model.encoder.config.num_hidden_layers
    assert all(isinstance(layer.attention.self, KamSelfAttention) for layer in model.encoder.encoder.layer)
    assert all(layer.conv.in_channels == heads + 3 and layer.conv.out_channels == heads for layer in model.kam_layers)
    assert kam(maps=["entity"]).kam_layers[0].conv.in_channels == heads + 1
    assert kam(use_conv=False).kam_layers[0].conv is None
    # The backbone's weights keep their state-dict names.
    assert "encoder.encoder.layer.0.attention.self.query.weight" in model.state_dict()


def test_maps_of_a_multi_piece_entity():
    maps = knowledge_maps(features(), 8, ("entity", "phrase", "pmi"))
    assert maps.shape == (2, 3, 8, 8)
    entity = torch.zeros(8, 8)
    entity[2:5, 2:5] = 1
    assert torch.equal(maps[0, 0], entity)
    phrase = torch.zeros(8, 8)
    phrase[1:5, 1:5] = 1
    assert torch.equal(maps[0, 1], phrase)
    pmi = maps[0, 2]
    assert pmi[1, 1] == 1 and torch.equal(pmi[2:5, 2:5], torch.ones(3, 3))  # 1 within a word
    assert pmi[1, 5] == 0.5 and pmi[5, 1] == 0.5 and pmi[1, 2] == 0 and pmi[0, 0] == 0
    # A link partly truncated keeps its tokens in range; text 1 has no phrase and no PMI pairs.
    assert maps[1, 0].sum() == 1 and maps[1, 0, 1, 1] == 1
    assert maps[1, 1:].sum() == 0
    with pytest.raises(KlmError, match="pmi_pairs"):
        knowledge_maps(features(), 8, ("pmi",), missing_pmi="error")
    with pytest.raises(KlmError, match="knowledge graph"):
        knowledge_maps(features(), 8, ("kg",))


def test_kg_map_links_the_tokens_of_adjacent_entities():
    from knowledge_lm.knowledge.kg import KnowledgeGraph

    kg = KnowledgeGraph([("Q1", "P1", "Q2"), ("Q3", "P1", "Q4")])
    example = {"links": [{"tokens": [1, 2], "candidates": [["Q1", 0.9], ["Q3", 0.1]]},
                         {"tokens": [4], "candidates": [["Q2", 1.0]]},
                         {"tokens": [5], "candidates": [["Q4", 1.0]]},  # adjacent to Q3, not linked top
                         {"tokens": [6], "candidates": [["Qunknown", 1.0]]}]}
    kg_map = knowledge_maps([example], 8, ("kg",), kg=kg)[0, 0]
    expected = torch.zeros(8, 8)
    expected[1:3, 4] = expected[4, 1:3] = 1
    assert torch.equal(kg_map, expected)
    model = kam(maps=["entity", "kg"])
    model.load_kg(kg)
    assert model.kam_layers[0].conv.in_channels == model.encoder.config.num_attention_heads + 2


def test_unimplemented_options_raise():
    with pytest.raises(KlmError, match="not implemented"):
        kam(pmi_expansion=True)
    with pytest.raises(KlmError, match="unknown map"):
        kam(maps=["entity", "dependency"])


def test_gradients_reach_the_conv(tokenizer):
    torch.manual_seed(0)
    model = kam().train()
    (model.encode(batch(tokenizer)) ** 2).mean().backward()
    for layer in model.kam_layers:
        assert layer.conv.weight.grad is not None and layer.conv.weight.grad.abs().sum() > 0
    assert model.kam_state.maps is None and model.kam_state.previous is None  # cleared after encode


@pytest.fixture(scope="module")
def prepared_cache(tmp_path_factory, tokenizer):
    cache = tmp_path_factory.mktemp("kam-cache")
    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=cache, max_length=32, **SIZES)
    prepare(data, tokenizer, KnowledgeConfig(), cache, progress=False)
    return cache


@pytest.mark.parametrize("method, options", [("kam", {}), ("kam-no-conv", {}),
                                             ("kam", {"maps": ["entity", "phrase", "kg"]})])
def test_kam_trains_as_a_cell(method, options, prepared_cache, tmp_path):
    from knowledge_lm.cell import run_cell
    from knowledge_lm.config import TrainConfig
    from knowledge_lm.results import Cell

    train = TrainConfig(batch_size=8, max_steps=3, evaluations=1, max_length=32, method_options=options)
    result = run_cell(Cell(method, "generated", "facts", 1.0, 1, "tiny"), train, results_dir=tmp_path / "r",
                      runs_dir=tmp_path / "runs", dataset_options={**SIZES, "cache_dir": str(prepared_cache), "knowledge": {}},
                      progress=False)
    assert result["cell"]["method"] == method and "accuracy" in result["metrics"]["test"]
