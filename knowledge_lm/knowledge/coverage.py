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
* where the dataset has gold links (``link_agreement``), the alias-table linkers against them, matched strongly
  (a mention is right where its span is a gold link's span and its top candidate that link's entity, as GERBIL's
  strong annotation match): ``link_precision``, the share of the linker's mentions that are right, and
  ``link_recall``, the share of gold links found; ``mentions=ngrams`` (every n-gram: ``EntityLinker``) and
  ``mentions=entities`` (spaCy's entity spans: ``SpanLinker``) each.
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
    """An alias-table linker's mentions of ``text_a`` (``alias_linked``: per record, per segment) against the
    records' gold links, strongly matched: ``link_precision``, ``link_recall`` and the counts they are shares of."""
    right = mentions = gold_count = 0
    for record, segments in zip(records, alias_linked):
        gold = {(start, end): qid for qid, start, end in gold_links(record)}
        found = segments[0] if segments else []
        gold_count += len(gold)
        mentions += len(found)
        right += len({(m.start, m.end) for m in found if gold.get((m.start, m.end)) == m.candidates[0][0]})
    return {
        "link_precision": right / mentions if mentions else None,
        "link_recall": right / gold_count if gold_count else None,
        "mentions": mentions,
        "gold_links": gold_count,
    }


def measure_coverage(data_module, config, cache_dir, sample: int | None = COVERAGE_SAMPLE) -> dict:
    """The coverage of every split of ``data_module``'s task with the knowledge ``config`` (a ``KnowledgeConfig``),
    ``sample`` examples per split at most; with the alias linker's agreement with the gold links where the
    dataset has some. Links only: no spaCy, no features."""
    from dataclasses import replace

    from knowledge_lm.knowledge.annotate import Annotator
    from knowledge_lm.knowledge.kg import KnowledgeGraph
    from knowledge_lm.knowledge.prepare import (
        MENTION_SOURCES,
        entity_linker,
        has_gold_links,
        knowledge_graph_dir,
        link_segments,
        text_segments,
    )

    splits = data_module.read_labelled()
    kg = KnowledgeGraph.load(knowledge_graph_dir(data_module, config, cache_dir))
    gold, linker = entity_linker(data_module, splits, kg, config)
    alias_linkers = {
        source: entity_linker(data_module, splits, kg, replace(config, linking="alias", mentions=source))[1]
        for source in MENTION_SOURCES
    }
    annotator = None
    measured = {}
    for split, records in splits.items():
        chosen = [records[index] for index in sample_indices(len(records), sample)]
        agree = has_gold_links(records)
        annotations = None
        if agree or getattr(linker, "needs_annotations", False):  # spaCy only where a span linker reads it
            annotator = annotator or Annotator(backend=config.annotator, phrases=config.phrases)
            flat = iter(annotator.annotate([text for record in chosen for _, text in text_segments(record)]))
            annotations = [[next(flat) for _ in text_segments(record)] for record in chosen]
        entry = split_coverage(chosen, link_segments(chosen, gold, linker, annotations=annotations), kg)
        entry.update(examples=len(records), measured=len(chosen))
        if agree:
            entry["links"] = {
                source: link_agreement(chosen, link_segments(chosen, False, alias, annotations=annotations))
                for source, alias in alias_linkers.items()
            }
        measured[split] = entry
    return {"gold_links": gold, "mentions": config.mentions, "splits": measured}


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
    for source, agreement in (coverage.get("links") or {}).items():
        precision, recall = agreement["link_precision"], agreement["link_recall"]
        if precision is not None:
            line += (
                f"; alias links from {source} against the gold links: precision {precision:.1%}, recall {recall:.1%}"
            )
    return line
