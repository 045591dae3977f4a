import copy
import importlib.util
import json
import sys
import unicodedata

import pytest

from knowledge_lm.core.errors import KlmError
from knowledge_lm.knowledge.annotate import (
    MISSING_SPACY_MODEL,
    Annotation,
    Annotator,
    Parse,
    align_char_spans,
    load_spacy,
    subtree_phrases,
    throughput,
    ud_noun_chunks,
    word_ids_for_tokens,
)
from knowledge_lm.knowledge.linking import tokenize_words

SENTENCE = "Barack Obama was born in Honolulu, Hawaii."
TRICKY = "Café Müller met a U.S.-based lawyer who said: don't. Pneumonoultramicroscopicsilicovolcanoconiosis!"


@pytest.fixture(scope="module")
def annotator():
    pytest.importorskip("spacy")
    return Annotator()


@pytest.fixture(scope="module")
def subtree_annotator(annotator):
    # Same loaded pipeline, other phrase segments: the model loads once.
    other = copy.copy(annotator)
    other.phrases = "subtrees"
    return other


@pytest.fixture(scope="module")
def annotation(annotator):
    return annotator.annotate([SENTENCE])[0]


def text_of(spans, text):
    return [text[span[0] : span[1]] for span in spans]


def squash(text: str) -> str:
    """What an uncased WordPiece vocabulary sees: lower case, no accents, no spaces."""
    text = unicodedata.normalize("NFD", text.lower())
    return "".join(char for char in text if not unicodedata.combining(char) and not char.isspace())


def decoded(tokenizer, input_ids, indices) -> str:
    pieces = tokenizer.convert_ids_to_tokens([input_ids[index] for index in indices])
    return "".join(piece.removeprefix("##") for piece in pieces)


def spans_of(text, *substrings):
    return [(text.index(substring), text.index(substring) + len(substring)) for substring in substrings]


# --- annotations -----------------------------------------------------------------------------------


def test_words_are_the_tokens(annotation):
    words = text_of(annotation.words, SENTENCE)
    assert words == ["Barack", "Obama", "was", "born", "in", "Honolulu", ",", "Hawaii", "."]


def test_ner_finds_person_and_place(annotation):
    entities = {SENTENCE[start:end]: label for start, end, label in annotation.ner}
    assert entities.get("Barack Obama") == "PERSON"
    assert "GPE" in {entities.get("Honolulu"), entities.get("Hawaii")}


def test_noun_chunks(annotation):
    assert "Barack Obama" in text_of(annotation.phrases, SENTENCE)


def test_subtrees(subtree_annotator):
    text = "The old man saw a big dog in the park. It ran."
    annotation = subtree_annotator.annotate([text])[0]
    phrases = text_of(annotation.phrases, text)
    assert "The old man" in phrases and "the park" in phrases
    for sentence in ("The old man saw a big dog in the park.", "It ran."):
        assert sentence not in phrases
    word_starts = [start for start, _ in annotation.words]
    for start, end in annotation.phrases:
        assert sum(start <= word_start < end for word_start in word_starts) >= 2


def test_dependencies_are_valid_word_indices(annotator):
    text = "Barack Obama was born in Honolulu.  He later moved to Chicago."
    annotation = annotator.annotate([text])[0]
    words = len(annotation.words)
    assert all(not text[start:end].isspace() for start, end in annotation.words)
    dependents = [dependent for _, dependent, _ in annotation.dependencies]
    assert len(dependents) == len(set(dependents)) == words - 2  # one head per word but the two roots
    for head, dependent, label in annotation.dependencies:
        assert 0 <= head < words and 0 <= dependent < words and head != dependent and label


def test_annotate_many_with_progress(annotator):
    texts = [SENTENCE, "", "Paris is in France."]
    annotations = annotator.annotate(iter(texts), progress=True)
    assert len(annotations) == 3 and annotations[1] == Annotation()


def test_annotation_round_trips_through_json(annotation):
    assert Annotation.from_dict(json.loads(json.dumps(annotation.to_dict()))) == annotation


def test_throughput_reports_rates(annotator):
    assert set(throughput([SENTENCE], annotator=annotator)) == {"annotate"}


def test_missing_spacy_model(monkeypatch):
    spacy = pytest.importorskip("spacy")

    def not_installed(name, *args, **kwargs):
        raise OSError(f"[E050] Can't find model '{name}'")

    monkeypatch.setattr(spacy, "load", not_installed)
    with pytest.raises(KlmError) as error:
        load_spacy()
    assert str(error.value) == MISSING_SPACY_MODEL
    with pytest.raises(KlmError, match="en_core_web_lg"):
        Annotator(model="en_core_web_lg")


def test_bad_options():
    with pytest.raises(KlmError, match="backend"):
        Annotator(backend="nltk")
    with pytest.raises(KlmError, match="phrases"):
        Annotator(phrases="constituents")


@pytest.mark.skipif(importlib.util.find_spec("stanza") is not None, reason="stanza is installed")
def test_stanza_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "stanza", None)
    with pytest.raises(KlmError, match="pip install 'knowledge-lm\\[stanza\\]'"):
        Annotator(backend="stanza")


@pytest.mark.skipif(importlib.util.find_spec("stanza") is None, reason="stanza is not installed")
def test_stanza_backend():
    try:
        stanza_annotator = Annotator(backend="stanza")
    except KlmError as error:
        pytest.skip(str(error))
    annotation = stanza_annotator.annotate([SENTENCE])[0]
    assert "Barack Obama" in text_of(annotation.ner, SENTENCE)
    assert "Barack Obama" in text_of(annotation.phrases, SENTENCE)


def hand_parse():
    # The old man saw a big dog . (UD)
    return Parse(
        words=[(0, 3), (4, 7), (8, 11), (12, 15), (16, 17), (18, 21), (22, 25), (25, 26)],
        heads=[2, 2, 3, None, 6, 6, 3, 3],
        labels=["det", "amod", "nsubj", "root", "det", "amod", "obj", "punct"],
        upos=["DET", "ADJ", "NOUN", "VERB", "DET", "ADJ", "NOUN", "PUNCT"],
        sentences=[(0, 8)],
        ner=[],
    )


def test_parse_helpers_on_a_hand_parse():
    assert ud_noun_chunks(hand_parse()) == [(0, 3), (4, 7)]
    assert subtree_phrases(hand_parse()) == [(0, 3), (4, 7)]


# --- sub-word alignment ----------------------------------------------------------------------------


def test_alignment_on_tricky_text(tokenizer):
    encoding = tokenizer(TRICKY, return_offsets_mapping=True)
    pieces = (
        "Café Müller",
        "Müller",
        "U.S.",
        "U.S.-based",
        "don't",
        "said: don't.",
        "Pneumonoultramicroscopicsilicovolcanoconiosis",
    )
    spans = spans_of(TRICKY, *pieces)
    aligned = align_char_spans(encoding["offset_mapping"], spans)
    for piece, indices in zip(pieces, aligned):
        assert decoded(tokenizer, encoding["input_ids"], indices) == squash(piece)
        assert indices == sorted(indices)
    assert len(aligned[-1]) > 3


def test_span_inside_a_piece_takes_the_whole_piece(tokenizer):
    encoding = tokenizer("Pneumonoultramicroscopicsilicovolcanoconiosis", return_offsets_mapping=True)
    (indices,) = align_char_spans(encoding["offset_mapping"], [(1, 2)])
    assert len(indices) == 1
    piece_start, piece_end = encoding["offset_mapping"][indices[0]]
    assert piece_start <= 1 and piece_end >= 2 and piece_end - piece_start > 1
    assert align_char_spans(encoding["offset_mapping"], [(3, 3)]) == [[]]


def test_word_ids_for_tokens(tokenizer):
    words = tokenize_words(TRICKY)
    encoding = tokenizer(TRICKY, return_offsets_mapping=True)
    word_ids = word_ids_for_tokens(encoding["offset_mapping"], words)
    assert len(word_ids) == len(encoding["input_ids"])
    assert word_ids[0] is None and word_ids[-1] is None  # [CLS], [SEP]
    tokens = tokenizer.convert_ids_to_tokens(encoding["input_ids"])
    offsets = encoding["offset_mapping"]
    for index, word in enumerate(word_ids[1:-1], start=1):
        assert word is not None and words[word][0] <= offsets[index][0] < words[word][1]
    # WordPiece's "don" straddles this tokenizer's words "do" + "n't": it takes the word it starts in.
    assert tokens[word_ids.index(words.index(spans_of(TRICKY, "do")[0]))] == "don"
    long_word = words.index(spans_of(TRICKY, "Pneumonoultramicroscopicsilicovolcanoconiosis")[0])
    assert word_ids.count(long_word) > 3
    for word, indices in enumerate(align_char_spans(offsets, words)):
        assert all(index in indices for index, word_id in enumerate(word_ids) if word_id == word)


def test_word_ids_with_spacy_words(tokenizer, annotator):
    annotation = annotator.annotate([TRICKY])[0]
    encoding = tokenizer(TRICKY, return_offsets_mapping=True)
    word_ids = word_ids_for_tokens(encoding["offset_mapping"], annotation.words)
    assert all(word is not None for word in word_ids[1:-1])


def test_pair_alignment(tokenizer):
    text_a, text_b = "Paris is in France.", "Is Paris in France? Café Müller!"
    encoding = tokenizer(text_a, text_b, return_offsets_mapping=True)
    sequence_ids = encoding.sequence_ids()
    spans_b = spans_of(text_b, "Paris", "France", "Café Müller")
    aligned = align_char_spans(encoding["offset_mapping"], spans_b, sequence_ids=sequence_ids, sequence=1)
    for (start, end), indices in zip(spans_b, aligned):
        assert indices and all(sequence_ids[index] == 1 for index in indices)
        assert decoded(tokenizer, encoding["input_ids"], indices) == squash(text_b[start:end])
    (first,) = align_char_spans(encoding["offset_mapping"], spans_of(text_a, "Paris"), sequence_ids, sequence=0)
    assert [sequence_ids[index] for index in first] == [0]
    word_ids = word_ids_for_tokens(encoding["offset_mapping"], tokenize_words(text_b), sequence_ids, sequence=1)
    assert all(word is None for word, segment in zip(word_ids, sequence_ids) if segment != 1)
    with pytest.raises(KlmError, match="sequence_ids"):
        align_char_spans(encoding["offset_mapping"], spans_b)


def test_truncation(tokenizer):
    text = "Paris is the capital of France and Berlin is the capital of Germany, said Müller."
    encoding = tokenizer(text, return_offsets_mapping=True, truncation=True, max_length=8)
    paris, mueller = align_char_spans(encoding["offset_mapping"], spans_of(text, "Paris", "Müller"))
    assert decoded(tokenizer, encoding["input_ids"], paris) == "paris" and mueller == []
    # A span cut by the truncation keeps the pieces that survive.
    (cut,) = align_char_spans(encoding["offset_mapping"], spans_of(text, "capital of France and Berlin"))
    assert decoded(tokenizer, encoding["input_ids"], cut) == "capitalofFrance".lower()


def test_tensor_offsets(tokenizer):
    encoding = tokenizer(
        [SENTENCE], return_offsets_mapping=True, return_tensors="pt", padding="max_length", max_length=32
    )
    (obama,) = align_char_spans(encoding["offset_mapping"][0], spans_of(SENTENCE, "Obama"))
    assert decoded(tokenizer, encoding["input_ids"][0].tolist(), obama) == "obama"
    word_ids = word_ids_for_tokens(encoding["offset_mapping"][0], tokenize_words(SENTENCE))
    assert word_ids[-1] is None  # padding
    with pytest.raises(KlmError, match="index the batch"):
        align_char_spans(encoding["offset_mapping"], [(0, 5)])


# -- only the components the annotations read ------------------------------------------------------
def sample_texts() -> list[str]:
    """Texts with entities, pairs of spaces, several sentences; SST-2 and RTE sentences where the data is here."""
    import csv
    import gzip

    from helpers import SHARED

    texts = [SENTENCE, TRICKY, "", "  Two  spaces , then   three .", "Paris is in France. Berlin is not."]
    for task, rows in (("sst2", 120), ("rte", 40)):
        path = SHARED / f"glue_{task}" / "train.tsv.gz"
        if path.is_file():
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                lines = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))[1 : rows + 1]
            texts += [line[0] if task == "sst2" else line[1] for line in lines]
    return texts


@pytest.mark.parametrize("phrases", ["noun_chunks", "subtrees"])
def test_disabled_components_leave_the_annotations_unchanged(phrases):
    pytest.importorskip("spacy")
    from knowledge_lm.knowledge.annotate import annotation_from_parse, parse_from_spacy

    texts = sample_texts()
    annotator = Annotator(phrases=phrases)
    assert "lemmatizer" not in annotator.nlp.pipe_names
    assert ("tagger" in annotator.nlp.pipe_names) == (phrases == "noun_chunks")
    everything = load_spacy()
    for name in list(everything.disabled):
        everything.enable_pipe(name)
    expected = []
    for doc in everything.pipe(texts, batch_size=64):
        parse, noun_chunks = parse_from_spacy(doc)
        expected.append(annotation_from_parse(parse, phrases, noun_chunks))
    assert annotator.annotate(texts) == expected
