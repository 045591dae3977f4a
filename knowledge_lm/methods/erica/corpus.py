"""ERICA's pretraining corpus from the data at hand: documents with linked entities + a KG → distant supervision.

:func:`build_erica_corpus` turns named sources (and user JSONL files) into the records of
:func:`knowledge_lm.methods.erica.model.build_corpus` (format in ``model.py``'s docstring): every entity with all
its mentions and their sentences, the KG relations of each ordered entity pair (distant supervision),
the remaining pairs as no_relation, each pair intra- or cross-sentence; documents kept with ≥ 4 entities
and ≥ 4 relations (configurable); entity pairs of the named test sets removed. :func:`cached_corpus`
stores the result under the cache directory, keyed by everything it depends on.

The sources: ``parse_sources``; Wikidata-side sentences packed into documents: ``pack_sentences``; the
test sets removed: ``test_pairs``.
"""

import hashlib
import json
import re
from collections import defaultdict
from pathlib import Path

from knowledge_lm.core.caches import damaged_file, file_record, read_cached_json, set_aside_cache
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import find_file, open_text, read_jsonl, resolve_data_dir
from knowledge_lm.core.results import write_json_atomic
from knowledge_lm.data.fewrel import FewRelDataModule
from knowledge_lm.data.generated import GeneratedDataModule
from knowledge_lm.data.redocred import LABELS, DocREDDataModule
from knowledge_lm.knowledge.kg import read_relation_names, read_triples
from knowledge_lm.knowledge.linking import AliasTable, EntityLinker
from knowledge_lm.methods.erica.model import build_corpus, entity_keys, read_corpus, write_corpus

SOURCES = ("redocred", "fewrel", "lama", "generated")
TEST_SETS = ("redocred", "fewrel", "generated")
SENTENCES_PER_DOCUMENT = 8
CORPUS_VERSION = 1  # part of the cache key: bump when the records built from the same inputs change
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


# -- the KG and linking -----------------------------------------------------------------------
class WikidataKG:
    """The triples, relation names and alias table of a KG folder (``wikidata_kg`` layout), loaded on use."""

    def __init__(self, directory: Path | None):
        self.directory = directory
        self._alias_table = self._triples = self._names = None

    def require(self, source: str):
        if self.directory is None or find_file(self.directory, "triples.tsv") is None:
            raise KlmError(
                f"ERICA corpus source {source!r} needs a Wikidata KG (triples.tsv[.gz]); none under "
                f"{self.directory or 'the data directory'} (give --kg-dir or --data-dir holding wikidata_kg/)"
            )
        return self

    @property
    def triples(self):
        if self._triples is None:
            self._triples = read_triples(find_file(self.directory, "triples.tsv")) if self.available else []
        return self._triples

    @property
    def available(self) -> bool:
        return self.directory is not None and find_file(self.directory, "triples.tsv") is not None

    @property
    def relation_names(self) -> dict[str, str]:
        if self._names is None:
            path = find_file(self.directory, "relations.tsv", "properties_P_info.json") if self.directory else None
            self._names = read_relation_names(path) if path else {}
        return self._names

    @property
    def alias_table(self):
        if self._alias_table is None:
            path = find_file(self.directory, "entities.jsonl") if self.directory else None
            self._alias_table = AliasTable.from_entities_file(path) if path else AliasTable()
        return self._alias_table

    def link_entity(self, surfaces) -> str | None:
        """The QID whose priors summed over ``surfaces`` (an entity's mention names) are highest."""
        scores: dict[str, float] = defaultdict(float)
        for surface in surfaces:
            for qid, prior in self.alias_table.candidates(surface):
                scores[qid] += prior
        return min(scores, key=lambda qid: (-scores[qid], qid)) if scores else None

    def link_text(self, text: str) -> list[dict]:
        """Entities of a raw text: longest non-overlapping alias matches, grouped by their best QID."""

        mentions: dict[str, list[dict]] = {}
        for mention in EntityLinker(self.alias_table, longest_only=True).link(text):
            qid = mention.candidates[0][0]
            mentions.setdefault(qid, []).append({"start": mention.start, "end": mention.end})
        return [{"qid": qid, "mentions": spans} for qid, spans in mentions.items()]


def sentence_ids(text: str, entities: list[dict]) -> None:
    """Fill missing mention ``sent_id`` values from a punctuation sentence split of ``text``."""
    starts = [0] + [match.end() for match in SENTENCE_END.finditer(text)]
    for entity in entities:
        for mention in entity["mentions"]:
            if mention.get("sent_id") is None:
                mention["sent_id"] = sum(1 for start in starts[1:] if start <= mention["start"])


# -- packing sentences into documents ---------------------------------------------------------
def pack_sentences(
    sentences: list[dict], per_document: int = SENTENCES_PER_DOCUMENT, prefix: str = "doc"
) -> list[dict]:
    """Sentences ``{"text", "entities": [{"qid", "start", "end"}]}`` → documents of ≤ ``per_document``
    sentences, each next one sharing an entity with the document so far (below).

    The Wikidata-side sources are single sentences with two entities, which never reach 4 entities and
    4 relations alone: their sentences are packed into pseudo-documents of at most
    ``sentences_per_document`` (8) sentences, each next sentence sharing an entity with those already in
    (a greedy walk over the entity → sentence index, in file order), so that documents hold several
    entities and both intra- and cross-sentence pairs. These are not natural documents; the paper's
    Wikipedia documents are not available here.
    """
    by_entity: dict[str, list[int]] = defaultdict(list)
    for number, sentence in enumerate(sentences):
        for qid in dict.fromkeys(entity["qid"] for entity in sentence["entities"]):
            by_entity[qid].append(number)
    used, documents = set(), []
    for first in range(len(sentences)):
        if first in used:
            continue
        chosen, frontier = [first], list(dict.fromkeys(e["qid"] for e in sentences[first]["entities"]))
        used.add(first)
        while len(chosen) < per_document and frontier:
            candidates = by_entity[frontier[0]]
            while candidates and candidates[0] in used:
                candidates.pop(0)
            if not candidates:
                frontier.pop(0)
                continue
            number = candidates.pop(0)
            used.add(number)
            chosen.append(number)
            frontier += [e["qid"] for e in sentences[number]["entities"] if e["qid"] not in frontier]
        documents.append(join_sentences([sentences[number] for number in chosen], f"{prefix}-{len(documents)}"))
    return documents


def join_sentences(sentences: list[dict], identifier: str) -> dict:
    text, entities = "", {}
    for sent_id, sentence in enumerate(sentences):
        shift = len(text) + (1 if text else 0)
        text = f"{text} {sentence['text']}" if text else sentence["text"]
        for entity in sentence["entities"]:
            record = entities.setdefault(
                entity["qid"], {"qid": entity["qid"], "name": entity.get("name"), "mentions": []}
            )
            record["mentions"].append(
                {"start": entity["start"] + shift, "end": entity["end"] + shift, "sent_id": sent_id}
            )
    return {"id": identifier, "text": text, "entities": list(entities.values())}


# -- sources ----------------------------------------------------------------------------------
def redocred_documents(data_dir, kg: WikidataKG) -> list[dict]:
    documents = []
    for record in DocREDDataModule(task="revised", data_dir=data_dir).read_splits()["train"]:
        entities = [
            {
                "qid": kg.link_entity({m["name"] for m in entity["mentions"]}) if kg.available else None,
                "name": entity["name"],
                "mentions": entity["mentions"],
            }
            for entity in record["entities"]
        ]
        relations = [
            {"head": head, "tail": tail, "relation": LABELS[relation]} for head, tail, relation in record["label"]
        ]
        documents.append({"id": record["id"], "text": record["text_a"], "entities": entities, "relations": relations})
    return documents


def fewrel_documents(data_dir, per_document: int) -> list[dict]:
    sentences = [
        {
            "text": record["text_a"],
            "entities": [
                {"qid": e["qid"], "name": e["mention"], "start": e["start"], "end": e["end"]}
                for e in record["entities"]
            ],
        }
        for record in FewRelDataModule(task="main", data_dir=data_dir).read_splits()["train"]
    ]
    return pack_sentences(sentences, per_document, "fewrel")


def lama_documents(data_dir, per_document: int) -> list[dict]:
    folder = Path(data_dir) / "lama" / "TREx" if data_dir else None
    paths = sorted(folder.glob("P*.jsonl*")) if folder and folder.is_dir() else []
    if not paths:
        raise KlmError(
            f"ERICA corpus source 'lama' needs LAMA's TREx/P*.jsonl[.gz] under {folder or 'a data directory'}"
        )
    sentences = []
    for path in paths:
        for _, fact in read_jsonl(path):
            evidence = next(iter(fact.get("evidences") or []), None)
            if not evidence or "[MASK]" not in evidence.get("masked_sentence", "") or not evidence.get("obj_surface"):
                continue
            masked, obj, sub = evidence["masked_sentence"], evidence["obj_surface"], evidence.get("sub_surface") or ""
            obj_start = masked.index("[MASK]")
            text = masked.replace("[MASK]", obj, 1)
            sub_start = text.find(sub) if sub else -1
            if sub_start < 0 or obj_start < sub_start + len(sub) and sub_start < obj_start + len(obj):
                continue  # subject not found, or it overlaps the object
            sentences.append(
                {
                    "text": text,
                    "entities": [
                        {
                            "qid": fact["sub_uri"],
                            "name": fact.get("sub_label"),
                            "start": sub_start,
                            "end": sub_start + len(sub),
                        },
                        {
                            "qid": fact["obj_uri"],
                            "name": fact.get("obj_label"),
                            "start": obj_start,
                            "end": obj_start + len(obj),
                        },
                    ],
                }
            )
    return pack_sentences(sentences, per_document, "lama")


def generated_data(data_dir):
    return GeneratedDataModule(task="facts", data_dir=data_dir).generated()


def generated_documents(data, per_document: int) -> list[dict]:
    sentences = [
        {
            "text": record["text_a"],
            "entities": [
                {"qid": link.get("gold_qid") or link["qid"], "start": link["start"], "end": link["end"]}
                for link in record["entities"]
            ],
        }
        for record in data.splits["train"]
        if record["label"] in (1, "true") and record["entities"]
    ]
    return pack_sentences(sentences, per_document, "generated")


def user_documents(path: Path, kg: WikidataKG) -> list[dict]:
    if not path.is_file():
        raise KlmError(
            f"ERICA corpus file {path} does not exist (a source is one of {', '.join(SOURCES)} or a .jsonl path)"
        )
    documents = []
    with open_text(path) as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                document = json.loads(line)
            except json.JSONDecodeError as error:
                raise KlmError(f"{path}:{line_number}: malformed JSON line ({error.msg})") from None
            if not isinstance(document, dict) or not isinstance(document.get("text"), str):
                raise KlmError(f"{path}:{line_number}: expected an object with a string 'text'")
            text = document["text"]
            entities = document.get("entities")
            if entities is None:
                entities = kg.link_text(text)
            for entity in entities:
                spans = entity.get("mentions") if isinstance(entity, dict) else None
                if not isinstance(spans, list) or not all(
                    isinstance(m, dict)
                    and isinstance(m.get("start"), int)
                    and isinstance(m.get("end"), int)
                    and 0 <= m["start"] < m["end"] <= len(text)
                    for m in spans
                ):
                    raise KlmError(
                        f"{path}:{line_number}: every entity needs 'mentions' of integer character spans "
                        f"[start, end) inside the text"
                    )
                if not entity.get("qid"):
                    surfaces = {text[m["start"] : m["end"]] for m in spans} | {entity.get("name") or ""}
                    entity["qid"] = kg.link_entity({surface for surface in surfaces if surface.strip()})
            sentence_ids(text, entities)
            documents.append(
                {
                    "id": str(document.get("id", f"{path.stem}-{line_number}")),
                    "text": text,
                    "entities": entities,
                    "relations": document.get("relations") or [],
                }
            )
    return documents


# -- test pairs -------------------------------------------------------------------------------
def pair_keys(head: dict, tail: dict, text: str) -> set[tuple[str, str]]:
    heads, tails = entity_keys(head, text), entity_keys(tail, text)
    return {(a, b) for a in heads for b in tails} | {(b, a) for a in heads for b in tails}


def test_pairs(name: str, data_dir, kg: WikidataKG, generated=None) -> set[tuple[str, str]]:
    """Entity-pair keys of a named test set (below), both directions.

    Test sets (``exclude_test``; default: those of the named sources that have one, i.e. ``redocred``,
    ``fewrel``, ``generated``): Re-DocRED test facts (keys: mention names, and the QID where linked), FewRel
    test instances' (head, tail) (QIDs and names), generated test statements' co-mentioned entity pairs
    (QIDs). A pair is removed in both directions.
    """
    pairs: set[tuple[str, str]] = set()
    if name == "redocred":
        for record in DocREDDataModule(task="revised", data_dir=data_dir).read_splits()["test"]:
            entities = [
                dict(entity, qid=kg.link_entity({m["name"] for m in entity["mentions"]}) if kg.available else None)
                for entity in record["entities"]
            ]
            for head, tail, _ in record["label"]:
                pairs |= pair_keys(entities[head], entities[tail], record["text_a"])
    elif name == "fewrel":
        for record in FewRelDataModule(task="main", data_dir=data_dir).read_splits()["test"]:
            head, tail = ({"qid": e["qid"], "name": e["mention"], "mentions": []} for e in record["entities"])
            pairs |= pair_keys(head, tail, record["text_a"])
    elif name == "generated":
        for record in (generated or generated_data(data_dir)).splits["test"]:
            qids = list(dict.fromkeys(link.get("gold_qid") or link["qid"] for link in record["entities"]))
            pairs |= {(a, b) for a in qids for b in qids if a != b}
    else:
        raise KlmError(f"unknown test set {name!r} to exclude from the ERICA corpus; known: {', '.join(TEST_SETS)}")
    return pairs


# -- the corpus -------------------------------------------------------------------------------
def parse_sources(corpus: str | list[str]) -> list[str]:
    """The source names of ``--corpus`` (comma-separated, or a list), checked.

    Sources (``<data_dir>`` is the shared layout):

    ``redocred``
        Re-DocRED's ``train`` split (700 documents; the split of ``knowledge_lm.data.redocred``, so its dev and
        test documents never enter the corpus). Entities and mentions (with sentence ids) as annotated.
        Re-DocRED has no QIDs: each entity is linked by its mention names through the alias table of the
        KG's ``entities.jsonl`` (the QID whose priors summed over the entity's mentions are highest; no
        candidate: unlinked). Relations = the document's annotated facts (Wikidata pids, human-checked)
        ∪ the KG triples between linked entities (the paper's distant supervision; the shared KG covers
        few of these entities, so the annotation carries most of the relations). Unlinked entities keep
        their annotated relations and are matched against test pairs by name.
    ``fewrel``
        FewRel's ``train`` split (FewRel val_wiki cut 70/10/20, ``knowledge_lm.data.fewrel``): sentences
        with head and tail QIDs.
    ``lama``
        LAMA T-REx evidence sentences (the first evidence of each fact, ``[MASK]`` filled with the object's
        surface; subject found by its surface form, else the sentence is skipped). Google-RE is skipped
        (Freebase subjects). A LAMA probe of a checkpoint pretrained on this source is contaminated.
    ``generated``
        The generated task's ``train`` statements whose label is true (false ones state wrong facts), with
        their gold links; the KG is the generated one, not Wikidata.
    a path to a ``.jsonl`` file
        User documents, one JSON object a line: ``{"id": str (optional), "text": str, "entities": [...]
        (optional), "relations": [...] (optional)}``. ``entities`` as ``build_corpus`` takes them:
        ``{"qid": str|null, "name": str (optional), "mentions": [{"start", "end", "sent_id" (optional)}]}``
        with character offsets into ``text``; entities without ``qid`` are linked by their mention names as
        Re-DocRED's. Without ``entities``, the text is linked with the alias table (longest non-overlapping
        matches, each span's most likely entity; all spans of one QID are that entity's mentions). Missing
        ``sent_id`` values come from a sentence split at ``.``/``!``/``?`` followed by white space.
        ``relations``: optional annotated facts ``{"head": int, "tail": int, "relation": pid}``.
    """
    sources = [part.strip() for part in (corpus.split(",") if isinstance(corpus, str) else corpus) if part.strip()]
    if not sources:
        raise KlmError("no ERICA corpus source given: name some of " + ", ".join(SOURCES) + " or a .jsonl path")
    for source in sources:
        if source not in SOURCES and not source.endswith(".jsonl") and not source.endswith(".jsonl.gz"):
            raise KlmError(
                f"unknown ERICA corpus source {source!r}; known: {', '.join(SOURCES)}, or a path to a .jsonl file"
            )
        if source not in SOURCES and not Path(source).expanduser().is_file():
            raise KlmError(f"ERICA corpus file {source} does not exist")
    return sources


def build_erica_corpus(
    corpus,
    data_dir=None,
    *,
    kg_dir=None,
    exclude_test=None,
    min_entities: int = 4,
    min_relations: int = 4,
    sentences_per_document: int = SENTENCES_PER_DOCUMENT,
) -> list[dict]:
    """ERICA records from ``corpus`` (source names and/or JSONL paths, a list or a comma string).

    ``kg_dir``: the Wikidata KG (default ``<data_dir>/wikidata_kg``); ``exclude_test``: test-set names
    (default: the sources' own, of :data:`TEST_SETS`; ``[]`` for none)."""

    sources = parse_sources(corpus)
    data_dir = resolve_data_dir(data_dir)
    kg = WikidataKG(Path(kg_dir) if kg_dir else (data_dir / "wikidata_kg" if data_dir else None))
    if kg_dir and not Path(kg_dir).is_dir():
        raise KlmError(f"knowledge graph directory {kg_dir} does not exist")
    excluded = [name for name in TEST_SETS if name in sources] if exclude_test is None else list(exclude_test)
    generated = generated_data(data_dir) if "generated" in sources or "generated" in excluded else None
    pairs = set().union(*(test_pairs(name, data_dir, kg, generated) for name in excluded)) if excluded else set()
    filters = dict(test_pairs=pairs, min_entities=min_entities, min_relations=min_relations)
    records = []
    for source in sources:
        if source == "generated":
            records += build_corpus(
                generated_documents(generated, sentences_per_document),
                generated.kg.triples,
                relation_names=generated.kg.relations,
                **filters,
            )
            continue
        if source == "redocred":
            documents = redocred_documents(data_dir, kg)
        elif source == "fewrel":
            documents = fewrel_documents(data_dir, sentences_per_document)
        elif source == "lama":
            documents = lama_documents(data_dir, sentences_per_document)
        else:
            documents = user_documents(Path(source).expanduser(), kg)
        if source != "redocred":
            kg.require(source)
        records += build_corpus(documents, kg.triples, relation_names=kg.relation_names, **filters)
    return records


def source_fingerprint(source: str, data_dir) -> str:
    """What a source's records depend on besides the options: its files' names, sizes and mtimes."""
    if source in SOURCES:
        folder = {"redocred": "redocred", "fewrel": "fewrel", "lama": "lama/TREx", "generated": "generated"}[source]
        root = Path(data_dir) / folder if data_dir else None
        files = sorted(root.rglob("*")) if root and root.is_dir() else []
    else:
        files = [Path(source).expanduser().resolve()]
    return ";".join(f"{path}:{path.stat().st_size}:{path.stat().st_mtime_ns}" for path in files if path.is_file())


def cached_corpus(
    corpus,
    cache_dir,
    data_dir=None,
    *,
    kg_dir=None,
    exclude_test=None,
    min_entities: int = 4,
    min_relations: int = 4,
    sentences_per_document: int = SENTENCES_PER_DOCUMENT,
) -> tuple[list[dict], Path]:
    """:func:`build_erica_corpus`, read from ``<cache_dir>/erica/<key>.jsonl`` when built before and intact (its
    size and checksum those its ``.manifest.json`` records); a damaged one is set aside and built again."""

    sources = parse_sources(corpus)
    data_dir = resolve_data_dir(data_dir)
    kg_folder = Path(kg_dir) if kg_dir else (data_dir / "wikidata_kg" if data_dir else None)
    key = json.dumps(
        {
            "version": CORPUS_VERSION,
            "sources": {s: source_fingerprint(s, data_dir) for s in sources},
            "kg": sorted(
                f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in kg_folder.iterdir() if p.is_file()
            )
            if kg_folder and kg_folder.is_dir()
            else None,
            "exclude_test": exclude_test,
            "min_entities": min_entities,
            "min_relations": min_relations,
            "sentences_per_document": sentences_per_document,
        },
        sort_keys=True,
    )
    path = Path(cache_dir) / "erica" / f"corpus-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsonl"
    manifest = path.with_suffix(".manifest.json")
    if path.is_file():
        why = damaged_file(path, read_cached_json(manifest))
        if why is None:
            return read_corpus(path), path
        set_aside_cache(path, why)
    records = build_erica_corpus(
        sources,
        data_dir,
        kg_dir=kg_dir,
        exclude_test=exclude_test,
        min_entities=min_entities,
        min_relations=min_relations,
        sentences_per_document=sentences_per_document,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    write_corpus(records, partial)
    partial.replace(path)
    write_json_atomic(manifest, file_record(path))
    return records, path


def corpus_statistics(records: list[dict]) -> dict:
    relations = [relation for record in records for relation in record["relations"]]
    return {
        "documents": len(records),
        "entities": sum(len(record["entities"]) for record in records),
        "relations": len(relations),
        "intra": sum(relation["intra"] for relation in relations),
        "relation_types": len({relation["relation"] for relation in relations}),
    }
