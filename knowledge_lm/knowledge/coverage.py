"""Coverage: how much of the KG reaches a knowledge method on a dataset, per split.

Measured on the links the methods receive (``prepare.entity_linker``: the dataset's gold links where it has them,
else alias-table candidates) and the KG they see (``prepare.knowledge_graph_dir``: answers removed). Per split
(``split_coverage``):

* ``linked``: share of examples with ≥ 1 linked entity (a mention's top candidate);
* ``in_kg``: share of the linked entities (distinct per example) that are KG entities (gold links may not be);
* ``with_triple``: share of examples whose linked entities touch ≥ 1 KG triple; ``triples_median``,
  ``triples_mean``: the distinct triples touching an example's linked entities;
* ``asked_pairs``, ``joined``: the entity pairs the task asks about and the share of them joined by a KG edge
  (either direction). ``asked`` says which pairs: ``head and tail`` (relation classification: the entities
  linked at the two marked spans; a side with no link is a pair not joined), ``gold facts`` (document-level RE:
  each fact's head and tail, linked at any of their mentions), else ``linked pairs`` (every two distinct linked
  entities of an example);
* where the dataset has gold links (``link_agreement``), the alias-table linker against them: ``link_precision``,
  the share of alias mentions overlapping a gold-linked span whose top candidate is that span's entity, and
  ``link_recall``, the share of gold links that such a mention finds.
"""

import random
import statistics

COVERAGE_SAMPLE = 2000  # examples per split measured at most (a seeded sample of larger splits)


def sample_indices(size: int, sample: int | None, seed: int = 0) -> list[int]:
    """All of ``range(size)``, or a seeded sorted sample of ``sample`` of them."""
    if sample is None or size <= sample:
        return list(range(size))
    return sorted(random.Random(seed).sample(range(size), sample))


def overlaps(mention, start: int, end: int) -> bool:
    return mention.start < end and start < mention.end


def asked_pairs(record: dict, first_segment: list) -> tuple[str, list[tuple[set, set]]] | None:
    """``(kind, pairs)`` of the entity pairs a relation task asks about, each side the top entities of the mentions
    of ``first_segment`` (the record's ``text_a``) overlapping its spans; None for other tasks."""

    def linked_at(spans) -> set:
        return {m.candidates[0][0] for m in first_segment if any(overlaps(m, s, e) for s, e in spans)}

    entities = record.get("entities") or []
    roles = [entity for entity in entities if entity.get("role")]
    if len(roles) == 2:
        return "head and tail", [tuple(linked_at([(e["start"], e["end"])]) for e in roles)]
    if entities and all("mentions" in entity for entity in entities) and isinstance(record.get("label"), list):
        spans = [[(m["start"], m["end"]) for m in entity["mentions"]] for entity in entities]
        return "gold facts", [(linked_at(spans[head]), linked_at(spans[tail])) for head, tail, _ in record["label"]]
    return None


def split_coverage(records: list[dict], linked: list[list[list]], kg) -> dict:
    """The coverage of one split: ``records`` and, per record, per text segment, its mentions (``link_segments``)."""
    touching: dict[str, set[int]] = {}
    for number, (head, _, tail) in enumerate(kg.triples):
        touching.setdefault(head, set()).add(number)
        touching.setdefault(tail, set()).add(number)
    with_link = with_triple = entities = entities_in_kg = 0
    triples, pairs, joined, kind = [], 0, 0, "linked pairs"
    for record, segments in zip(records, linked):
        tops = list(dict.fromkeys(m.candidates[0][0] for segment in segments for m in segment))
        with_link += bool(tops)
        entities += len(tops)
        entities_in_kg += sum(qid in kg for qid in tops)
        touched = set().union(*(touching.get(qid, ()) for qid in tops))
        triples.append(len(touched))
        with_triple += bool(touched)
        asked = asked_pairs(record, segments[0] if segments else [])
        if asked is None:
            in_kg = [qid for qid in tops if qid in kg]
            asked_here = [({a}, {b}) for i, a in enumerate(in_kg) for b in in_kg[i + 1 :]]
        else:
            kind, asked_here = asked
        pairs += len(asked_here)
        joined += sum(any(kg.adjacent(a, b) for a in heads for b in tails) for heads, tails in asked_here)
    count = len(records)
    return {
        "examples": count,
        "linked": with_link / count if count else 0.0,
        "in_kg": entities_in_kg / entities if entities else 0.0,
        "with_triple": with_triple / count if count else 0.0,
        "triples_median": statistics.median(triples) if triples else 0,
        "triples_mean": statistics.fmean(triples) if triples else 0.0,
        "asked": kind,
        "asked_pairs": pairs,
        "joined": joined / pairs if pairs else 0.0,
    }


def gold_links(record: dict) -> list[tuple[str, int, int]]:
    """The record's gold links into ``text_a``: ``(qid, start, end)`` (a generated record's ``gold_qid`` first)."""
    return [
        (entity.get("gold_qid") or entity["qid"], entity["start"], entity["end"])
        for entity in record.get("entities") or []
        if entity.get("gold_qid") or entity.get("qid")
    ]


def link_agreement(records: list[dict], alias_linked: list[list[list]]) -> dict:
    """The alias-table linker's mentions of ``text_a`` (``alias_linked``: per record, per segment) against the
    records' gold links: ``link_precision``, ``link_recall`` and the counts they are shares of."""
    at_gold = right = found = gold_count = 0
    for record, segments in zip(records, alias_linked):
        gold = gold_links(record)
        gold_count += len(gold)
        mentions = segments[0] if segments else []
        for mention in mentions:
            spans = [qid for qid, start, end in gold if overlaps(mention, start, end)]
            if spans:
                at_gold += 1
                right += mention.candidates[0][0] in spans
        found += sum(
            any(overlaps(m, start, end) and m.candidates[0][0] == qid for m in mentions) for qid, start, end in gold
        )
    return {
        "link_precision": right / at_gold if at_gold else None,
        "link_recall": found / gold_count if gold_count else None,
        "alias_mentions_at_gold": at_gold,
        "gold_links": gold_count,
    }


def measure_coverage(data_module, config, cache_dir, sample: int | None = COVERAGE_SAMPLE) -> dict:
    """The coverage of every split of ``data_module``'s task with the knowledge ``config`` (a ``KnowledgeConfig``),
    ``sample`` examples per split at most; with the alias linker's agreement with the gold links where the
    dataset has some. Links only: no spaCy, no features."""
    from dataclasses import replace

    from knowledge_lm.knowledge.kg import KnowledgeGraph
    from knowledge_lm.knowledge.prepare import entity_linker, has_gold_links, knowledge_graph_dir, link_segments

    splits = data_module.read_labelled()
    kg = KnowledgeGraph.load(knowledge_graph_dir(data_module, config, cache_dir))
    gold, linker = entity_linker(data_module, splits, kg, config)
    alias_linker = entity_linker(data_module, splits, kg, replace(config, linking="alias"))[1]
    measured = {}
    for split, records in splits.items():
        chosen = [records[index] for index in sample_indices(len(records), sample)]
        entry = split_coverage(chosen, link_segments(chosen, gold, linker), kg)
        entry.update(examples=len(records), measured=len(chosen))
        if has_gold_links(records):
            entry.update(link_agreement(chosen, link_segments(chosen, False, alias_linker)))
        measured[split] = entry
    return {"gold_links": gold, "splits": measured}


def coverage_line(coverage: dict | None, linked: float | None = None) -> str:
    """One split's coverage in a line (``klm prepare``'s output); ``linked`` alone where the manifest predates
    coverage."""
    if not coverage:
        return f"{linked:.1%} of examples with ≥1 linked entity" if linked is not None else "coverage not measured"
    line = (
        f"≥1 linked entity {coverage['linked']:.1%}, ≥1 triple {coverage['with_triple']:.1%}, triples per example "
        f"median {coverage['triples_median']:g} mean {coverage['triples_mean']:.1f}, {coverage['asked']} joined by a "
        f"KG edge {coverage['joined']:.1%} of {coverage['asked_pairs']}"
    )
    if coverage.get("link_precision") is not None:
        precision, recall = coverage["link_precision"], coverage["link_recall"]
        line += f"; alias links against the gold links: precision {precision:.1%}, recall {recall:.1%}"
    return line
