"""A knowledge graph of entity ids, and the graph queries the knowledge methods need.

The files it reads, entity types and distances: ``KnowledgeGraph``.
"""

import json
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Iterable

import networkx as nx
import numpy as np
import scipy.sparse
from scipy.sparse.csgraph import connected_components

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import find_file, open_text, read_json, read_jsonl

INSTANCE_OF = "P31"
TRIPLES_FILE = "triples.tsv"
ENTITIES_FILE = "entities.jsonl"
RELATION_FILES = ("relations.tsv", "properties_P_info.json")
SI_K_HOP = 6  # SI (the SI+SR paper, Eq. 4): entities count as close below this distance


@dataclass
class Entity:
    qid: str
    label: str | None = None
    surface_forms: list[str] = field(default_factory=list)
    type: str | None = None


class KnowledgeGraph:
    """Entities, named relations and (head, pid, tail) triples, with undirected distance queries.

    ``graph`` is the networkx view (a MultiDiGraph, built on first use); the distance queries run on
    an undirected adjacency of integer ids built once here, which is several times faster.

    Files read by ``KnowledgeGraph.load(directory)``; each may also be gzip-compressed (``name.gz``):

    ``triples.tsv`` (required)
        One fact a line, tab-separated: ``head_qid  relation_pid  tail_qid``. A first line starting with
        ``head_qid`` is a header and skipped; columns after the third (e.g. the shared KG's ``sources``)
        are ignored. Ids are any strings without tabs, not only Wikidata's Q/P numbers.
    ``entities.jsonl`` (optional)
        One JSON record a line: ``{"qid": ..., "label": ..., "surface_forms": [...], "type": ...}``; only
        ``qid`` is required, ``label`` and ``type`` may be null, ``surface_forms`` lists the aliases.
        An entity met in a triple without a record gets one with label None.
    ``relations.tsv`` or ``properties_P_info.json`` (optional)
        Relation names: ``pid  name`` lines (optional header ``pid  name``), or Wikidata's property list
        (a JSON list of ``{"id", "name", ...}``). A relation without a name is named by its pid.

    This is the layout of the shared ``wikidata_kg`` folder and of the generated dataset's graph
    (``knowledge_lm.data.generated``, ``write_kg``). Wikidata5M as distributed, or a triples TSV with a labels
    file, is converted into it by ``knowledge_lm.knowledge.kg_formats`` (``--kg``); for ConceptNet or your own
    graph, write its facts as ``triples.tsv`` and, if you have them, its names as ``entities.jsonl``.

    Entity types: the record's ``type`` where given; else the class of the entity's "instance of" (P31)
    triples, as the class's id (the class most frequent in the whole graph where it has several); else None.

    Distances are undirected (a triple links its head and tail both ways) and count edges.
    """

    def __init__(
        self,
        triples: Iterable[tuple[str, str, str]],
        entities: Iterable[Entity] = (),
        relations: dict[str, str] | None = None,
    ):
        self.triples = [tuple(triple) for triple in triples]
        self.entities: dict[str, Entity] = {entity.qid: entity for entity in entities}
        for head, _, tail in self.triples:
            for qid in (head, tail):
                if qid not in self.entities:
                    self.entities[qid] = Entity(qid)
        # pid -> name of every relation in a triple: named ones in the order given, then the others by first use.
        names, used = relations or {}, dict.fromkeys(pid for _, pid, _ in self.triples)
        self.relations = {pid: name for pid, name in names.items() if pid in used}
        self.relations.update((pid, pid) for pid in used if pid not in names)
        self._type_untyped_from_instance_of()

        self.qids = list(self.entities)
        self.index = {qid: number for number, qid in enumerate(self.qids)}
        self._adjacency = self._undirected_csr()
        self._neighbours = [
            self._adjacency.indices[self._adjacency.indptr[node] : self._adjacency.indptr[node + 1]].tolist()
            for node in range(len(self.qids))
        ]
        # Entities in different components are infinitely far apart: close_counts and distance
        # reject those pairs without a search.
        _, self._component = connected_components(self._adjacency, directed=False)

    # -- loading ---------------------------------------------------------------------------

    @classmethod
    def load(cls, directory) -> "KnowledgeGraph":
        directory = Path(directory)
        if not directory.is_dir():
            raise KlmError(f"knowledge graph directory {directory} does not exist")
        triples_path = find_file(directory, TRIPLES_FILE)
        if triples_path is None:
            raise KlmError(
                f"{directory}: no {TRIPLES_FILE} or {TRIPLES_FILE}.gz (a knowledge graph needs its triples; "
                f"optional: {ENTITIES_FILE}, {' or '.join(RELATION_FILES)}, each possibly .gz)"
            )
        entities_path = find_file(directory, ENTITIES_FILE)
        relations_path = find_file(directory, *RELATION_FILES)
        return cls(
            read_triples(triples_path),
            read_entities(entities_path) if entities_path else (),
            read_relation_names(relations_path) if relations_path else None,
        )

    def _type_untyped_from_instance_of(self):
        classes_of = {}
        for head, pid, tail in self.triples:
            if pid == INSTANCE_OF:
                classes_of.setdefault(head, []).append(tail)
        class_sizes = Counter(tail for classes in classes_of.values() for tail in classes)
        for qid, classes in classes_of.items():
            entity = self.entities[qid]
            if entity.type is None:
                # The most populous class gives coarse types (human, city) over rare ones; ties by id.
                entity.type = min(classes, key=lambda tail: (-class_sizes[tail], tail))

    def _undirected_csr(self) -> scipy.sparse.csr_matrix:
        size = len(self.qids)
        heads = np.fromiter((self.index[head] for head, _, _ in self.triples), dtype=np.int64, count=len(self.triples))
        tails = np.fromiter((self.index[tail] for _, _, tail in self.triples), dtype=np.int64, count=len(self.triples))
        not_loop = heads != tails
        rows = np.concatenate([heads[not_loop], tails[not_loop]])
        columns = np.concatenate([tails[not_loop], heads[not_loop]])
        matrix = scipy.sparse.csr_matrix((np.ones(len(rows), dtype=np.int8), (rows, columns)), shape=(size, size))
        matrix.sum_duplicates()
        matrix.data[:] = 1  # several relations between two entities are one edge
        return matrix

    # -- entities --------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.entities)

    def __contains__(self, qid) -> bool:
        return qid in self.entities

    def entities_of_type(self, entity_type: str) -> list[str]:
        return [qid for qid, entity in self.entities.items() if entity.type == entity_type]

    def entity_records(self) -> list[dict]:
        """The entities as ``entities.jsonl`` records."""
        return [
            {"qid": entity.qid, "label": entity.label, "surface_forms": entity.surface_forms, "type": entity.type}
            for entity in self.entities.values()
        ]

    def write_kg(self, directory) -> Path:
        """Write ``triples.tsv``, ``relations.tsv`` and ``entities.jsonl`` (with headers) to ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / TRIPLES_FILE, "w", encoding="utf-8") as handle:
            handle.write("head_qid\trelation_pid\ttail_qid\n")
            handle.writelines(f"{head}\t{pid}\t{tail}\n" for head, pid, tail in self.triples)
        with open(directory / RELATION_FILES[0], "w", encoding="utf-8") as handle:
            handle.write("pid\tname\n")
            handle.writelines(f"{pid}\t{name}\n" for pid, name in self.relations.items())
        with open(directory / ENTITIES_FILE, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in self.entity_records())
        return directory

    def _node(self, qid: str) -> int:
        try:
            return self.index[qid]
        except KeyError:
            raise KlmError(f"unknown entity {qid!r}: not in the knowledge graph ({len(self)} entities)") from None

    # -- graph views -----------------------------------------------------------------------

    @cached_property
    def graph(self):
        """A networkx MultiDiGraph: nodes are qids (label, surface_forms, type), edges keyed by pid."""

        graph = nx.MultiDiGraph()
        graph.add_nodes_from(
            (qid, {"label": entity.label, "surface_forms": entity.surface_forms, "type": entity.type})
            for qid, entity in self.entities.items()
        )
        graph.add_edges_from((head, tail, pid, {"relation": self.relations[pid]}) for head, pid, tail in self.triples)
        return graph

    def to_undirected_adjacency(self) -> scipy.sparse.csr_matrix:
        """Symmetric 0/1 adjacency without self-loops; row and column i are entity ``self.qids[i]``."""
        return self._adjacency.copy()

    # -- relation paths ----------------------------------------------------------------------

    @cached_property
    def _tails(self) -> dict[tuple[str, str], list[str]]:
        tails = {}
        for head, pid, tail in self.triples:
            tails.setdefault((head, pid), []).append(tail)
        return tails

    def objects(self, qid: str, relation: str) -> list[str]:
        """Tails of ``qid`` along ``relation`` (a pid, or a relation name)."""
        pid = relation if relation in self.relations else self._pids.get(relation, relation)
        return list(self._tails.get((qid, pid), ()))

    @cached_property
    def _pids(self) -> dict[str, str]:
        return {name: pid for pid, name in self.relations.items()}

    def follow(self, qid: str, path) -> list[list[str]]:
        """The entities reached after each hop of ``path`` (relations), in order, without repeats."""
        reached, frontier = [], [qid]
        for relation in path:
            frontier = list(dict.fromkeys(tail for head in frontier for tail in self.objects(head, relation)))
            reached.append(frontier)
        return reached

    def relation_blind_signature(self, subject: str, claimed: str) -> tuple[bool, int]:
        """What a relation-blind reader sees of a pair: whether they share an edge (either direction) and how many
        common neighbours they have (their two-edge paths, where a pair has at most one edge)."""
        neighbours = set(self._neighbours[self._node(subject)])
        claimed_node = self._node(claimed)
        return claimed_node in neighbours, len(neighbours.intersection(self._neighbours[claimed_node]))

    # -- distance queries ------------------------------------------------------------------

    def neighbours(self, qid: str) -> set[str]:
        """Entities sharing a triple with ``qid``, either direction."""
        return {self.qids[node] for node in self._neighbours[self._node(qid)]}

    def adjacent(self, a: str, b: str) -> bool:
        """Whether a triple joins ``a`` and ``b``, either direction; False where either is not in the KG."""
        if a not in self.index or b not in self.index:
            return False
        return self.index[b] in self._neighbours[self.index[a]]

    def k_hop(self, qid: str, k: int) -> set[str]:
        """Entities at undirected distance 1..k from ``qid``."""
        source = self._node(qid)
        return {self.qids[node] for node in self._ball(source, k) if node != source}

    def distance(self, a: str, b: str, cutoff: int | None = None) -> int | None:
        """Undirected shortest-path length, or None when there is no path of at most ``cutoff`` edges."""
        source, target = self._node(a), self._node(b)
        if source == target:
            return 0
        if self._component[source] != self._component[target]:
            return None
        return self._bidirectional_distance(source, target, len(self.qids) if cutoff is None else cutoff)

    def close_counts(self, linked: Iterable[str], k_hop: int = SI_K_HOP) -> dict[str, int]:
        """For each distinct entity e of ``linked``, |S(e)|: how many others lie at distance < ``k_hop``."""
        # Measured on the shared Wikidata KG (38k entities, hubs of degree ~1,000), sets drawn from 2-hop
        # neighbourhoods, K_hop = 6, ms per set for |E| = 5 / 20: pairwise bidirectional BFS 0.07 / 1.8;
        # one BFS ball of radius K_hop − 1 per entity 1.2 / 8.0; scipy's C Dijkstra with a limit 1.3 / 5.3;
        # sparse-matrix multi-source BFS 1.9 / 3.9. Two small balls meet long before one ball swallows
        # the hubs' neighbourhoods, and pairs in different components (5,072 of them) cost nothing.
        nodes = list(dict.fromkeys(self._node(qid) for qid in linked))
        counts = dict.fromkeys(nodes, 0)
        by_component = {}
        for node in nodes:
            by_component.setdefault(self._component[node], []).append(node)
        for group in by_component.values():
            for position, source in enumerate(group):
                for target in group[position + 1 :]:
                    if self._bidirectional_distance(source, target, k_hop - 1) is not None:
                        counts[source] += 1
                        counts[target] += 1
        return {self.qids[node]: count for node, count in counts.items()}

    def _ball(self, source: int, radius: int) -> dict[int, int]:
        """Node -> distance for every node within ``radius`` of ``source`` (source included)."""
        distances = {source: 0}
        frontier = [source]
        for depth in range(1, radius + 1):
            reached = []
            for node in frontier:
                for neighbour in self._neighbours[node]:
                    if neighbour not in distances:
                        distances[neighbour] = depth
                        reached.append(neighbour)
            if not reached:
                break
            frontier = reached
        return distances

    def _bidirectional_distance(self, source: int, target: int, cutoff: int) -> int | None:
        # Grows the smaller of two balls one level at a time; the first contact is the shortest path.
        if source == target:
            return 0
        seen, other_seen = {source}, {target}
        frontier, other_frontier = [source], [target]
        depth = 0
        while frontier and other_frontier and depth < cutoff:
            if len(frontier) > len(other_frontier):
                seen, other_seen, frontier, other_frontier = other_seen, seen, other_frontier, frontier
            depth += 1
            reached = []
            for node in frontier:
                for neighbour in self._neighbours[node]:
                    if neighbour in other_seen:
                        return depth
                    if neighbour not in seen:
                        seen.add(neighbour)
                        reached.append(neighbour)
            frontier = reached
        return None


def document_frequency(linked_docs: Iterable[Iterable[str]]) -> Counter:
    """Number of documents mentioning each entity; repeated mentions in one document count once."""
    return Counter(qid for linked in linked_docs for qid in set(linked))


# -- readers ---------------------------------------------------------------------------------


def read_triples(path: Path) -> list[tuple[str, str, str]]:
    triples = []
    with open_text(path) as handle:
        for line_number, line in enumerate(handle, start=1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            fields = [part.strip() for part in line.split("\t")]
            if line_number == 1 and fields[0] == "head_qid":
                continue
            if len(fields) < 3:
                raise KlmError(
                    f"{path}:{line_number}: expected head_qid, relation_pid, tail_qid separated by tabs, "
                    f"got {len(fields)} column{'s' if len(fields) != 1 else ''}"
                )
            head, pid, tail = fields[:3]
            if not (head and pid and tail):
                raise KlmError(f"{path}:{line_number}: empty id in {line!r}")
            triples.append((head, pid, tail))
    return triples


def read_entities(path: Path) -> list[Entity]:
    entities, seen = [], set()
    for line_number, record in read_jsonl(path):
        qid = record.get("qid") if isinstance(record, dict) else None
        if not isinstance(qid, str) or not qid:
            raise KlmError(f"{path}:{line_number}: an entity record needs a non-empty string 'qid'")
        if qid in seen:
            raise KlmError(f"{path}:{line_number}: entity {qid} is listed twice")
        seen.add(qid)
        surface_forms = record.get("surface_forms") or []
        if not isinstance(surface_forms, list):
            raise KlmError(f"{path}:{line_number}: 'surface_forms' must be a list of strings")
        entities.append(Entity(qid, record.get("label"), [str(form) for form in surface_forms], record.get("type")))
    return entities


def read_relation_names(path: Path) -> dict[str, str]:
    if Path(path.name.removesuffix(".gz")).suffix == ".json":
        properties = read_json(path)
        if not isinstance(properties, list):
            raise KlmError(f"{path}: expected a JSON list of {{'id', 'name', ...}} properties")
        return {
            item["id"]: item.get("name") or item["id"] for item in properties if isinstance(item, dict) and "id" in item
        }
    names = {}
    with open_text(path) as handle:
        for line_number, line in enumerate(handle, start=1):
            fields = [part.strip() for part in line.rstrip("\r\n").split("\t")]
            if not line.strip() or (line_number == 1 and fields[0] == "pid"):
                continue
            if len(fields) < 2 or not fields[0]:
                raise KlmError(f"{path}:{line_number}: expected 'pid<TAB>name'")
            names[fields[0]] = fields[1]
    return names
