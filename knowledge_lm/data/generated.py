"""The suite's embedded default dataset: a fictional knowledge graph and true/false statements about it.

A deterministic generator, offline and fast, of a small world (people, cities, countries, companies, rivers, with
random syllable names) and of statements whose label ("false"/"true") needs facts that are in the knowledge graph
but not in the sentence. Knowledge methods, which get the entity links and the graph, should beat a plain fine-tuned
encoder here by a clear margin: the suite's sanity check.

The relations, templates and what keeps text and graph alone uninformative: ``generate``; the knobs:
``GeneratorKnobs``; the files: ``export``.
"""

import json
import math
import random
import re
import string
from collections import defaultdict
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import find_file, read_json, read_jsonl
from knowledge_lm.data.base import TaskDataModule, TaskSpec
from knowledge_lm.knowledge.kg import Entity, KnowledgeGraph
from knowledge_lm.knowledge.noise import replace_by_other_types

LABELS = ("false", "true")
SPLIT_VERSION = "2"
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
    Relation("R2", "lives_in", "person", "city"),
    Relation("R3", "died_in", "person", "city"),
    Relation("R4", "works_for", "person", "company"),
    Relation("R5", "founded", "person", "company"),
    Relation("R6", "headquartered_in", "company", "city"),
    Relation("R7", "has_office_in", "company", "city"),
    Relation("R8", "citizen_of", "person", "country"),
    Relation("R9", "located_in", "city", "country"),
    Relation("R10", "flows_through", "river", "country"),
)
RELATION_BY_NAME = {relation.name: relation for relation in RELATIONS}
DIED_SHARE = 0.5  # of persons with a died_in city
FOUNDER_SHARE = 0.5  # of persons who founded a company
# "matched", the third generator's (opt-in): no relation-blind cue (``SplitWorld.matched_pairs``). Its worlds keep
# split version "2", so that the page keeps the cells of both beside each other as worlds of their own.
NEGATIVES = ("hard", "easy", "mixed", "matched")


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
        return RELATION_BY_NAME[self.path[0]].head_type

    @property
    def object_type(self) -> str:
        return RELATION_BY_NAME[self.path[-1]].tail_type

    @property
    def alternative_paths(self) -> list[tuple[str, ...]]:
        """The other relation paths of the same length from the subject's type to the object's type: what a hard
        negative's subject reaches the claimed object through."""
        paths = [(relation.name,) for relation in RELATIONS]
        if len(self.path) == 2:
            paths = [
                (first.name, second.name)
                for first in RELATIONS
                for second in RELATIONS
                if first.tail_type == second.head_type
            ]
        return [
            path
            for path in paths
            if path != self.path
            and RELATION_BY_NAME[path[0]].head_type == self.subject_type
            and RELATION_BY_NAME[path[-1]].tail_type == self.object_type
        ]


@dataclass(frozen=True)
class TextTemplate:
    """A knowledge-free check: true iff the two mentioned ``object_type`` entities ``x`` and ``y`` are one."""

    name: str
    object_type: str
    text: str
    kind: str = "text"


FACT_TEMPLATES = (
    FactTemplate("born_city", "one_hop", ("born_in",), "{s} was born in {o}.", "{s} is a native of {t}."),
    FactTemplate("lives_city", "one_hop", ("lives_in",), "{s} lives in {o}.", "{s} resides in {t}."),
    FactTemplate("died_city", "one_hop", ("died_in",), "{s} died in {o}.", "{s} passed away in {t}."),
    FactTemplate("works_for", "one_hop", ("works_for",), "{s} works for {o}.", "{s} is employed by {t}."),
    FactTemplate("founded", "one_hop", ("founded",), "{s} founded {o}.", "{s} is the founder of {t}."),
    FactTemplate(
        "hq_city", "one_hop", ("headquartered_in",), "{s} has its headquarters in {o}.", "{s} is headquartered in {t}."
    ),
    FactTemplate(
        "office_city", "one_hop", ("has_office_in",), "{s} has an office in {o}.", "{s} keeps an office in {t}."
    ),
    FactTemplate("citizen", "one_hop", ("citizen_of",), "{s} is a citizen of {o}.", "{s} holds a passport of {t}."),
    FactTemplate("city_country", "one_hop", ("located_in",), "{s} is located in {o}.", "{s} lies within {t}."),
    FactTemplate("river_country", "one_hop", ("flows_through",), "{s} flows through {o}.", "{s} runs through {t}."),
    FactTemplate(
        "born_country",
        "two_hop",
        ("born_in", "located_in"),
        "{s} was born in a city of {o}.",
        "{s} is a native of {b}. {b} lies within {t}.",
    ),
    FactTemplate(
        "lives_country",
        "two_hop",
        ("lives_in", "located_in"),
        "{s} lives in a city of {o}.",
        "{s} resides in {b}. {b} lies within {t}.",
    ),
    FactTemplate(
        "died_country",
        "two_hop",
        ("died_in", "located_in"),
        "{s} died in a city of {o}.",
        "{s} passed away in {b}. {b} lies within {t}.",
    ),
    FactTemplate(
        "works_city",
        "two_hop",
        ("works_for", "headquartered_in"),
        "{s} works for a company based in {o}.",
        "{s} is employed by {b}. {b} is headquartered in {t}.",
    ),
    FactTemplate(
        "founded_city",
        "two_hop",
        ("founded", "headquartered_in"),
        "{s} founded a company based in {o}.",
        "{s} is the founder of {b}. {b} is headquartered in {t}.",
    ),
    FactTemplate(
        "hq_country",
        "two_hop",
        ("headquartered_in", "located_in"),
        "{s} has its headquarters in a city of {o}.",
        "{s} is headquartered in {b}. {b} lies within {t}.",
    ),
    FactTemplate(
        "office_country",
        "two_hop",
        ("has_office_in", "located_in"),
        "{s} has an office in a city of {o}.",
        "{s} keeps an office in {b}. {b} lies within {t}.",
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
        entities.append(Entity(f"G{index}", label, [label, *aliases], entity_type))
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
    # Distinct objects per type pair: a (subject, object) pair has at most one edge, so that only the relation,
    # never the number of edges, tells a true claim from a hard negative.
    for company in companies:
        headquarters, *offices = rng.sample(cities, 1 + rng.randint(1, 3))
        triples.append((company, pid["headquartered_in"], headquarters))
        triples += [(company, pid["has_office_in"], office) for office in offices]
    for person in by_type["person"]:
        born, lives, died = rng.sample(cities, 3)
        triples.append((person, pid["born_in"], born))
        triples.append((person, pid["lives_in"], lives))
        if rng.random() < DIED_SHARE:
            triples.append((person, pid["died_in"], died))
        employer, founded = rng.sample(companies, 2)
        triples.append((person, pid["works_for"], employer))
        if rng.random() < FOUNDER_SHARE:
            triples.append((person, pid["founded"], founded))
        triples.append((person, pid["citizen_of"], rng.choice(countries)))
    for river in by_type["river"]:
        for country in rng.sample(countries, min(len(countries), rng.randint(1, 2))):
            triples.append((river, pid["flows_through"], country))
    return KnowledgeGraph(triples, entities, {relation.pid: relation.name for relation in RELATIONS})


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
            entity_type: [kg.entities[qid] for qid in kg.entities_of_type(entity_type) if home_splits[qid] == split]
            for entity_type in ENTITY_TYPES
        }
        self.mentionable = {
            entity_type: [
                kg.entities[qid] for qid in kg.entities_of_type(entity_type) if home_splits[qid] in mentionable_splits
            ]
            for entity_type in ENTITY_TYPES
        }
        self._mentionable_qids = {entity.qid for entities in self.mentionable.values() for entity in entities}
        self._fact_candidates = {}
        self._hard_pairs = {}
        self._matched_pairs = {}
        self.out_degree, self.in_degree = defaultdict(int), defaultdict(int)
        for head, _, tail in kg.triples:
            self.out_degree[head] += 1
            self.in_degree[tail] += 1

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

    def hard_pairs(self, template: FactTemplate) -> tuple[list, dict[str, list]]:
        """The true claims that have a hard negative, ``(subject, reached, claimed object)``, and by claimed
        object the subjects of those negatives, ``(subject, reached)``: subjects that reach the object through
        another relation path of the same types and not through the template's. True and false pairs alike
        have the family's relation-blind signature (``HARD_SIGNATURES``)."""
        if template.name not in self._hard_pairs:
            signature = HARD_SIGNATURES[template.kind]
            candidates = self.fact_candidates(template)
            negatives = defaultdict(list)
            for subject, reached in candidates:
                elsewhere = [
                    qid
                    for path in template.alternative_paths
                    for qid in self.kg.follow(subject.qid, path)[-1]
                    if qid not in reached[-1]
                ]
                for claimed in dict.fromkeys(elsewhere):
                    if self.kg.relation_blind_signature(subject.qid, claimed) == signature:
                        negatives[claimed].append((subject, reached))
            positives = [
                (subject, reached, claimed)
                for subject, reached in candidates
                for claimed in reached[-1]
                if negatives.get(claimed) and self.kg.relation_blind_signature(subject.qid, claimed) == signature
            ]
            self._hard_pairs[template.name] = positives, dict(negatives)
        return self._hard_pairs[template.name]

    def matched_pairs(self, template: FactTemplate) -> tuple[list, dict[tuple, list]]:
        """The true claims that have a matched false one, ``(subject, reached, claimed object, cell)``, and by cell
        the subjects of those false claims, ``(subject, reached)``. A cell is the claimed object and all a
        relation-blind reader sees of the pair (``relation_blind_cell``): the subject's out- and in-degree, how many
        objects it reaches along the template's path (it has the claimed relation, to other objects), whether it
        shares an edge with the object and their common neighbours. A true claim and its false one share their
        cell, so these features, and the object's type, degree and frequency, are distributed alike in both."""
        if template.name not in self._matched_pairs:
            candidates = self.fact_candidates(template)
            positives = [
                (subject, reached, claimed, self.relation_blind_cell(subject.qid, reached, claimed))
                for subject, reached in candidates
                for claimed in reached[-1]
            ]
            cells = {cell for *_, cell in positives}
            objects_by_subject_part = defaultdict(set)
            for claimed, *subject_part, _, _ in cells:
                objects_by_subject_part[tuple(subject_part)].add(claimed)
            negatives = defaultdict(list)
            for subject, reached in candidates:
                subject_part = self.subject_part(subject.qid, reached)
                for claimed in sorted(objects_by_subject_part.get(subject_part, ())):
                    cell = self.relation_blind_cell(subject.qid, reached, claimed)
                    if claimed not in reached[-1] and cell in cells:
                        negatives[cell].append((subject, reached))
            self._matched_pairs[template.name] = [p for p in positives if p[3] in negatives], dict(negatives)
        return self._matched_pairs[template.name]

    def subject_part(self, subject: str, reached: list[list[str]]) -> tuple[int, int, int]:
        return self.out_degree[subject], self.in_degree[subject], len(reached[-1])

    def relation_blind_cell(self, subject: str, reached: list[list[str]], claimed: str) -> tuple:
        """``(claimed, out-degree, in-degree, objects reached along the path, shares an edge, common neighbours)``."""
        return (claimed, *self.subject_part(subject, reached), *self.kg.relation_blind_signature(subject, claimed))


# A one_hop claim's pair shares exactly one edge; a two_hop claim's pair shares none and has one two-edge path.
HARD_SIGNATURES = {"one_hop": (True, 0), "two_hop": (False, 1)}


def too_few_entities(what: str) -> KlmError:
    return KlmError(f"generated: too few entities for {what}; raise num_entities")


def fact_pair(world: SplitWorld, template: FactTemplate, negative: str, rng: random.Random) -> list[Draft]:
    """A true claim and a false one about the same object, so that objects carry no label information. A hard
    false claim's subject reaches the object through another relation (path); an easy one's is any subject for
    which the claim is false; a matched one's shares the true claim's relation-blind cell (``matched_pairs``)."""
    if negative == "matched":
        positives, negatives = world.matched_pairs(template)
        if not positives:
            raise too_few_entities(f"matched {template.name} claims")
        subject, reached, claimed, cell = rng.choice(positives)
        other, other_reached = rng.choice(negatives[cell])
    elif negative == "hard":
        positives, negatives = world.hard_pairs(template)
        if not positives:
            raise too_few_entities(f"hard {template.name} claims")
        subject, reached, claimed = rng.choice(positives)
        other, other_reached = rng.choice(negatives[claimed])
    else:
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
    if len(reached) == 2:  # the bridge through which the stated object is reached
        slots["b"] = kg.entities[next(b for b in reached[0] if stated in kg.objects(b, template.path[1]))]
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
            continue
        negative = knobs.negatives
        if negative == "mixed":
            negative = "hard" if rng.random() < 0.5 else "easy"
        # Under hard (matched) negatives a template takes part where this split has a hard (matched) pair for it:
        # never one whose type pair has a single relation (citizen_of, located_in, flows_through) under one_hop.
        pairs = {"hard": world.hard_pairs, "matched": world.matched_pairs}.get(negative)
        templates = [
            template for template in FACT_TEMPLATES if template.kind == kind and (pairs is None or pairs(template)[0])
        ]
        if not templates:
            raise too_few_entities(f"{negative} {kind} claims")
        drafts += fact_pair(world, rng.choice(templates), negative, rng)
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
    """Point ``share`` of the links at a mentionable entity of another type (``knowledge.noise``); ``gold_qid``
    keeps the gold entity."""
    links = [record["entities"] for record in records]
    mentionable = {entity.qid: entity for entities in world.mentionable.values() for entity in entities}
    noisy, _ = replace_by_other_types([[link["gold_qid"] for link in text] for text in links], mentionable, share, rng)
    for text, qids in zip(links, noisy):
        for link, qid in zip(text, qids):
            link["qid"] = qid


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
        qids = kg.entities_of_type(entity_type)
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
    """What the generator is asked for.

    Knobs (``GeneratorKnobs``; recorded in ``knobs.json`` of an exported version): ``knowledge_share`` (share of
    knowledge examples, 0.8), ``redundancy`` (share of knowledge examples that state their facts too, 0.0),
    ``link_noise`` (share of entity links pointing at a random entity of another type instead of the gold one, which
    stays in ``gold_qid``; 0.0), ``train_size``/``dev_size``/``test_size`` (2000/500/500), ``num_entities`` (1000),
    ``seed`` (0) and ``negatives`` ("hard"). The graph depends on ``num_entities`` and ``seed`` only, and each split on
    its own random stream. Split version "2" (``SPLIT_VERSION``); a frozen ``knobs.json`` without ``negatives`` is an
    export of the first generator (version "1", read as ``negatives="easy"``).
    """

    knowledge_share: float = 0.8
    redundancy: float = 0.0
    link_noise: float = 0.0
    train_size: int = 2000
    dev_size: int = 500
    test_size: int = 500
    num_entities: int = 1000
    seed: int = 0
    negatives: str = "hard"

    def __post_init__(self):
        if self.negatives not in NEGATIVES:
            raise KlmError(f"generated: negatives must be one of {', '.join(NEGATIVES)}, got {self.negatives!r}")
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
    version: str = SPLIT_VERSION  # "1": a frozen export of the first generator (its knobs.json has no negatives)


def random_stream(seed: int, purpose: str) -> random.Random:
    # A string seed is hashed with SHA-512, so the streams do not depend on PYTHONHASHSEED.
    return random.Random(f"knowledge-lm/generated:{seed}:{purpose}")


def generate(**knobs) -> GeneratedData:
    """The dataset for these knobs (see ``GeneratorKnobs``), in memory.

    Relations (pids R1..R10): born_in, lives_in, died_in (person→city; three distinct cities, died_in for half the
    persons); works_for, founded (person→company; distinct, founded for half); headquartered_in, has_office_in
    (company→city; 1-3 offices, none in the HQ city); citizen_of (person→country); located_in (city→country);
    flows_through (river→country). A (subject, object) pair has at most one edge.

    Templates (the record's ``template``; its family is ``kind``; ``o`` the claimed object)

        type     entity_type "{s} is a {o}."                                the entity's type
        one_hop  born_city, lives_city, died_city   "{s} was born in / lives in / died in {o}."
                 works_for, founded                 "{s} works for / founded {o}."
                 hq_city, office_city               "{s} has its headquarters in / has an office in {o}."
                 citizen, city_country, river_country   "{s} is a citizen of / is located in / flows through {o}."
        two_hop  born_country, lives_country, died_country  "{s} was born in / lives in / died in a city of {o}."
                 works_city, founded_city           "{s} works for / founded a company based in {o}."
                 hq_country, office_country         "{s} has its headquarters in / has an office in a city of {o}."
        text     moved, travelled, sailed           "{s} moved to {x} last year. {s} now lives in {y}." ...: x == y

    A template's claim follows its relation path from the subject (``FACT_TEMPLATES``); the ``text`` family is
    knowledge-free. A *redundant* example is prefixed by a statement of the true facts (``"{s} is a native of {b}. {b}
    lies within {t}."``), so its text suffices too; ``needs_knowledge`` is true only for knowledge examples that are not
    redundant.

    What keeps the text alone, and the graph without its relation labels, uninformative:

    * names are drawn from one syllable distribution for every type, and every word of every name belongs to one
      entity only, so a surface form names exactly one entity and says nothing about its type;
    * false statements come in pairs with true ones: the false claim reuses the true claim's object (or type word)
      with a subject for which it is false, so every object and template is exactly as frequent in true statements
      as in false;
    * hard negatives (``negatives="hard"``, the default): the false subject reaches the object through another relation
      of the same types (one_hop: "born in o" where it lives in o) or another two-hop path (two_hop: lives in a city of
      o, born elsewhere), and true and false pairs share a relation-blind signature (one_hop: one edge, no two-edge
      path; two_hop: no edge, one two-edge path). Single-relation templates have no hard negative and appear under easy
      only. ``"easy"``: any subject for which the claim is false (the first generator's rule); ``"mixed"``: hard or easy
      per pair, half each. ``knowledge_lm.report.sanity`` scores relation-blind oracles against both;
    * matched negatives (``negatives="matched"``, the third generator, opt-in): hard negatives leave a cue per
      template (a subject with more objects along the claimed path is more often true). A matched false claim shares
      with its true claim the object and everything a relation-blind reader sees of the pair: the subject's out- and
      in-degree, how many objects it reaches along the template's path, whether subject and object share an edge
      and their common neighbours (``SplitWorld.matched_pairs``). A true claim without such a partner is not drawn;
    * generalisation split: each entity is assigned to one example split (60% train, 20% dev, 20% test, per type). Train
      examples mention train entities only; dev and test examples have as subject entities of their own split and may
      mention train entities besides, so no dev/test subject appears anywhere in train. The graph holds every fact.
    """
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
    ``GeneratedDataModule(data_dir=directory)`` then reads instead of generating. Returns that folder.

    Files (``export``, and what ``GeneratedDataModule`` reads from ``<data_dir>/generated/``): ``train.jsonl``,
    ``dev.jsonl``, ``test.jsonl``, ``knobs.json`` and the graph in the suite's plain KG format: ``triples.tsv``
    (``head_qid relation_pid tail_qid``), ``relations.tsv`` (``pid name``) and ``entities.jsonl`` (``{"qid", "label",
    "surface_forms", "type"}``, the label first among the surface forms).
    """
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
    knobs, version = None, SPLIT_VERSION
    if knobs_path:
        recorded = read_json(knobs_path)
        unknown = sorted(set(recorded) - set(asdict(GeneratorKnobs())))
        if unknown:
            raise KlmError(f"{knobs_path}: unknown knobs {', '.join(unknown)}")
        if "negatives" not in recorded:  # the first generator's export: its false subjects were any subject
            recorded["negatives"], version = "easy", "1"
        knobs = GeneratorKnobs(**recorded)
    return GeneratedData(knobs, read_frozen_kg(folder), splits, version)


def read_frozen_kg(folder: Path) -> KnowledgeGraph:
    """The frozen version's graph: all three files, every entity with a label and a type."""
    missing = [name for name in ("triples.tsv", "relations.tsv", "entities.jsonl") if find_file(folder, name) is None]
    if missing:
        raise KlmError(f"{folder}: missing {', '.join(missing)} of the generated knowledge graph")
    kg = KnowledgeGraph.load(folder)
    unnamed = [qid for qid, entity in kg.entities.items() if not entity.label or entity.type is None]
    if unnamed:
        raise KlmError(f"{folder}: entity {unnamed[0]} has no label or no type (entities.jsonl)")
    return kg


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


class GeneratedDataModule(TaskDataModule):
    """The generated facts: read from ``<data_dir>/generated/`` where a frozen version lies, else generated.

    Generator knobs are keyword options (None: the default); against a frozen version they must match
    its ``knobs.json``. All three splits are labelled, so results are reported on test.
    """

    name = "generated"
    has_example_groups = True
    split_origins = {
        "dev": "the generator's dev statements (about dev entities; v2: several relations per type pair)",
        "test": "the generator's test statements (about test entities, never a subject in train; v2: several "
        "relations per type pair, hard negatives by default)",
    }
    first_split_origins = {
        "dev": "the generator's dev statements (about dev entities)",
        "test": "the generator's test statements (about test entities, never a subject in train)",
    }
    tasks = ("facts",)
    world = staticmethod(generate)  # a world of given knobs, in memory, without a data module (the sanity report's)
    fact_templates = FACT_TEMPLATES  # each statement template with its relation path (the sanity report's rule)
    knobs_class = GeneratorKnobs  # the world's knobs with their defaults (the sanity report names worlds by them)

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
        negatives=None,
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
            negatives=negatives,
        )
        self.requested_knobs = {name: value for name, value in given.items() if value is not None}
        GeneratorKnobs(**self.requested_knobs)  # bad values fail here rather than at setup
        self._generated = None

    @classmethod
    def resolved_options(cls, options: dict) -> dict:
        """The generator knobs with ``GeneratorKnobs``' defaults where ``options`` leaves them out (or gives None)."""
        knobs = {knob.name for knob in fields(GeneratorKnobs)}
        given = {name: value for name, value in options.items() if name in knobs and value is not None}
        return {**super().resolved_options(options), **asdict(GeneratorKnobs(**given))}

    @classmethod
    def spec(cls, task: str) -> TaskSpec:
        return TaskSpec(task, "classification", LABELS, ("accuracy",), "accuracy")

    @classmethod
    def split_origin(cls, task: str, split: str, split_version: str) -> str:
        if split_version == "1":
            return cls.first_split_origins.get(split, "")
        return super().split_origin(task, split, split_version)

    @property
    def split_version(self) -> str:
        """ "2": the relational world with hard negatives (by default); "1": a frozen export of the first one."""
        return self.generated().version

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
