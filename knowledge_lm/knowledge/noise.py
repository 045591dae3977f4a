"""Entity-link noise for robustness studies (papers/000, Fig. 1b and 5d): some links point at a wrong entity.

``inject_link_noise`` replaces exactly ``round(ratio × number of links)`` links, drawn uniformly among all
links of all texts, each by a uniformly drawn entity of a different type. "Different type":

* a link to an entity of known type T: any entity whose type is known and is not T;
* a link whose entity has no type (or is not in the KG): any entity of known type, since an untyped
  entity may well share the link's unknown type;
* where the KG holds no typed entity at all (or no entity of another known type): any other entity
  whose type is not T.

The same ``seed`` gives the same noise.
"""

import random
from bisect import bisect_left, bisect_right

from knowledge_lm.errors import KlmError


def inject_link_noise(linked: list[list[str]], kg, ratio: float, seed: int) -> tuple[list[list[str]], list[list[bool]]]:
    """``(noisy, replaced_mask)``: ``linked`` with links replaced, and which were, text by text."""
    if not 0.0 <= ratio <= 1.0:
        raise KlmError(f"link noise ratio must lie within [0, 1], got {ratio}")
    positions = [(text, link) for text, qids in enumerate(linked) for link in range(len(qids))]
    rng = random.Random(seed)
    chosen = rng.sample(positions, round(ratio * len(positions)))

    # Typed entities sorted by type: those of one type form a block, so "any typed entity of another
    # type" is one uniform draw over the list with that block skipped.
    typed = sorted((entity.type, qid) for qid, entity in kg.entities.items() if entity.type is not None)
    typed_qids = [qid for _, qid in typed]
    types = [entity_type for entity_type, _ in typed]
    untyped_qids = [qid for qid, entity in kg.entities.items() if entity.type is None]
    all_qids = list(kg.entities)

    noisy = [list(qids) for qids in linked]
    replaced = [[False] * len(qids) for qids in linked]
    for text, link in chosen:
        gold = linked[text][link]
        gold_type = kg.entities[gold].type if gold in kg.entities else None
        block_start, block_end = (bisect_left(types, gold_type), bisect_right(types, gold_type)) if gold_type is not None else (0, 0)
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
