"""Corrupted entity links for robustness studies: a wrong linker (link noise) and counterfactual links.

Both work on the linked entity ids of texts (``linked``: per text, one entity id per mention), choose an
exact share drawn uniformly with a seeded RNG (the same ``seed`` gives the same corruption), and leave
the rest untouched.

Link noise: ``inject_link_noise``, ``noisy_link_candidates``; counterfactuals: ``shuffle_entities``,
``relocate_spans`` (spans without entity ids), ``permute_relations`` (a graph's relation labels).
"""

import random
from bisect import bisect_left, bisect_right
from itertools import groupby

from knowledge_lm.core.errors import KlmError

MAX_DISTRACTORS = 2
WRONG_PRIOR = (0.55, 0.8)  # the wrong entity's prior, uniform in this range
LINKED_SHARE = (0.6, 0.9)  # the linked entity's share of the prior the wrong entity leaves


def check_share(name: str, share: float):
    if not 0.0 <= share <= 1.0:
        raise KlmError(f"{name} must lie within [0, 1], got {share}")


def inject_link_noise(linked: list[list[str]], kg, ratio: float, seed: int) -> tuple[list[list[str]], list[list[bool]]]:
    """``(noisy, replaced_mask)``: ``linked`` with links replaced, and which were, text by text.

    **Link noise** (the SI+SR paper, Fig. 1b and 5d). ``inject_link_noise`` replaces exactly
    ``round(ratio × number of links)`` links, drawn uniformly among all links of all texts, each by a
    uniformly drawn entity of a different type. "Different type":

    * a link to an entity of known type T: any entity whose type is known and is not T;
    * a link whose entity has no type (or is not in the KG): any entity of known type, since an untyped
      entity may well share the link's unknown type;
    * where the KG holds no typed entity at all (or no entity of another known type): any other entity
      whose type is not T.
    """
    return replace_by_other_types(linked, kg.entities, ratio, random.Random(seed))


def replace_by_other_types(linked: list[list[str]], entities: dict, ratio: float, rng: random.Random):
    """``inject_link_noise`` drawing from ``rng``, with replacements among ``entities`` (qid -> entity with a
    ``type``): a graph's entities, or the share of them a text may name."""
    check_share("link noise ratio", ratio)
    positions = [(text, link) for text, qids in enumerate(linked) for link in range(len(qids))]
    chosen = rng.sample(positions, round(ratio * len(positions)))

    # Typed entities sorted by type: those of one type form a block, so "any typed entity of another
    # type" is one uniform draw over the list with that block skipped.
    typed = sorted((entity.type, qid) for qid, entity in entities.items() if entity.type is not None)
    typed_qids = [qid for _, qid in typed]
    types = [entity_type for entity_type, _ in typed]
    untyped_qids = [qid for qid, entity in entities.items() if entity.type is None]
    all_qids = list(entities)

    noisy = [list(qids) for qids in linked]
    replaced = [[False] * len(qids) for qids in linked]
    for text, link in chosen:
        gold = linked[text][link]
        gold_type = entities[gold].type if gold in entities else None
        block_start, block_end = (
            (bisect_left(types, gold_type), bisect_right(types, gold_type)) if gold_type is not None else (0, 0)
        )
        other_types = len(typed_qids) - (block_end - block_start)
        if other_types:
            draw = rng.randrange(other_types)
            noisy[text][link] = typed_qids[draw if draw < block_start else draw + block_end - block_start]
        else:
            pool = untyped_qids if gold_type is not None else all_qids
            if not any(qid != gold for qid in pool[:2]):
                raise KlmError(f"link noise: the knowledge graph has no entity to replace {gold} with")
            replacement = gold
            while replacement == gold:
                replacement = rng.choice(pool)
            noisy[text][link] = replacement
        replaced[text][link] = True
    return noisy, replaced


def noisy_link_candidates(
    linked: list[list[str]], kg, ratio: float, seed: int
) -> list[list[list[tuple[str, float]] | None]]:
    """Per text, per link: the candidates ``[(qid, prior)]`` of a noisy link (below),
    None for a link left as it is. The links made noisy are those ``inject_link_noise`` replaces.

    ``noisy_link_candidates`` turns each replaced link into what a wrong entity linker produces for an
    ambiguous mention: candidates ranked ``[wrong, linked, distractor(s)]``, so that whatever reads the top
    candidate reads the wrong entity, while the linked (true) entity stays among the candidates for a learned
    linker to find. One or two distractors (their number drawn uniformly) are any other entities of the KG
    (fewer where the KG has fewer). Priors, drawn per link: the wrong entity ``p ~ U(0.55, 0.8)``, the
    linked entity a share ``U(0.6, 0.9)`` of the rest, the distractors the remainder in equal parts; they sum
    to 1, rank the candidates in the order above, and none is 1.0. A noisy link therefore has several
    candidates and no prior of 1.0: it is not a gold link (KnowBERT's linking loss skips it).
    """
    rng = random.Random(seed)
    noisy, replaced = replace_by_other_types(linked, kg.entities, ratio, rng)
    all_qids = list(kg.entities)
    candidates = [[None] * len(qids) for qids in linked]
    for text, qids in enumerate(linked):
        for link, gold in enumerate(qids):
            if replaced[text][link]:
                candidates[text][link] = ambiguous_candidates(noisy[text][link], gold, all_qids, rng)
    return candidates


def ambiguous_candidates(wrong: str, gold: str, all_qids: list[str], rng: random.Random) -> list[tuple[str, float]]:
    """``[(wrong, p), (gold, p'), (distractor, p''), ...]``: priors summing to 1, in decreasing order."""
    taken = {wrong, gold}
    room = len(all_qids) - len(taken.intersection(all_qids))
    distractors = []
    for _ in range(min(rng.randint(1, MAX_DISTRACTORS), room)):
        qid = rng.choice(all_qids)
        while qid in taken:
            qid = rng.choice(all_qids)
        taken.add(qid)
        distractors.append(qid)
    wrong_prior = rng.uniform(*WRONG_PRIOR)
    rest = 1.0 - wrong_prior
    gold_prior = rest * rng.uniform(*LINKED_SHARE) if distractors else rest
    distractor_prior = (rest - gold_prior) / len(distractors) if distractors else 0.0
    return [(wrong, wrong_prior), (gold, gold_prior)] + [(qid, distractor_prior) for qid in distractors]


def shuffle_entities(linked: list[list[str]], kg, share: float, seed: int) -> tuple[list[list[str]], list[list[bool]]]:
    """``(shuffled, relinked_mask)``: ``linked`` with a share of its (text, entity) pairs re-linked to
    another entity of the same type (below), and which links were, text by text.

    **Counterfactual links.** ``shuffle_entities`` re-links exactly ``round(share × number of (text, entity)
    pairs)`` of the distinct (text, entity) pairs, drawn uniformly; every mention of the entity in that text
    is re-linked to one replacement, so a text that names an entity twice stays coherent. The replacement
    keeps the type and destroys the identity: a uniformly drawn other entity of the KG with the same type.
    For an entity without a type, the pool is the other untyped entities; for an entity not in the KG, any
    entity of the KG; where the pool holds no other entity (a type of one entity), any other entity of the KG.
    """
    check_share("shuffle_links", share)
    pairs = list(dict.fromkeys((text, qid) for text, qids in enumerate(linked) for qid in qids))
    # A stream of its own: the same seed also draws the link noise.
    rng = random.Random(f"shuffle_entities/{seed}")
    chosen = rng.sample(pairs, round(share * len(pairs)))

    pools: dict[str | None, list[str]] = {}
    for qid, entity in kg.entities.items():
        pools.setdefault(entity.type, []).append(qid)
    position = {qid: index for pool in pools.values() for index, qid in enumerate(pool)}
    all_qids = list(kg.entities)
    all_position = {qid: index for index, qid in enumerate(all_qids)}

    def other(qid: str, pool: list[str], index: dict[str, int]) -> str:
        # Uniform over the pool without qid: one draw, with qid's slot skipped.
        if qid not in index:
            return rng.choice(pool)
        draw = rng.randrange(len(pool) - 1)
        return pool[draw if draw < index[qid] else draw + 1]

    replacement = {}
    for text, qid in chosen:
        entity = kg.entities.get(qid)
        same_type = pools[entity.type] if entity is not None else []
        if len(same_type) > 1:
            replacement[text, qid] = other(qid, same_type, position)
        elif len(all_qids) > (qid in all_position):
            replacement[text, qid] = other(qid, all_qids, all_position)
        else:
            raise KlmError(f"shuffle_links: the knowledge graph has no entity to re-link {qid} to")
    shuffled = [[replacement.get((text, qid), qid) for qid in qids] for text, qids in enumerate(linked)]
    relinked = [[(text, qid) in replacement for qid in qids] for text, qids in enumerate(linked)]
    return shuffled, relinked


def relocate_spans(words: list[list[tuple[int, int]]], spans: list[list[tuple]], share: float, seed: int) -> list[list]:
    """``spans`` (per text, ``(start, end, *rest)`` character spans) with a share moved to other words of their
    text (below); ``words``: per text, its words' character spans, in order.

    **Relocated spans** (the counterfactual of spans that carry no entity id, such as the NER spans of KAM's
    entity map). ``relocate_spans`` moves exactly ``round(share × number of spans)`` of the spans of all texts,
    drawn uniformly, each to a uniformly drawn run of as many words of its text, first among the runs that
    overlap no span of the text (where it was or where it now is), else among those that overlap no span
    where it now is and start elsewhere; a span with no such run, or covering no whole word, stays. A span
    covers the words wholly inside it; it moves as that many words, its other fields kept.
    """
    check_share("relocated span share", share)
    rng = random.Random(f"relocate_spans/{seed}")
    positions = [(text, number) for text, text_spans in enumerate(spans) for number in range(len(text_spans))]
    chosen = sorted(rng.sample(positions, round(share * len(positions))))
    relocated = [list(text_spans) for text_spans in spans]
    for text, numbers in groupby(chosen, key=lambda position: position[0]):
        text_words = words[text]

        def covered(span) -> range:
            inside = [w for w, (start, end) in enumerate(text_words) if start >= span[0] and end <= span[1]]
            return range(inside[0], inside[-1] + 1) if inside else range(0)

        moving = {number for _, number in numbers}
        originally = set().union(*(covered(span) for span in spans[text]))
        taken = set().union(*(covered(span) for number, span in enumerate(spans[text]) if number not in moving))
        for number in sorted(moving):
            span = spans[text][number]
            own = covered(span)
            if not own:
                continue
            runs = [range(first, first + len(own)) for first in range(len(text_words) - len(own) + 1)]
            free = [run for run in runs if not taken.intersection(run) and not originally.intersection(run)]
            free = free or [run for run in runs if not taken.intersection(run) and run.start != own.start]
            run = rng.choice(free) if free else own
            taken.update(run)
            relocated[text][number] = (text_words[run.start][0], text_words[run[-1]][1], *span[2:])
    return relocated


def permute_relations(triples, rng: random.Random, keep=()) -> list[tuple[str, str, str]]:
    """``triples`` with the relations of the edges whose relation is not in ``keep`` permuted over those edges by
    ``rng`` (in the triples' order); the edges, their order and the ``keep`` edges stay.

    **Permuted relations** (the counterfactual of a graph's relation labels). ``permute_relations`` keeps every
    (head, tail) edge and gives the edges the same relations, in a seeded permutation, so that relation frequencies
    stay and no edge need keep its own.
    """
    pids = [pid for _, pid, _ in triples if pid not in keep]
    rng.shuffle(pids)
    permuted = iter(pids)
    return [(head, pid if pid in keep else next(permuted), tail) for head, pid, tail in triples]
