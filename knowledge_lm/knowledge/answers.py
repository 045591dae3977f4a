"""The evaluation examples' answers, kept out of the KG a knowledge method sees.

A dataset whose labels are KG relations (FewRel's relation between its head and tail, Re-DocRED's gold facts,
LAMA's probed facts) would hand a knowledge method its answers wherever the KG holds them: the shared
``wikidata_kg`` was built from FewRel's and LAMA's own facts. ``kg_without_answers`` writes, once, a copy of the
KG without the triples that are an example's answer, of every split (train included: a model must not learn to
read the label off the KG either); ``KnowledgeConfig.keep_answers`` keeps them, as a labelled control only.

A triple is an answer of a fact ``(heads, relation, tails)`` when it joins a head and a tail by that relation, in
either direction (a symmetric relation, such as spouse, holds it either way). Heads and tails are QIDs, or, for a
dataset without QIDs (Re-DocRED), the entity's mention names, each resolved to every candidate the KG's alias table
gives it: whichever of them a linker picks, the method meets no answer.
"""

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from knowledge_lm.core.io import find_file

ANSWERS_FILE = "answers_removed.json"  # in the copy: what was removed, for the coverage report


@dataclass(frozen=True)
class AnswerFact:
    """One evaluation example's answer as a KG fact: ``relation`` (a pid) between any of ``heads`` and any of
    ``tails``; each side QIDs, or the entity's mention names where ``by_name``."""

    heads: tuple[str, ...]
    relation: str
    tails: tuple[str, ...]
    by_name: bool = False


def answer_triples(triples, facts: list[AnswerFact], alias_table=None) -> set[tuple[str, str, str]]:
    """The ``triples`` that are the answer of one of ``facts`` (either direction); names are resolved through
    ``alias_table`` (an ``AliasTable``; needed only for facts ``by_name``)."""
    wanted: dict[tuple[str, str], set[str]] = {}  # (entity, relation) -> the entities an answer joins it to

    def entities(side: tuple[str, ...], by_name: bool) -> set[str]:
        if not by_name:
            return set(side)
        return {qid for name in side for qid, _ in alias_table.candidates(name)}

    for fact in facts:
        heads, tails = entities(fact.heads, fact.by_name), entities(fact.tails, fact.by_name)
        for one, others in ((heads, tails), (tails, heads)):
            for entity in one:
                wanted.setdefault((entity, fact.relation), set()).update(others)
    return {(head, pid, tail) for head, pid, tail in triples if tail in wanted.get((head, pid), ())}


def facts_fingerprint(facts: list[AnswerFact]) -> str:
    rows = sorted({(fact.heads, fact.relation, fact.tails, fact.by_name) for fact in facts})
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16]


def kg_without_answers(kg_dir: Path, kg_id: str, facts: list[AnswerFact], dataset: str, cache_dir: Path) -> Path:
    """A copy of the KG in ``kg_dir`` (whose files' fingerprint is ``kg_id``) without the answer triples of
    ``facts``, written once to ``<cache_dir>/kg/`` under a name keyed by the KG and the facts, so a later call
    finds it without reading the KG. The copy's ``answers_removed.json`` says how many triples went."""
    from knowledge_lm.knowledge.kg import ENTITIES_FILE, TRIPLES_FILE, read_triples
    from knowledge_lm.knowledge.linking import AliasTable

    folder = Path(cache_dir) / "kg" / f"{kg_dir.name}-without-{dataset}-answers-{kg_id}-{facts_fingerprint(facts)}"
    if (folder / ANSWERS_FILE).is_file():
        return folder
    triples = read_triples(find_file(kg_dir, TRIPLES_FILE))
    alias_table = None
    if any(fact.by_name for fact in facts):
        entities_path = find_file(kg_dir, ENTITIES_FILE)
        alias_table = AliasTable.from_entities_file(entities_path) if entities_path else AliasTable()
    removed = answer_triples(triples, facts, alias_table)
    staging = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for path in Path(kg_dir).iterdir():
        if path.is_file() and path.name not in (TRIPLES_FILE, f"{TRIPLES_FILE}.gz"):
            shutil.copyfile(path, staging / path.name)
    with open(staging / TRIPLES_FILE, "w", encoding="utf-8") as handle:
        handle.write("head_qid\trelation_pid\ttail_qid\n")
        handle.writelines(f"{h}\t{pid}\t{t}\n" for h, pid, t in triples if (h, pid, t) not in removed)
    summary = {"dataset": dataset, "answer_facts": len(set(facts)), "triples": len(triples), "removed": len(removed)}
    (staging / ANSWERS_FILE).write_text(json.dumps(summary, sort_keys=True) + "\n")
    try:
        os.replace(staging, folder)
    except OSError:  # another process wrote the same copy first: keep theirs
        shutil.rmtree(staging, ignore_errors=True)
    return folder
