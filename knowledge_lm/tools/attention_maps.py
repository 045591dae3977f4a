"""``klm attention``: one sentence's attention maps in the baseline and in KAM, side by side (the KAM-BERT paper,
Fig. 3).

The sentence's knowledge features come from the featurizers ``klm prepare`` uses (spaCy words, NER and
phrases; alias-table links against ``kg_dir`` when given, else none; PMI from ``pmi_corpus`` when given,
else none), computed here on the fly for this one text. Both models load the same backbone; checkpoints
(a Lightning ``.ckpt`` of a cell, or a bare state dict) replace the weights of its encoder, KAM's convs
included. Without a KAM checkpoint the convs are freshly initialised (``seed``): the picture then shows
what the knowledge maps do to untrained KAM attention, not what fine-tuning made of them.

Each panel is one layer's attention probabilities (rows: queries, columns: keys), one head or the mean
over heads. KAM's panel has K more columns when PMI expansion is on: the auxiliary sub-words.
The figure is drawn on a bare ``matplotlib.figure.Figure`` (the Agg canvas), so no display is needed.
"""

import pickle
from pathlib import Path

import torch
from matplotlib.figure import Figure

from knowledge_lm.core.backbones import encoder_layers, load_backbone
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import METHODS, TASK_KINDS
from knowledge_lm.data.base import TaskSpec
from knowledge_lm.knowledge.annotate import Annotator
from knowledge_lm.knowledge.kg import KnowledgeGraph
from knowledge_lm.knowledge.linking import AliasTable, EntityLinker
from knowledge_lm.knowledge.prepare import KnowledgeConfig, example_features, pmi_statistics, with_pmi_features
from knowledge_lm.methods.kam import Kam
from knowledge_lm.tasks.base import ENCODER_INPUTS, tokenize_with_offsets


def sentence_features(
    text: str,
    tokenizer,
    max_length: int,
    *,
    kg_dir: str | None = None,
    pmi_corpus: str | None = None,
    annotator: str = "spacy",
    phrases: str = "noun_chunks",
) -> dict:
    """The knowledge features ``klm prepare`` would store for ``text`` as a one-example dataset."""

    config = KnowledgeConfig.from_dict(
        {"kg_dir": kg_dir, "pmi_corpus": pmi_corpus, "annotator": annotator, "phrases": phrases}
    )
    if kg_dir:
        if not Path(kg_dir).expanduser().is_dir():
            raise KlmError(f"knowledge graph directory {kg_dir} does not exist")
        kg = KnowledgeGraph.load(Path(kg_dir).expanduser())
        linker = EntityLinker(
            AliasTable.from_entities(
                ((e.qid, e.label, e.surface_forms) for e in kg.entities.values()), max_candidates=config.max_candidates
            )
        )
        mentions = linker.link(text)
    else:
        kg, mentions = KnowledgeGraph([]), []
    record = {"id": "text", "text_a": text}
    annotation = Annotator(backend=config.annotator, phrases=config.phrases).annotate([text])[0]
    pmi = pmi_statistics(config, [])  # without a corpus: no PMI
    encoded = tokenize_with_offsets(tokenizer, text, max_length=max_length)
    encoding = {"offset_mapping": encoded["offset_mapping"], "sequence_ids": encoded.sequence_ids()}
    task_kind = TASK_KINDS.get("classification")(TaskSpec("attention", "classification", ("0", "1")))
    features = example_features(record, [mentions], [annotation], encoding, pmi, {}, kg, config, task_kind)
    return with_pmi_features(features, pmi, tokenizer)


def load_encoder_weights(encoder: torch.nn.Module, path: str, what: str):
    """The ``encoder.*`` weights of a cell's checkpoint (or a bare state dict) into ``encoder``, which must fit
    them all."""
    if not Path(path).is_file():
        raise KlmError(f"{what} checkpoint {path} does not exist")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)  # tensors and plain data: no code runs
    except pickle.UnpicklingError:
        raise KlmError(
            f"{what} checkpoint {path}: holds more than tensors and plain data (pickled objects); not loaded"
        ) from None
    except Exception as error:
        raise KlmError(f"{what} checkpoint {path}: unreadable ({type(error).__name__})") from None
    state = checkpoint.get("state_dict", checkpoint) if isinstance(checkpoint, dict) else {}
    weights = {name[len("encoder.") :]: value for name, value in state.items() if name.startswith("encoder.")}
    if not weights:
        raise KlmError(f"{what} checkpoint {path} holds no encoder weights (keys starting 'encoder.')")
    try:
        missing, unexpected = encoder.load_state_dict(weights, strict=False)
    except RuntimeError as error:  # shapes differ: another backbone, or other maps than the options name
        raise KlmError(
            f"{what} checkpoint {path} does not fit the {what} model ({str(error).splitlines()[-1].strip()})"
        ) from None
    if missing or unexpected:
        example = (missing or unexpected)[0]
        raise KlmError(
            f"{what} checkpoint {path} does not fit the {what} model: {len(missing)} weights missing, "
            f"{len(unexpected)} unexpected (e.g. {example})"
        )


def layer_attention(model_encode, attention_module, inputs, layer: int, head: int | None) -> torch.Tensor:
    """The chosen layer's attention probabilities of the one example (queries × keys), a head or the heads' mean."""
    captured = []
    handle = attention_module.register_forward_hook(lambda module, args, output: captured.append(output[1]))
    try:
        with torch.no_grad():
            model_encode(inputs)
    finally:
        handle.remove()
    if not captured or captured[0] is None:
        raise KlmError(f"layer {layer} returned no attention probabilities (the backbone must run eager attention)")
    probabilities = captured[0][0]  # m × n × keys
    return probabilities.mean(0) if head is None else probabilities[head]


def draw_maps(out, maps, tokens: list[str], auxiliary: list[str], *, titles, layer: int, head: int | None) -> Path:
    """The baseline's and the knowledgeable model's attention ``maps`` side by side, the second's keys with the
    auxiliary (expansion) pieces after the sentence's ``tokens``, written as the PNG ``out``."""
    plain, knowledgeable = maps
    which = "mean over heads" if head is None else f"head {head}"
    size = 2.0 + 0.32 * (len(tokens) + len(auxiliary))
    figure = Figure(figsize=(2 * size + 1.5, size + 0.8), layout="constrained")
    panels = figure.subplots(1, 2)
    for panel, probabilities, title, keys in (
        (panels[0], plain, titles[0], tokens),
        (panels[1], knowledgeable, titles[1], tokens + [f"+{p}" for p in auxiliary]),
    ):
        image = panel.imshow(probabilities.float().numpy(), cmap="Blues", aspect="equal")
        panel.set_title(f"{title}: layer {layer}, {which}")
        panel.set_xticks(range(len(keys)), keys, rotation=90, fontsize=8)
        panel.set_yticks(range(len(tokens)), tokens, fontsize=8)
        figure.colorbar(image, ax=panel, shrink=0.7)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, format="png", dpi=100)
    return out


def render_attention(
    text: str,
    out: str | Path,
    *,
    backbone: str = "minilm",
    method: str = "kam",
    options: dict | None = None,
    layer: int = -1,
    head: int | None = None,
    baseline_checkpoint: str | None = None,
    kam_checkpoint: str | None = None,
    kg_dir: str | None = None,
    pmi_corpus: str | None = None,
    max_length: int = 128,
    seed: int = 0,
) -> Path:
    """Draw the two attention maps of ``text`` to the PNG ``out``; returns its path."""

    if not text or not text.strip():
        raise KlmError("attention: --text is empty")
    method_class = METHODS.get(method)
    if not issubclass(method_class, Kam):
        raise KlmError(f"attention: method {method!r} is not a KAM method (kam, its ablations, kam+si)")

    baseline, tokenizer, _ = load_backbone(backbone, "eager", seed=seed)
    kam_encoder, _, _ = load_backbone(backbone, "eager", seed=seed)
    layers = len(encoder_layers(baseline))
    if not -layers <= layer < layers:
        raise KlmError(f"attention: layer {layer} outside the backbone's {layers} layers (0-based, -1 the last)")
    layer %= layers
    heads = baseline.config.num_attention_heads
    if head is not None and not 0 <= head < heads:
        raise KlmError(f"attention: head {head} outside the backbone's {heads} heads")
    torch.manual_seed(seed)
    try:
        kam = method_class(kam_encoder, TaskSpec("attention", "classification", ("0", "1")), **(options or {}))
    except TypeError as error:
        raise KlmError(f"attention: bad {method} option ({error})") from None
    if baseline_checkpoint:
        load_encoder_weights(baseline, baseline_checkpoint, "baseline")
    if kam_checkpoint:
        load_encoder_weights(kam.encoder, kam_checkpoint, method)
    baseline.eval()
    kam.eval()

    features = sentence_features(text, tokenizer, max_length, kg_dir=kg_dir, pmi_corpus=pmi_corpus)
    if "kg" in kam.maps:
        if not kg_dir:
            raise KlmError("attention: the kg map needs --kg-dir")

        kam.load_kg(KnowledgeGraph.load(Path(kg_dir).expanduser()))
    inputs = dict(tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt"))
    encoder_inputs = {name: inputs[name] for name in ENCODER_INPUTS if name in inputs}
    self_attention = getattr(encoder_layers(baseline)[layer].attention, kam.kam_layers[layer].layout.self_attention)
    # MPNet's self-attention returns its probabilities only when asked
    plain = layer_attention(
        lambda batch: baseline(**batch, output_attentions=True), self_attention, encoder_inputs, layer, head
    )
    knowledgeable = layer_attention(
        kam.encode, kam.kam_layers[layer], {**encoder_inputs, "knowledge": [features]}, layer, head
    )

    tokens = tokenizer.convert_ids_to_tokens(inputs["input_ids"][0].tolist())
    auxiliary = [
        piece
        for word in features.get("pmi_expansion", [])[: kam.expansion_k]
        for piece in tokenizer.convert_ids_to_tokens(word["ids"])
    ]
    titles = (f"baseline ({backbone})", method)
    return draw_maps(out, (plain, knowledgeable), tokens, auxiliary, titles=titles, layer=layer, head=head)
