"""PMI statistics: hand counts, thresholds, the KAM map and expansion, saving, and speed on SemEval."""

import gzip
import math

import numpy as np
import pytest

from knowledge_lm.core.errors import KlmError
from knowledge_lm.knowledge.pmi import CorpusStatistics, PmiTable, cache_key, load_unigram_counts, tokenize_words

# Units = texts. Texts holding: the 3, cat 2, sat 2, ran 2, dog 2, a 1.
# Pairs: (cat, the) 2, (sat, the) 2, (cat, sat) 1, (cat, ran) 1, (ran, the) 1, (a, dog) 1, (a, ran) 1,
# (dog, ran) 1, (dog, the) 1, (dog, sat) 1.
CORPUS = ["The cat sat.", "the cat ran", "A dog ran", "the dog sat"]


def test_tokenizer_lower_cases_words():
    assert tokenize_words("The cat's 2 toys, don't!") == ["the", "cat's", "2", "toys", "don't"]


def test_pmi_matches_a_hand_count():
    statistics = CorpusStatistics.from_texts(CORPUS, min_count=1)
    assert statistics.num_units == 4 and statistics.unit_counts["the"] == 3
    assert statistics.pmi("the", "cat") == pytest.approx(math.log(4 * 2 / (3 * 2)))
    assert statistics.pmi("cat", "the") == statistics.pmi("the", "cat")
    assert statistics.pmi("a", "dog") == pytest.approx(math.log(4 * 1 / (1 * 2)))
    assert statistics.pmi("dog", "the") == pytest.approx(math.log(4 * 1 / (2 * 3)))
    assert statistics.pmi("cat", "dog") is None  # never together
    assert statistics.pmi("cat", "cat") is None
    assert statistics.pmi("cat", "zebra") is None


def test_window_units():
    statistics = CorpusStatistics.from_texts(["a b c"], min_count=1, window=2)
    assert statistics.num_units == 2  # [a b], [b c]
    assert statistics.pmi("a", "c") is None
    assert statistics.pmi("a", "b") == pytest.approx(math.log(2 * 1 / (1 * 2)))
    with pytest.raises(KlmError, match="window"):
        CorpusStatistics.from_texts(["a b"], window=1)


def test_min_count_drops_rare_words_and_pairs():
    statistics = CorpusStatistics.from_texts(CORPUS, min_count=2)
    assert "a" not in statistics.unigram_counts and "dog" in statistics.unigram_counts
    assert statistics.pmi("a", "dog") is None  # a occurs once
    assert statistics.pmi("dog", "ran") is None  # together once
    assert statistics.pmi("cat", "the") == pytest.approx(math.log(4 / 3))
    assert set(statistics.pair_pmi) == {("cat", "the"), ("sat", "the")}


def test_normalised_matrix_is_the_kam_map():
    statistics = CorpusStatistics.from_texts(CORPUS, min_count=1)
    words = ["the", "cat", "dog", "zebra", "the", "a"]
    matrix = statistics.normalised_pmi_matrix(words)
    assert matrix.shape == (6, 6) and matrix.dtype == np.float32
    assert np.all((matrix >= 0) & (matrix <= 1))
    np.testing.assert_array_equal(matrix, matrix.T)
    np.testing.assert_array_equal(np.diag(matrix), 1.0)
    z = math.log(2)  # the largest PMI of the corpus: (a, dog)
    assert matrix[0, 1] == pytest.approx(math.log(4 / 3) / z)
    assert matrix[2, 5] == pytest.approx(1.0)
    assert matrix[1, 2] == 0 and matrix[0, 2] == 0  # no PMI; negative PMI
    assert matrix[0, 4] == 1  # the same word twice
    assert not matrix[3, :3].any()  # an unknown word


def test_top_k_neighbours_excludes_sentence_words_and_breaks_ties_by_word():
    texts = ["x p", "x q", "y", "z"]  # PMI(x, p) = PMI(x, q) = log 2
    statistics = CorpusStatistics.from_texts(texts, min_count=1)
    assert statistics.top_k_neighbours(["x"], 2) == ["p", "q"]
    assert statistics.top_k_neighbours(["x"], 1) == ["p"]
    assert CorpusStatistics.from_texts(list(reversed(texts)), min_count=1).top_k_neighbours(["x"], 2) == ["p", "q"]
    assert statistics.top_k_neighbours(["x", "p"], 5) == ["q"]
    assert statistics.top_k_neighbours(["unknown"], 3) == []
    assert statistics.top_k_neighbours(["x"], 0) == []


def test_top_k_neighbours_ranks_by_mean_pmi():
    statistics = CorpusStatistics.from_texts(CORPUS, min_count=1)
    # dog: a (log 2), ran (0), sat (0), the (negative): only a has a positive mean.
    assert statistics.top_k_neighbours(["dog"], 3) == ["a"]
    neighbours = statistics.top_k_neighbours(["cat", "sat"], 3)
    assert neighbours == ["the"] and not {"cat", "sat"} & set(neighbours)


def test_top_k_neighbours_are_the_mean_pmi_ranking_a_loop_over_the_neighbours_gives():
    """The vectorised expansion against its definition, written as a loop (sums in the same order), on a random
    corpus with many ties."""
    import random
    from collections import defaultdict

    generator = random.Random(0)
    words = [f"w{i}" for i in range(40)]
    texts = [" ".join(generator.choices(words, k=generator.randint(2, 8))) for _ in range(300)]
    statistics = CorpusStatistics.from_texts(texts, min_count=1)

    def by_loop(sentence, k):
        known = sorted({word for word in sentence if word in statistics.unigram_counts})
        totals = defaultdict(float)
        for word in known:
            for neighbour, value in statistics.neighbours.get(word, {}).items():
                if neighbour not in sentence:
                    totals[neighbour] += value
        ranked = sorted((-total / len(known), neighbour) for neighbour, total in totals.items() if total > 0)
        return [neighbour for _, neighbour in ranked[:k]] if known and k > 0 else []

    sentences = [generator.choices(words + ["unknown"], k=generator.randint(1, 6)) for _ in range(200)]
    for sentence in sentences:
        for k in (0, 1, 5, 50):
            assert statistics.top_k_neighbours(sentence, k) == by_loop(sentence, k)


@pytest.mark.parametrize("name", ["statistics.json", "statistics.json.gz"])
def test_save_load_round_trip(tmp_path, name):
    statistics = CorpusStatistics.from_texts(CORPUS * 3, min_count=2, window=3)
    loaded = CorpusStatistics.load(statistics.save(tmp_path / name))
    assert loaded.to_dict() == statistics.to_dict()
    assert loaded.pair_pmi == statistics.pair_pmi and loaded.max_pmi == statistics.max_pmi
    words = ["the", "cat", "dog", "ran"]
    np.testing.assert_array_equal(loaded.normalised_pmi_matrix(words), statistics.normalised_pmi_matrix(words))
    assert loaded.top_k_neighbours(["cat"], 3) == statistics.top_k_neighbours(["cat"], 3)


def test_table_gives_the_map_of_its_vocabulary_and_survives_saving(tmp_path):
    statistics = CorpusStatistics.from_texts(CORPUS, min_count=1)
    vocabulary = ["the", "zebra", "dog", "cat", "a", "sat"]  # zebra: no PMI; ran: outside the table
    table = PmiTable.load(statistics.table(vocabulary).save(tmp_path / "pmi.npz"))
    assert table.vocabulary == vocabulary and table.max_pmi == statistics.max_pmi
    words = ["the", "cat", "zebra", "the", "dog", "a", "sat"]
    entries = table.entries(np.array([vocabulary.index(word) for word in words]))
    map_values = np.where(entries >= 0, table.normalised()[entries], 0.0)
    expected = statistics.normalised_pmi_matrix(words)
    np.fill_diagonal(expected, 0.0)
    expected[0, 3] = expected[3, 0] = 0.0  # the same word twice: no entry
    np.testing.assert_array_equal(map_values.astype(np.float32), expected)
    assert (entries[0, 3], entries[2, 2]) == (-1, -1)
    assert len(table.pmi) == 3  # the positive pairs within vocabulary: (cat, the), (sat, the), (a, dog)


def test_table_load_rejects_other_files(tmp_path):
    path = tmp_path / "pmi.npz"
    np.savez(path, format_version=np.int64(99))
    with pytest.raises(KlmError, match="format version"):
        PmiTable.load(path)
    path.write_text("not numpy")
    with pytest.raises(KlmError, match="unreadable PMI table"):
        PmiTable.load(path)


def test_load_rejects_other_files(tmp_path):
    path = tmp_path / "other.json"
    path.write_text('{"something": 1}')
    with pytest.raises(KlmError, match="not a PMI statistics file"):
        CorpusStatistics.load(path)


def test_cache_key_and_cached(tmp_path):
    key = cache_key(CORPUS, min_count=1)
    assert key == cache_key(list(CORPUS), min_count=1)
    assert (
        len(
            {
                key,
                cache_key(CORPUS, min_count=2),
                cache_key(CORPUS, min_count=1, window=3),
                cache_key(CORPUS[:3], min_count=1),
                cache_key(CORPUS, min_count=1, unigram_counts={"the": 1}),
            }
        )
        == 5
    )
    first = CorpusStatistics.cached(CORPUS, tmp_path, min_count=1)
    assert (tmp_path / f"pmi-{key}.json.gz").is_file()
    assert CorpusStatistics.cached(CORPUS, tmp_path, min_count=1).pair_pmi == first.pair_pmi


def test_external_unigram_counts(tmp_path):
    path = tmp_path / "freq.txt.gz"
    with gzip.open(path, "wt") as handle:
        handle.write("the 600\ncat 100\ndog 100\nsat 100\nran 100\n")
    counts = load_unigram_counts(path)
    assert counts["the"] == 600 and sum(counts.values()) == 1000
    statistics = CorpusStatistics.from_texts(CORPUS, min_count=1, unigram_counts=counts)
    mean_unit_length = 12 / 4
    assert statistics.probability("the") == 1.0  # 3 * 600 / 1000, capped
    assert statistics.probability("cat") == pytest.approx(mean_unit_length * 100 / 1000)
    p_cat = mean_unit_length * 100 / 1000
    assert statistics.pmi("the", "cat") == pytest.approx(math.log((2 / 4) / (1.0 * p_cat)))  # p(the) capped at 1
    assert statistics.pmi("a", "dog") is None  # a is not in the table
    round_trip = CorpusStatistics.load(statistics.save(tmp_path / "s.json"))
    assert round_trip.pair_pmi == statistics.pair_pmi


def test_load_unigram_counts_rejects_bad_lines(tmp_path):
    path = tmp_path / "freq.txt"
    path.write_text("the 10\ncat many\n")
    with pytest.raises(KlmError, match=r"freq.txt:2: expected 'word count'"):
        load_unigram_counts(path)


def test_semeval_train_sentences_statistics(shared_data):
    from knowledge_lm.data.semeval import SemEvalDataModule

    module = SemEvalDataModule(data_dir=shared_data)
    texts = [record["text_a"] for record in module.read_file(module.find_files()["train"])]
    assert len(texts) == 8000
    statistics = CorpusStatistics.from_texts(texts, min_count=5)
    assert len(statistics.unigram_counts) > 1000 and statistics.pair_pmi
    sentence = tokenize_words(texts[0])
    assert statistics.normalised_pmi_matrix(sentence).shape == (len(sentence), len(sentence))
    neighbours = statistics.top_k_neighbours(sentence, 5)
    assert len(neighbours) == 5 and not set(neighbours) & set(sentence)
