"""kg-text: the linked entities' KG facts, written out as text, as a second segment of the input.

The positive control of the knowledge methods, and the simple baseline each of them should be compared
with. The plain encoder (the baseline's :class:`TaskModel`, no new module) reads
``[CLS] text [SEP] facts [SEP]``, where ``facts`` are sentences about the entities ``klm prepare``
linked in the text. It shows whether the links and the KG carry the signal a task needs: where kg-text
beats the baseline, a knowledge method that does not has failed to use what it was given.

Verbalisation: ``KgText.verbalise_rows``; the input layout and ``zero_knowledge``: ``KgText``.
"""

from collections import defaultdict
from dataclasses import dataclass, fields
from functools import partial
from itertools import chain, islice
from typing import Iterable, Iterator

import torch
from torch.nn import functional as F

from knowledge_lm.core.backbones import token_positions
from knowledge_lm.core.errors import KlmError
from knowledge_lm.knowledge.kg import INSTANCE_OF, Entity, KnowledgeGraph
from knowledge_lm.knowledge.prepare import text_segments
from knowledge_lm.methods.knowbert import prepared_kg_dir
from knowledge_lm.methods.task_model import MethodOptions, TaskModel
from knowledge_lm.tasks.base import ENCODER_INPUTS

FACT_IDS = "kg_text_ids"  # the key of an example's fact ids (with the closing [SEP]) in its features row


# -- verbalisation ---------------------------------------------------------------------------------
Key = tuple[str, str, str]  # a fact as (head, relation, tail); a type fact is its "instance of" edge


class KgFacts:
    """A KG as verbalisation reads it: each entity's outgoing and incoming edges (each list sorted by the
    other end's id, then the relation's), labels, types and relation names."""

    def __init__(self, kg: KnowledgeGraph):
        outgoing, incoming = defaultdict(list), defaultdict(list)
        for head, pid, tail in dict.fromkeys(kg.triples):
            outgoing[head].append((tail, pid))
            incoming[tail].append((head, pid))
        self.outgoing: dict[str, list[tuple[str, str]]] = {qid: sorted(edges) for qid, edges in outgoing.items()}
        self.incoming: dict[str, list[tuple[str, str]]] = {qid: sorted(edges) for qid, edges in incoming.items()}
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


def verbalised_facts(
    linked: Iterable[str], surfaces: dict[str, str], kg: KgFacts
) -> tuple[list[tuple[Key, str]], Iterator[tuple[Key, str]]]:
    """The facts about the ``linked`` entities as (key, sentence) pairs, each once, in the canonical order
    of ``KgText.verbalise_rows``: the linked facts (all of them) and a generator of the rest (a budget reads
    only what it keeps). The order depends on the graph and the set of linked entities only."""
    entities = sorted(set(linked))
    is_linked = set(entities)

    def name(qid: str) -> str:
        return surfaces.get(qid) or kg.labels.get(qid) or qid

    def edge(head: str, pid: str, tail: str) -> tuple[Key, str]:
        return (head, pid, tail), f"{name(head)} {kg.relations.get(pid, pid)} {name(tail)}."

    def between_linked():  # an edge, or a path through one bridge, from a linked entity to another
        for qid in entities:
            for bridge, pid in kg.outgoing.get(qid, ()):
                if bridge in is_linked:
                    yield edge(qid, pid, bridge)
                for end, second in kg.outgoing.get(bridge, ()):
                    if end in is_linked and end != qid:
                        yield edge(qid, pid, bridge)
                        yield edge(bridge, second, end)

    def types():  # keyed as the "instance of" edge each is, so that such an edge is not said twice
        for qid in entities:
            if qid in kg.types:
                yield (qid, INSTANCE_OF, kg.types[qid]), f"{name(qid)} is a {name(kg.types[qid])}."

    def outgoing():
        for qid in entities:
            yield from (edge(qid, pid, tail) for tail, pid in kg.outgoing.get(qid, ()))

    def two_hop():
        for qid in entities:
            for bridge, _ in kg.outgoing.get(qid, ()):
                yield from (edge(bridge, pid, tail) for tail, pid in kg.outgoing.get(bridge, ()) if tail != qid)

    def incoming():
        for qid in entities:
            yield from (edge(head, pid, qid) for head, pid in kg.incoming.get(qid, ()))

    said = set()

    def first_time(facts):
        for key, sentence in facts:
            if key not in said:
                said.add(key)
                yield key, sentence

    return list(first_time(between_linked())), first_time(chain(types(), outgoing(), two_hop(), incoming()))


def verbalise(linked: Iterable[str], surfaces: dict[str, str], kg: KgFacts) -> Iterator[str]:
    """The facts about the ``linked`` entities as sentences, each once, in the canonical order (the
    linked facts, then the rest: ``verbalised_facts``)."""
    between, rest = verbalised_facts(linked, surfaces, kg)
    return (sentence for _, sentence in chain(between, rest))


def within_budget(linked: list[list[int]], rest: Iterable[list[int]], budget: int) -> tuple[list[int], int]:
    """The facts' token ids (each fact a list) concatenated: every ``linked`` fact, then those of ``rest``
    while the whole fits ``budget`` (the first that does not ends it); and how many facts that is."""
    ids = [token for fact in linked for token in fact]
    kept = len(linked)
    for fact in rest:
        if len(ids) + len(fact) > budget:
            break
        ids += fact
        kept += 1
    return ids, kept


@dataclass
class Segment:
    """An example's verbalised facts as the encoder reads them: the kept facts' keys in order, their
    token ids (no [SEP]), how many of them are linked facts (those come first), and how many facts the
    budget was offered (the linked ones and at most ``fact_tokens + 1`` others: more than it kept where
    it cut some)."""

    keys: list[Key]
    ids: list[int]
    linked: int
    offered: int


def segments(
    examples: list[tuple[list[str], dict[str, str]]], kg: KgFacts, tokenizer, fact_tokens: int
) -> list[Segment]:
    """Each example's (linked entities, surface forms) verbalised and cut to ``fact_tokens`` sub-word
    tokens of ``tokenizer``, its linked facts kept whole (``within_budget``)."""
    verbalised = []
    for linked, surfaces in examples:
        between, rest = verbalised_facts(linked, surfaces, kg)
        verbalised.append((between, list(islice(rest, fact_tokens + 1))))  # each fact has a token at least
    sentences = list(dict.fromkeys(sentence for between, rest in verbalised for _, sentence in chain(between, rest)))
    pieces = dict(zip(sentences, tokenizer(sentences, add_special_tokens=False)["input_ids"])) if sentences else {}
    kept_segments = []
    for between, rest in verbalised:
        ids, kept = within_budget([pieces[s] for _, s in between], (pieces[s] for _, s in rest), fact_tokens)
        keys = [key for key, _ in chain(between, rest)][:kept]
        kept_segments.append(Segment(keys, ids, len(between), len(between) + len(rest)))
    return kept_segments


# -- the position view of the input ------------------------------------------------------------------
POSITION_FEATURES = ("facts", "linked_facts", "edges_between_linked", "first_edge_between_linked")


def fact_positions(segment: Segment, linked: Iterable[str]) -> dict[str, int]:
    """The relation-blind view of an example's facts: how many facts it has, how many linked facts, how
    many edges join two linked entities and the index of the first (-1: none). What a reader of the input
    learns from where facts are, not from what they say (their sub-word count is left out: it spells the
    relation names, "founded" against "works for")."""
    is_linked = set(linked)
    between = [index for index, (head, _, tail) in enumerate(segment.keys) if head in is_linked and tail in is_linked]
    return {
        "facts": len(segment.keys),
        "linked_facts": segment.linked,
        "edges_between_linked": len(between),
        "first_edge_between_linked": between[0] if between else -1,
    }


def gold_row(record: dict) -> dict:
    """A features row of a generated record whose links are the record's own (``entities``), each with
    its entity as the one candidate."""
    return {
        "id": record["id"],
        "links": [
            {"segment": 0, "start": link["start"], "end": link["end"], "candidates": [[link["qid"], 1.0]]}
            for link in record.get("entities") or []
        ],
    }


def stump(features: list[dict[str, int]], labels: list[int]) -> tuple[str | None, float, int]:
    """The decision stump of best accuracy on these examples: (feature, threshold, the label given above
    the threshold); feature None: always the majority label (given as the third item)."""
    majority = int(2 * sum(labels) >= len(labels))
    best, best_correct = (None, 0.0, majority), sum(label == majority for label in labels)
    for feature in POSITION_FEATURES:
        values = [row[feature] for row in features]
        for threshold in sorted(set(values)):
            above = sum(label for value, label in zip(values, labels) if value > threshold)
            above_count = sum(value > threshold for value in values)
            below = sum(labels) - above  # positives at or below the threshold
            for label_above in (0, 1):
                correct = above + (len(labels) - above_count - below) if label_above else (above_count - above) + below
                if correct > best_correct:
                    best, best_correct = (feature, float(threshold), label_above), correct
    return best


def stump_predicts(rule: tuple[str | None, float, int], row: dict[str, int]) -> int:
    feature, threshold, label_above = rule
    if feature is None:
        return label_above
    return label_above if row[feature] > threshold else 1 - label_above


def position_views(data, tokenizer, splits: Iterable[str], fact_tokens: int = 64) -> dict[str, list[tuple]]:
    """Per split of the generated ``data`` (``generate``'s ``GeneratedData``; links as in its records),
    each example's (family, ``fact_positions``, label), its facts verbalised from ``data``'s graph and
    cut to ``fact_tokens`` of ``tokenizer`` as kg-text cuts them."""
    kg = KgFacts(
        KnowledgeGraph(
            data.kg.triples,
            [
                Entity(entity.qid, entity.label, list(entity.surface_forms), entity.type)
                for entity in data.kg.entities.values()
            ],
            data.kg.relations,
        )
    )
    views = {}
    for split in splits:
        records = data.splits[split]
        rows = [gold_row(record) for record in records]
        linked = [linked_entities(row) for row in rows]
        examples = [(entities, surface_forms(row, record)) for entities, row, record in zip(linked, rows, records)]
        views[split] = [
            (record.get("kind", "unknown"), fact_positions(segment, entities), int(record["label"]))
            for record, segment, entities in zip(records, segments(examples, kg, tokenizer, fact_tokens), linked)
        ]
    return views


def input_order_oracle(data, tokenizer, fact_tokens: int = 64, fit: str = "train", score: str = "test") -> dict:
    """A relation-blind oracle of kg-text's input order: per statement family of the generated ``data``,
    the ``score`` split's accuracy of the best decision stump over ``fact_positions`` fit on the ``fit``
    split (``position_views``). Near chance (0.5): where facts are does not give the label away."""
    views = position_views(data, tokenizer, (fit, score), fact_tokens)
    accuracies = {}
    for family in sorted({family for family, _, _ in views[score]}):
        fit_rows = [(row, label) for kind, row, label in views[fit] if kind == family]
        score_rows = [(row, label) for kind, row, label in views[score] if kind == family]
        rule = stump([row for row, _ in fit_rows], [label for _, label in fit_rows]) if fit_rows else (None, 0.0, 1)
        accuracies[family] = round(
            sum(stump_predicts(rule, row) == label for row, label in score_rows) / len(score_rows), 4
        )
    return accuracies


# -- the facts of a batch ----------------------------------------------------------------------------
@dataclass
class FactTensors:
    ids: torch.Tensor  # b × f long: each row's fact ids and [SEP], padded; f = 0 when no row has facts
    lengths: torch.Tensor  # b long: each row's fact ids, [SEP] included (0: no segment)

    def to(self, device, non_blocking: bool = False) -> "FactTensors":
        """On ``device`` (Lightning's batch transfer calls this: it moves objects that have a ``to``)."""
        return FactTensors(*(getattr(self, field.name).to(device, non_blocking=non_blocking) for field in fields(self)))


def fact_tensors(knowledge: list[dict], sequence_length: int = 0, pad_id: int = 0, zeroed: bool = False) -> FactTensors:
    """The batch's fact ids from its features rows (``KgText.knowledge_fields``), padded with
    ``pad_id``; none at all when ``zeroed``. Runs in the data loader (``knowledge_batch``, which also
    passes the text's ``sequence_length``: the facts do not depend on it)."""
    if any(FACT_IDS not in row for row in knowledge):
        raise KlmError(
            "kg-text: the examples' facts are not verbalised; build the model and its data module with "
            "build_model_and_data, or call knowledge_lm.run.trainer.wire_knowledge(model, data)"
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


class KgText(TaskModel):
    """The plain encoder reading the linked entities' verbalised KG facts after the text.

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

    options_class = KgTextOptions

    def __init__(self, encoder, spec, **options):
        super().__init__(encoder, spec, **options)
        self.fact_tokens = self.options.fact_tokens
        self.pad_id = encoder.config.pad_token_id or 0
        self.token_types = getattr(encoder.config, "type_vocab_size", 0) >= 2
        self.verbalised = None  # the features rows verbalised last: a second wiring to them does not redo it
        self.fact_ids: list = []  # their fact ids, one list per row
        self.stats: dict = {}  # what the verbalisation measured (method_stats)

    def knowledge_fields(self, data) -> dict[str, list]:
        """Every features row's fact ids (``FACT_IDS``) of the set-up data module ``data``, verbalised once per
        data module from the KG it prepared."""
        if data.knowledge_features is None:
            raise KlmError("kg-text needs a data module set up with knowledge features (dataset option knowledge={})")
        tokenizer = data.tokenizer
        if tokenizer.padding_side != "right":
            raise KlmError(
                "kg-text: the tokenizer pads on the left; the facts are written after the text, which "
                "needs padding on the right"
            )
        table = token_positions(self.encoder)
        positions = None if table is None else len(table)
        if positions is not None and data.max_length + self.fact_tokens + 1 > positions:
            raise KlmError(
                f"kg-text: max_length {data.max_length} + fact_tokens {self.fact_tokens} + [SEP] exceed the "
                f"backbone's {positions} positions; lower one of them"
            )
        self.pad_id = tokenizer.pad_token_id
        if self.verbalised is not data.knowledge_features:
            self.stats, self.fact_ids = self.verbalise_rows(data, KgFacts(self.load_kg(data)), tokenizer, positions)
            self.verbalised = data.knowledge_features
        return {FACT_IDS: self.fact_ids}

    def knowledge_collate(self, data):
        """The batch's fact tensors from its rows' ``FACT_IDS`` (``knowledge_fields``)."""
        return partial(fact_tensors, pad_id=self.pad_id, zeroed=self.options.zero_knowledge)

    @staticmethod
    def load_kg(data) -> KnowledgeGraph:
        return KnowledgeGraph.load(prepared_kg_dir(data))

    def verbalise_rows(self, data, kg: KgFacts, tokenizer, positions: int | None = None) -> tuple[dict, list]:
        """Every features row's fact ids, each split's rows read beside its records (for the surface forms):
        ``(what method_stats reports, one fact id list per row of data.knowledge_features)``. ``positions``: the
        backbone's, which the longest segment after a text of ``max_length`` must fit.

        Verbalisation (once per example, in ``knowledge_fields``; the KG is the one the data module prepared):

        * **Entities**: the top candidate of each link of the example's features, in the order of the text.
        * **Names**: an entity linked in the text is named by its surface form there (its first mention's
          characters), any other entity by its KG label (its id without one), so that a fact reads with the
          text's own words: the generated task names entities by aliases.
        * **Facts**: a type, ``"{entity} is a {type}."`` (``entities.jsonl``'s type, or the class of its
          "instance of" edges, named by its label); an edge, ``"{head} {relation} {tail}."`` (the relation's
          name with underscores as spaces). Each linked entity contributes its type, its outgoing and incoming
          edges, and the second edge of every directed two-edge path starting from it
          (``Zorba born_in Kelmar, Kelmar located_in Tranu`` gives ``"Kelmar located in Tranu."``).
        * **Order**, canonical: it depends on the graph and the set of linked entities only, never on their
          order in the text or on the claim the text makes. First the *linked facts*: every edge between two
          linked entities and the two edges of every directed path through one bridge from a linked entity to
          another (the facts that make a one- or two-hop claim true or false). Then the rest in tiers: the
          linked entities' types, their outgoing edges, the 2-hop edges, and last their incoming edges (whose
          number is unbounded: a country has every city's "located in", a Wikidata class every instance;
          an entity's outgoing edges and paths are its own few attributes). Within each group and tier, linked
          entities by id, and an entity's edges by the other end's id, then the relation's id; a path's two
          edges stay together, after the edge to its bridge. The relation's id only breaks ties between
          parallel edges: where the relation decides the label, the place of a fact does not tell it. A fact
          met twice stays where it first comes (an "instance of" edge is the type fact). ``fact_positions``
          gives the relation-blind view of this order, and ``input_order_oracle`` the accuracy of a decision
          stump on it per family of the generated task (a check that it is near chance).
        * **Budget**: the linked facts are always kept whole; the rest are taken in order while the whole
          segment's sub-word tokens fit ``fact_tokens`` (default 64), and the first that does not fit ends it.
          So a segment is longer than ``fact_tokens`` only where its linked facts alone are (``method_stats``:
          ``examples_linked_facts_over_budget``); the backbone's positions are checked against the longest
          segment once all are verbalised. The segment's [SEP] is not counted. An example without facts gets
          no segment at all.
        """
        records = data.read_labelled()
        rows, examples = [], []
        for split, (start, end) in data.knowledge_spans.items():
            for row, record in zip(data.knowledge_features[start:end], records[split], strict=True):
                if row.get("id", record["id"]) != record["id"]:
                    raise KlmError(f"kg-text: features row {row['id']} beside record {record['id']} of {split}")
                rows.append(row)
                examples.append((linked_entities(row), surface_forms(row, record)))
        kept = segments(examples, kg, tokenizer, self.fact_tokens)
        longest = max((len(segment.ids) for segment in kept), default=0)
        if positions is not None and data.max_length + longest + 1 > positions:
            raise KlmError(
                f"kg-text: an example's facts between linked entities take {longest} tokens; max_length "
                f"{data.max_length} + those + [SEP] exceed the backbone's {positions} positions; lower max_length"
            )
        fact_ids = [segment.ids + [tokenizer.sep_token_id] if segment.ids else [] for segment in kept]
        count = max(1, len(kept))
        stats = {
            "examples_with_facts": round(sum(1 for segment in kept if segment.keys) / count, 4),
            "facts_per_example": round(sum(len(segment.keys) for segment in kept) / count, 3),
            "linked_facts_per_example": round(sum(segment.linked for segment in kept) / count, 3),
            "fact_tokens_per_example": round(sum(len(segment.ids) for segment in kept) / count, 3),
            "examples_cut_by_budget": round(sum(len(segment.keys) < segment.offered for segment in kept) / count, 4),
            "examples_linked_facts_over_budget": round(
                sum(len(segment.ids) > self.fact_tokens for segment in kept) / count, 4
            ),
        }
        return stats, fact_ids

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
