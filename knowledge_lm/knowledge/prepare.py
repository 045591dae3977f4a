"""``klm prepare``: knowledge features computed once on the CPU and cached, as nanoGPT's prepare.py.

For every split of a dataset's task and every example: the linked entity mentions (the dataset's gold
links where it has them, else alias-table candidates), NER spans, phrase segments, dependency arcs and
PMI neighbours; every character span also as the indices of the backbone's sub-word tokens (the same
tokenization, truncation included, that training uses). KAM's PMI features: the pairwise PMI of the
sentence's words (``pmi_pairs``) and its expansion words (``pmi_expansion``: the ``pmi_top_k`` words absent
from it with the highest mean PMI, each with its sub-word ids and its PMI with the sentence's words). Per linked
entity, what selective injection needs: its document frequency over the train split and its number of other
linked entities within ``k_hop`` in the KG. Training reads these files only: no spaCy, no KG walk, so GPU runs
carry the cache.

The files' layout, the link controls and the cache key: ``prepare``.
"""

import hashlib
import json
import os
import random
import shutil
import time
from collections import Counter
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from knowledge_lm.core.caches import damaged_file, file_record, set_aside_cache
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.options import coerce_fields, option_kinds

if TYPE_CHECKING:
    from knowledge_lm.knowledge.pmi import PmiTable

# torch, transformers, spaCy and the KG code load inside the functions that use them: `klm list`, `klm status`
# and argument errors import this module and answer before any of them loads (tests/test_cli_errors.py).

LINKING_MODES = ("auto", "gold", "alias")
MENTION_SOURCES = ("ngrams", "entities")  # alias linking's mentions: every n-gram, or spaCy's entity spans
FEATURES_VERSION = 5  # part of the cache key: bump when the features written per example change
PMI_TABLE = "pmi.npz"  # beside the splits' files: the PMI their pmi_pairs and pmi_expansion are derived from
DEFAULT_KG = "wikidata_kg"
SPLIT_NAMES = ("train", "dev", "test")  # the splits a dataset may have (knowledge_lm.data)
# Options left out of the cache key at their default value: the features of configs without them keep their key.
KEYED_WHEN_SET = ("permute_relations", "shuffle_splits", "keep_answers", "mentions", "link_threshold")


@dataclass(frozen=True)
class KnowledgeConfig:
    # A KG name, folder or triples file (``kg_formats.resolve_kg``: Wikidata5M as distributed too); default: the
    # dataset's own KG (generated task), else <data_dir>/wikidata_kg.
    kg_dir: str | None = None
    linking: str = "auto"  # gold links where the dataset has them, else alias-table candidates
    # Alias linking's mentions: every n-gram (KnowBERT's candidate generator, ``EntityLinker``) or spaCy's entity
    # spans whose top candidate's prior reaches link_threshold (``SpanLinker``: precise against TAGME's links).
    mentions: str = "ngrams"
    link_threshold: float = 0.6  # linking.SPAN_LINK_THRESHOLD, read with mentions=entities only
    annotator: str = "spacy"  # or "stanza" where its models are installed
    phrases: str = "noun_chunks"  # or "subtrees"
    max_candidates: int = 30
    pmi_corpus: str | None = None  # a text file, one text per line; default: the dataset's own train text
    pmi_unigrams: str | None = None  # "word count" lines (e.g. enwiki_word_freq) for p(w); default: the corpus
    pmi_min_count: int = 5
    pmi_top_k: int = 10
    k_hop: int = 6
    link_noise: float = 0.0  # share of links given a wrong top candidate of another type (the linked entity 2nd)
    shuffle_links: float = 0.0  # share of (text, entity) pairs re-linked to another entity of the same type
    shuffle_splits: tuple[str, ...] | None = None  # the splits shuffle_links acts on; None: every split
    permute_relations: bool = False  # the KG's relation labels permuted over its edges (seeded by noise_seed)
    noise_seed: int = 0
    kg_embeddings: bool = False  # also train (once) and cache the KG embeddings (kg_embedding) of the KG
    # The KG embedding knowbert reads: "transe", or "rotate" (relation-aware: ``kg_embeddings.train_rotate``).
    kg_embedding: str = "transe"
    # A control only: the KG keeps the triples that are an evaluation example's answer (``knowledge.answers``).
    keep_answers: bool = False

    def __post_init__(self):
        if isinstance(self.shuffle_splits, (list, str)):  # YAML gives a list; a tuple keeps the config hashable
            splits = [self.shuffle_splits] if isinstance(self.shuffle_splits, str) else self.shuffle_splits
            object.__setattr__(self, "shuffle_splits", tuple(splits))

    @classmethod
    def from_dict(cls, values: dict | None) -> "KnowledgeConfig":
        values = dict(values or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise KlmError(f"unknown knowledge option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")

        def refused(name, value, expected) -> str:
            return f"knowledge option {name}={value!r} is not {option_kinds(expected)}"

        checked = coerce_fields(cls, values, refused)
        config = cls(**checked)
        if config.linking not in LINKING_MODES:
            raise KlmError(f"knowledge linking {config.linking!r}: expected one of {', '.join(LINKING_MODES)}")
        for option in ("max_candidates", "pmi_min_count", "pmi_top_k", "k_hop", "noise_seed"):
            if getattr(config, option) < 0:
                raise KlmError(f"knowledge option {option}={getattr(config, option)}: expected a whole number ≥ 0")
        if config.kg_embedding not in KG_EMBEDDINGS:
            raise KlmError(
                f"knowledge kg_embedding {config.kg_embedding!r}: expected one of {', '.join(KG_EMBEDDINGS)}"
            )
        if config.mentions not in MENTION_SOURCES:
            raise KlmError(f"knowledge mentions {config.mentions!r}: expected one of {', '.join(MENTION_SOURCES)}")
        for option in ("link_noise", "shuffle_links", "link_threshold"):
            share = getattr(config, option)
            if not isinstance(share, (int, float)) or not 0.0 <= share <= 1.0:
                raise KlmError(f"knowledge option {option}: expected a share within [0, 1], got {share!r}")
        if config.shuffle_splits is not None:
            unknown = [split for split in config.shuffle_splits if split not in SPLIT_NAMES]
            if unknown or not config.shuffle_splits:
                raise KlmError(
                    f"knowledge option shuffle_splits {list(config.shuffle_splits)}: expected split names "
                    f"among {', '.join(SPLIT_NAMES)}"
                )
            if not config.shuffle_links:
                raise KlmError("knowledge option shuffle_splits: it restricts shuffle_links, which is 0")
        for option in ("pmi_corpus", "pmi_unigrams"):
            path = getattr(config, option)
            if path and not Path(path).expanduser().is_file():
                raise KlmError(f"knowledge option {option}: {path} does not exist")
        return config


KG_EMBEDDINGS = ("transe", "rotate")  # knowledge.kg_embeddings.KINDS, named here without importing torch
KG_MANIFEST = "manifest.json"  # a cached KG folder's record of its files (``kg_manifest``), not part of the KG


def files_fingerprint(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(directory).rglob("*") if p.is_file() and p.name != KG_MANIFEST):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def kg_manifest(directory: Path) -> dict[str, dict]:
    """Each file of a KG folder (its manifest left out) by name: its ``file_record`` (size and sha256)."""
    return {
        path.name: file_record(path)
        for path in sorted(Path(directory).iterdir())
        if path.is_file() and path.name != KG_MANIFEST
    }


def damaged_kg(folder: Path, expected: dict[str, dict]) -> str | None:
    """Why the cached KG ``folder`` is not the one ``expected`` (``kg_manifest``) records, or its ``KG_MANIFEST``
    another: a file missing, of another size or checksum (truncated, overwritten); None where it is intact."""
    if (folder / KG_MANIFEST).is_file():  # else cached before manifests: its files are checked alone
        try:
            recorded = json.loads((folder / KG_MANIFEST).read_text())["files"]
        except (OSError, ValueError, KeyError, TypeError):
            return f"{KG_MANIFEST} does not parse"
        if recorded != expected:
            return f"{KG_MANIFEST} records other files"
    for name, record in expected.items():
        why = damaged_file(folder / name, record)
        if why is not None:
            return why
    return None


def knowledge_graph_dir(data_module, config: KnowledgeConfig, cache_dir: Path) -> Path:
    """Where the KG a method sees on this dataset lies; the generated task's own KG is written to the cache once,
    and so are the copy without the evaluation examples' answers (``answers_removed``, unless ``keep_answers``)
    and the relations-permuted copy (``permute_relations``)."""
    if config.kg_dir:
        from knowledge_lm.knowledge.kg_formats import resolve_kg

        path = resolve_kg(config.kg_dir, data_module.data_dir, cache_dir)
    elif getattr(data_module, "knowledge_graph", None) is not None:
        staging = cache_dir / "kg" / f"{data_module.name}.tmp{os.getpid()}"
        data_module.knowledge_graph.write_kg(staging)
        path = stored_kg(staging, data_module.name, cache_dir)
    elif data_module.data_dir is None or not (data_module.data_dir / DEFAULT_KG).is_dir():
        raise KlmError(
            f"no knowledge graph for {data_module.name}: pass --kg-dir or put {DEFAULT_KG}/ under the data directory"
        )
    else:
        path = data_module.data_dir / DEFAULT_KG
    if not config.keep_answers:
        path = answers_removed(data_module, path, cache_dir)
    return relations_permuted_kg(path, config.noise_seed, cache_dir) if config.permute_relations else path


def answers_removed(data_module, kg_dir: Path, cache_dir: Path) -> Path:
    """The KG of ``kg_dir`` less the answers of every split's examples (the data module's ``answer_facts``),
    copied once to the cache; ``kg_dir`` itself where the dataset's labels are no KG facts."""
    from knowledge_lm.knowledge.answers import kg_without_answers

    answer_facts = getattr(data_module, "answer_facts", None)
    facts = answer_facts(data_module.read_labelled()) if answer_facts else []
    if not facts:
        return kg_dir
    return kg_without_answers(Path(kg_dir), files_fingerprint(kg_dir), facts, data_module.name, cache_dir)


def stored_kg(staging: Path, name: str, cache_dir: Path) -> Path:
    """The KG folder ``staging`` moved to ``<cache_dir>/kg/<name>-<its content's fingerprint>`` with its
    ``KG_MANIFEST`` (each file's size and checksum), or dropped where that folder exists and holds those files; a
    damaged one (``damaged_kg``) is set aside and replaced."""
    from knowledge_lm.core.results import write_json_atomic

    expected = kg_manifest(staging)
    write_json_atomic(staging / KG_MANIFEST, {"files": expected})
    folder = Path(cache_dir) / "kg" / f"{name}-{files_fingerprint(staging)}"
    if folder.exists():
        why = damaged_kg(folder, expected)
        if why is None:
            if not (folder / KG_MANIFEST).is_file():  # cached before manifests, and intact: recorded now
                write_json_atomic(folder / KG_MANIFEST, {"files": expected})
            shutil.rmtree(staging)
            return folder
        set_aside_cache(folder, why)
    try:
        os.replace(staging, folder)
    except OSError:  # another process stored it meanwhile
        shutil.rmtree(staging)
    return folder


def relations_permuted_kg(kg_dir: Path, seed: int, cache_dir: Path) -> Path:
    """A copy of the KG in ``kg_dir`` with the relation of every edge but "instance of" drawn by a seeded
    permutation of those edges' relations: the same (head, tail) edges and relation frequencies, the relations
    no longer those of the edges. "Instance of" edges stay: they are the entities' types. The other files
    (entities, relation names) are copied as they are. Written to the cache once, named by its content: a KG
    folder of its own, found again by every method that reads the prepared KG (``knowledge_graph_dir``), and
    TransE, cached by the KG's content, is trained on it (``permute_relations``, the third control)."""
    from knowledge_lm.core.io import find_file
    from knowledge_lm.knowledge.kg import INSTANCE_OF, TRIPLES_FILE, read_triples
    from knowledge_lm.knowledge.noise import permute_relations

    triples_path = find_file(kg_dir, TRIPLES_FILE)
    if triples_path is None:
        raise KlmError(f"{kg_dir}: no {TRIPLES_FILE} or {TRIPLES_FILE}.gz to permute the relations of")
    triples = permute_relations(
        read_triples(triples_path), random.Random(f"permute_relations/{seed}"), keep=(INSTANCE_OF,)
    )
    staging = Path(cache_dir) / "kg" / f"{kg_dir.name}-relations-permuted.tmp{os.getpid()}"
    staging.mkdir(parents=True, exist_ok=True)
    for path in Path(kg_dir).iterdir():
        if path.is_file() and path.name not in (TRIPLES_FILE, f"{TRIPLES_FILE}.gz", KG_MANIFEST):
            shutil.copyfile(path, staging / path.name)
    with open(staging / TRIPLES_FILE, "w", encoding="utf-8") as handle:
        handle.write("head_qid\trelation_pid\ttail_qid\n")
        handle.writelines(f"{head}\t{pid}\t{tail}\n" for head, pid, tail in triples)
    return stored_kg(staging, f"{kg_dir.name}-relations-permuted", cache_dir)


def split_key(records: list[dict], tokenizer_id: str, max_length: int, config: KnowledgeConfig, kg_id: str) -> str:
    # Whether (and which) KG embeddings were trained alongside changes no feature: they stay out of the key.
    defaults = KnowledgeConfig()
    options = {
        name: value
        for name, value in asdict(config).items()
        if name not in ("kg_embeddings", "kg_embedding")
        and not (name in KEYED_WHEN_SET and value == getattr(defaults, name))
    }
    if config.shuffle_links:  # shuffled features also have their NER spans relocated (relocate_named_entities)
        options["ner_spans"] = "relocated"
    digest = hashlib.sha256()
    digest.update(json.dumps(records, sort_keys=True, default=str).encode())
    digest.update(json.dumps([FEATURES_VERSION, tokenizer_id, max_length, options, kg_id], sort_keys=True).encode())
    return digest.hexdigest()[:16]


def prepared_dir(cache_dir: Path, data_module) -> Path:
    return Path(cache_dir) / "knowledge" / data_module.name / data_module.task


def has_gold_links(records: list[dict]) -> bool:
    return any(entity.get("qid") for record in records[:50] for entity in record.get("entities") or [])


def text_segments(record: dict) -> list[tuple[int, str]]:
    segments = [(0, record["text_a"])]
    if record.get("text_b") is not None:
        segments.append((1, record["text_b"]))
    return segments


def split_keys(data_module, tokenizer, config: KnowledgeConfig, cache_dir: Path):
    """The splits' records, the KG folder and one cache folder named by everything the features depend on."""
    from knowledge_lm.core.backbones import tokenizer_fingerprint

    splits = data_module.labelled_splits()
    kg_dir = knowledge_graph_dir(data_module, config, cache_dir)
    kg_id = files_fingerprint(kg_dir)
    tokenizer_id = tokenizer_fingerprint(tokenizer)
    keys = {
        split: split_key(records, tokenizer_id, data_module.max_length, config, kg_id)
        for split, records in splits.items()
    }
    combined = hashlib.sha256(json.dumps(keys, sort_keys=True).encode()).hexdigest()[:16]
    return splits, kg_dir, prepared_dir(cache_dir, data_module) / combined


# Texts from which spaCy may run in one process per idle core: below, starting the processes (each loads the
# pipeline) costs about what they save.
PARALLEL_ANNOTATION_TEXTS = 10_000


def annotation_processes(texts: int) -> int:
    """The processes spaCy annotates ``texts`` texts in: one per core not already busy (by the load average), for
    large inputs; else one. On 2 cores loaded by other work (load ~9), 2 processes annotated SST-2 slower than one
    (113 against 137 texts/s). ``KLM_ANNOTATION_PROCESSES`` overrides."""
    if os.environ.get("KLM_ANNOTATION_PROCESSES"):
        return max(1, int(os.environ["KLM_ANNOTATION_PROCESSES"]))
    if texts < PARALLEL_ANNOTATION_TEXTS:
        return 1
    cores = len(os.sched_getaffinity(0))
    return max(1, min(cores, round(cores - os.getloadavg()[0])))


def link_segments(
    records, gold: bool, linker, progress: bool = False, description: str = "linking", annotations=None
) -> list[list[list]]:
    """Per record, per text segment: its mentions (gold links or alias-table candidates); ``annotations`` (per
    record, per segment: ``annotated_splits``') for a linker that reads them (``SpanLinker``)."""
    from knowledge_lm.knowledge.annotate import progress_bar
    from knowledge_lm.knowledge.linking import gold_mentions

    linked = []
    for number, record in enumerate(
        progress_bar(records, len(records), description) if progress and not gold else records
    ):
        if gold:
            links = [(e["qid"], e["start"], e["end"]) for e in record.get("entities") or [] if e.get("qid")]
            linked.append([gold_mentions(record["text_a"], links)] + ([[]] if record.get("text_b") is not None else []))
        elif getattr(linker, "needs_annotations", False):
            segments = zip(text_segments(record), annotations[number])
            linked.append([linker.link(text, annotation) for (_, text), annotation in segments])
        else:
            linked.append([linker.link(text) for _, text in text_segments(record)])
    return linked


def top_entity(mention) -> str:
    return mention.candidates[0][0]


def relink(examples: list[list[list]], candidates: list[list | None]) -> list[list[list]]:
    """``examples`` (per example, per segment, its mentions) with new candidates where given: ``candidates``
    holds per example one entry per mention, segment after segment, None to keep the mention as it is."""
    from itertools import islice

    from knowledge_lm.knowledge.linking import Mention

    relinked = []
    for example, new in zip(examples, candidates):
        new = iter(new)
        relinked.append(
            [
                [
                    m if c is None else Mention(m.start, m.end, m.surface, c)
                    for m, c in zip(segment, islice(new, len(segment)))
                ]
                for segment in example
            ]
        )
    return relinked


def linked_entities(examples: list[list[list]]) -> list[list[str]]:
    """Per example, the top entity of each mention, segment after segment."""
    return [[top_entity(m) for segment in example for m in segment] for example in examples]


def shuffled_splits(splits, config: KnowledgeConfig) -> list[tuple[int, str]]:
    """``(offset, split)`` of the splits ``shuffle_links`` acts on; a split's offset (its rank among every
    split) adds to ``noise_seed``, so that a split is shuffled alike whichever others are."""
    return [
        (offset, split)
        for offset, split in enumerate(sorted(splits))
        if config.shuffle_splits is None or split in config.shuffle_splits
    ]


def shuffle_links(linked: dict[str, list[list[list]]], kg, config: KnowledgeConfig):
    """Re-link ``config.shuffle_links`` of each shuffled split's (example, entity) pairs to another entity of
    the same type, as a gold link (one candidate, prior 1.0). An example's texts (both of a pair) count as one
    text: an entity named in both is re-linked alike."""
    from knowledge_lm.knowledge.noise import shuffle_entities

    for offset, split in shuffled_splits(linked, config):
        examples = linked[split]
        shuffled, relinked = shuffle_entities(
            linked_entities(examples), kg, config.shuffle_links, config.noise_seed + offset
        )
        linked[split] = relink(
            examples,
            [[[(qid, 1.0)] if was else None for qid, was in zip(qids, mask)] for qids, mask in zip(shuffled, relinked)],
        )


def relocate_named_entities(annotations: dict[str, list[list]], config: KnowledgeConfig):
    """Move ``config.shuffle_links`` of each shuffled split's NER spans (KAM's entity map) to other words of
    their text segment (``noise.relocate_spans``); ``annotations``: per split, per example, per segment."""
    from dataclasses import replace

    from knowledge_lm.knowledge.noise import relocate_spans

    for offset, split in shuffled_splits(annotations, config):
        segments = [annotation for example in annotations[split] for annotation in example]
        moved = iter(
            relocate_spans(
                [a.words for a in segments], [a.ner for a in segments], config.shuffle_links, config.noise_seed + offset
            )
        )
        annotations[split] = [[replace(a, ner=next(moved)) for a in example] for example in annotations[split]]


def make_links_noisy(linked: dict[str, list[list[list]]], kg, config: KnowledgeConfig):
    """Make ``config.link_noise`` of each split's links noisy: a wrong entity of another type ranked first,
    the linked entity and distractors after it (``knowledge.noise.noisy_link_candidates``)."""
    from knowledge_lm.knowledge.noise import noisy_link_candidates

    for offset, (split, examples) in enumerate(sorted(linked.items())):
        linked[split] = relink(
            examples,
            noisy_link_candidates(linked_entities(examples), kg, config.link_noise, config.noise_seed + offset),
        )


def pmi_statistics(config: KnowledgeConfig, train_records: list[dict]):
    from knowledge_lm.core.io import open_text
    from knowledge_lm.knowledge.pmi import CorpusStatistics, load_unigram_counts

    if config.pmi_corpus:
        with open_text(Path(config.pmi_corpus).expanduser()) as handle:
            texts = [line.strip() for line in handle if line.strip()]
    else:
        texts = [text for record in train_records for _, text in text_segments(record)]
    unigrams = load_unigram_counts(Path(config.pmi_unigrams).expanduser()) if config.pmi_unigrams else None
    return CorpusStatistics.from_texts(texts, min_count=config.pmi_min_count, unigram_counts=unigrams)


def example_features(record, mentions_by_segment, annotations_by_segment, encoding, pmi, df, kg, config, task_kind):
    """One example's features as ``klm prepare`` stores them, with words as text: ``links``, ``ner``,
    ``phrases``, ``words`` (segment and sub-word indices), ``dependencies`` (over word indices), ``pmi_words``
    (each word's lower-cased text) and ``pmi_neighbours``. :func:`with_pmi_features` turns the last two into
    what KAM reads."""
    from knowledge_lm.knowledge.annotate import align_char_spans
    from knowledge_lm.knowledge.pmi import tokenize_words

    offsets, sequence_ids = encoding["offset_mapping"], encoding["sequence_ids"]

    def tokens(segment, spans):
        # Spans are offsets into the record's own text; the tokenizer may read it with markers inserted.
        spans = task_kind.map_char_spans(record, spans) if segment == 0 else spans
        return align_char_spans(offsets, spans, sequence_ids=sequence_ids, sequence=segment)

    features = {"links": [], "ner": [], "phrases": [], "words": [], "dependencies": [], "pmi_words": []}
    linked_entities = [top_entity(m) for mentions in mentions_by_segment for m in mentions]
    close = kg.close_counts([qid for qid in set(linked_entities) if qid in kg], config.k_hop)
    for segment, mentions in enumerate(mentions_by_segment):
        for mention, span_tokens in zip(mentions, tokens(segment, [(m.start, m.end) for m in mentions])):
            features["links"].append(
                {
                    "segment": segment,
                    "start": mention.start,
                    "end": mention.end,
                    "candidates": [[qid, round(prior, 6)] for qid, prior in mention.candidates],
                    "tokens": span_tokens,
                    "df": df.get(top_entity(mention), 0),
                    "close": close.get(top_entity(mention), 0),
                }
            )
    for (segment, text), annotation in zip(text_segments(record), annotations_by_segment):
        word_offset = len(features["words"])
        features["words"] += [{"segment": segment, "tokens": t} for t in tokens(segment, annotation.words)]
        features["pmi_words"] += [text[start:end].lower() for start, end in annotation.words]
        features["ner"] += [
            {"segment": segment, "start": s, "end": e, "label": label, "tokens": t}
            for (s, e, label), t in zip(annotation.ner, tokens(segment, [(s, e) for s, e, _ in annotation.ner]))
        ]
        features["phrases"] += [
            {"segment": segment, "start": s, "end": e, "tokens": t}
            for (s, e), t in zip(annotation.phrases, tokens(segment, annotation.phrases))
        ]
        features["dependencies"] += [
            [head + word_offset, dependent + word_offset, label] for head, dependent, label in annotation.dependencies
        ]
    words = [w for _, text in text_segments(record) for w in tokenize_words(text)]
    features["pmi_neighbours"] = pmi.top_k_neighbours(words, config.pmi_top_k)
    return features


def pmi_vocabulary(rows: list[dict]) -> list[str]:
    """Every word and neighbour of ``rows`` (``example_features``'s), the most frequent first: small
    indices compress best."""
    counts = Counter(word for row in rows for word in row["pmi_words"] + row["pmi_neighbours"])
    return sorted(counts, key=lambda word: (-counts[word], word))


def stored_row(features: dict, index: dict[str, int]) -> dict:
    """``example_features``'s features as a split's file holds them: ``pmi_words`` and ``pmi_neighbours`` as
    indices into the PMI table's vocabulary (``index``: word → index)."""
    return {
        **features,
        "pmi_words": [index[word] for word in features["pmi_words"]],
        "pmi_neighbours": [index[word] for word in features["pmi_neighbours"]],
    }


class PmiFeatures:
    """A stored row (``stored_row``) as training reads it: ``pmi_words`` replaced by KAM's PMI map and
    expansion, derived from the PMI table of the row's folder, ``pmi_neighbours`` as words.

    * ``pmi_pairs``: ``[i, j, max(0, PMI)/Z]`` over the pairs of the example's words (``i < j``, distinct
      texts, value > 0), row by row: the map kept sparse;
    * ``pmi_expansion``: per neighbour the backbone splits into sub-words, ``{"word", "ids": its sub-word ids,
      "pmi": [[i, value], ...]}`` over the example's words i it has a value > 0 with (1 for the same text).

    Values are the float32 map's, rounded to 4 decimals."""

    def __init__(self, table: "PmiTable", tokenizer):
        import numpy as np

        self.table = table
        normalised = table.normalised()
        # One more entry for the table's -1 (no entry): not positive, 0. Rounding once per pair, not per
        # example, is what makes loading fast: Python's round is most of the time otherwise.
        self.positive = np.append(normalised > 0, False)
        self.values = np.array([round(value, 4) for value in normalised.tolist()] + [0.0])
        vocabulary = table.vocabulary
        self.pieces = tokenizer(vocabulary, add_special_tokens=False)["input_ids"] if vocabulary else []

    def __call__(self, row: dict) -> dict:
        import numpy as np

        words, neighbours = row["pmi_words"], row["pmi_neighbours"]
        ids = np.array(words + neighbours, dtype=np.int64)
        entries = self.table.entries(ids)
        same = np.equal.outer(ids, ids)
        positive = same | self.positive[entries]
        values = np.where(same, 1.0, self.values[entries])
        count = len(words)
        first, second = np.nonzero(np.triu(positive[:count, :count] & ~same[:count, :count], 1))
        pmi_pairs = list(map(list, zip(first.tolist(), second.tolist(), values[first, second].tolist())))
        pmi_expansion = []
        for k, word in enumerate(neighbours):
            if self.pieces[word]:
                (columns,) = np.nonzero(positive[count + k, :count])
                pmi = list(map(list, zip(columns.tolist(), values[count + k, columns].tolist())))
                pmi_expansion.append({"word": self.table.vocabulary[word], "ids": self.pieces[word], "pmi": pmi})
        return {
            **{name: value for name, value in row.items() if name != "pmi_words"},
            "pmi_neighbours": [self.table.vocabulary[word] for word in neighbours],
            "pmi_pairs": pmi_pairs,
            "pmi_expansion": pmi_expansion,
        }


def with_pmi_features(features: dict, statistics, tokenizer) -> dict:
    """One example's features (``example_features``'s) as training reads them, the PMI from ``statistics``."""
    vocabulary = pmi_vocabulary([features])
    row = stored_row(features, {word: number for number, word in enumerate(vocabulary)})
    return PmiFeatures(statistics.table(vocabulary), tokenizer)(row)


def write_jsonl_xz(path: Path, rows: list[dict]):
    import lzma

    staging = path.with_name(path.name + f".tmp{os.getpid()}")
    # xz at its largest dictionary: rows repeat text far beyond gzip's 32 KB window (SST-2: 3.8 MB, gzip 7.9 MB).
    with lzma.open(staging, "wt", encoding="utf-8", preset=9) as handle:
        for row in rows:
            handle.write(json.dumps(row, separators=(",", ":")) + "\n")
    os.replace(staging, path)


def cached_manifest(data_module, splits: dict, folder: Path, config: KnowledgeConfig) -> dict | None:
    """The manifest of features already prepared in ``folder``, else None (an unreadable one set aside); a
    ``shuffle_splits`` naming a split the data module lacks is an error first."""
    missing = sorted(set(config.shuffle_splits or ()) - set(splits))
    if missing:
        raise KlmError(f"knowledge option shuffle_splits: {data_module.name} has no {', '.join(missing)} split")
    manifest_path = folder / "manifest.json"
    if manifest_path.is_file():
        manifest = read_manifest(manifest_path)
        if manifest is not None:
            return manifest
        set_aside_cache(folder, f"{manifest_path.name} does not parse")
    return None


def entity_linker(data_module, splits: dict, kg, config: KnowledgeConfig):
    """``(gold, linker)``: whether the records' own gold links are used, else the alias-table linker over ``kg``."""
    from knowledge_lm.knowledge.linking import AliasTable, EntityLinker, SpanLinker

    gold = config.linking == "gold" or (config.linking == "auto" and has_gold_links(splits["train"]))
    if config.linking == "gold" and not has_gold_links(splits["train"]):
        raise KlmError(f"{data_module.name}/{data_module.task} has no gold entity links: use linking=alias or auto")
    if gold:
        return gold, None
    entities = ((e.qid, e.label, e.surface_forms) for e in kg.entities.values())
    table = AliasTable.from_entities(entities, max_candidates=config.max_candidates)
    return gold, SpanLinker(table, config.link_threshold) if config.mentions == "entities" else EntityLinker(table)


def linked_splits(
    splits: dict, gold: bool, linker, kg, config: KnowledgeConfig, progress: bool, annotations: dict | None = None
) -> dict:
    """Each split's entity links per record and text segment, after the link controls.

    Two controls corrupt the links before any feature is computed (``knowledge.noise``, each split on its own
    seeded stream): ``shuffle_links`` first re-links a share of each text's entities to another entity of the
    same type, in the form of a gold link (the counterfactual the method then takes for the truth);
    ``link_noise`` then turns a share of the links into a wrong linker's output (a wrong entity of another
    type as top candidate, the linked entity and distractors after it, realistic priors: no longer a gold link).
    ``shuffle_splits`` restricts both to some splits (``[test]``: a model trained and selected with correct
    links, evaluated with shuffled ones)."""
    linked = {
        split: link_segments(
            records, gold, linker, progress, f"linking {split}", annotations[split] if annotations else None
        )
        for split, records in splits.items()
    }
    if config.shuffle_links:
        shuffle_links(linked, kg, config)
    if config.link_noise:
        make_links_noisy(linked, kg, config)
    return linked


def annotated_splits(splits: dict, annotator, progress: bool) -> dict:
    """Each split's annotations (NER spans, phrases) per record and text segment, as the annotator gives them
    (``prepare`` relocates NER spans for ``shuffle_links`` after linking: ``relocate_named_entities``)."""
    annotations = {}
    for split, records in splits.items():
        texts = [text for record in records for _, text in text_segments(record)]
        flat = iter(annotator.annotate(texts, progress=progress, description=f"annotating {split}"))
        annotations[split] = [[next(flat) for _ in text_segments(record)] for record in records]
    return annotations


def cached_kg_embeddings(kg, cache_dir: Path, progress: bool, kind: str = "transe") -> str:
    """Where the ``kind`` embeddings of ``kg`` are cached, trained first where they are not."""
    from knowledge_lm.knowledge.kg_embeddings import cached_embeddings, embeddings_cache_path

    cached_embeddings(kind, kg, Path(cache_dir) / "kg_embeddings", progress=progress)
    return str(embeddings_cache_path(kind, kg, Path(cache_dir) / "kg_embeddings"))


def split_rows(data_module, tokenizer, split: str, records: list, knowledge: dict, progress: bool) -> list[dict]:
    """One feature row per record of ``split`` (``example_features``); ``knowledge``: the linked and annotated
    splits, the PMI statistics, the train split's entity document frequencies, the KG and the config."""
    from knowledge_lm.knowledge.annotate import progress_bar

    first, second = data_module.task_kind.texts(records)
    encoded = tokenizer(first, second, truncation=True, max_length=data_module.max_length, return_offsets_mapping=True)
    rows = []
    indices = range(len(records))
    for index in progress_bar(indices, len(records), f"features {split}") if progress else indices:
        encoding = {"offset_mapping": encoded["offset_mapping"][index], "sequence_ids": encoded.sequence_ids(index)}
        features = example_features(
            records[index],
            knowledge["linked"][split][index],
            knowledge["annotations"][split][index],
            encoding,
            knowledge["pmi"],
            knowledge["df"],
            knowledge["kg"],
            knowledge["config"],
            data_module.task_kind,
        )
        rows.append({"id": records[index]["id"], **features})
    return rows


def split_stats(records: list, linked: list, rows: list[dict], kg) -> dict:
    """A split's manifest entry: its examples, the share of them linked, the mentions per example, and what of the
    KG reaches them (``knowledge.coverage.split_coverage``)."""
    from knowledge_lm.knowledge.coverage import split_coverage
    from knowledge_lm.knowledge.linking import coverage

    return {
        "examples": len(records),
        "linked_coverage": coverage([sum(segments, []) for segments in linked]),
        "mentions_per_example": sum(len(r["links"]) for r in rows) / len(rows),
        "coverage": split_coverage(records, linked, kg),
    }


def write_features(folder: Path, rows_by_split: dict, pmi) -> None:
    """Each split's rows (words as indices into the folder's vocabulary) and the folder's PMI table."""
    folder.mkdir(parents=True, exist_ok=True)
    vocabulary = pmi_vocabulary([row for rows in rows_by_split.values() for row in rows])
    index = {word: number for number, word in enumerate(vocabulary)}
    for split, rows in rows_by_split.items():
        write_jsonl_xz(folder / f"{split}.jsonl.xz", [stored_row(row, index) for row in rows])
    pmi.table(vocabulary).save(folder / PMI_TABLE)


def write_manifest(path: Path, manifest: dict) -> None:
    """``manifest.json``, written last and atomically: its presence says the folder is complete."""
    staging = path.with_name(f"manifest.json.tmp{os.getpid()}")
    staging.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    os.replace(staging, path)


def prepare(data_module, tokenizer, config: KnowledgeConfig, cache_dir: Path, progress: bool = True) -> dict:
    """Features for every split of ``data_module``'s task, computed once; returns the manifest.

    Layout: ``<split>.jsonl.xz`` (one row per example), ``pmi.npz`` (a ``PmiTable``: the folder's word vocabulary
    and the positive PMI of its pairs) and ``manifest.json``, written last. A row stores its words as indices into
    that vocabulary (``pmi_words``, one per entry of ``words``) and its neighbours likewise; ``load_prepared``
    derives ``pmi_pairs`` and ``pmi_expansion`` from them (``PmiFeatures``), the same values computing them per
    example from the corpus statistics gives, so the folder holds each pair's PMI once, not once per example.

    Three controls (``linked_splits``, ``relocate_named_entities``, ``relations_permuted_kg``) corrupt the knowledge
    before any feature is computed.

    The cache key hashes the split's records, the tokenizer, ``max_length``, the knowledge config and the
    KG's files, so a second ``prepare`` with the same inputs only reads and hashes them.
    """
    from knowledge_lm.knowledge.annotate import Annotator
    from knowledge_lm.knowledge.kg import KnowledgeGraph, document_frequency

    started = time.time()
    splits, kg_dir, folder = split_keys(data_module, tokenizer, config, cache_dir)
    manifest = cached_manifest(data_module, splits, folder, config)
    if manifest is not None:
        return manifest

    timings = {}
    clock = time.time()
    kg = KnowledgeGraph.load(kg_dir)
    gold, linker = entity_linker(data_module, splits, kg, config)
    texts = sum(len(text_segments(record)) for records in splits.values() for record in records)
    annotator = Annotator(backend=config.annotator, phrases=config.phrases, n_process=annotation_processes(texts))
    timings["load_s"] = time.time() - clock

    clock = time.time()
    annotations = annotated_splits(splits, annotator, progress)
    timings["annotation_s"] = time.time() - clock
    timings["annotated_texts"] = sum(len(a) for examples in annotations.values() for a in examples)

    clock = time.time()
    linked = linked_splits(splits, gold, linker, kg, config, progress, annotations)
    timings["linking_s"] = time.time() - clock
    if config.shuffle_links:  # KAM's entity map moved as the links were shuffled; the span linker read them first
        relocate_named_entities(annotations, config)
    df = document_frequency([{top_entity(m) for segment in example for m in segment} for example in linked["train"]])

    clock = time.time()
    pmi = pmi_statistics(config, splits["train"])
    timings["pmi_s"] = time.time() - clock
    embeddings_path = None
    if config.kg_embeddings:
        clock = time.time()
        embeddings_path = cached_kg_embeddings(kg, cache_dir, progress, config.kg_embedding)
        timings["kg_embeddings_s"] = time.time() - clock

    clock = time.time()
    knowledge = {"linked": linked, "annotations": annotations, "pmi": pmi, "df": df, "kg": kg, "config": config}
    rows_by_split = {
        split: split_rows(data_module, tokenizer, split, records, knowledge, progress)
        for split, records in splits.items()
    }
    stats = {split: split_stats(records, linked[split], rows_by_split[split], kg) for split, records in splits.items()}
    write_features(folder, rows_by_split, pmi)
    timings["features_s"] = time.time() - clock
    manifest = {
        "dataset": data_module.name,
        "task": data_module.task,
        "config": asdict(config),
        "kg_dir": str(kg_dir),
        "gold_links": gold,
        "kg_embeddings": embeddings_path,
        "max_length": data_module.max_length,
        "splits": stats,
        "entities_with_df": len(df),
        "timings": {k: round(v, 3) for k, v in timings.items()},
        "total_s": round(time.time() - started, 3),
    }
    write_manifest(folder / "manifest.json", manifest)
    return manifest


def load_prepared(data_module, tokenizer, config: KnowledgeConfig, cache_dir: Path) -> dict[str, list[dict]]:
    """The cached features of every split, for training; never computes them. KAM's PMI map and expansion
    are derived here from each example's words and the folder's PMI table (``with_pmi_features``)."""
    splits, _, folder = split_keys(data_module, tokenizer, config, cache_dir)
    if not (folder / "manifest.json").is_file():
        raise KlmError(
            f"no prepared knowledge for {data_module.name}/{data_module.task} with this tokenizer, "
            f"max_length and knowledge config: run "
            f"`klm prepare --dataset {data_module.name} --tasks {data_module.task}` first"
        )
    try:
        features, table = read_prepared(folder, splits)
    except CorruptPrepared as error:  # set aside and built again, once: a second failure is an error
        set_aside_cache(folder, str(error))
        prepare(data_module, tokenizer, config, cache_dir, progress=False)
        features, table = read_prepared(folder, splits)
    derive = PmiFeatures(table, tokenizer)
    return {split: [derive(row) for row in rows] for split, rows in features.items()}


class CorruptPrepared(KlmError):
    """A prepared folder's file that does not read (truncated, garbage) or does not match its split."""


def read_manifest(path: Path) -> dict | None:
    """A prepared folder's manifest, None where it does not parse as one (garbage, half-written)."""
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and isinstance(manifest.get("splits"), dict) else None


def read_prepared(folder: Path, splits: dict[str, list[dict]]) -> tuple[dict[str, list[dict]], "PmiTable"]:
    """The stored rows of every split of a prepared ``folder`` and its PMI table, as written; ``CorruptPrepared``
    naming the file that does not read or does not match its split's records."""
    import lzma

    from knowledge_lm.core.io import read_jsonl
    from knowledge_lm.knowledge.pmi import PmiTable

    if read_manifest(folder / "manifest.json") is None:
        raise CorruptPrepared(f"{folder / 'manifest.json'} does not parse")
    features = {}
    for split, records in splits.items():
        path = folder / f"{split}.jsonl.xz"
        try:
            rows = [row for _, row in read_jsonl(path)]
            ids = [row["id"] for row in rows]
        except (
            KlmError,
            OSError,
            EOFError,
            lzma.LZMAError,
            UnicodeDecodeError,
            ValueError,
            KeyError,
            TypeError,
        ) as error:
            raise CorruptPrepared(f"{path.name} does not read: {type(error).__name__}: {error}") from None
        if ids != [record["id"] for record in records]:
            raise CorruptPrepared(f"{path.name}: its rows do not match the {split} split")
        features[split] = rows
    try:
        table = PmiTable.load(folder / PMI_TABLE)
    except KlmError as error:
        raise CorruptPrepared(str(error).replace(str(folder / PMI_TABLE), PMI_TABLE)) from None
    return features, table
