"""The knowledge graph: loaders, distance queries against brute force, DF, TransE, fallback, link noise."""

import gzip
import json
import random
from collections import Counter

import networkx as nx
import pytest
import torch

from knowledge_lm.core.errors import KlmError
from knowledge_lm.knowledge import kg_embeddings
from knowledge_lm.knowledge.kg import Entity, KnowledgeGraph, document_frequency
from knowledge_lm.knowledge.kg_embeddings import EntityEmbeddings, cached_transe, label_embedding, train_transe
from knowledge_lm.knowledge.noise import inject_link_noise

# A - B - C - D - E - F - G chain (mixed directions, a duplicate edge, a self-loop), H - I apart, J alone.
HAND_TRIPLES = [
    ("A", "P1", "B"),
    ("C", "P1", "B"),
    ("C", "P2", "D"),
    ("D", "P2", "C"),
    ("D", "P1", "E"),
    ("F", "P1", "E"),
    ("F", "P3", "G"),
    ("A", "P3", "A"),
    ("H", "P1", "I"),
]


def hand_kg() -> KnowledgeGraph:
    return KnowledgeGraph(HAND_TRIPLES, [Entity("J", "lonely")], {"P1": "one"})


def brute_force_distances(triples, source) -> dict:
    """Plain BFS over a dict-of-sets built independently of the KnowledgeGraph."""
    adjacent = {}
    for head, _, tail in triples:
        adjacent.setdefault(head, set()).add(tail)
        adjacent.setdefault(tail, set()).add(head)
    distances, frontier = {source: 0}, [source]
    while frontier:
        reached = []
        for node in frontier:
            for neighbour in adjacent.get(node, ()):
                if neighbour not in distances:
                    distances[neighbour] = distances[node] + 1
                    reached.append(neighbour)
        frontier = reached
    return distances


def random_triples(nodes=150, edges=190, seed=3):
    rng = random.Random(seed)
    graph = nx.gnm_random_graph(nodes, edges, seed=seed)
    triples = []
    for a, b in graph.edges():
        head, tail = (a, b) if rng.random() < 0.5 else (b, a)
        triples.append((f"Q{head}", f"P{rng.randrange(4)}", f"Q{tail}"))
    return triples


def check_against_brute_force(kg, triples, qids):
    for qid in qids:
        truth = brute_force_distances(triples, qid)
        for k in (0, 1, 2, 3, 5):
            assert kg.k_hop(qid, k) == {other for other, length in truth.items() if 0 < length <= k}, (qid, k)
        for other in qids:
            assert kg.distance(qid, other) == truth.get(other)
            for cutoff in (1, 2, 4):
                expected = truth.get(other)
                assert kg.distance(qid, other, cutoff) == (
                    expected if expected is not None and expected <= cutoff else None
                )


def brute_force_close_counts(triples, linked, k_hop):
    distinct = list(dict.fromkeys(linked))
    counts = {}
    for qid in distinct:
        truth = brute_force_distances(triples, qid)
        counts[qid] = sum(1 for other in distinct if other != qid and truth.get(other, k_hop) < k_hop)
    return counts


# -- queries ---------------------------------------------------------------------------------


def test_hand_made_graph_distances():
    kg = hand_kg()
    assert len(kg) == 10 and "J" in kg and "Z" not in kg
    assert kg.neighbours("C") == {"B", "D"}
    assert kg.neighbours("A") == {"B"}  # the self-loop is no neighbour
    assert kg.k_hop("A", 2) == {"B", "C"}
    assert kg.k_hop("D", 3) == {"A", "B", "C", "E", "F", "G"}
    assert kg.k_hop("J", 4) == set()
    assert kg.distance("A", "G") == 6 and kg.distance("A", "G", cutoff=5) is None
    assert kg.distance("A", "H") is None and kg.distance("A", "A") == 0
    check_against_brute_force(kg, HAND_TRIPLES, kg.qids)
    assert kg.close_counts(["A", "G", "C", "H", "I", "J", "A"]) == {"A": 1, "G": 1, "C": 2, "H": 1, "I": 1, "J": 0}
    assert kg.close_counts(["A", "G"], k_hop=7) == {"A": 1, "G": 1}


def test_random_graph_against_brute_force():
    triples = random_triples()
    kg = KnowledgeGraph(triples)
    check_against_brute_force(kg, triples, kg.qids[:40])
    rng = random.Random(0)
    for _ in range(60):
        linked = rng.choices(kg.qids, k=rng.randint(1, 25))
        k_hop = rng.randint(1, 7)
        assert kg.close_counts(linked, k_hop) == brute_force_close_counts(triples, linked, k_hop)


def test_networkx_view_and_adjacency():
    kg = hand_kg()
    assert kg.graph.number_of_edges() == len(HAND_TRIPLES)
    assert kg.graph.nodes["J"]["label"] == "lonely"
    adjacency = kg.to_undirected_adjacency()
    assert (adjacency != adjacency.T).nnz == 0 and adjacency.diagonal().sum() == 0
    assert adjacency.nnz == 2 * 7  # C-D twice and the A self-loop collapse


def test_unknown_ids_are_rejected_by_name():
    kg = hand_kg()
    for query in (
        lambda: kg.neighbours("Q404"),
        lambda: kg.k_hop("Q404", 2),
        lambda: kg.distance("A", "Q404"),
        lambda: kg.close_counts(["A", "Q404"]),
    ):
        with pytest.raises(KlmError, match="Q404"):
            query()


def test_document_frequency_counts_documents():
    docs = [["Q1", "Q2", "Q1"], ["Q2"], [], ("Q3", "Q1"), iter(["Q1"])]
    assert document_frequency(docs) == Counter({"Q1": 3, "Q2": 2, "Q3": 1})


# -- loaders ---------------------------------------------------------------------------------


def write(path, text):
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")


def test_plain_format(tmp_path):
    write(tmp_path / "triples.tsv", "head_qid\trelation_pid\ttail_qid\textra\nQ1\tR1\tQ2\tx\nQ2\tR2\tQ3\n\n")
    write(tmp_path / "relations.tsv", "pid\tname\nR1\tborn_in\nR9\tunused\n")
    write(
        tmp_path / "entities.jsonl",
        "\n".join(
            json.dumps(record)
            for record in [
                {"qid": "Q1", "label": "Ada", "surface_forms": ["Ada", "A. L."], "type": "person"},
                {"qid": "Q2", "label": None, "type": "city"},
            ]
        )
        + "\n",
    )
    kg = KnowledgeGraph.load(tmp_path)
    assert kg.triples == [("Q1", "R1", "Q2"), ("Q2", "R2", "Q3")]
    assert kg.relations == {"R1": "born_in", "R2": "R2"}
    assert kg.entities["Q1"] == Entity("Q1", "Ada", ["Ada", "A. L."], "person")
    assert kg.entities["Q3"] == Entity("Q3")  # met in a triple only
    assert kg.entities_of_type("city") == ["Q2"]


def test_wikidata_layout_gzipped_with_instance_of_types(tmp_path):
    write(
        tmp_path / "triples.tsv.gz",
        "head_qid\trelation_pid\ttail_qid\tsources\n"
        "Q1\tP31\tQ5\tlama\nQ2\tP31\tQ5\tlama\nQ2\tP31\tQ6\tlama\nQ3\tP31\tQ6\tlama\nQ1\tP19\tQ3\tfewrel\n",
    )
    write(tmp_path / "entities.jsonl.gz", json.dumps({"qid": "Q1", "label": "Ada", "surface_forms": ["Ada"]}) + "\n")
    write(
        tmp_path / "properties_P_info.json.gz",
        json.dumps(
            [
                {"id": "P31", "name": "instance of", "alias": [], "desc": "", "type": "Item"},
                {"id": "P19", "name": "place of birth"},
            ]
        ),
    )
    kg = KnowledgeGraph.load(tmp_path)
    assert kg.relations == {"P31": "instance of", "P19": "place of birth"}
    assert [kg.entities[qid].type for qid in ("Q1", "Q2", "Q3", "Q5")] == ["Q5", "Q5", "Q6", None]
    assert kg.entities["Q3"].label is None and kg.entities["Q1"].label == "Ada"


def test_generated_kg_round_trip(tmp_path):
    from knowledge_lm.data.generated import build_knowledge_graph

    generated = build_knowledge_graph(200, random.Random(0))
    kg = KnowledgeGraph.load(generated.write_kg(tmp_path))
    assert len(kg) == len(generated.entities) and len(kg.triples) == len(generated.triples)
    assert {kg.entities[qid].type for qid in kg.qids} == {entity.type for entity in generated.entities.values()}


@pytest.mark.parametrize(
    "line, problem", [("Q1\tP1", "got 2 columns"), ("Q1\t\tQ2", "empty id"), ("Q1 P1 Q2", "got 1 column")]
)
def test_malformed_triple_lines_name_file_and_line(tmp_path, line, problem):
    write(tmp_path / "triples.tsv.gz", f"head_qid\trelation_pid\ttail_qid\nQ1\tP1\tQ2\n{line}\n")
    with pytest.raises(KlmError, match=rf"triples\.tsv\.gz:3: .*{problem}"):
        KnowledgeGraph.load(tmp_path)


def test_missing_files_are_named(tmp_path):
    with pytest.raises(KlmError, match="does not exist"):
        KnowledgeGraph.load(tmp_path / "nowhere")
    write(tmp_path / "entities.jsonl", "{}\n")
    with pytest.raises(KlmError, match=r"no triples\.tsv or triples\.tsv\.gz"):
        KnowledgeGraph.load(tmp_path)
    write(tmp_path / "triples.tsv", "Q1\tP1\tQ2\n")
    with pytest.raises(KlmError, match=r"entities\.jsonl:1: .*qid"):
        KnowledgeGraph.load(tmp_path)


# -- TransE ----------------------------------------------------------------------------------


def tiny_world_triples():
    rng = random.Random(1)
    cities = [f"city{number}" for number in range(6)]
    triples = [(city, "located_in", f"country{number % 2}") for number, city in enumerate(cities)]
    triples += [(f"person{number}", "born_in", rng.choice(cities)) for number in range(40)]
    return triples


def test_transe_learns_the_tiny_graph():
    kg = KnowledgeGraph(tiny_world_triples())
    embeddings = train_transe(kg, dim=16, epochs=60, batch_size=16, lr=0.02, progress=False)
    assert embeddings.losses[-1] < 0.5 * embeddings.losses[0]
    assert embeddings.matrix.shape == (len(kg), 16)
    assert torch.allclose(embeddings.matrix.norm(dim=1), torch.ones(len(kg)), atol=1e-5)
    true = set(kg.triples)
    rng = random.Random(0)
    better = 0
    for head, pid, tail in kg.triples:
        wrong_tail = rng.choice([qid for qid in kg.qids if (head, pid, qid) not in true])
        better += embeddings.score(head, pid, tail) > embeddings.score(head, pid, wrong_tail)
    assert better / len(kg.triples) > 0.9


def test_rotate_tells_apart_two_relations_of_one_type_pair_and_is_cached_as_its_kind(tmp_path, monkeypatch):
    """born_in and lives_in join the same persons and cities: RotatE, trained with relation-corrupting negatives,
    scores each person's true relation to a city above the other one; cached and loaded back as "rotate"."""
    rng = random.Random(2)
    cities = [f"city{number}" for number in range(8)]
    triples = []
    for number in range(40):
        born, lives = rng.sample(cities, 2)
        triples += [(f"person{number}", "born_in", born), (f"person{number}", "lives_in", lives)]
    kg = KnowledgeGraph(triples)
    embeddings = kg_embeddings.cached_embeddings("rotate", kg, tmp_path, dim=8, epochs=60, batch_size=32)
    assert embeddings.kind == "rotate" and embeddings.dim == 16  # real and imaginary parts
    swapped = {"born_in": "lives_in", "lives_in": "born_in"}
    right = sum(embeddings.score(h, pid, t) > embeddings.score(h, swapped[pid], t) for h, pid, t in triples)
    assert right / len(triples) > 0.9
    monkeypatch.setattr(kg_embeddings, "train_rotate", lambda *args, **kwargs: pytest.fail("trained twice"))
    again = kg_embeddings.cached_embeddings("rotate", kg, tmp_path, dim=8, epochs=60, batch_size=32)
    assert again.kind == "rotate" and torch.equal(again.matrix, embeddings.matrix)
    assert len(list(tmp_path.glob("rotate-*.pt"))) == 1 and not list(tmp_path.glob("transe-*.pt"))
    with pytest.raises(KlmError, match="unknown KG embedding 'complex'"):
        kg_embeddings.cached_embeddings("complex", kg, tmp_path)


def test_transe_cache_trains_once(tmp_path, monkeypatch):
    kg = KnowledgeGraph(tiny_world_triples())
    first = cached_transe(kg, tmp_path, dim=8, epochs=2, progress=False)
    monkeypatch.setattr(kg_embeddings, "train_transe", lambda *args, **kwargs: pytest.fail("trained twice"))
    again = cached_transe(kg, tmp_path, dim=8, epochs=2, progress=False)
    assert torch.equal(first.matrix, again.matrix) and again.qids == first.qids and again.index == first.index
    assert len(list(tmp_path.glob("transe-*.pt"))) == 1
    with pytest.raises(KlmError, match="unknown TransE hyper-parameter"):
        cached_transe(kg, tmp_path, dimension=8)
    (tmp_path / "bad.pt").write_bytes(b"not torch")
    with pytest.raises(KlmError, match="bad.pt"):
        EntityEmbeddings.load(tmp_path / "bad.pt")


def test_fallback_embedding_is_deterministic_and_not_zero():
    kg = KnowledgeGraph(tiny_world_triples())
    embeddings = train_transe(kg, dim=12, epochs=1, progress=False)
    assert torch.equal(embeddings.lookup("person1", label="ignored"), embeddings.matrix[embeddings.index["person1"]])
    vector = embeddings.lookup("Q_unseen", label="Marie Curie")
    assert vector.shape == (12,) and vector.norm() == pytest.approx(1.0, abs=1e-4)
    assert torch.equal(vector, embeddings.lookup("Q_other", label="marie  curie"))  # case and spacing ignored
    assert not torch.allclose(vector, embeddings.lookup("Q_unseen", label="Pierre Curie"))
    assert torch.equal(label_embedding("Paris", 12), label_embedding("Paris", 12))
    for label in (None, "", "  "):
        with pytest.raises(KlmError, match="Q_unseen"):
            embeddings.lookup("Q_unseen", label=label)


# -- link noise ------------------------------------------------------------------------------


def typed_kg(untyped=3) -> KnowledgeGraph:
    types = ["person"] * 10 + ["city"] * 5 + ["river"] * 3 + [None] * untyped
    entities = [Entity(f"Q{number}", type=entity_type) for number, entity_type in enumerate(types)]
    return KnowledgeGraph([("Q0", "P1", "Q1")], entities)


def test_link_noise_ratio_and_types():
    kg = typed_kg()
    rng = random.Random(5)
    linked = [rng.choices(kg.qids, k=rng.randint(0, 6)) for _ in range(30)]
    total = sum(map(len, linked))
    for ratio in (0.0, 0.1, 0.37, 1.0):
        noisy, replaced = inject_link_noise(linked, kg, ratio, seed=1)
        assert sum(map(sum, replaced)) == round(ratio * total)
        assert [len(qids) for qids in noisy] == [len(qids) for qids in linked]
        for gold_qids, noisy_qids, mask in zip(linked, noisy, replaced):
            for gold, noise, was_replaced in zip(gold_qids, noisy_qids, mask):
                if was_replaced:
                    assert kg.entities[noise].type not in (None, kg.entities[gold].type)
                else:
                    assert noise == gold
    assert inject_link_noise(linked, kg, 0.3, seed=2) == inject_link_noise(linked, kg, 0.3, seed=2)
    assert inject_link_noise(linked, kg, 0.3, seed=2) != inject_link_noise(linked, kg, 0.3, seed=3)
    with pytest.raises(KlmError, match="ratio"):
        inject_link_noise(linked, kg, 1.5, seed=0)


def test_link_noise_without_types_replaces_by_another_entity():
    kg = KnowledgeGraph([("Q1", "P1", "Q2"), ("Q2", "P1", "Q3")])
    noisy, replaced = inject_link_noise([["Q1", "Q2"], ["Q3"]], kg, 1.0, seed=0)
    assert replaced == [[True, True], [True]]
    assert all(noise != gold for noise, gold in zip(sum(noisy, []), ["Q1", "Q2", "Q3"]))


# -- the shared Wikidata KG ------------------------------------------------------------------


def test_shared_wikidata_kg_loads(shared_data):
    folder = shared_data / "wikidata_kg"
    if not folder.is_dir():
        pytest.skip("no shared wikidata_kg")
    kg = KnowledgeGraph.load(folder)
    assert len(kg) == 37_989 and len(kg.triples) == 34_034
    assert len(kg.relations) == 41 and kg.relations["P19"] == "place of birth"
    assert kg.entities["Q2"].label == "Earth"
    linked = sorted(kg.k_hop("Q2", 2))[:15] + ["Q2"]
    assert kg.close_counts(linked)["Q2"] == len(linked) - 1
