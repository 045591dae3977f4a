"""Corrupted links: noisy links keep the linked entity among ranked candidates; shuffled links keep the type."""

import random

import pytest

from knowledge_lm.core.errors import KlmError
from knowledge_lm.knowledge.kg import Entity, KnowledgeGraph
from knowledge_lm.knowledge.noise import inject_link_noise, noisy_link_candidates, relocate_spans, shuffle_entities


def typed_kg() -> KnowledgeGraph:
    types = ["person"] * 10 + ["city"] * 5 + ["river"] * 3 + [None] * 3
    entities = [Entity(f"Q{number}", type=entity_type) for number, entity_type in enumerate(types)]
    return KnowledgeGraph([("Q0", "P1", "Q1")], entities)


def random_texts(kg: KnowledgeGraph, seed: int = 5) -> list[list[str]]:
    """Texts of 0 to 6 links; small so that texts name some entity twice."""
    rng = random.Random(seed)
    return [rng.choices(kg.qids[:8] + kg.qids[15:], k=rng.randint(0, 6)) for _ in range(40)]


# -- link noise ------------------------------------------------------------------------------


@pytest.mark.parametrize("ratio", [0.0, 0.1, 0.37, 1.0])
def test_noisy_links_rank_a_wrong_entity_first_and_keep_the_linked_one(ratio):
    kg = typed_kg()
    linked = random_texts(kg)
    candidates = noisy_link_candidates(linked, kg, ratio, seed=1)
    wrong, replaced = inject_link_noise(linked, kg, ratio, seed=1)
    total = sum(map(len, linked))
    assert sum(c is not None for text in candidates for c in text) == round(ratio * total)
    for gold_qids, wrong_qids, mask, text in zip(linked, wrong, replaced, candidates):
        for gold, wrong_qid, was_replaced, link in zip(gold_qids, wrong_qids, mask, text):
            assert (link is not None) == was_replaced
            if link is None:
                continue
            qids, priors = [qid for qid, _ in link], [prior for _, prior in link]
            assert qids[0] == wrong_qid and qids[1] == gold and 3 <= len(qids) <= 4 and len(set(qids)) == len(qids)
            assert kg.entities[qids[0]].type not in (None, kg.entities[gold].type)
            assert sum(priors) == pytest.approx(1.0)
            assert priors[0] > priors[1] > priors[2] and all(0.0 < prior < 1.0 for prior in priors)


def test_noisy_links_reproduce_with_their_seed():
    kg = typed_kg()
    linked = random_texts(kg)
    assert noisy_link_candidates(linked, kg, 0.4, seed=2) == noisy_link_candidates(linked, kg, 0.4, seed=2)
    assert noisy_link_candidates(linked, kg, 0.4, seed=2) != noisy_link_candidates(linked, kg, 0.4, seed=3)


def test_noisy_links_in_a_small_kg_take_the_distractors_it_has():
    kg = KnowledgeGraph([("Q1", "P1", "Q2"), ("Q2", "P1", "Q3")])
    candidates = noisy_link_candidates([["Q1", "Q2"], ["Q3"]], kg, 1.0, seed=0)
    for gold, link in zip(["Q1", "Q2", "Q3"], sum(candidates, [])):
        assert link[1][0] == gold and len(link) == 3 and sum(prior for _, prior in link) == pytest.approx(1.0)
    with pytest.raises(KlmError, match="ratio"):
        noisy_link_candidates([["Q1"]], kg, 1.5, seed=0)


# -- shuffled links --------------------------------------------------------------------------


@pytest.mark.parametrize("share", [0.0, 0.37, 0.5, 1.0])
def test_shuffled_links_keep_the_type_and_one_replacement_per_text_and_entity(share):
    kg = typed_kg()
    linked = random_texts(kg)
    assert any(len(set(qids)) < len(qids) for qids in linked)  # some text names an entity twice
    shuffled, relinked = shuffle_entities(linked, kg, share, seed=1)
    pairs = {(text, qid) for text, qids in enumerate(linked) for qid in qids}
    replacements = {}
    for text, (gold_qids, new_qids, mask) in enumerate(zip(linked, shuffled, relinked)):
        for gold, new, was_relinked in zip(gold_qids, new_qids, mask):
            if not was_relinked:
                assert new == gold
                continue
            assert new != gold and kg.entities[new].type == kg.entities[gold].type
            assert replacements.setdefault((text, gold), new) == new
    assert len(replacements) == round(share * len(pairs))
    assert all(
        was == ((text, gold) in replacements)
        for text, (qids, mask) in enumerate(zip(linked, relinked))
        for gold, was in zip(qids, mask)
    )


def test_shuffled_links_reproduce_with_their_seed():
    kg = typed_kg()
    linked = random_texts(kg)
    assert shuffle_entities(linked, kg, 0.5, seed=2) == shuffle_entities(linked, kg, 0.5, seed=2)
    assert shuffle_entities(linked, kg, 0.5, seed=2) != shuffle_entities(linked, kg, 0.5, seed=3)


def test_shuffled_links_without_a_same_type_entity_take_any_other():
    kg = KnowledgeGraph([("Q1", "P1", "Q2")], [Entity("Q1", type="city"), Entity("Q2", type="river")])
    shuffled, _ = shuffle_entities([["Q1", "Q1"], ["Q2", "Q_absent"]], kg, 1.0, seed=0)
    assert shuffled[0] == ["Q2", "Q2"] and shuffled[1][0] == "Q1" and shuffled[1][1] in ("Q1", "Q2")
    with pytest.raises(KlmError, match="no entity to re-link"):
        shuffle_entities([["Q1"]], KnowledgeGraph([], [Entity("Q1", type="city")]), 1.0, seed=0)
    with pytest.raises(KlmError, match="shuffle_links"):
        shuffle_entities([["Q1"]], kg, -0.1, seed=0)


# -- relocated spans -------------------------------------------------------------------------


def word_spans(text: str) -> list[tuple[int, int]]:
    import re

    return [(match.start(), match.end()) for match in re.finditer(r"\S+", text)]


def test_relocated_spans_keep_their_length_and_label_and_leave_the_entities():
    texts = ["Zorba Kel was born in Kelmar .", "Tranu is a country in the north of the world"] * 5
    words = [word_spans(text) for text in texts]
    spans = [[(0, 9, "PERSON"), (22, 28, "GPE")], [(0, 5, "GPE")]] * 5
    for seed in range(4):
        moved = relocate_spans(words, spans, 1.0, seed)
        assert relocate_spans(words, spans, 1.0, seed) == moved
        for text, before, after in zip(texts, spans, moved):
            assert [label for *_, label in after] == [label for *_, label in before]
            for (start, end, _), (old_start, old_end, _) in zip(after, before):
                assert len(text[start:end].split()) == len(text[old_start:old_end].split())
                assert end <= old_start or start >= old_end  # off every entity's words
                assert all(e <= start or s >= end for s, e, _ in before)
    half = relocate_spans(words, spans, 0.5, 0)
    assert sum(a != b for text_spans, moved in zip(spans, half) for a, b in zip(text_spans, moved)) == round(0.5 * 15)


def test_a_span_without_room_or_whole_words_stays():
    words = [word_spans("Kelmar"), word_spans("in Kelmar")]
    spans = [[(0, 6, "GPE")], [(4, 6, "GPE")]]  # the only word; part of a word
    assert relocate_spans(words, spans, 1.0, 0) == spans
    with pytest.raises(KlmError, match="within"):
        relocate_spans(words, spans, 1.5, 0)
