"""The KG a user names (``--kg PATH|NAME``, knowledge option ``kg_dir``), as a folder of the suite's KG layout.

Accepted: a name (``wikidata_kg``, the shared small KG, or ``wikidata5m``, under ``<data_dir>/<name>/``); a folder of
the suite's layout (``triples.tsv``, optional ``entities.jsonl`` and relation names: ``kg.KnowledgeGraph``); a
folder of Wikidata5M as distributed (Wang et al., 2021: ``wikidata5m_all_triplet.txt`` or its
``train``/``valid``/``test`` splits, ``wikidata5m_entity.txt`` and ``wikidata5m_relation.txt`` for the names, each
possibly ``.gz``); or a TSV file of ``head<TAB>relation<TAB>tail`` triples with a labels file beside it
(``entities.jsonl``, ``labels.tsv`` or ``wikidata5m_entity.txt``; relation names in ``relations.tsv`` or
``wikidata5m_relation.txt``). The last two are converted once into ``<cache_dir>/kg/<name>-<fingerprint>/``, which
linking, TransE, KAM's KG map and kg-text then read as they read the shared KG.
"""

import hashlib
import json
import os
import shutil
from pathlib import Path

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import find_file, open_text

KG_NAMES = ("wikidata_kg", "wikidata5m")
WIKIDATA5M_TRIPLES = (
    ("wikidata5m_all_triplet.txt",),
    tuple(f"wikidata5m_transductive_{split}.txt" for split in ("train", "valid", "test")),
    tuple(f"wikidata5m_inductive_{split}.txt" for split in ("train", "valid", "test")),
)
ENTITY_ALIASES = "wikidata5m_entity.txt"
RELATION_ALIASES = "wikidata5m_relation.txt"
LABEL_FILES = ("entities.jsonl", "labels.tsv", ENTITY_ALIASES)
RELATION_NAME_FILES = ("relations.tsv", RELATION_ALIASES)


def resolve_kg(kg: str, data_dir: Path | None, cache_dir: Path) -> Path:
    """The folder, in the suite's KG layout, of the KG named by ``kg`` (a name, a folder or a triples file)."""
    from knowledge_lm.knowledge.kg import TRIPLES_FILE

    path = Path(kg).expanduser()
    if kg in KG_NAMES and not path.exists():
        if data_dir is None:
            raise KlmError(f"knowledge graph {kg!r}: no data directory to find {kg}/ in (set --data-dir or DATA_DIR)")
        path = Path(data_dir) / kg
    if path.is_dir() and find_file(path, TRIPLES_FILE):
        return path
    if path.is_dir():
        triples = wikidata5m_triples(path)
        if not triples:
            raise KlmError(
                f"knowledge graph {path}: neither {TRIPLES_FILE} nor Wikidata5M's triples "
                f"({', '.join(names[0] for names in WIKIDATA5M_TRIPLES)}, …; each possibly .gz)"
            )
        return converted_kg(triples, path, "wikidata5m" if kg == "wikidata5m" else path.name, cache_dir)
    if path.is_file():
        return converted_kg([path], path.parent, path.name.split(".")[0], cache_dir)
    known = ", ".join(KG_NAMES)
    raise KlmError(f"knowledge graph {kg} does not exist (a name among {known}, a folder or a triples TSV)")


def wikidata5m_triples(folder: Path) -> list[Path]:
    """Wikidata5M's triple files in ``folder``: all triples where distributed, else a split set's three files."""
    for names in WIKIDATA5M_TRIPLES:
        found = [find_file(folder, name) for name in names]
        if all(found):
            return found
    return []


def stats_fingerprint(paths: list[Path]) -> str:
    """Of the files' names, sizes and modification times: Wikidata5M's gigabytes are not read to find its copy."""
    stats = [(path.name, path.stat().st_size, path.stat().st_mtime_ns) for path in paths]
    return hashlib.sha256(json.dumps(stats).encode()).hexdigest()[:16]


def converted_kg(triple_files: list[Path], folder: Path, name: str, cache_dir: Path) -> Path:
    """The triples of ``triple_files`` and the labels and relation names beside them in ``folder``, written once in
    the suite's layout to the cache; the copy's folder."""
    from knowledge_lm.knowledge.kg import ENTITIES_FILE, RELATION_FILES, TRIPLES_FILE, read_triples

    labels, relations = find_file(folder, *LABEL_FILES), find_file(folder, *RELATION_NAME_FILES)
    sources = [*triple_files, *(path for path in (labels, relations) if path is not None)]
    target = Path(cache_dir) / "kg" / f"{name}-{stats_fingerprint(sources)}"
    if (target / TRIPLES_FILE).is_file():
        return target
    staging = target.with_name(f"{target.name}.tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    seen = set()
    with open(staging / TRIPLES_FILE, "w", encoding="utf-8") as handle:
        handle.write("head_qid\trelation_pid\ttail_qid\n")
        for path in triple_files:
            for triple in read_triples(path):
                if triple not in seen:  # Wikidata5M's splits and repeated lines: each fact once
                    seen.add(triple)
                    handle.write("\t".join(triple) + "\n")
    if labels is not None and labels.name.startswith(ENTITIES_FILE):
        shutil.copyfile(labels, staging / labels.name)
    elif labels is not None:
        with open(staging / ENTITIES_FILE, "w", encoding="utf-8") as handle:
            for qid, names in read_aliases(labels):
                record = {"qid": qid, "label": names[0], "surface_forms": names[1:]}
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    if relations is not None and relations.name.startswith(RELATION_FILES[0]):
        shutil.copyfile(relations, staging / relations.name)
    elif relations is not None:
        with open(staging / RELATION_FILES[0], "w", encoding="utf-8") as handle:
            handle.write("pid\tname\n")
            handle.writelines(f"{pid}\t{names[0]}\n" for pid, names in read_aliases(relations))
    try:
        os.replace(staging, target)
    except OSError:  # another process converted the same files first: keep theirs
        shutil.rmtree(staging, ignore_errors=True)
    return target


def read_aliases(path: Path):
    """``(id, [name, alias, …])`` of each ``id<TAB>name<TAB>alias…`` line with at least one name (Wikidata5M's
    alias files; a labels TSV)."""
    with open_text(path) as handle:
        for line in handle:
            fields = [field.strip() for field in line.rstrip("\r\n").split("\t")]
            names = list(dict.fromkeys(field for field in fields[1:] if field))
            if fields[0] and names and fields[0] not in ("qid", "pid", "id"):
                yield fields[0], names
