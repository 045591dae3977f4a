"""Candidate entity mentions for KnowBERT-KAR (and any method that consumes linked entities).

``AliasTable`` maps a surface form to candidate entities with a prior p(e|m); ``EntityLinker`` finds
the candidate mention spans of a text the way KnowBERT's ``WikiCandidateMentionGenerator`` does
(allenai/kb ``kb/wiki_linking_util.py``): every word n-gram of at most 5 words, minus the spans that
start or end in a stop word (in any casing: "The", "the" and "THE" alike) or hold punctuation, kept
when the table has at least one candidate.
The linker does not disambiguate: overlapping spans are all kept (KnowBERT's learned linker decides
among them), unless ``longest_only=True`` asks for the longest non-overlapping matches.
"""

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import open_text

MAX_CANDIDATES = 30
MAX_SPAN_WORDS = 5

# Used only when spaCy is not installed; spaCy's list (326 words plus contractions) is preferred.
FALLBACK_STOP_WORDS = frozenset(
    """
a about above after again against all also am an and any are as at be because been before being
below between both but by can could did do does doing down during each either else ever every few
for from further had has have having he her here hers herself him himself his how however i if in
into is it its itself just least less many may me might more most much must my myself neither no nor
not now of off often on once one only or other others otherwise our ours ourselves out over own per
perhaps please put rather re same see seem several she should show side since so some still such
than that the their theirs them themselves then there these they this those though through thus to
too under until up upon us very via was we well were what whatever when where whether which while
who whoever whom whose why will with within without would yet you your yours yourself yourselves
's 'd 'll 'm 're 've n't ’s ’d ’ll ’m ’re ’ve n’t
""".split()
)

# KnowBERT's span filter rejects spaCy's punctuation, quotes, ellipses and currency symbols but lets
# hyphens, periods and ampersands through, which keeps "St. Louis", "U.S." and "Coca-Cola" linkable.
SPAN_JOINERS = frozenset("-‐–.&")

# Words with character offsets, split roughly like spaCy: clitics ("'s", "n't") are their own words
# so that "Obama's" still yields "Obama", "O'Brien" stays whole, and punctuation is one word per char.
CLITIC = r"(?:['’](?:s|re|ve|ll|d|m)|n['’]t)\b"
WORD_PATTERN = re.compile(
    rf"{CLITIC}"
    rf"|\w+?(?=n['’]t\b)"
    rf"|\d+(?:[.,]\d+)+"
    rf"|\w+(?:['’](?!(?:s|re|ve|ll|d|m|t)\b)\w+)*"
    rf"|[^\w\s]",
    re.IGNORECASE,
)


def tokenize_words(text: str) -> list[tuple[int, int]]:
    """Character spans ``(start, end)`` of the words of ``text``."""
    return [match.span() for match in WORD_PATTERN.finditer(text)]


def is_punctuation(word: str) -> bool:
    return not any(char.isalnum() or char == "_" for char in word)


def default_stop_words() -> frozenset[str]:
    try:
        from spacy.lang.en.stop_words import STOP_WORDS
    except ImportError:
        return FALLBACK_STOP_WORDS
    return frozenset(STOP_WORDS)


@dataclass
class Mention:
    start: int
    end: int
    surface: str
    candidates: list[tuple[str, float]]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, record: dict) -> "Mention":
        return cls(
            record["start"],
            record["end"],
            record["surface"],
            [(entity_id, float(prior)) for entity_id, prior in record["candidates"]],
        )


def normalise_surface(surface: str) -> str:
    return " ".join(surface.split())


class AliasTable:
    """Surface form -> candidate entities ``[(entity_id, prior)]``, best first.

    Where priors come from:
    - entity records ``(qid, label, surface_forms)``: no counts exist, only the order of the surface forms
      (most frequent first). With ``weighting="rank"`` (the default) the label counts as rank 0 and the
      surface forms follow in order; a form of rank r gets the Zipf pseudo-count 1/(r+1) for that entity.
      So an entity whose label (or most frequent form) is the mention beats one for which the mention is
      a rare alias ("Honolulu" -> the city 2/3, the airport 1/3). ``weighting="uniform"`` gives every
      (form, entity) pair the count 1, i.e. p(e|m) uniform over the candidates.
    - a KnowBERT prior file (``mention<TAB>count<TAB>id,prior,title<TAB>...``): count x prior per entity.
    - merging tables: the two sources count on different scales (Wikipedia anchor counts versus rank
      pseudo-counts), so each table's p(e|m) is normalised per surface form and the sources get equal
      weight wherever both know a form.
    Priors handed out are renormalised over the candidates kept (at most ``max_candidates``, 30 as in
    KnowBERT), so they sum to 1 per mention, as KnowBERT does after merging cased and lower-cased entries.
    """

    def __init__(self, max_candidates: int = MAX_CANDIDATES):
        self.max_candidates = max_candidates
        self._counts: dict[str, dict[str, float]] = defaultdict(dict)
        self._casefolded: dict[str, dict[str, float]] | None = None

    def __len__(self) -> int:
        return len(self._counts)

    def __contains__(self, surface: str) -> bool:
        return bool(self.candidates(surface))

    def surface_forms(self) -> list[str]:
        return list(self._counts)

    def add(self, surface: str, entity_id: str, count: float = 1.0) -> None:
        surface = normalise_surface(surface)
        if not surface or count <= 0:
            return
        entities = self._counts[surface]
        entities[entity_id] = entities.get(entity_id, 0.0) + count
        self._casefolded = None

    @classmethod
    def from_entities(
        cls, records: Iterable, weighting: str = "rank", max_candidates: int = MAX_CANDIDATES
    ) -> "AliasTable":
        """From ``(qid, label, surface_forms)`` tuples or dicts with those keys (label may be None)."""
        if weighting not in ("rank", "uniform"):
            raise KlmError(f"alias weighting must be 'rank' or 'uniform', not {weighting!r}")
        table = cls(max_candidates)
        for record in records:
            if isinstance(record, Mapping):
                qid, label, surface_forms = record["qid"], record.get("label"), record.get("surface_forms") or []
            else:
                qid, label, surface_forms = record
            forms = ([label] if label else []) + list(surface_forms)
            best_rank: dict[str, int] = {}
            for rank, form in enumerate(forms):
                form = normalise_surface(form)
                if form and form not in best_rank:
                    best_rank[form] = rank
            for form, rank in best_rank.items():
                table.add(form, qid, 1.0 / (rank + 1) if weighting == "rank" else 1.0)
        return table

    @classmethod
    def from_entities_file(
        cls, path: str | Path, weighting: str = "rank", max_candidates: int = MAX_CANDIDATES
    ) -> "AliasTable":
        """From ``entities.jsonl(.gz)``: one ``{qid, label, surface_forms}`` object per line."""
        path = Path(path)
        if not path.is_file():
            raise KlmError(f"entity file {path} does not exist")

        def records():
            with open_text(path) as handle:
                for line_number, line in enumerate(handle, start=1):
                    if not line.strip():
                        continue
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError as error:
                        raise KlmError(f"{path}:{line_number}: malformed JSON line ({error.msg})") from None
                    if "qid" not in record:
                        raise KlmError(f"{path}:{line_number}: entity record without 'qid'")
                    yield record

        return cls.from_entities(records(), weighting, max_candidates)

    @classmethod
    def from_knowbert_priors(
        cls,
        path: str | Path,
        id_field: str = "title",
        id_map: Mapping[str, str] | None = None,
        max_candidates: int = MAX_CANDIDATES,
    ) -> "AliasTable":
        """From KnowBERT's ``mention<TAB>count<TAB>id,prior,title<TAB>...`` file.

        Entities are named by ``id_field`` ("title" or "page_id"), Wikipedia's names, not QIDs; pass
        ``id_map`` (Wikipedia name -> QID) to translate them, in which case unmapped entities are dropped.
        """
        if id_field not in ("title", "page_id"):
            raise KlmError(f"id_field must be 'title' or 'page_id', not {id_field!r}")
        path = Path(path)
        if not path.is_file():
            raise KlmError(f"prior file {path} does not exist")
        table = cls(max_candidates)
        with open_text(path) as handle:
            for line_number, line in enumerate(handle, start=1):
                fields = line.rstrip().split("\t")
                if len(fields) < 3:
                    continue
                mention, mention_count = fields[0], fields[1]
                try:
                    mention_count = float(mention_count)
                    for field in filter(None, fields[2:]):  # lines end in a tab
                        # Titles may hold commas ("Loeki,_Rieki,_Wieki"): split twice only.
                        page_id, prior, title = (part.strip() for part in field.split(",", 2))
                        entity_id = title if id_field == "title" else page_id
                        if id_map is not None:
                            entity_id = id_map.get(entity_id)
                            if entity_id is None:
                                continue
                        table.add(mention, entity_id, mention_count * float(prior))
                except ValueError:
                    raise KlmError(f"{path}:{line_number}: expected mention<TAB>count<TAB>id,prior,title...") from None
        return table

    def merge(self, other: "AliasTable") -> "AliasTable":
        """A new table where each source's p(e|m) counts equally (see ``AliasTable``)."""
        merged = AliasTable(max(self.max_candidates, other.max_candidates))
        for table in (self, other):
            for surface, entities in table._counts.items():
                total = sum(entities.values())
                for entity_id, count in entities.items():
                    merged.add(surface, entity_id, count / total)
        return merged

    def _casefold_index(self) -> dict[str, dict[str, float]]:
        # As KnowBERT's lower-cased table: cased variants merged, an entity keeps its best share.
        if self._casefolded is None:
            index: dict[str, dict[str, float]] = defaultdict(dict)
            for surface, entities in self._counts.items():
                total = sum(entities.values())
                merged = index[surface.casefold()]
                for entity_id, count in entities.items():
                    merged[entity_id] = max(merged.get(entity_id, 0.0), count / total)
            self._casefolded = dict(index)
        return self._casefolded

    def _raw_counts(self, surface: str) -> dict[str, float] | None:
        for variant in (surface, surface.lower(), surface.title(), surface.upper()):
            if variant in self._counts:
                return self._counts[variant]
        return self._casefold_index().get(surface.casefold())

    def candidates(self, surface: str) -> list[tuple[str, float]]:
        """Candidates of the first case variant known: exact, lower, Title, UPPER, then any casing."""
        counts = self._raw_counts(normalise_surface(surface))
        if not counts:
            return []
        # Ties broken by id so that the order is reproducible.
        best = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[: self.max_candidates]
        total = sum(count for _, count in best)
        return [(entity_id, count / total) for entity_id, count in best]


class EntityLinker:
    """Candidate mention spans of a text, with their candidates and priors from an ``AliasTable``."""

    def __init__(
        self,
        alias_table: AliasTable,
        max_span_words: int = MAX_SPAN_WORDS,
        stop_words: Iterable[str] | None = None,
        longest_only: bool = False,
    ):
        self.alias_table = alias_table
        self.max_span_words = max_span_words
        stop_words = stop_words if stop_words is not None else default_stop_words()
        self.stop_words = frozenset(word.casefold() for word in stop_words)
        self.longest_only = longest_only

    def _allowed_span(self, words: list[str]) -> bool:
        # Case-insensitive: a sentence-initial "The" would otherwise link (to the film, the band, ...) in most
        # texts; the price is that "US", "May" or "The Hague" link only through a span without the stop word.
        if words[0].casefold() in self.stop_words or words[-1].casefold() in self.stop_words:
            return False
        return not any(is_punctuation(word) and word not in SPAN_JOINERS for word in words)

    def link(self, text: str, longest_only: bool | None = None) -> list[Mention]:
        """Mentions sorted by (start, end); overlapping ones kept unless ``longest_only``."""
        word_spans = tokenize_words(text)
        words = [text[start:end] for start, end in word_spans]
        mentions = []
        for first in range(len(words)):
            for last in range(first, min(first + self.max_span_words, len(words))):
                if not self._allowed_span(words[first : last + 1]):
                    continue
                start, end = word_spans[first][0], word_spans[last][1]
                surface = text[start:end]
                candidates = self.alias_table.candidates(surface)
                if candidates:
                    mentions.append(Mention(start, end, surface, candidates))
        if self.longest_only if longest_only is None else longest_only:
            mentions = longest_non_overlapping(mentions)
        return sorted(mentions, key=lambda mention: (mention.start, mention.end))

    def link_many(self, texts: Iterable[str], longest_only: bool | None = None) -> list[list[Mention]]:
        return [self.link(text, longest_only) for text in texts]


# spaCy entity labels that name no KG entity (numbers, dates) or that TAGME links inconsistently (NORP: "Russian"
# to the language, the people or the country).
NOT_LINKED_LABELS = frozenset({"DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL", "NORP"})
# The least prior of a kept span's top candidate (knowledge option link_threshold). Chosen on OpenEntity's train split
# against its TAGME links, as the least threshold whose precision there reaches 60 %: 54.2 % at 0, 55.9 % at 0.5,
# 61.1 % at 0.6 (recall 13.8 %); on its test split 64.0 % (recall 16.1 %), against 15.9 % (recall 18.6 %) of every
# n-gram (``EntityLinker``). Adding capitalised noun chunks to the entity spans lowered precision to 54.7 %.
SPAN_LINK_THRESHOLD = 0.6


class SpanLinker:
    """Mentions from a text's named-entity spans (spaCy's, from ``knowledge.annotate``) rather than every n-gram:
    each span (less leading and trailing stop words and punctuation, labels of ``NOT_LINKED_LABELS`` left out)
    looked up in the alias table, kept where its top candidate's prior reaches ``threshold``; overlapping spans
    resolved to the longest. Precise where ``EntityLinker`` is exhaustive (``SPAN_LINK_THRESHOLD``)."""

    needs_annotations = True  # link(text, annotation): the spans come from the text's annotation

    def __init__(self, alias_table: AliasTable, threshold: float = SPAN_LINK_THRESHOLD, stop_words=None):
        self.alias_table = alias_table
        self.threshold = threshold
        stop_words = stop_words if stop_words is not None else default_stop_words()
        self.stop_words = frozenset(word.casefold() for word in stop_words)

    def trimmed(self, text: str, start: int, end: int) -> tuple[int, int] | None:
        """``[start, end)`` less its leading and trailing stop words and punctuation; None where nothing is left."""
        words = [(start + s, start + e) for s, e in tokenize_words(text[start:end])]

        def dropped(word: tuple[int, int]) -> bool:
            surface = text[word[0] : word[1]]
            return surface.casefold() in self.stop_words or is_punctuation(surface)

        while words and dropped(words[0]):
            words.pop(0)
        while words and dropped(words[-1]):
            words.pop()
        return (words[0][0], words[-1][1]) if words else None

    def link(self, text: str, annotation) -> list[Mention]:
        mentions = {}
        for start, end, label in annotation.ner:
            span = None if label in NOT_LINKED_LABELS else self.trimmed(text, start, end)
            if span is None:
                continue
            candidates = self.alias_table.candidates(text[span[0] : span[1]])
            if candidates and candidates[0][1] >= self.threshold:
                mentions[span] = Mention(span[0], span[1], text[span[0] : span[1]], candidates)
        return sorted(longest_non_overlapping(list(mentions.values())), key=lambda m: (m.start, m.end))


def longest_non_overlapping(mentions: list[Mention]) -> list[Mention]:
    """Greedy: longest spans first (earlier first on ties), each kept if it overlaps none kept."""
    kept: list[Mention] = []
    for mention in sorted(mentions, key=lambda m: (-(m.end - m.start), m.start)):
        if all(mention.end <= other.start or other.end <= mention.start for other in kept):
            kept.append(mention)
    return sorted(kept, key=lambda mention: mention.start)


def gold_mentions(text: str, links: Iterable[tuple[str, int, int]]) -> list[Mention]:
    """Mentions from a dataset's gold links ``(entity_id, start, end)`` (char offsets into ``text``).

    Each candidate list holds the gold entity with prior 1.0; a span linked to several entities
    gets them all with equal priors.
    """
    entities_per_span: dict[tuple[int, int], list[str]] = {}
    for entity_id, start, end in links:
        if not 0 <= start < end <= len(text):
            raise KlmError(f"gold link {entity_id} at [{start}, {end}) lies outside a text of {len(text)} characters")
        entities = entities_per_span.setdefault((start, end), [])
        if entity_id not in entities:
            entities.append(entity_id)
    return [
        Mention(start, end, text[start:end], [(entity_id, 1.0 / len(entities)) for entity_id in entities])
        for (start, end), entities in sorted(entities_per_span.items())
    ]


def coverage(mentions_per_example: Iterable[list[Mention]]) -> float:
    """Share of examples with at least one mention (0.0 for no examples)."""
    counts = [bool(mentions) for mentions in mentions_per_example]
    return sum(counts) / len(counts) if counts else 0.0
