"""KAM-BERT: the α = 0 invariant, the conv's channels and their initialisation, the maps, PMI expansion, the
zeroed-knowledge control, gradients, and cells that train."""

import pytest
import torch

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import METHODS
from knowledge_lm.data.generated import GeneratedDataModule
from knowledge_lm.knowledge.prepare import KnowledgeConfig, prepare
from knowledge_lm.methods.kam import DEFAULT_MAPS, Kam, KamSelfAttention, knowledge_maps, mix_attention

SIZES = {"train_size": 40, "dev_size": 10, "test_size": 10}


def kam(method: str = "kam", **options) -> Kam:
    from knowledge_lm.core.backbones import load_backbone

    encoder, _, _ = load_backbone("tiny", attn_implementation="eager", seed=0)
    return METHODS.get(method)(encoder, GeneratedDataModule.spec("facts"), **options)


def plain_encoder():
    from knowledge_lm.core.backbones import load_backbone

    return load_backbone("tiny", attn_implementation="eager", seed=0)[0].eval()


def features():
    """Hand-made features: text 0 has a 3-piece entity (tokens 2-4, named and linked), a phrase (1-4), PMI between
    words and two expansion words (a 2-piece one with PMI to word 0, then a 1-piece one); text 1 has a named
    entity and a linked mention that differ, each partly truncated away, and no expansion word."""
    return [
        {
            "links": [{"segment": 0, "tokens": [2, 3, 4], "candidates": [["Q1", 1.0]]}],
            "ner": [{"segment": 0, "tokens": [2, 3, 4], "label": "ORG"}],
            "phrases": [{"segment": 0, "tokens": [1, 2, 3, 4]}],
            "words": [{"tokens": [1]}, {"tokens": [2, 3, 4]}, {"tokens": [5]}],
            "pmi_pairs": [[0, 2, 0.5]],
            "pmi_expansion": [
                {"word": "omega", "ids": [1010, 1011], "pmi": [[0, 0.25]]},
                {"word": "rho", "ids": [1012], "pmi": [[2, 0.75]]},
            ],
        },
        {
            "links": [{"segment": 0, "tokens": [1, 40], "candidates": [["Q2", 1.0]]}],  # 40: truncated away
            "ner": [{"segment": 0, "tokens": [2, 40], "label": "PERSON"}],
            "phrases": [],
            "words": [{"tokens": [1]}],
            "pmi_expansion": [],
        },
    ]


def batch(tokenizer):
    encoded = tokenizer(["alpha beta gamma delta epsilon", "zeta eta"], padding=True, return_tensors="pt")
    return {**encoded, "knowledge": features()}


def first_conv_inputs(model: Kam, seen: list | None = None) -> list:
    """Appends to ``seen`` (returned) what the first layer's conv reads in each ``encode`` from now on: the logits
    with padding pairs zeroed, then the maps (b × (heads + maps) × n × n)."""
    seen = [] if seen is None else seen
    mix, first = model.kam_state.mix, model.kam_layers[0].conv

    def reading(logits, maps, attention_mask, padding_pairs, *, weight, **rest):
        if weight is first.weight:
            visible = logits if padding_pairs is None else logits.masked_fill(padding_pairs, 0.0)
            seen.append(torch.cat([visible, maps], 1))
        return mix(logits, maps, attention_mask, padding_pairs, weight=weight, **rest)

    model.kam_state.mix = reading
    return seen


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


def test_skip_hands_the_next_layer_the_result_map_after_softmax(tokenizer):
    """§3.3: layer i+1's logits get layer i's result attention map A^i (Eq. 3, a softmax), so each added row sums
    to 1 over the keys instead of growing with depth; with α = 0 the first layer still equals the backbone's."""
    model = kam(alpha=0.0).eval()
    handed = []
    for layer in model.kam_layers:
        layer.register_forward_pre_hook(lambda module, args: handed.append(module.kam_state.previous))
    with torch.no_grad():
        model.encode(batch(tokenizer))
    assert handed[0] is None and len(handed) == len(model.kam_layers)
    for previous in handed[1:]:
        assert previous.min() >= 0 and torch.allclose(previous.sum(-1), torch.ones(previous.shape[:-1]))


def test_under_mixed_precision_the_maps_stay_in_the_compute_dtype(tokenizer):
    """Under bf16 autocast each layer hands the next a bf16 result map, not the float32 that autocast's softmax
    returns (twice the bytes on every b × m × n × n pass), and the states stay close to float32's."""
    model = kam(alpha=0.5).eval()
    handed = []
    for layer in model.kam_layers:
        layer.register_forward_pre_hook(lambda module, args: handed.append(module.kam_state.previous))
    inputs = batch(tokenizer)
    with torch.no_grad():
        expected = model.encode(inputs)
        handed.clear()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = model.encode(inputs)
    assert [previous.dtype for previous in handed[1:]] == [torch.bfloat16] * (len(handed) - 1)
    assert torch.allclose(mixed.float(), expected, atol=0.1)


def test_padding_does_not_leak_through_the_conv(tokenizer):
    """An example's states are the same alone and padded in a batch with a longer text (conv on, α = 1)."""
    model = kam(alpha=1.0).eval()
    example = {"links": [], "phrases": [], "words": [], "pmi_pairs": []}
    alone = tokenizer(["alpha beta"], return_tensors="pt")
    padded = tokenizer(["alpha beta", "gamma delta epsilon zeta eta"], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = model.encode({**alone, "knowledge": [example]})[0]
        states = model.encode({**padded, "knowledge": [example, example]})[0, : len(expected)]
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


def seeded(method: str, seed: int = 0, **options) -> Kam:
    torch.manual_seed(seed)
    return kam(method, **options)


def test_ablations_share_the_logit_channels_and_each_maps_weights():
    """Built from one seed, kam and its map ablations have the same logit-channel weights and bias, each map the
    same weights wherever its channel is, and leave the global RNG in the same state."""
    full = seeded("kam")
    after_full = torch.rand(4)
    heads = full.encoder.config.num_attention_heads
    for method in ("kam-no-pmi", "kam-no-phrase", "kam-no-entity", "kam+kg"):
        ablation = seeded(method)
        assert torch.equal(torch.rand(4), after_full)
        for ours, theirs in zip(full.kam_layers, ablation.kam_layers):
            assert torch.equal(ours.conv.weight[:, :heads], theirs.conv.weight[:, :heads])
            assert torch.equal(ours.conv.bias, theirs.conv.bias)
            for name in set(DEFAULT_MAPS) & set(ablation.maps):
                assert torch.equal(
                    ours.conv.weight[:, heads + full.maps.index(name)],
                    theirs.conv.weight[:, heads + ablation.maps.index(name)],
                )
    other = seeded("kam", seed=1)
    layers = full.kam_layers
    assert not torch.equal(other.kam_layers[0].conv.weight, layers[0].conv.weight)
    assert not torch.equal(layers[0].conv.weight, layers[1].conv.weight)  # every layer draws its own
    entity, phrase = layers[0].conv.weight[:, heads], layers[0].conv.weight[:, heads + 1]
    assert not torch.equal(entity, phrase)
    # The map channels' scale (initialise_conv's choice), well above the logit channels' (1/√(9m)).
    assert 0.2 < float(torch.cat([layer.conv.weight[:, heads:] for layer in layers]).std()) < 0.5


def test_new_modules_are_the_convs_and_train_at_their_own_rate():
    model = kam(new_module_lr=1e-3)
    assert model.new_modules() == [layer.conv for layer in model.kam_layers]
    assert kam("kam-no-conv").new_modules() == []
    optimizer = model.configure_optimizers()["optimizer"]
    fast = {
        id(parameter)
        for group in optimizer.param_groups
        if group["initial_lr"] == 1e-3
        for parameter in group["params"]
    }
    assert fast == {id(parameter) for conv in model.new_modules() for parameter in conv.parameters()}


def test_the_entity_map_comes_from_named_entities_or_linked_mentions():
    ner = knowledge_maps(features(), 8, maps=("entity",))[:, 0]
    links = knowledge_maps(features(), 8, maps=("entity",), entity_source="links")[:, 0]
    assert torch.equal(ner[0], links[0])  # text 0: the named entity is the linked mention
    assert ner[1].sum() == 1 and ner[1, 2, 2] == 1  # text 1: the named entity, token 2
    assert links[1].sum() == 1 and links[1, 1, 1] == 1  # the linked mention, token 1
    without_ner = [{key: value for key, value in example.items() if key != "ner"} for example in features()]
    assert knowledge_maps(without_ner, 8, maps=("entity",)).sum() == 0
    with pytest.raises(KlmError, match="entity_source"):
        knowledge_maps(features(), 8, maps=("entity",), entity_source="spans")
    with pytest.raises(KlmError, match="entity_source"):
        kam(entity_source="spans")
    assert kam().entity_source == "ner" and kam("kam+si").entity_source == "links"


def test_the_model_reads_the_chosen_entity_source(tokenizer):
    entity_maps = []  # text 1's entity map as the first conv reads it
    for source in ("ner", "links"):
        model = kam(entity_source=source).eval()
        seen = first_conv_inputs(model)
        with torch.no_grad():
            model.encode(batch(tokenizer))
        entity_maps.append(seen[0][1, -3])
    ner, links = entity_maps
    assert ner[2, 2] == 1 and ner[1, 1] == 0 and links[1, 1] == 1 and links[2, 2] == 0


def test_zero_knowledge_runs_on_empty_knowledge(tokenizer):
    """The control zeroes every map and appends no expansion word: the same states as examples without features,
    unlike the real maps'; the conv still runs, on the logits and all-zero maps."""
    model = kam(expansion_k=2).eval()
    inputs = batch(tokenizer)
    empty = {
        **inputs,
        "knowledge": [{"links": [], "ner": [], "phrases": [], "words": [], "pmi_pairs": [], "pmi_expansion": []}] * 2,
    }
    with torch.no_grad():
        real = model.encode(inputs)
        without = model.encode(empty)
        model.options.zero_knowledge = True
        seen = first_conv_inputs(model)
        zeroed = model.encode(inputs)
    assert torch.allclose(zeroed, without, atol=1e-6)
    assert (zeroed - real).abs().max() > 1e-3
    heads, length = model.encoder.config.num_attention_heads, inputs["input_ids"].shape[1]
    assert seen[0].shape == (2, heads + 3, length, length)  # no expansion rows
    assert seen[0][:, heads:].abs().sum() == 0
    entity = DEFAULT_MAPS.index("entity")
    assert knowledge_maps(inputs["knowledge"], length)[:, entity].sum() > 0  # the entity map, zeroed too
    assert kam(zero_knowledge=True).options.zero_knowledge


def test_kam_kg_adds_the_kg_map(tokenizer):
    from knowledge_lm.knowledge.kg import KnowledgeGraph

    model = kam("kam+kg").eval()
    assert model.maps == (*DEFAULT_MAPS, "kg")
    assert model.kam_layers[0].conv.in_channels == model.encoder.config.num_attention_heads + 4
    model.load_kg(KnowledgeGraph([("Q1", "P1", "Q2")]))
    inputs = batch(tokenizer)
    example = {
        "links": [{"tokens": [1], "candidates": [["Q1", 1.0]]}, {"tokens": [2], "candidates": [["Q2", 1.0]]}],
        "words": [],
        "pmi_pairs": [],
    }
    seen = first_conv_inputs(model)
    with torch.no_grad():
        model.encode({**inputs, "knowledge": [example, {**example, "links": []}]})
    seen = [conv_input[:, -1] for conv_input in seen]
    assert seen[0][0, 1, 2] == 1 and seen[0][0, 2, 1] == 1 and seen[0][0].sum() == 2
    assert seen[0][1].sum() == 0


def test_maps_of_a_multi_piece_entity():
    maps = knowledge_maps(features(), 8, maps=("entity", "phrase", "pmi"))
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
    # A named entity partly truncated keeps its tokens in range; text 1 has no phrase and no PMI pairs.
    assert maps[1, 0].sum() == 1 and maps[1, 0, 2, 2] == 1
    assert maps[1, 1:].sum() == 0
    with pytest.raises(KlmError, match="pmi_pairs"):
        knowledge_maps(features(), 8, maps=("pmi",), missing_pmi="error")
    with pytest.raises(KlmError, match="knowledge graph"):
        knowledge_maps(features(), 8, maps=("kg",))


def test_kg_map_links_the_tokens_of_adjacent_entities():
    from knowledge_lm.knowledge.kg import KnowledgeGraph

    kg = KnowledgeGraph([("Q1", "P1", "Q2"), ("Q3", "P1", "Q4")])
    example = {
        "links": [
            {"tokens": [1, 2], "candidates": [["Q1", 0.9], ["Q3", 0.1]]},
            {"tokens": [4], "candidates": [["Q2", 1.0]]},
            {"tokens": [5], "candidates": [["Q4", 1.0]]},  # adjacent to Q3, not linked top
            {"tokens": [6], "candidates": [["Qunknown", 1.0]]},
        ]
    }
    kg_map = knowledge_maps([example], 8, maps=("kg",), kg=kg)[0, 0]
    expected = torch.zeros(8, 8)
    expected[1:3, 4] = expected[4, 1:3] = 1
    assert torch.equal(kg_map, expected)
    model = kam(maps=["entity", "kg"])
    model.load_kg(kg)
    assert model.kam_layers[0].conv.in_channels == model.encoder.config.num_attention_heads + 2


def test_bad_options_raise():
    with pytest.raises(KlmError, match="unknown map"):
        kam(maps=["entity", "dependency"])
    with pytest.raises(KlmError, match="needs the pmi map"):
        kam(maps=["entity"], expansion_k=2)
    with pytest.raises(KlmError, match="expansion_k"):
        kam(expansion_k=-1)


def test_expansion_maps_are_padded_to_n_plus_k():
    plain = knowledge_maps(features(), 8, maps=("entity", "phrase", "pmi"))
    maps = knowledge_maps(features(), 8, maps=("entity", "phrase", "pmi"), expansion_k=2)
    assert maps.shape == (2, 3, 11, 11)  # K = 3 sub-words: the largest of the batch
    assert torch.equal(maps[:, :, :8, :8], plain)
    assert maps[:, :2, 8:].sum() == 0 and maps[:, :2, :, 8:].sum() == 0  # entity and phrase: zero padding
    pmi = maps[0, 2]
    assert torch.equal(pmi[8:10, 8:10], torch.ones(2, 2)) and pmi[10, 10] == 1  # 1 within an expansion word
    assert pmi[1, 8] == pmi[8, 1] == pmi[1, 9] == 0.25 and pmi[5, 10] == pmi[10, 5] == 0.75
    assert pmi[8, 10] == 0 and pmi[2, 8] == 0
    assert maps[1, :, 8:].sum() == 0  # text 1 has no expansion word
    assert knowledge_maps(features(), 8, maps=("pmi",), expansion_k=1).shape[-1] == 10
    with pytest.raises(KlmError, match="pmi_expansion"):
        knowledge_maps([{"words": []}], 8, maps=("pmi",), expansion_k=1)


def test_expansion_keeps_n_outputs_and_attends_to_the_auxiliary_words(tokenizer):
    inputs = batch(tokenizer)
    length = inputs["input_ids"].shape[1]
    model = kam(alpha=0.0, skip=False, expansion_k=2).eval()
    seen = []
    first_conv_inputs(model, seen)
    model.kam_layers[0].register_forward_hook(lambda module, args, output: seen.append(output[1]))
    with torch.no_grad():
        states = model.encode(inputs)
        plain = plain_encoder()(
            **{k: inputs[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
        ).last_hidden_state
        assert states.shape == plain.shape == (2, length, model.encoder.config.hidden_size)
        heads = model.encoder.config.num_attention_heads
        assert [x.shape for x in seen] == [(2, heads + 3, length + 3, length + 3), (2, heads, length, length + 3)]
        # Text 0 attends to its expansion words, text 1 has none: with α = 0 and no skip it is the backbone's.
        assert (states[0] - plain[0]).abs().max() > 1e-4
        assert torch.allclose(states[1], plain[1], atol=1e-5)
        assert model.kam_state.auxiliary is None and model.kam_state.real is None  # cleared after encode


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


@pytest.mark.parametrize(
    "method, options",
    [
        ("kam", {}),
        ("kam-no-conv", {}),
        ("kam+kg", {}),
        ("kam", {"expansion_k": 3}),
        ("kam", {"zero_knowledge": True}),
        ("kam+si", {}),
    ],
)
def test_kam_trains_as_a_cell(method, options, prepared_cache, tmp_path):
    from knowledge_lm.core.results import Cell
    from knowledge_lm.run.cell import run_cell
    from knowledge_lm.run.config import TrainConfig

    train = TrainConfig(batch_size=8, max_steps=3, evaluations=1, max_length=32, method_options=options)
    result = run_cell(
        Cell(method, "generated", "facts", 1.0, 1, "tiny"),
        train,
        results_dir=tmp_path / "r",
        runs_dir=tmp_path / "runs",
        dataset_options={**SIZES, "cache_dir": str(prepared_cache), "knowledge": {}},
        progress=False,
    )
    assert result["cell"]["method"] == method and "accuracy" in result["metrics"]["test"]
    if method == "kam+si":  # SI's record: the share of links kept, K_thresh from the train split's DF
        stats = result["method_stats"]
        assert 0 < stats["si_kept_share"] <= 1 and stats["si_k_thresh_source"] == "quantile 0.9 of train DF"


def test_kam_si_filters_the_links_in_training_only(tokenizer):
    from knowledge_lm.methods.kam import KamSI

    encoder = plain_encoder()
    model = KamSI(encoder, GeneratedDataModule.spec("facts"), si_seed=1)
    filtered = []

    def drop_every_link(df, close, valid, entities, generator=None):
        filtered.append(len(valid))
        return torch.zeros_like(valid)

    object.__setattr__(model.selective_injection, "keep_mask", drop_every_link)
    inputs = {
        **batch(tokenizer),
        "knowledge": [
            {**example, "links": [{**link, "df": 1, "close": 0} for link in example["links"]]} for example in features()
        ],
    }
    seen = first_conv_inputs(model)
    model.train().encode(inputs)
    model.eval().encode(inputs)
    seen = [conv_input[:, -3].sum().item() for conv_input in seen]
    assert filtered == [2]  # called once, for the training batch
    assert seen[0] == 0 and seen[1] > 0  # the entity map: empty after SI dropped every link, full in evaluation


def si_features():
    """Links to drop: overlapping mentions, an entity mentioned twice, a link without candidates, one truncated."""
    rows = features()
    rows[0]["links"] = [
        {"tokens": [2, 3, 4], "candidates": [["Q1", 1.0]], "df": 1, "close": 0},
        {"tokens": [3, 4, 5], "candidates": [["Q2", 0.6], ["Q1", 0.4]], "df": 9, "close": 3},
        {"tokens": [1], "candidates": [["Q1", 1.0]], "df": 1, "close": 0},
        {"tokens": [6], "candidates": [], "df": 0, "close": 0},
        {"tokens": [7, 40], "candidates": [["Q3", 1.0]], "df": 2, "close": 12},
    ]
    rows[1]["links"] = [{**link, "df": 4, "close": 6} for link in rows[1]["links"]]
    return rows


def test_si_dropping_entries_gives_the_maps_of_the_filtered_features():
    """kam+si drops the entries of the links SI did not inject from the batch's entries (``KamKnowledge.maps``):
    the same maps, exactly, as entries built again from the features ``filter_batch`` filtered, draw for draw."""
    from knowledge_lm.knowledge.kg import KnowledgeGraph
    from knowledge_lm.methods.kam import map_entries
    from knowledge_lm.methods.sisr import SelectiveInjection

    kg = KnowledgeGraph([("Q1", "P1", "Q2"), ("Q2", "P1", "Q3"), ("Q1", "P2", "Q1")])
    maps, rows = ("entity", "phrase", "pmi", "kg"), si_features()
    options = {"maps": maps, "kg": kg, "expansion_k": 2, "entity_source": "links"}
    entries = map_entries(rows, 8, links=True, **options)
    assert torch.equal(entries.maps(len(rows), len(maps)), knowledge_maps(rows, 8, **options))  # nothing dropped
    filtering, masking = (SelectiveInjection(k_thresh=3, k_min=1, k_max=10, seed=5) for _ in range(2))
    kept_counts = set()
    for _ in range(12):
        expected = knowledge_maps(filtering.filter_batch(rows, filtering.generator("cpu")), 8, **options)
        links = entries.links
        kept = masking.keep_mask(links.df, links.close, links.valid, links.entities, masking.generator("cpu"))
        assert torch.equal(entries.maps(len(rows), len(maps), kept), expected)
        kept_counts.add(int(kept.sum()))
    assert len(kept_counts) > 1  # the draws dropped different numbers of links
    assert filtering.counts.tolist() == masking.counts.tolist()


def test_kam_si_collated_batches_train_as_per_example_features(tokenizer):
    """A training batch whose entries the loader built (with their links) encodes as the same batch of features."""
    from knowledge_lm.methods.kam import KamSI

    states = []
    for collated in (False, True):
        torch.manual_seed(0)
        model = KamSI(plain_encoder(), GeneratedDataModule.spec("facts"), si_seed=3, si_k_thresh=3)
        inputs = {**batch(tokenizer), "knowledge": si_features()}
        if collated:
            inputs["knowledge"] = model.batch_entries(inputs["knowledge"], inputs["input_ids"].shape[1])
        model.train()
        torch.manual_seed(1)  # dropout
        states.append(model.encode(inputs))
    assert torch.equal(*states)


@pytest.mark.slow  # about 20 s on 2 cores: inductor builds C++ kernels; the eager KAM is tested above
def test_compiled_kam_matches_eager(tokenizer):
    """``compile=true``: the mix is one compiled function for every layer (the layers' shared state stays outside
    it) and the parts after the attention compile as plain modules; the states match the eager ones."""
    inputs, model = batch(tokenizer), kam().eval()
    with torch.no_grad():
        expected = model.encode(inputs)
        model.compile_modules("default")
        assert model.kam_state.mix is not mix_attention
        states = model.encode(inputs)
    assert torch.allclose(states, expected, atol=1e-5)
