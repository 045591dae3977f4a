import json

import pytest
from helpers import SHARED

from knowledge_lm.core.errors import KlmError
from knowledge_lm.knowledge.linking import (
    AliasTable,
    EntityLinker,
    Mention,
    coverage,
    gold_mentions,
    tokenize_words,
)

RECORDS = [
    ("Q1", "Paris", ["Paris", "City of Light"]),
    ("Q2", "Paris Hilton", ["Paris", "Hilton"]),
    ("Q3", None, ["paris"]),
    ("Q4", "Paris, Texas", []),
    ("Q5", "St. Louis", []),
    ("Q6", "The Hague", []),
    ("Q7", "the Paris", []),
    ("Q8", "Coca-Cola", []),
    ("Q9", "Alpha Beta Gamma Delta Epsilon Zeta", []),
    ("Q10", "Texas", []),
]


@pytest.fixture()
def table():
    return AliasTable.from_entities(RECORDS)


@pytest.fixture()
def linker(table):
    return EntityLinker(table)


def surfaces(mentions):
    return [mention.surface for mention in mentions]


def test_words_keep_offsets_and_split_clitics():
    text = "Obama's U.S.-based O'Brien don't, 3.5 Café"
    words = [text[start:end] for start, end in tokenize_words(text)]
    assert words == ["Obama", "'s", "U", ".", "S", ".", "-", "based", "O'Brien", "do", "n't", ",", "3.5", "Café"]


def test_rank_priors_match_a_hand_count(table):
    # "Paris": Q1's label (rank 0 -> 1), Q2's first surface form after its label (rank 1 -> 1/2).
    assert table.candidates("Paris") == [("Q1", pytest.approx(2 / 3)), ("Q2", pytest.approx(1 / 3))]


def test_uniform_priors():
    uniform = AliasTable.from_entities(RECORDS, weighting="uniform")
    assert uniform.candidates("Paris") == [("Q1", 0.5), ("Q2", 0.5)]
    with pytest.raises(KlmError):
        AliasTable.from_entities(RECORDS, weighting="zipf")


def test_records_may_be_dicts():
    table = AliasTable.from_entities([{"qid": "Q1", "label": None, "surface_forms": ["Earth", "Terra"]}])
    assert table.candidates("Terra") == [("Q1", 1.0)]


def test_case_fallbacks(table):
    assert table.candidates("paris") == [("Q3", 1.0)]  # exact wins over other casings
    assert table.candidates("PARIS") == [("Q3", 1.0)]  # then lower-cased
    assert table.candidates("hilton") == [("Q2", 1.0)]  # then title-cased
    assert table.candidates("city of light") == [("Q1", 1.0)]  # then any casing ("City of Light")
    assert table.candidates("Lyon") == []


def test_at_most_30_candidates_sorted_and_normalised():
    records = [(f"Q{i}", None, [f"alias {j}" for j in range(i % 7)] + ["Springfield"]) for i in range(40)]
    table = AliasTable.from_entities(records)
    candidates = table.candidates("Springfield")
    assert len(candidates) == 30
    priors = [prior for _, prior in candidates]
    assert priors == sorted(priors, reverse=True)
    assert sum(priors) == pytest.approx(1.0)
    assert len(AliasTable.from_entities(records, max_candidates=5).candidates("Springfield")) == 5


def test_knowbert_prior_file(shared_data):
    path = shared_data / "wikidata_kg" / "knowbert_wiki_linking_priors_sample.txt.gz"
    table = AliasTable.from_knowbert_priors(path)
    candidates = table.candidates("United States")
    assert candidates[0][0] == "United_States"
    assert len(candidates) <= 30 and sum(prior for _, prior in candidates) == pytest.approx(1.0)
    # Titles may hold commas.
    assert "Loeki,_Rieki,_Wieki" in [entity for entity, _ in table.candidates("Wiki")]
    by_page = AliasTable.from_knowbert_priors(path, id_field="page_id")
    assert by_page.candidates("United States")[0][0] == "3434750"
    mapped = AliasTable.from_knowbert_priors(path, id_map={"United_States": "Q30"})
    assert mapped.candidates("United States") == [("Q30", 1.0)]


def test_knowbert_prior_file_hand_count(tmp_path):
    path = tmp_path / "priors.txt"
    path.write_text("Paris\t100\t1,0.6,Paris\t2,0.3,Paris_Hilton\t3,0.1,Paris,_Texas\n")
    table = AliasTable.from_knowbert_priors(path)
    assert table.candidates("Paris") == [
        ("Paris", pytest.approx(0.6)),
        ("Paris_Hilton", pytest.approx(0.3)),
        ("Paris,_Texas", pytest.approx(0.1)),
    ]
    path.write_text("Paris\tmany\t1,0.6,Paris\n")
    with pytest.raises(KlmError, match="priors.txt:1"):
        AliasTable.from_knowbert_priors(path)


def test_merge_weights_sources_equally(table, tmp_path):
    path = tmp_path / "priors.txt"
    path.write_text("Paris\t1000\t1,1.0,Paris\n")
    merged = table.merge(AliasTable.from_knowbert_priors(path))
    assert merged.candidates("Paris") == [
        ("Paris", pytest.approx(1 / 2)),
        ("Q1", pytest.approx(1 / 3)),
        ("Q2", pytest.approx(1 / 6)),
    ]
    assert merged.candidates("Hilton") == [("Q2", 1.0)]


def test_linker_keeps_overlapping_spans(linker):
    mentions = linker.link("Paris Hilton visited Paris.")
    assert surfaces(mentions) == ["Paris", "Paris Hilton", "Hilton", "Paris"]
    assert [(m.start, m.end) for m in mentions] == [(0, 5), (0, 12), (6, 12), (21, 26)]
    for mention in mentions:
        assert sum(prior for _, prior in mention.candidates) == pytest.approx(1.0)


def test_longest_only(table):
    text = "Paris Hilton visited Paris."
    assert surfaces(EntityLinker(table).link(text, longest_only=True)) == ["Paris Hilton", "Paris"]
    assert surfaces(EntityLinker(table, longest_only=True).link(text)) == ["Paris Hilton", "Paris"]


def test_stop_word_and_punctuation_filters(linker):
    # "the Paris" starts with a stop word; "Paris, Texas" holds a comma: both skipped.
    assert surfaces(linker.link("He saw the Paris, Texas sign")) == ["Paris", "Texas"]
    # Hyphens and periods may sit inside a span.
    assert "St. Louis" in surfaces(linker.link("in St. Louis today"))
    assert "Coca-Cola" in surfaces(linker.link("a Coca-Cola bottle"))


def test_stop_words_match_in_any_casing(table):
    table.add("The", "Q11")
    table.add("Hague", "Q6")
    table.add("of", "Q12")
    linker = EntityLinker(table, stop_words={"the", "Of"})  # the list's own casing does not matter either
    for text in ("The Hague is here", "the Hague is here", "THE Hague is here"):
        assert surfaces(linker.link(text)) == ["Hague"]
    assert linker.link("OF") == [] and linker.link("of") == []
    assert surfaces(EntityLinker(table, stop_words=set()).link("THE Hague OF")) == ["THE", "THE Hague", "Hague", "OF"]


def test_span_length_limit(table):
    text = "Alpha Beta Gamma Delta Epsilon Zeta"
    assert EntityLinker(table).link(text) == []
    assert surfaces(EntityLinker(table, max_span_words=6).link(text)) == [text]


def test_fallback_stop_words(table):
    linker = EntityLinker(table, stop_words={"visited"})
    assert all("visited" not in mention.surface for mention in linker.link("Paris visited Texas"))


def test_gold_mentions():
    text = "Barack Obama was born in Honolulu"
    mentions = gold_mentions(text, [("Q18094", 25, 33), ("Q76", 0, 12), ("Q76", 0, 12), ("Q531178", 25, 33)])
    assert mentions == [
        Mention(0, 12, "Barack Obama", [("Q76", 1.0)]),
        Mention(25, 33, "Honolulu", [("Q18094", 0.5), ("Q531178", 0.5)]),
    ]
    with pytest.raises(KlmError, match="outside"):
        gold_mentions(text, [("Q1", 30, 40)])


def test_mention_round_trips_through_json():
    mention = Mention(0, 5, "Paris", [("Q1", 0.75), ("Q2", 0.25)])
    assert Mention.from_dict(json.loads(json.dumps(mention.to_dict()))) == mention


def test_coverage():
    one = [Mention(0, 1, "a", [("Q1", 1.0)])]
    assert coverage([one, [], one, []]) == 0.5
    assert coverage([]) == 0.0


@pytest.fixture(scope="module")
def wikidata_linker():

    path = SHARED / "wikidata_kg" / "entities.jsonl.gz"
    if not path.is_file():
        pytest.skip("the shared Wikidata KG is not here")
    return EntityLinker(AliasTable.from_entities_file(path))


def test_shared_kg_links_obama_and_honolulu(wikidata_linker):
    mentions = {mention.surface: mention for mention in wikidata_linker.link("Barack Obama was born in Honolulu")}
    assert mentions["Barack Obama"].candidates[0][0] == "Q76"
    # The city's label beats the airport, for which "Honolulu" is a second surface form.
    assert [qid for qid, _ in mentions["Honolulu"].candidates][:2] == ["Q18094", "Q531178"]
    assert "was" not in mentions and "in" not in mentions


def test_missing_entity_file(tmp_path):
    with pytest.raises(KlmError, match="does not exist"):
        AliasTable.from_entities_file(tmp_path / "entities.jsonl.gz")
    bad = tmp_path / "entities.jsonl"
    bad.write_text('{"qid": "Q1"}\n{oops\n')
    with pytest.raises(KlmError, match="entities.jsonl:2"):
        AliasTable.from_entities_file(bad)


def test_span_linker_links_entity_spans_above_the_threshold_only():
    from knowledge_lm.knowledge.annotate import Annotation
    from knowledge_lm.knowledge.linking import SpanLinker

    table = AliasTable.from_entities(
        [("Q1", "Paris", []), ("Q2", "Paris Hilton", []), ("Q3", "Texas", ["Paris"]), ("Q4", "film", [])]
    )
    text = "The Paris Hilton film was shot in Paris , Texas by Russians ."
    # "The" trimmed, "Paris" inside "Paris Hilton" gives way to it, NORP left out, "film" is no entity span.
    ner = Annotation(ner=[(0, 16, "PERSON"), (4, 9, "PERSON"), (34, 39, "GPE"), (42, 47, "GPE"), (51, 59, "NORP")])
    linked = SpanLinker(table, threshold=0.6).link(text, ner)
    assert [(m.surface, m.candidates[0][0]) for m in linked] == [
        ("Paris Hilton", "Q2"),
        ("Paris", "Q1"),
        ("Texas", "Q3"),
    ]
    # "Paris": Q1 by its label (2/3), Q3 by an alias (1/3): below 0.7, left out.
    assert [m.surface for m in SpanLinker(table, threshold=0.7).link(text, ner)] == ["Paris Hilton", "Texas"]
