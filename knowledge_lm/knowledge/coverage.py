"""Coverage: how much of the KG reaches a knowledge method on a dataset, per split (``split_coverage``).

Measured on the links the methods receive (``prepare.entity_linker``) and the KG they see
(``prepare.knowledge_graph_dir``: answers removed): ``linked``, the share of examples with ≥ 1 linked entity;
``in_kg``, the share of linked entities that are KG entities; ``with_triple``, the share of examples whose linked
entities touch ≥ 1 KG triple (``triples_median``, ``triples_mean``: how many); ``asked_pairs`` and ``joined``, the
entity pairs the task asks about (``asked``: the head and tail of relation classification, the gold facts of
document-level RE, else every two linked entities) and the share joined by a KG edge. Where the dataset has gold
links (``link_agreement``), each alias-table linker against them, matched strongly as GERBIL does:
``link_precision`` and ``link_recall``. ``knowledge.measure`` runs it on a dataset.
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
