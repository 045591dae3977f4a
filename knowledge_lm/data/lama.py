"""LAMA probe facts (Petroni et al., 2019): cloze sentences with the object masked, per relation.

Read from ``<data_dir>/lama/`` (LAMA's ``data.zip`` layout, files plain or gzip-compressed):

- T-REx: ``TREx/<Pid>.jsonl`` (sub_label, obj_label), one relation per file present, each sentence
  the relation's template from ``relations.jsonl`` with [X] the subject and [Y] the mask;
- Google-RE: ``Google_RE/<relation>_test.jsonl`` (sub_label, obj_label) with LAMA's own templates
  for its three relations (its run_experiments.py; they are not in relations.jsonl);
- SQuAD: ``Squad/test.jsonl``, one relation "squad" of hand-written ``masked_sentences``.

This is zero-shot probing, not a training dataset: it has no entry in ``knowledge_lm.core.catalog``.
Sentences carry ``MASK`` where the object goes; the prober swaps in its tokenizer's mask token.
"""

from dataclasses import dataclass, field
from pathlib import Path

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import find_file, read_jsonl
from knowledge_lm.knowledge.answers import AnswerFact

MASK = "[MASK]"
GOOGLE_RE_TEMPLATES = {
    "place_of_birth": "[X] was born in [Y] .",
    "date_of_birth": "[X] (born [Y]).",
    "place_of_death": "[X] died in [Y] .",
}
SQUAD_RELATION = "squad"
# Google-RE's relations as Wikidata properties (its date of birth is a literal, no KG entity).
GOOGLE_RE_PIDS = {"place_of_birth": "P19", "place_of_death": "P20"}


@dataclass
class Fact:
    subject: str
    object: str
    sentence: str  # holds MASK where the object goes


@dataclass
class Relation:
    name: str  # T-REx predicate id, Google-RE relation name, or "squad"
    corpus: str  # "T-REx", "Google-RE" or "SQuAD"
    template: str | None
    facts: list[Fact] = field(default_factory=list)


def fill_template(template: str, subject: str) -> str:
    return template.replace("[X]", subject).replace("[Y]", MASK)


def required(row, names: tuple[str, ...], where: str) -> list:
    if not isinstance(row, dict) or any(not isinstance(row.get(name), str) for name in names):
        raise KlmError(f"{where}: expected an object with string field(s) {', '.join(names)}")
    return [row[name] for name in names]


def read_templated(path: Path, template: str) -> list[Fact]:
    facts = []
    for line, row in read_jsonl(path):
        subject, obj = required(row, ("sub_label", "obj_label"), f"{path}:{line}")
        facts.append(Fact(subject, obj, fill_template(template, subject)))
    return facts


def read_masked_sentences(path: Path) -> list[Fact]:
    """Facts of the first masked sentence of each row (every LAMA SQuAD row has exactly one)."""
    facts = []
    for line, row in read_jsonl(path):
        where = f"{path}:{line}"
        (obj,) = required(row, ("obj_label",), where)
        sentences = row.get("masked_sentences")
        if not isinstance(sentences, list) or not sentences or not isinstance(sentences[0], str):
            raise KlmError(f"{where}: expected a non-empty list masked_sentences")
        facts.append(Fact(str(row.get("sub_label", "")), obj, sentences[0]))
    return facts


def trex_templates(folder: Path) -> dict[str, str]:
    path = find_file(folder, "relations.jsonl")
    if path is None:
        raise KlmError(f"{folder}: missing relations.jsonl (the T-REx templates)")
    templates = {}
    for line, row in read_jsonl(path):
        relation, template = required(row, ("relation", "template"), f"{path}:{line}")
        templates[relation] = template
    return templates


def available_relations(folder: Path) -> dict[str, tuple[str, str | None, Path]]:
    """name -> (corpus, template, file) for every relation whose file is present."""
    found = {}
    trex_files = sorted((folder / "TREx").glob("P*.jsonl*")) if (folder / "TREx").is_dir() else []
    if trex_files:
        templates = trex_templates(folder)
        for path in trex_files:
            name = path.name.split(".")[0]
            if name not in templates:
                raise KlmError(f"{path}: relation {name} has no template in relations.jsonl")
            found[name] = ("T-REx", templates[name], path)
    for name, template in GOOGLE_RE_TEMPLATES.items():
        path = find_file(folder, f"Google_RE/{name}_test.jsonl")
        if path is not None:
            found[name] = ("Google-RE", template, path)
    path = find_file(folder, "Squad/test.jsonl")
    if path is not None:
        found[SQUAD_RELATION] = ("SQuAD", None, path)
    return found


def load_lama(folder: Path, relations: list[str] | None = None) -> list[Relation]:
    """The relations named (all present, by default) with their facts, from a LAMA folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise KlmError(
            f"no LAMA data: {folder} does not exist (expected LAMA's data.zip layout: "
            "relations.jsonl, TREx/, Google_RE/, Squad/)"
        )
    found = available_relations(folder)
    if not found:
        raise KlmError(f"{folder}: no LAMA relation files (TREx/P*.jsonl, Google_RE/*_test.jsonl, Squad/test.jsonl)")
    names = list(relations) if relations else list(found)
    unknown = [name for name in names if name not in found]
    if unknown:
        raise KlmError(f"unknown LAMA relation(s) {', '.join(unknown)}; present: {', '.join(found)}")
    loaded = []
    for name in names:
        corpus, template, path = found[name]
        facts = read_masked_sentences(path) if template is None else read_templated(path, template)
        loaded.append(Relation(name, corpus, template, facts))
    return loaded


def lama_answer_facts(folder: Path) -> list[AnswerFact]:
    """The facts LAMA probes, as KG facts: T-REx's (sub_uri, predicate_id, obj_uri) by QID, Google-RE's places of
    birth and death by their labels (its ids are Freebase's). A KG used beside a LAMA probe must not hold them
    (``knowledge.answers``); SQuAD's hand-written facts have no relation."""
    facts = []
    for name, (corpus, _, path) in available_relations(Path(folder)).items():
        if corpus == "T-REx":
            for line, row in read_jsonl(path):
                subject, obj = required(row, ("sub_uri", "obj_uri"), f"{path}:{line}")
                facts.append(AnswerFact((subject,), name, (obj,)))
        elif name in GOOGLE_RE_PIDS:
            for line, row in read_jsonl(path):
                subject, obj = required(row, ("sub_label", "obj_label"), f"{path}:{line}")
                facts.append(AnswerFact((subject,), GOOGLE_RE_PIDS[name], (obj,), by_name=True))
    return facts
