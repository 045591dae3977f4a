"""Pointwise mutual information between words, counted once over a corpus: KAM-BERT's PMI map and expansion.

The estimator and the PMI map: ``CorpusStatistics``; the stored table: ``PmiTable``.
"""

import gzip
import hashlib
import json
import math
import os
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from itertools import combinations
from pathlib import Path

import numpy as np

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import open_text, read_json

FORMAT_VERSION = 1
WORD_PATTERN = re.compile(r"[^\W_]+(?:'[^\W_]+)*")


def tokenize_words(text: str) -> list[str]:
    """Lower-cased words: runs of letters and digits, keeping inner apostrophes (``don't``)."""
    return WORD_PATTERN.findall(text.lower())


def load_unigram_counts(path: str | os.PathLike) -> dict[str, int]:
    """``word count`` lines (plain or .gz), as in ``enwiki_word_freq/enwiki_vocab_min200.txt.gz``."""
    path = Path(path)
    counts = {}
    with open_text(path) as handle:
        for line_number, line in enumerate(handle, start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 2 or not fields[1].isdigit():
                raise KlmError(f"{path}:{line_number}: expected 'word count', got {line.strip()!r}")
            counts[fields[0]] = counts.get(fields[0], 0) + int(fields[1])
    if not counts:
        raise KlmError(f"{path}: no word counts")
    return counts


def cache_key(
    texts: Iterable[str],
    min_count: int = 5,
    window: int | None = None,
    tokenize: Callable[[str], list[str]] = tokenize_words,
    unigram_counts: Mapping[str, int] | None = None,
) -> str:
    """A hash of the texts and every option that changes the statistics (the tokenizer by its name)."""
    digest = hashlib.sha256()
    options = {
        "version": FORMAT_VERSION,
        "min_count": min_count,
        "window": window,
        "tokenize": f"{tokenize.__module__}.{tokenize.__qualname__}",
    }
    digest.update(json.dumps(options, sort_keys=True).encode())
    for text in texts:
        digest.update(text.encode())
        digest.update(b"\x00")
    if unigram_counts is not None:
        digest.update(b"\x01unigrams")
        for word in sorted(unigram_counts):
            digest.update(f"{word} {unigram_counts[word]}\n".encode())
    return digest.hexdigest()[:16]


def units_of(words: list[str], window: int | None) -> list[list[str]]:
    if window is None or len(words) <= window:
        return [words]
    return [words[start : start + window] for start in range(len(words) - window + 1)]


class PmiTable:
    """The positive PMI of word pairs, as indices into ``vocabulary`` (``first < second``, sorted), and
    ``max_pmi`` (the corpus's ``Z``): the values ``CorpusStatistics.normalised_pmi_matrix`` gives those words.

    ``PmiTable`` (``CorpusStatistics.table``): the positive PMI of the pairs of a vocabulary and the corpus's
    ``Z``, what the PMI map of sentences made of those words needs, without the corpus; saved as a small
    ``.npz`` beside prepared features and looked up for many pairs at once.
    """

    def __init__(self, vocabulary: list[str], first: np.ndarray, second: np.ndarray, pmi: np.ndarray, max_pmi: float):
        self.vocabulary = vocabulary
        self.max_pmi = max_pmi
        self.pmi = np.asarray(pmi, dtype=np.float64)
        self.keys = np.asarray(first, dtype=np.int64) * len(vocabulary) + np.asarray(second, dtype=np.int64)
        if np.any(self.keys[1:] <= self.keys[:-1]):
            raise KlmError("a PMI table's pairs must be distinct and sorted")

    def normalised(self) -> np.ndarray:
        """Each pair's value in the PMI map, ``max(0, PMI) / Z`` as float32, as ``normalised_pmi_matrix`` gives it."""
        scale = self.max_pmi if self.max_pmi > 0 else 1.0
        return np.clip((np.maximum(self.pmi, 0.0) / scale).astype(np.float32), 0.0, 1.0)

    def entries(self, ids: np.ndarray) -> np.ndarray:
        """For every pair of the words ``ids`` (indices into ``vocabulary``), the index of its entry in the
        table; -1 where the table has none (the same word twice included)."""
        distinct, position = np.unique(np.asarray(ids, dtype=np.int64), return_inverse=True)
        first, second = np.triu_indices(len(distinct), 1)  # distinct is sorted: first's word has the lower index
        keys = distinct[first] * len(self.vocabulary) + distinct[second]
        found = np.searchsorted(self.keys, keys)
        found[found == len(self.keys)] = 0
        hit = self.keys[found] == keys if len(self.keys) else np.zeros(len(keys), dtype=bool)
        between_distinct = np.full((len(distinct), len(distinct)), -1, dtype=np.int64)
        between_distinct[first, second] = between_distinct[second, first] = np.where(hit, found, -1)
        return between_distinct[np.ix_(position.ravel(), position.ravel())]

    def save(self, path: str | os.PathLike) -> Path:
        """A compressed ``.npz`` (PMI as float64: exact), written atomically."""
        path = Path(path)
        size = len(self.vocabulary)
        staging = path.with_name(path.name + f".tmp{os.getpid()}.npz")
        np.savez_compressed(
            staging,
            format_version=np.int64(FORMAT_VERSION),
            vocabulary=np.array(self.vocabulary, dtype=str),
            first=(self.keys // max(size, 1)).astype(np.int32),
            second=(self.keys % max(size, 1)).astype(np.int32),
            pmi=self.pmi,
            max_pmi=np.float64(self.max_pmi),
        )
        os.replace(staging, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "PmiTable":
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as stored:
                if int(stored["format_version"]) != FORMAT_VERSION:
                    raise KlmError(f"{path}: not a PMI table of format version {FORMAT_VERSION}")
                return cls(
                    stored["vocabulary"].tolist(),
                    stored["first"],
                    stored["second"],
                    stored["pmi"],
                    float(stored["max_pmi"]),
                )
        except (OSError, KeyError, ValueError) as error:
            raise KlmError(f"{path}: unreadable PMI table ({type(error).__name__}: {error})") from None


class CorpusStatistics:
    """Word and word-pair counts of a corpus and the PMI they give; build with :meth:`from_texts`.

    Estimator. The corpus is cut into *units*: whole texts (``window=None``) or, with ``window=n``, every
    run of ``n`` consecutive words of a text (a text shorter than ``n`` is one unit). With ``N`` units,
    ``n(w)`` the number of units holding ``w`` and ``n(a, b)`` the number holding both distinct words,

        p(w) = n(w) / N,   p(a, b) = n(a, b) / N,   PMI(a, b) = log( N · n(a, b) / (n(a) · n(b)) )   (natural log).

    Words occurring fewer than ``min_count`` times in the texts are dropped before pairing (their counts
    are not kept); pairs seen in fewer than ``min_count`` units get no PMI, and neither does a word with
    itself. With ``unigram_counts`` (external term counts such as ``enwiki_word_freq``), the marginals
    come from that table instead: ``p(w) = min(1, L · c(w) / C)``, ``C`` the table's total and ``L`` the
    mean number of words per unit, i.e. the chance that a unit of mean length holds ``w`` to first order,
    which keeps the external marginals on the same per-unit scale as the joint; a word absent from the
    table has no PMI.

    PMI map (``normalised_pmi_matrix``): ``max(0, PMI(w_i, w_j)) / Z`` with ``Z`` the largest PMI of any
    pair in the corpus, so every value is in [0, 1] and unknown pairs are 0; two occurrences of the same
    word (the diagonal included) get 1.
    """

    def __init__(
        self,
        *,
        min_count: int,
        window: int | None,
        num_texts: int,
        num_units: int,
        num_unit_words: int,
        unigram_counts: dict[str, int],
        document_counts: dict[str, int],
        unit_counts: dict[str, int],
        pair_counts: dict[tuple[str, str], int],
        marginal_counts: dict[str, int] | None = None,
        marginal_total: int | None = None,
    ):
        self.min_count = min_count
        self.window = window
        self.num_texts = num_texts
        self.num_units = num_units
        self.num_unit_words = num_unit_words  # words summed over units: the mean unit length's numerator
        self.unigram_counts = unigram_counts
        self.document_counts = document_counts
        self.unit_counts = unit_counts
        self.pair_counts = pair_counts
        self.marginal_counts = marginal_counts
        self.marginal_total = marginal_total
        self.pair_pmi = {
            pair: value
            for pair, count in pair_counts.items()
            if count >= min_count and (value := self._pmi_from_counts(*pair, count)) is not None
        }
        self.max_pmi = max(self.pair_pmi.values(), default=0.0)
        self.neighbours: dict[str, dict[str, float]] = defaultdict(dict)
        for (first, second), value in self.pair_pmi.items():
            self.neighbours[first][second] = value
            self.neighbours[second][first] = value
        self._neighbour_arrays = None

    # -- building -----------------------------------------------------------------------------
    @classmethod
    def from_texts(
        cls,
        texts: Iterable[str],
        min_count: int = 5,
        window: int | None = None,
        tokenize: Callable[[str], list[str]] = tokenize_words,
        unigram_counts: Mapping[str, int] | None = None,
    ) -> "CorpusStatistics":
        if min_count < 1:
            raise KlmError(f"min_count must be at least 1, got {min_count}")
        if window is not None and window < 2:
            raise KlmError(f"a co-occurrence window needs at least 2 words, got {window}")
        tokenized = [tokenize(text) for text in texts]
        all_counts = Counter(word for words in tokenized for word in words)
        vocabulary = {word for word, count in all_counts.items() if count >= min_count}

        document_counts, unit_counts, pair_counts = Counter(), Counter(), Counter()
        num_units = num_unit_words = 0
        for words in tokenized:
            document_counts.update({word for word in words if word in vocabulary})
            for unit in units_of(words, window):
                num_units += 1
                num_unit_words += len(unit)
                present = sorted({word for word in unit if word in vocabulary})
                unit_counts.update(present)
                pair_counts.update(combinations(present, 2))

        marginal_counts = marginal_total = None
        if unigram_counts is not None:
            marginal_counts = {word: int(unigram_counts[word]) for word in vocabulary if word in unigram_counts}
            marginal_total = int(sum(unigram_counts.values()))
        return cls(
            min_count=min_count,
            window=window,
            num_texts=len(tokenized),
            num_units=num_units,
            num_unit_words=num_unit_words,
            unigram_counts={word: all_counts[word] for word in vocabulary},
            document_counts=dict(document_counts),
            unit_counts=dict(unit_counts),
            pair_counts={pair: count for pair, count in pair_counts.items() if count >= min_count},
            marginal_counts=marginal_counts,
            marginal_total=marginal_total,
        )

    @classmethod
    def cached(cls, texts: list[str], cache_dir: str | os.PathLike, **options) -> "CorpusStatistics":
        """``from_texts``, saved under ``cache_dir`` by :func:`cache_key` and loaded from there next time."""
        path = Path(cache_dir) / f"pmi-{cache_key(texts, **options)}.json.gz"
        if path.is_file():
            return cls.load(path)
        statistics = cls.from_texts(texts, **options)
        statistics.save(path)
        return statistics

    # -- PMI ----------------------------------------------------------------------------------
    def probability(self, word: str) -> float | None:
        """p(word) as the estimator (``CorpusStatistics``) defines it; None for a word without one."""
        if self.marginal_counts is None:
            count = self.unit_counts.get(word)
            return count / self.num_units if count else None
        count = self.marginal_counts.get(word)
        if not count or not self.marginal_total:
            return None
        mean_unit_length = self.num_unit_words / max(1, self.num_units)
        return min(1.0, mean_unit_length * count / self.marginal_total)

    def _pmi_from_counts(self, first: str, second: str, pair_count: int) -> float | None:
        p_first, p_second = self.probability(first), self.probability(second)
        if p_first is None or p_second is None:
            return None
        return math.log(pair_count / self.num_units / (p_first * p_second))

    def pmi(self, first: str, second: str) -> float | None:
        """PMI of two distinct words, or None (a rare word or pair, or the same word twice)."""
        pair = (first, second) if first < second else (second, first)
        return self.pair_pmi.get(pair)

    def normalised_pmi_matrix(self, words: list[str]) -> np.ndarray:
        """KAM's PMI map over a sentence's words: ``max(0, PMI) / Z`` in [0, 1], 1 for the same word."""
        distinct = sorted(set(words))
        scale = self.max_pmi if self.max_pmi > 0 else 1.0
        between_distinct = np.eye(len(distinct), dtype=np.float32)
        for i, j in combinations(range(len(distinct)), 2):
            value = max(0.0, self.pmi(distinct[i], distinct[j]) or 0.0) / scale
            between_distinct[i, j] = between_distinct[j, i] = value
        position = {word: index for index, word in enumerate(distinct)}
        rows = np.array([position[word] for word in words], dtype=np.int64)
        return np.clip(between_distinct[np.ix_(rows, rows)], 0.0, 1.0)

    def table(self, vocabulary: list[str]) -> PmiTable:
        """The positive PMI of the pairs of ``vocabulary``'s words (the others give 0 in the map) and ``Z``."""
        index = {word: number for number, word in enumerate(vocabulary)}
        pairs = sorted(
            (min(index[first], index[second]), max(index[first], index[second]), value)
            for (first, second), value in self.pair_pmi.items()
            if value > 0 and first in index and second in index
        )
        columns = [np.array(column) for column in zip(*pairs)] if pairs else [np.zeros(0)] * 3
        return PmiTable(vocabulary, *columns, self.max_pmi)

    def top_k_neighbours(self, words: list[str], k: int) -> list[str]:
        """KAM's PMI expansion: up to ``k`` words absent from ``words`` with the highest positive mean PMI.

        The mean runs over the sentence's distinct words that the statistics know, a pair without a
        PMI counting as 0 (no evidence of association); ties go to the alphabetically first word.
        """
        known = sorted({word for word in words if word in self.unigram_counts})
        if not known or k <= 0:
            return []
        vocabulary, index, arrays = self.neighbour_arrays()
        found = [arrays[word] for word in known if word in arrays]
        if not found:
            return []
        # One weighted bincount adds each word's neighbours in the order a loop over them would: the same sums.
        ids, values = (np.concatenate(column) for column in zip(*found))
        totals = np.bincount(ids, weights=values, minlength=len(vocabulary))
        eligible = totals > 0
        eligible[[index[word] for word in set(words) if word in index]] = False
        (candidates,) = np.nonzero(eligible)
        means = -totals[candidates] / len(known)
        ranked = candidates[np.lexsort((candidates, means))[:k]]  # ids are alphabetical: ties by word
        return [vocabulary[i] for i in ranked.tolist()]

    def neighbour_arrays(self) -> tuple[list[str], dict[str, int], dict[str, tuple[np.ndarray, np.ndarray]]]:
        """The words with a PMI neighbour, sorted (an id's order is its word's), their ids, and per word its
        neighbours' ids and PMI values as arrays, in the neighbours' order: built once, for
        ``top_k_neighbours``."""
        if self._neighbour_arrays is None:
            vocabulary = sorted(self.neighbours)
            index = {word: number for number, word in enumerate(vocabulary)}
            arrays = {
                word: (
                    np.fromiter((index[n] for n in neighbours), np.int64, len(neighbours)),
                    np.fromiter(neighbours.values(), np.float64, len(neighbours)),
                )
                for word, neighbours in self.neighbours.items()
            }
            self._neighbour_arrays = (vocabulary, index, arrays)
        return self._neighbour_arrays

    # -- saving -------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "format_version": FORMAT_VERSION,
            "min_count": self.min_count,
            "window": self.window,
            "num_texts": self.num_texts,
            "num_units": self.num_units,
            "num_unit_words": self.num_unit_words,
            "unigram_counts": self.unigram_counts,
            "document_counts": self.document_counts,
            "unit_counts": self.unit_counts,
            "pair_counts": [[first, second, count] for (first, second), count in sorted(self.pair_counts.items())],
            "marginal_counts": self.marginal_counts,
            "marginal_total": self.marginal_total,
        }

    def save(self, path: str | os.PathLike) -> Path:
        """JSON, gzip-compressed when ``path`` ends in .gz; written atomically."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(path.name + f".tmp{os.getpid()}")
        text = json.dumps(self.to_dict())
        if path.suffix == ".gz":
            with gzip.open(staging, "wt", encoding="utf-8") as handle:
                handle.write(text)
        else:
            staging.write_text(text, encoding="utf-8")
        os.replace(staging, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "CorpusStatistics":
        path = Path(path)
        data = read_json(path)
        if not isinstance(data, dict) or data.get("format_version") != FORMAT_VERSION:
            raise KlmError(f"{path}: not a PMI statistics file of format version {FORMAT_VERSION}")
        try:
            return cls(
                min_count=data["min_count"],
                window=data["window"],
                num_texts=data["num_texts"],
                num_units=data["num_units"],
                num_unit_words=data["num_unit_words"],
                unigram_counts=data["unigram_counts"],
                document_counts=data["document_counts"],
                unit_counts=data["unit_counts"],
                pair_counts={(first, second): count for first, second, count in data["pair_counts"]},
                marginal_counts=data["marginal_counts"],
                marginal_total=data["marginal_total"],
            )
        except (KeyError, TypeError, ValueError) as error:
            raise KlmError(f"{path}: malformed PMI statistics ({type(error).__name__}: {error})") from None
