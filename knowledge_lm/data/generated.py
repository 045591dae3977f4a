"""The suite's embedded default dataset: a fictional knowledge graph and true/false statements about it.

A deterministic generator, offline and fast, of a small world (people, cities, countries, companies,
rivers, with random syllable names) and of statements whose label ("false"/"true") needs facts that
are in the knowledge graph but not in the sentence. Knowledge methods, which get the entity links and
the graph, should beat a plain fine-tuned encoder here by a clear margin: the suite's sanity check.

Templates (the record's ``template``; its family is ``kind``)

    kind      template        claim                         decided by (relations from the subject)
    type      entity_type     "{s} is a {type}."            the entity's type
    one_hop   born_city       "{s} was born in {o}."        born_in
              works_for       "{s} works for {o}."          works_for
              hq_city         "{s} is based in {o}."        headquartered_in
              city_country    "{s} is located in {o}."      located_in
              river_country   "{s} flows through {o}."      flows_through
    two_hop   born_country    "{s} was born in {o}."        born_in, located_in
              works_city      "{s} works in {o}."           works_for, headquartered_in
              hq_country      "{s} is based in {o}."        headquartered_in, located_in
    text      moved           "{s} moved to {x} last year. {s} now lives in {y}."   x == y
              travelled       "{s} has only ever travelled to {x}. {s} has been to {y}."
              sailed          "{s} has only ever sailed on {x}. {s} sailed on {y}."

The ``text`` family is knowledge-free: the text states all it needs. A *redundant* knowledge example
is prefixed by a statement of the true facts (``"{s} is a native of {b}. {b} lies within {t}."``), so
its text suffices too; ``needs_knowledge`` is true only for knowledge examples that are not redundant.

What keeps the text alone uninformative on knowledge examples:

* names are drawn from one syllable distribution for every type, and every word of every name belongs
  to one entity only, so a surface form names exactly one entity and says nothing about its type;
* false statements come in pairs with true ones: the false claim reuses the true claim's object (or
  type word) with a subject for which it is false, so every object and template is exactly as
  frequent in true statements as in false ones;
* generalisation split: each entity is assigned to one example split (60% train, 20% dev, 20% test,
  per type). Train examples mention train entities only; dev and test examples are about (have as
  subject) entities of their own split, and may mention train entities besides. So no dev/test subject
  appears anywhere in train, and a model can answer them only from the graph, never by memorising
  training sentences. The graph itself holds every entity and fact: only the example-level use is split.

Knobs (``GeneratorKnobs``; recorded in ``knobs.json`` of an exported version): ``knowledge_share``
(share of knowledge examples, 0.8), ``redundancy`` (share of knowledge examples that state their
facts too, 0.0), ``link_noise`` (share of entity links pointing at a random entity of another type
instead of the gold one, which stays in ``gold_qid``; 0.0), ``train_size``/``dev_size``/``test_size``
(2000/500/500), ``num_entities`` (1000) and ``seed`` (0). The graph depends on ``num_entities`` and
``seed`` only, and each split on its own random stream.

Files (``export``, and what ``GeneratedDataModule`` reads from ``<data_dir>/generated/``):
``train.jsonl``, ``dev.jsonl``, ``test.jsonl``, ``knobs.json`` and the graph in the suite's plain KG
format: ``triples.tsv`` (``head_qid relation_pid tail_qid``), ``relations.tsv`` (``pid name``) and
``entities.jsonl`` (``{"qid", "label", "surface_forms", "type"}``, the label first among the surface forms).
"""

import json
import math
import random
import re
import string
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import networkx as nx

from knowledge_lm.data.base import TaskDataModule, TaskSpec
from knowledge_lm.data.io import find_file, read_json, read_jsonl, read_tsv
from knowledge_lm.errors import KlmError
from knowledge_lm.registry import register_dataset

LABELS = ("false", "true")
SPLITS = ("train", "dev", "test")
FROZEN_FOLDER = "generated"

# -- the world --------------------------------------------------------------------------------

ENTITY_TYPES = ("person", "city", "country", "company", "river")
TYPE_SHARES = {"person": 0.40, "city": 0.25, "country": 0.07, "company": 0.18, "river": 0.10}
MIN_ENTITIES = 100
SPLIT_SHARES = {"train": 0.6, "dev": 0.2, "test": 0.2}


@dataclass(frozen=True)
class Relation:
    pid: str
    name: str
    head_type: str
    tail_type: str


RELATIONS = (
    Relation("R1", "born_in", "person", "city"),
    Relation("R2", "located_in", "city", "country"),
    Relation("R3", "works_for", "person", "company"),
    Relation("R4", "headquartered_in", "company", "city"),
    Relation("R5", "flows_through", "river", "country"),
)


@dataclass
class Entity:
    qid: str
    label: str
    type: str
    aliases: list[str] = field(default_factory=list)

    @property
    def surface_forms(self) -> list[str]:
        return [self.label, *self.aliases]


class KnowledgeGraph:
    """Entities, typed relations and triples, with the look-ups the generator and its tests need."""

    def __init__(self, entities: list[Entity], relations: dict[str, str], triples: list[tuple[str, str, str]]):
        self.entities = {entity.qid: entity for entity in entities}
        self.relations = dict(relations)  # pid -> name
        self.triples = [tuple(triple) for triple in triples]
        self._pids = {name: pid for pid, name in self.relations.items()}
        self._tails = defaultdict(list)
        for head, pid, tail in self.triples:
            self._tails[head, pid].append(tail)

    def objects(self, qid: str, relation: str) -> list[str]:
        """Tails of ``qid`` along ``relation`` (a name or a pid)."""
        return list(self._tails.get((qid, self._pids.get(relation, relation)), ()))

    def follow(self, qid: str, path) -> list[list[str]]:
        """The entities reached after each hop of ``path`` (relation names), in order, without repeats."""
        reached, frontier = [], [qid]
        for relation in path:
            frontier = list(dict.fromkeys(tail for head in frontier for tail in self.objects(head, relation)))
            reached.append(frontier)
        return reached

    def of_type(self, entity_type: str) -> list[Entity]:
        return [entity for entity in self.entities.values() if entity.type == entity_type]

    def entity_records(self) -> list[dict]:
        return [
            {"qid": entity.qid, "label": entity.label, "surface_forms": entity.surface_forms, "type": entity.type}
            for entity in self.entities.values()
        ]

    def to_networkx(self):
        """A MultiDiGraph: nodes are qids (with label, type, surface_forms), edges keyed by pid."""

        graph = nx.MultiDiGraph()
        for record in self.entity_records():
            graph.add_node(record["qid"], **{key: value for key, value in record.items() if key != "qid"})
        for head, pid, tail in self.triples:
            graph.add_edge(head, tail, key=pid, relation=self.relations[pid])
        return graph

    def write_kg(self, directory) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / "triples.tsv", "w", encoding="utf-8") as handle:
            handle.write("head_qid\trelation_pid\ttail_qid\n")
            handle.writelines(f"{head}\t{pid}\t{tail}\n" for head, pid, tail in self.triples)
        with open(directory / "relations.tsv", "w", encoding="utf-8") as handle:
            handle.write("pid\tname\n")
            handle.writelines(f"{pid}\t{name}\n" for pid, name in self.relations.items())
        write_jsonl(directory / "entities.jsonl", self.entity_records())
        return directory

    @classmethod
    def read_kg(cls, directory) -> "KnowledgeGraph":
        directory = Path(directory)
        paths = {name: find_file(directory, name) for name in ("triples.tsv", "relations.tsv", "entities.jsonl")}
        missing = [name for name, path in paths.items() if path is None]
        if missing:
            raise KlmError(f"{directory}: missing {', '.join(missing)} of the generated knowledge graph")
        _, relation_rows = read_tsv(paths["relations.tsv"], min_columns=2)
        relations = {columns[0]: columns[1] for _, columns in relation_rows}
        entities = []
        for line_number, record in read_jsonl(paths["entities.jsonl"]):
            try:
                label, surface_forms = record["label"], record.get("surface_forms") or [record["label"]]
                entities.append(
                    Entity(record["qid"], label, record["type"], [form for form in surface_forms if form != label])
                )
            except KeyError as error:
                raise KlmError(f"{paths['entities.jsonl']}:{line_number}: missing field {error}") from None
        known = {entity.qid for entity in entities}
        _, triple_rows = read_tsv(paths["triples.tsv"], min_columns=3)
        triples = []
        for line_number, (head, pid, tail, *_) in triple_rows:
            if pid not in relations or head not in known or tail not in known:
                raise KlmError(
                    f"{paths['triples.tsv']}:{line_number}: unknown relation or entity in {head} {pid} {tail}"
                )
            triples.append((head, pid, tail))
        return cls(entities, relations, triples)


# -- statement templates ---------------------------------------------------------------------


@dataclass(frozen=True)
class FactTemplate:
    """A claim about the object reached from the subject along ``path``; ``statement`` states the truth.

    Slots: ``s`` subject, ``o`` claimed object, ``b`` bridge (first hop of a two-hop path), ``t`` true object.
    """

    name: str
    kind: str
    path: tuple[str, ...]
    claim: str
    statement: str

    @property
    def subject_type(self) -> str:
        return next(relation.head_type for relation in RELATIONS if relation.name == self.path[0])


@dataclass(frozen=True)
class TextTemplate:
    """A knowledge-free check: true iff the two mentioned ``object_type`` entities ``x`` and ``y`` are one."""

    name: str
    object_type: str
    text: str
    kind: str = "text"


FACT_TEMPLATES = (
    FactTemplate("born_city", "one_hop", ("born_in",), "{s} was born in {o}.", "{s} is a native of {t}."),
    FactTemplate("works_for", "one_hop", ("works_for",), "{s} works for {o}.", "{s} is employed by {t}."),
    FactTemplate(
        "hq_city", "one_hop", ("headquartered_in",), "{s} is based in {o}.", "{s} has its headquarters in {t}."
    ),
    FactTemplate("city_country", "one_hop", ("located_in",), "{s} is located in {o}.", "{s} lies within {t}."),
    FactTemplate("river_country", "one_hop", ("flows_through",), "{s} flows through {o}.", "{s} runs through {t}."),
    FactTemplate(
        "born_country",
        "two_hop",
        ("born_in", "located_in"),
        "{s} was born in {o}.",
        "{s} is a native of {b}. {b} lies within {t}.",
    ),
    FactTemplate(
        "works_city",
        "two_hop",
        ("works_for", "headquartered_in"),
        "{s} works in {o}.",
        "{s} is employed by {b}. {b} has its headquarters in {t}.",
    ),
    FactTemplate(
        "hq_country",
        "two_hop",
        ("headquartered_in", "located_in"),
        "{s} is based in {o}.",
        "{s} has its headquarters in {b}. {b} lies within {t}.",
    ),
)
TYPE_TEMPLATE = FactTemplate("entity_type", "type", (), "{s} is a {o}.", "{s} is listed as a {t}.")
TEXT_TEMPLATES = (
    TextTemplate("moved", "city", "{s} moved to {x} last year. {s} now lives in {y}."),
    TextTemplate("travelled", "country", "{s} has only ever travelled to {x}. {s} has been to {y}."),
    TextTemplate("sailed", "river", "{s} has only ever sailed on {x}. {s} sailed on {y}."),
)
KNOWLEDGE_KINDS = ("type", "one_hop", "two_hop")

TEMPLATE_WORDS = sorted(
    {
        word
        for template in (*FACT_TEMPLATES, TYPE_TEMPLATE)
        for word in re.findall(r"[a-z]+", template.claim + " " + template.statement)
    }
    | {word for template in TEXT_TEMPLATES for word in re.findall(r"[a-z]+", template.text)}
    | set(ENTITY_TYPES)
)


# -- names ------------------------------------------------------------------------------------

ONSETS = (
    "b",
    "d",
    "f",
    "g",
    "h",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "z",
    "br",
    "dr",
    "gr",
    "kr",
    "st",
    "tr",
    "sh",
    "th",
)
VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ai", "ei", "ou")
FINAL_CODAS = ("", "", "", "", "n", "l", "r", "s", "m")


class NameMaker:
    """Labels and aliases whose every word belongs to one entity only, the same way for every type."""

    def __init__(self, rng: random.Random, reserved_words):
        self.rng = rng
        self.taken = {word.lower() for word in reserved_words}

    def _syllables(self, count: int) -> list[str]:
        syllables = [self.rng.choice(ONSETS) + self.rng.choice(VOWELS) for _ in range(count)]
        syllables[-1] += self.rng.choice(FINAL_CODAS)
        return syllables

    def _fresh_word(self, syllable_count: int) -> list[str]:
        while True:
            syllables = self._syllables(syllable_count)
            if "".join(syllables) not in self.taken:
                self.taken.add("".join(syllables))
                return syllables

    def make(self) -> tuple[str, list[str]]:
        words = [self._fresh_word(self.rng.randint(2, 3)) for _ in range(self.rng.choice((1, 1, 2)))]
        label = " ".join("".join(word).capitalize() for word in words)
        candidates = []
        if len(words) == 2:
            candidates += ["".join(word).capitalize() for word in words]
        if len(words[0]) == 3:
            clipped = "".join(words[0][:2])
            if clipped not in self.taken:
                candidates.append(clipped.capitalize())
        self.rng.shuffle(candidates)
        aliases = candidates[: self.rng.randint(1, 3)]
        for alias in aliases:
            self.taken.add(alias.lower())
        while not aliases or (len(aliases) < 3 and self.rng.random() < 0.3):
            aliases.append("".join(self._fresh_word(2)).capitalize())  # a nickname
        return label, aliases


def build_knowledge_graph(num_entities: int, rng: random.Random) -> KnowledgeGraph:
    counts = {entity_type: max(1, round(share * num_entities)) for entity_type, share in TYPE_SHARES.items()}
    counts["person"] += num_entities - sum(counts.values())
    # Shuffled before numbering, so that a qid says nothing about the entity's type either.
    types = [entity_type for entity_type in ENTITY_TYPES for _ in range(counts[entity_type])]
    rng.shuffle(types)
    names = NameMaker(rng, TEMPLATE_WORDS)
    entities = []
    for index, entity_type in enumerate(types, start=1):
        label, aliases = names.make()
        entities.append(Entity(f"G{index}", label, entity_type, aliases))
    by_type = {
        entity_type: [entity.qid for entity in entities if entity.type == entity_type] for entity_type in ENTITY_TYPES
    }
    pid = {relation.name: relation.pid for relation in RELATIONS}
    triples = []
    countries, cities, companies = by_type["country"], by_type["city"], by_type["company"]
    for index, city in enumerate(cities):
        # Every country gets a city first, so that every country is reachable in two hops.
        country = countries[index] if index < len(countries) else rng.choice(countries)
        triples.append((city, pid["located_in"], country))
    for company in companies:
        triples.append((company, pid["headquartered_in"], rng.choice(cities)))
    for person in by_type["person"]:
        triples.append((person, pid["born_in"], rng.choice(cities)))
        triples.append((person, pid["works_for"], rng.choice(companies)))
    for river in by_type["river"]:
        for country in rng.sample(countries, min(len(countries), rng.randint(1, 2))):
            triples.append((river, pid["flows_through"], country))
    return KnowledgeGraph(entities, {relation.pid: relation.name for relation in RELATIONS}, triples)


# -- examples ---------------------------------------------------------------------------------


@dataclass
class Draft:
    """An example before it is written out: its template, label and slot values (entities or words)."""

    template: FactTemplate | TextTemplate
    label: int
    slots: dict
    redundant: bool = False

    @property
    def pattern(self) -> str:
        if isinstance(self.template, TextTemplate):
            return self.template.text
        if self.redundant:
            return f"{self.template.statement} {self.template.claim}"
        return self.template.claim


class SplitWorld:
    """What the examples of one split may use: subjects of their own split, mentions of it and of train."""

    def __init__(self, kg: KnowledgeGraph, home_splits: dict[str, str], split: str):
        self.kg = kg
        mentionable_splits = ("train", split)
        self.subjects = {
            entity_type: [entity for entity in kg.of_type(entity_type) if home_splits[entity.qid] == split]
            for entity_type in ENTITY_TYPES
        }
        self.mentionable = {
            entity_type: [entity for entity in kg.of_type(entity_type) if home_splits[entity.qid] in mentionable_splits]
            for entity_type in ENTITY_TYPES
        }
        self._mentionable_qids = {entity.qid for entities in self.mentionable.values() for entity in entities}
        self._fact_candidates = {}

    def fact_candidates(self, template: FactTemplate) -> list[tuple[Entity, list[list[str]]]]:
        """Subjects with every entity on their path mentionable here (a redundant prefix names them)."""
        if template.name not in self._fact_candidates:
            candidates = []
            for subject in self.subjects[template.subject_type]:
                reached = self.kg.follow(subject.qid, template.path)
                if all(reached) and all(qid in self._mentionable_qids for hop in reached for qid in hop):
                    candidates.append((subject, reached))
            self._fact_candidates[template.name] = candidates
        return self._fact_candidates[template.name]


def too_few_entities(what: str) -> KlmError:
    return KlmError(f"generated: too few entities for {what}; raise num_entities")


def fact_pair(world: SplitWorld, template: FactTemplate, rng: random.Random) -> list[Draft]:
    """A true claim and a false one about the same object, so that objects carry no label information."""
    candidates = world.fact_candidates(template)
    if not candidates:
        raise too_few_entities(f"the {template.name} template")
    subject, reached = rng.choice(candidates)
    claimed = rng.choice(reached[-1])
    false_candidates = [candidate for candidate in candidates if claimed not in candidate[1][-1]]
    if not false_candidates:
        raise too_few_entities(f"false {template.name} claims")
    other, other_reached = rng.choice(false_candidates)
    return [
        fact_draft(world.kg, template, subject, reached, claimed, 1, rng),
        fact_draft(world.kg, template, other, other_reached, claimed, 0, rng),
    ]


def fact_draft(
    kg: KnowledgeGraph,
    template: FactTemplate,
    subject: Entity,
    reached: list[list[str]],
    claimed: str,
    label: int,
    rng: random.Random,
) -> Draft:
    stated = claimed if label else rng.choice(reached[-1])
    slots = {"s": subject, "o": kg.entities[claimed], "t": kg.entities[stated]}
    if len(reached) == 2:
        slots["b"] = kg.entities[reached[0][0]]
    return Draft(template, label, slots)


def type_pair(world: SplitWorld, rng: random.Random) -> list[Draft]:
    claimed_type = rng.choice(ENTITY_TYPES)
    others = [
        entity for entity_type in ENTITY_TYPES if entity_type != claimed_type for entity in world.subjects[entity_type]
    ]
    if not world.subjects[claimed_type] or not others:
        raise too_few_entities("type claims")
    subject, other = rng.choice(world.subjects[claimed_type]), rng.choice(others)
    return [
        Draft(TYPE_TEMPLATE, 1, {"s": subject, "o": claimed_type, "t": subject.type}),
        Draft(TYPE_TEMPLATE, 0, {"s": other, "o": claimed_type, "t": other.type}),
    ]


def text_pair(world: SplitWorld, rng: random.Random) -> list[Draft]:
    template = rng.choice(TEXT_TEMPLATES)
    people, places = world.subjects["person"], world.mentionable[template.object_type]
    if not people or len(places) < 2:
        raise too_few_entities(f"the {template.name} template")
    same = rng.choice(places)
    first, second = rng.sample(places, 2)
    return [
        Draft(template, 1, {"s": rng.choice(people), "x": same, "y": same}),
        Draft(template, 0, {"s": rng.choice(people), "x": first, "y": second}),
    ]


def draft_split(world: SplitWorld, size: int, knobs: "GeneratorKnobs", rng: random.Random) -> list[Draft]:
    knowledge_pairs = min(round(knobs.knowledge_share * size / 2), size // 2)
    drafts = []
    for index in range(knowledge_pairs):
        kind = KNOWLEDGE_KINDS[index % len(KNOWLEDGE_KINDS)]
        if kind == "type":
            drafts += type_pair(world, rng)
        else:
            drafts += fact_pair(
                world, rng.choice([template for template in FACT_TEMPLATES if template.kind == kind]), rng
            )
    knowledge_drafts = list(drafts)
    for _ in range(math.ceil((size - len(drafts)) / 2)):
        drafts += text_pair(world, rng)
    drafts = drafts[:size]
    for draft in rng.sample(knowledge_drafts, round(knobs.redundancy * len(knowledge_drafts))):
        draft.redundant = True
    rng.shuffle(drafts)
    return drafts


def render(draft: Draft, rng: random.Random) -> tuple[str, list[dict]]:
    """The text and its gold entity links; an entity keeps one surface form within an example,
    since a text-solvable example must be solvable without knowing which names co-refer."""
    surfaces = {}
    for value in draft.slots.values():
        if isinstance(value, Entity) and value.qid not in surfaces:
            surfaces[value.qid] = rng.choice(value.surface_forms)
    text, links = "", []
    for literal, slot, _, _ in string.Formatter().parse(draft.pattern):
        text += literal
        if slot is None:
            continue
        value = draft.slots[slot]
        if isinstance(value, Entity):
            mention = surfaces[value.qid]
            links.append(
                {
                    "start": len(text),
                    "end": len(text) + len(mention),
                    "mention": mention,
                    "qid": value.qid,
                    "gold_qid": value.qid,
                }
            )
            text += mention
        else:
            text += value
    return text, links


def add_link_noise(records: list[dict], world: SplitWorld, share: float, rng: random.Random):
    links = [link for record in records for link in record["entities"]]
    for link in rng.sample(links, round(share * len(links))):
        gold_type = world.kg.entities[link["gold_qid"]].type
        wrong = [
            entity
            for entity_type in ENTITY_TYPES
            if entity_type != gold_type
            for entity in world.mentionable[entity_type]
        ]
        link["qid"] = rng.choice(wrong).qid


def make_split(world: SplitWorld, split: str, size: int, knobs: "GeneratorKnobs", rng: random.Random) -> list[dict]:
    records = []
    for index, draft in enumerate(draft_split(world, size, knobs, rng)):
        text, links = render(draft, rng)
        kind = draft.template.kind
        records.append(
            {
                "id": f"{split}-{index:05d}",
                "text_a": text,
                "text_b": None,
                "label": draft.label,
                "kind": kind,
                "template": draft.template.name,
                "needs_knowledge": kind != "text" and not draft.redundant,
                "redundant": draft.redundant,
                "entities": links,
            }
        )
    add_link_noise(records, world, knobs.link_noise, rng)
    return records


def assign_home_splits(kg: KnowledgeGraph, rng: random.Random) -> dict[str, str]:
    """Each entity's split: the only one whose examples may have it as subject (train: may mention it)."""
    home_splits = {}
    for entity_type in ENTITY_TYPES:
        qids = [entity.qid for entity in kg.of_type(entity_type)]
        rng.shuffle(qids)
        dev_count = max(1, round(SPLIT_SHARES["dev"] * len(qids)))
        test_count = max(1, round(SPLIT_SHARES["test"] * len(qids)))
        for position, qid in enumerate(qids):
            home_splits[qid] = (
                "dev" if position < dev_count else "test" if position < dev_count + test_count else "train"
            )
    return home_splits


# -- the generator ----------------------------------------------------------------------------


@dataclass(frozen=True)
class GeneratorKnobs:
    knowledge_share: float = 0.8
    redundancy: float = 0.0
    link_noise: float = 0.0
    train_size: int = 2000
    dev_size: int = 500
    test_size: int = 500
    num_entities: int = 1000
    seed: int = 0

    def __post_init__(self):
        for name in ("knowledge_share", "redundancy", "link_noise"):
            value = self._coerced(name, float)
            if not 0.0 <= value <= 1.0:
                raise KlmError(f"generated: {name} must lie within [0, 1], got {value}")
        for name in ("train_size", "dev_size", "test_size"):
            if self._coerced(name, int) < 2:
                raise KlmError(f"generated: {name} must be at least 2, got {getattr(self, name)}")
        if self._coerced("num_entities", int) < MIN_ENTITIES:
            raise KlmError(f"generated: num_entities must be at least {MIN_ENTITIES}, got {self.num_entities}")
        self._coerced("seed", int)

    def _coerced(self, name: str, kind: type):
        """The knob as ``kind``, stored so; options may come as strings (a command line, a JSON file)."""
        value = getattr(self, name)
        try:
            number = float(value)
            if isinstance(value, bool) or (kind is int and not number.is_integer()):
                raise ValueError
        except (TypeError, ValueError):
            raise KlmError(
                f"generated: {name} must be a{'n integer' if kind is int else ' number'}, got {value!r}"
            ) from None
        object.__setattr__(self, name, kind(number))
        return kind(number)

    def size(self, split: str) -> int:
        return getattr(self, f"{split}_size")


@dataclass
class GeneratedData:
    knobs: GeneratorKnobs | None  # None for a hand-written frozen version without knobs.json
    kg: KnowledgeGraph
    splits: dict[str, list[dict]]


def random_stream(seed: int, purpose: str) -> random.Random:
    # A string seed is hashed with SHA-512, so the streams do not depend on PYTHONHASHSEED.
    return random.Random(f"knowledge-lm/generated:{seed}:{purpose}")


def generate(**knobs) -> GeneratedData:
    """The dataset for these knobs (see ``GeneratorKnobs``), in memory."""
    knobs = GeneratorKnobs(**knobs)
    kg = build_knowledge_graph(knobs.num_entities, random_stream(knobs.seed, "kg"))
    home_splits = assign_home_splits(kg, random_stream(knobs.seed, "home splits"))
    splits = {
        split: make_split(
            SplitWorld(kg, home_splits, split), split, knobs.size(split), knobs, random_stream(knobs.seed, split)
        )
        for split in SPLITS
    }
    return GeneratedData(knobs, kg, splits)


def write_jsonl(path: Path, records: list[dict]):
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)


def export(directory, **knobs) -> Path:
    """Freeze a version: writes ``<directory>/generated/`` (splits, knobs, KG), which
    ``GeneratedDataModule(data_dir=directory)`` then reads instead of generating. Returns that folder."""
    data = generate(**knobs)
    folder = Path(directory) / FROZEN_FOLDER
    data.kg.write_kg(folder)
    for split, records in data.splits.items():
        write_jsonl(folder / f"{split}.jsonl", records)
    (folder / "knobs.json").write_text(json.dumps(asdict(data.knobs), indent=2) + "\n", encoding="utf-8")
    return folder


def frozen_folder(data_dir: Path | None) -> Path | None:
    train = find_file(data_dir, f"{FROZEN_FOLDER}/train.jsonl")
    return train.parent if train else None


def read_frozen(folder: Path, spec: TaskSpec) -> GeneratedData:
    splits = {}
    for split in SPLITS:
        path = find_file(folder, f"{split}.jsonl")
        if path is None:
            raise KlmError(f"{folder}: no {split}.jsonl (a frozen generated version needs {', '.join(SPLITS)})")
        splits[split] = [read_record(record, spec, f"{path}:{line_number}") for line_number, record in read_jsonl(path)]
    knobs_path = find_file(folder, "knobs.json")
    knobs = None
    if knobs_path:
        recorded = read_json(knobs_path)
        unknown = sorted(set(recorded) - set(asdict(GeneratorKnobs())))
        if unknown:
            raise KlmError(f"{knobs_path}: unknown knobs {', '.join(unknown)}")
        knobs = GeneratorKnobs(**recorded)
    return GeneratedData(knobs, KnowledgeGraph.read_kg(folder), splits)


def read_record(record: dict, spec: TaskSpec, where: str) -> dict:
    for required in ("id", "text_a", "label"):
        if required not in record:
            raise KlmError(f"{where}: missing field {required!r}")
    label = record["label"]
    if not (isinstance(label, int) and not isinstance(label, bool) and 0 <= label < len(spec.labels)):
        record["label"] = spec.label_id(label, where)
    record.setdefault("text_b", None)
    return record


# -- the data module --------------------------------------------------------------------------


@register_dataset("generated")
class GeneratedDataModule(TaskDataModule):
    """The generated facts: read from ``<data_dir>/generated/`` where a frozen version lies, else generated.

    Generator knobs are keyword options (None: the default); against a frozen version they must match
    its ``knobs.json``. All three splits are labelled, so results are reported on test.
    """

    name = "generated"
    split_origins = {
        "dev": "the generator's dev statements (about dev entities)",
        "test": "the generator's test statements (about test entities, never a subject in train)",
    }
    tasks = ("facts",)
    default_tasks = ("facts",)

    def __init__(
        self,
        task: str | None = None,
        tokenizer=None,
        data_dir=None,
        *,
        knowledge_share=None,
        redundancy=None,
        link_noise=None,
        train_size=None,
        dev_size=None,
        test_size=None,
        num_entities=None,
        seed=None,
        **base_options,
    ):
        super().__init__(task, tokenizer, data_dir, **base_options)
        given = dict(
            knowledge_share=knowledge_share,
            redundancy=redundancy,
            link_noise=link_noise,
            train_size=train_size,
            dev_size=dev_size,
            test_size=test_size,
            num_entities=num_entities,
            seed=seed,
        )
        self.requested_knobs = {name: value for name, value in given.items() if value is not None}
        GeneratorKnobs(**self.requested_knobs)  # bad values fail here rather than at setup
        self._generated = None

    @classmethod
    def spec(cls, task: str) -> TaskSpec:
        return TaskSpec(task, "classification", LABELS, ("accuracy",), "accuracy")

    def generated(self) -> GeneratedData:
        if self._generated is None:
            folder = frozen_folder(self.data_dir)
            if folder is None:
                self._generated = generate(**self.requested_knobs)
            else:
                self._generated = read_frozen(folder, self.task_spec)
                self._check_knobs(folder, self._generated.knobs)
        return self._generated

    def _check_knobs(self, folder: Path, frozen: GeneratorKnobs | None):
        requested = GeneratorKnobs(**self.requested_knobs)
        for name in self.requested_knobs:
            if frozen is None or getattr(frozen, name) != getattr(requested, name):
                recorded = "unrecorded" if frozen is None else getattr(frozen, name)
                raise KlmError(
                    f"{folder} holds a frozen version with {name}={recorded}, not {getattr(requested, name)}; "
                    f"drop the option or point data_dir elsewhere"
                )

    @property
    def knowledge_graph(self) -> KnowledgeGraph:
        return self.generated().kg

    @property
    def knobs(self) -> GeneratorKnobs | None:
        return self.generated().knobs

    def read_splits(self) -> dict[str, list[dict]]:
        return {split: list(records) for split, records in self.generated().splits.items()}

    def example_groups(self, split: str) -> list[str] | None:
        """The statement family of each example (text, type, one_hop, two_hop): the knowledge-free text
        family against the three that need the graph."""
        return [record.get("kind", "unknown") for record in self.read_labelled()[split]]
