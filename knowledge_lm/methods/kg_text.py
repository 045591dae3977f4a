"""kg-text: the linked entities' KG facts, written out as text, as a second segment of the input.

The positive control of the knowledge methods, and the simple baseline each of them should be compared
with. The plain encoder (the baseline's :class:`TaskModel`, no new module) reads
``[CLS] text [SEP] facts [SEP]``, where ``facts`` are sentences about the entities ``klm prepare``
linked in the text. It shows whether the links and the KG carry the signal a task needs: where kg-text
beats the baseline, a knowledge method that does not has failed to use what it was given.

Verbalisation (once per example, in the ``setup`` hook; the KG is the one the data module prepared):

* **Entities**: the top candidate of each link of the example's features, in the order of the text.
* **Names**: an entity linked in the text is named by its surface form there (its first mention's
  characters), any other entity by its KG label (its id without one), so that a fact reads with the
  text's own words: the generated task names entities by aliases.
* **Facts**: a type, ``"{entity} is a {type}."`` (``entities.jsonl``'s type, or the class of its
  "instance of" edges, named by its label); an edge, ``"{head} {relation} {tail}."`` (the relation's
  name with underscores as spaces). Each linked entity contributes its type, its outgoing and incoming
  edges, and the second edge of every directed two-edge path starting from it
  (``Zorba born_in Kelmar, Kelmar located_in Tranu`` gives ``"Kelmar located in Tranu."``).
* **Order** (the budget cuts from the end): first the edges between two linked entities, and the two
  edges of each path through one bridge from a linked entity to another (how a two-hop claim is true);
  then the linked entities' types, their outgoing edges, the 2-hop edges, and last their incoming
  edges. Incoming edges come after the 2-hop ones because their number is unbounded (a country has every
  city's "located in", a Wikidata class every instance), while an entity's outgoing edges and paths are
  its own few attributes. In the order 1-hop (incoming included), then 2-hop, the facts that decide a
  false two-hop statement of the generated task were cut in 97% of them at 64 tokens; in this order in
  16%, and at 96 tokens in none (its default version's dev and test, MiniLM's tokenizer). Within a tier,
  entities in the order of the text, edges in the KG's order. A fact met twice stays where it first
  comes (an "instance of" edge is the type fact).
* **Budget**: facts are taken in that order while their sub-word tokens fit ``fact_tokens`` (default
  64); the first that does not fit ends the segment. The segment's [SEP] is not counted. An example
  without facts gets no segment at all.

Layout: the data loader pads each batch's fact ids (``fact_tensors``, with the [SEP]); ``encode`` writes
them right after each row's text on the device (``append_facts``: the text's length is its attention
mask's sum, the tokenizer pads on the right), with token type 1 where the backbone has token types, and
runs the encoder over the merged rows. The text's tokens keep their positions, so the hidden states
handed to the task head are the merged states cut to the text's width: a head reads positions of the
text only ([CLS], entity markers, mention and answer spans), and those do not move. Positions past a
row's text, padding for the baseline, hold the facts' states there (only extractive QA's softmax over
every position reads them, where the baseline's reads padding states).

``zero_knowledge``: no facts; every row is the baseline's input, and a batch's states are the
baseline's.
"""

from collections import defaultdict
from dataclasses import dataclass, fields
from functools import partial
from itertools import chain, islice
from typing import Iterable, Iterator

import torch
from torch.nn import functional as F

from knowledge_lm.errors import KlmError
from knowledge_lm.knowledge.kg import INSTANCE_OF, KnowledgeGraph
from knowledge_lm.knowledge.prepare import text_segments
from knowledge_lm.methods.knowbert import prepared_kg_dir
from knowledge_lm.methods.task_model import MethodOptions, TaskModel
from knowledge_lm.registry import register_method
from knowledge_lm.tasks.base import ENCODER_INPUTS

FACT_IDS = "kg_text_ids"  # the key of an example's fact ids (with the closing [SEP]) in its features row


# -- verbalisation ---------------------------------------------------------------------------------
class KgFacts:
    """A KG as verbalisation reads it: each entity's outgoing and incoming edges, labels, types and
    relation names."""

    def __init__(self, kg: KnowledgeGraph):
        outgoing, incoming = defaultdict(list), defaultdict(list)
        for head, pid, tail in dict.fromkeys(kg.triples):
            outgoing[head].append((pid, tail))
            incoming[tail].append((head, pid))
        self.outgoing: dict[str, list[tuple[str, str]]] = dict(outgoing)  # head → its (pid, tail) edges
        self.incoming: dict[str, list[tuple[str, str]]] = dict(incoming)  # tail → its (head, pid) edges
        self.labels = {qid: entity.label for qid, entity in kg.entities.items() if entity.label}
        self.types = {qid: entity.type for qid, entity in kg.entities.items() if entity.type}
        self.relations = {pid: name.replace("_", " ") for pid, name in kg.relations.items()}


def linked_entities(row: dict) -> list[str]:
    """The top candidate of each link of a features row, each once, in the order of the text."""
    links = sorted(
        (link for link in row.get("links") or [] if link["candidates"]),
        key=lambda link: (link["segment"], link["start"]),
    )
    return list(dict.fromkeys(link["candidates"][0][0] for link in links))


def surface_forms(row: dict, record: dict) -> dict[str, str]:
    """Each linked entity's surface form in the record's text (its first mention's characters)."""

    texts = dict(text_segments(record))
    surfaces = {}
    for link in sorted(row.get("links") or [], key=lambda link: (link["segment"], link["start"])):
        if link["candidates"]:
            surfaces.setdefault(link["candidates"][0][0], texts[link["segment"]][link["start"] : link["end"]])
    return surfaces


def verbalise(linked: list[str], surfaces: dict[str, str], kg: KgFacts) -> Iterator[str]:
    """The facts about the ``linked`` entities as sentences, most relevant first, each once (the order
    and naming of the module docstring). A generator: a budget reads only what it keeps."""
    is_linked = set(linked)

    def name(qid: str) -> str:
        return surfaces.get(qid) or kg.labels.get(qid) or qid

    def edge(head: str, pid: str, tail: str):
        return (head, pid, tail), f"{name(head)} {kg.relations.get(pid, pid)} {name(tail)}."

    def between_linked():  # an edge, or a path through one bridge, from a linked entity to another
        for qid in linked:
            for pid, tail in kg.outgoing.get(qid, ()):
                if tail in is_linked:
                    yield edge(qid, pid, tail)
                for second, end in kg.outgoing.get(tail, ()):
                    if end in is_linked and end != qid:
                        yield edge(qid, pid, tail)
                        yield edge(tail, second, end)

    def types():  # keyed as the "instance of" edge each is, so that such an edge is not said twice
        for qid in linked:
            if qid in kg.types:
                yield (qid, INSTANCE_OF, kg.types[qid]), f"{name(qid)} is a {name(kg.types[qid])}."

    def outgoing():
        for qid in linked:
            yield from (edge(qid, pid, tail) for pid, tail in kg.outgoing.get(qid, ()))

    def two_hop():
        for qid in linked:
            for _, bridge in kg.outgoing.get(qid, ()):
                yield from (edge(bridge, pid, tail) for pid, tail in kg.outgoing.get(bridge, ()) if tail != qid)

    def incoming():
        for qid in linked:
            yield from (edge(head, pid, qid) for head, pid in kg.incoming.get(qid, ()))

    said = set()
    for key, sentence in chain(between_linked(), types(), outgoing(), two_hop(), incoming()):
        if key not in said:
            said.add(key)
            yield sentence


def within_budget(facts: Iterable[list[int]], budget: int) -> tuple[list[int], int]:
    """The facts' token ids (each fact a list) concatenated while they fit ``budget``, and how many fit."""
    ids, kept = [], 0
    for fact in facts:
        if len(ids) + len(fact) > budget:
            break
        ids += fact
        kept += 1
    return ids, kept


# -- the facts of a batch ----------------------------------------------------------------------------
@dataclass
class FactTensors:
    ids: torch.Tensor  # b × f long: each row's fact ids and [SEP], padded; f = 0 when no row has facts
    lengths: torch.Tensor  # b long: each row's fact ids, [SEP] included (0: no segment)

    def to(self, device, non_blocking: bool = False) -> "FactTensors":
        """On ``device`` (Lightning's batch transfer calls this: it moves objects that have a ``to``)."""
        return FactTensors(*(getattr(self, field.name).to(device, non_blocking=non_blocking) for field in fields(self)))


def fact_tensors(knowledge: list[dict], sequence_length: int = 0, pad_id: int = 0, zeroed: bool = False) -> FactTensors:
    """The batch's fact ids from its features rows (verbalised by ``KgText.attach``), padded with
    ``pad_id``; none at all when ``zeroed``. Runs in the data loader (``knowledge_batch``, which also
    passes the text's ``sequence_length``: the facts do not depend on it)."""
    if any(FACT_IDS not in row for row in knowledge):
        raise KlmError(
            "kg-text: the examples' facts are not verbalised; run under a Trainer with a prepared "
            "data module, or call KgText.attach(data)"
        )
    rows = [[] if zeroed else row[FACT_IDS] for row in knowledge]
    ids = torch.full((len(rows), max(map(len, rows), default=0)), pad_id, dtype=torch.long)
    for index, row in enumerate(rows):
        ids[index, : len(row)] = torch.tensor(row, dtype=torch.long)
    return FactTensors(ids, torch.tensor([len(row) for row in rows], dtype=torch.long))


def append_facts(
    inputs: dict[str, torch.Tensor], facts: FactTensors, pad_id: int, token_types: bool
) -> dict[str, torch.Tensor]:
    """The encoder inputs with each row's facts written right after its text (b × (n + f)); the text keeps
    its positions. ``token_types``: the facts get token type 1 (else the types stay as they are)."""
    input_ids = inputs["input_ids"]
    attention_mask = inputs.get("attention_mask", torch.ones_like(input_ids))
    width = facts.ids.shape[1]
    text_lengths = attention_mask.sum(-1, keepdim=True)  # b × 1, on the device: no host sync
    positions = torch.arange(input_ids.shape[1] + width, device=input_ids.device)
    ends = text_lengths + facts.lengths.unsqueeze(-1)
    # Fact token j of a row goes to its text length + j; its padding lands past the row's end, on padding.
    merged_ids = F.pad(input_ids, (0, width), value=pad_id).scatter(
        1, text_lengths + torch.arange(width, device=input_ids.device), facts.ids
    )
    merged = {"input_ids": merged_ids, "attention_mask": (positions < ends).to(attention_mask.dtype)}
    type_ids = inputs.get("token_type_ids")
    if token_types:
        type_ids = torch.zeros_like(input_ids) if type_ids is None else type_ids
        in_facts = (positions >= text_lengths) & (positions < ends)
        merged["token_type_ids"] = F.pad(type_ids, (0, width)).masked_fill(in_facts, 1)
    elif type_ids is not None:
        merged["token_type_ids"] = F.pad(type_ids, (0, width))
    return merged


# -- the method -------------------------------------------------------------------------------------
@dataclass
class KgTextOptions(MethodOptions):
    """kg-text's option: ``fact_tokens``, the sub-word budget of an example's facts."""

    fact_tokens: int = 64

    def __post_init__(self):
        if self.fact_tokens < 1:
            raise KlmError(f"fact_tokens {self.fact_tokens!r}: expected a positive whole number of sub-word tokens")


@register_method("kg-text")
class KgText(TaskModel):
    """The plain encoder reading the linked entities' verbalised KG facts after the text."""

    options_class = KgTextOptions
    needs_knowledge = True

    def __init__(self, encoder, spec, **options):
        super().__init__(encoder, spec, **options)
        self.fact_tokens = self.options.fact_tokens
        self.pad_id = encoder.config.pad_token_id or 0
        self.token_types = getattr(encoder.config, "type_vocab_size", 0) >= 2
        self.verbalised = None  # the features rows verbalised last: a second setup on them does not redo it
        self.stats: dict = {}  # what the verbalisation measured (method_stats)

    def setup(self, stage=None):
        data = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if data is not None:
            self.attach(data)

    def attach(self, data, kg: KnowledgeGraph | None = None):
        """Verbalises every example of the set-up data module ``data`` once (into its features rows, key
        ``FACT_IDS``) and has its loader build the batches' fact tensors. ``kg``: default, the KG the
        data module prepared."""
        if data.knowledge_features is None:
            raise KlmError("kg-text needs a data module set up with knowledge features (dataset option knowledge={})")
        tokenizer = data.tokenizer
        if tokenizer.padding_side != "right":
            raise KlmError(
                "kg-text: the tokenizer pads on the left; the facts are written after the text, which "
                "needs padding on the right"
            )
        positions = getattr(self.encoder.config, "max_position_embeddings", None)
        if positions is not None and data.max_length + self.fact_tokens + 1 > positions:
            raise KlmError(
                f"kg-text: max_length {data.max_length} + fact_tokens {self.fact_tokens} + [SEP] exceed the "
                f"backbone's {positions} positions; lower one of them"
            )
        self.pad_id = tokenizer.pad_token_id
        if self.verbalised is not data.knowledge_features:
            self.stats = self.verbalise_rows(data, KgFacts(kg if kg is not None else self.load_kg(data)), tokenizer)
            self.verbalised = data.knowledge_features
        data.knowledge_batch = partial(fact_tensors, pad_id=self.pad_id, zeroed=self.options.zero_knowledge)

    @staticmethod
    def load_kg(data) -> KnowledgeGraph:
        return KnowledgeGraph.load(prepared_kg_dir(data))

    def verbalise_rows(self, data, kg: KgFacts, tokenizer) -> dict:
        """Every features row's fact ids, each split's rows read beside its records (for the surface forms);
        returns what ``method_stats`` reports."""
        records = data.read_labelled()
        candidates = []  # (row, its first facts: as many as could fit, each fact having a token at least)
        for split, (start, end) in data.knowledge_spans.items():
            for row, record in zip(data.knowledge_features[start:end], records[split], strict=True):
                if row.get("id", record["id"]) != record["id"]:
                    raise KlmError(f"kg-text: features row {row['id']} beside record {record['id']} of {split}")
                facts = verbalise(linked_entities(row), surface_forms(row, record), kg)
                candidates.append((row, list(islice(facts, self.fact_tokens + 1))))
        sentences = list(dict.fromkeys(fact for _, facts in candidates for fact in facts))
        pieces = dict(zip(sentences, tokenizer(sentences, add_special_tokens=False)["input_ids"])) if sentences else {}
        kept_facts, fact_tokens, cut = [], [], 0
        for row, facts in candidates:
            ids, kept = within_budget((pieces[fact] for fact in facts), self.fact_tokens)
            row[FACT_IDS] = ids + [tokenizer.sep_token_id] if ids else []
            kept_facts.append(kept)
            fact_tokens.append(len(ids))
            cut += kept < len(facts)
        examples = max(1, len(candidates))
        return {
            "examples_with_facts": round(sum(1 for kept in kept_facts if kept) / examples, 4),
            "facts_per_example": round(sum(kept_facts) / examples, 3),
            "fact_tokens_per_example": round(sum(fact_tokens) / examples, 3),
            "examples_cut_by_budget": round(cut / examples, 4),
        }

    def method_stats(self) -> dict:
        """What the verbalisation gave, over every split's examples (appended unless ``zero_knowledge``)."""
        return dict(self.stats)

    def encode(self, batch):
        inputs = {name: batch[name] for name in ENCODER_INPUTS if name in batch}
        facts = batch["knowledge"]
        if not isinstance(facts, FactTensors):  # the per-example rows: a batch from a loader not set up here
            facts = fact_tensors(facts, pad_id=self.pad_id, zeroed=self.options.zero_knowledge)
        if facts.ids.shape[1] == 0:  # no row has facts: the baseline's input
            return self.encoder(**inputs).last_hidden_state
        facts = facts.to(inputs["input_ids"].device)
        width = inputs["input_ids"].shape[1]
        merged = append_facts(inputs, facts, self.pad_id, self.token_types)
        return self.encoder(**merged).last_hidden_state[:, :width]
