"""The controls that isolate relational use, on the tiny generated task: relations permuted in the KG every
method reads, links shuffled in the test split only, and KAM's entity map moved by the shuffled control."""

from collections import Counter

import pytest
import torch

from knowledge_lm.data.generated import GeneratedDataModule
from knowledge_lm.knowledge.kg import KnowledgeGraph
from knowledge_lm.knowledge.prepare import KnowledgeConfig, load_prepared, prepare
from knowledge_lm.methods.knowbert import prepared_kg_dir

SIZES = {"train_size": 40, "dev_size": 12, "test_size": 12}
MAX_LENGTH = 32


def data_module(tokenizer, cache, knowledge: dict | None = None) -> GeneratedDataModule:
    return GeneratedDataModule(
        tokenizer=tokenizer, cache_dir=cache, max_length=MAX_LENGTH, knowledge=knowledge or {}, **SIZES
    )


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("controls-cache")


def features(tokenizer, cache, knowledge: dict) -> dict[str, list[dict]]:
    data = data_module(tokenizer, cache, knowledge)
    config = KnowledgeConfig.from_dict(knowledge)
    prepare(data, tokenizer, config, cache, progress=False)
    return load_prepared(data, tokenizer, config, cache)


# -- relations permuted -----------------------------------------------------------------------


def test_the_permuted_kg_has_the_same_edges_entities_and_relation_frequencies(tokenizer, cache):
    clean_dir = prepared_kg_dir(data_module(tokenizer, cache))
    permuted_dir = prepared_kg_dir(data_module(tokenizer, cache, {"permute_relations": True}))
    assert permuted_dir != clean_dir and permuted_dir.parent == clean_dir.parent
    assert prepared_kg_dir(data_module(tokenizer, cache, {"permute_relations": True})) == permuted_dir  # cached
    other_seed = prepared_kg_dir(data_module(tokenizer, cache, {"permute_relations": True, "noise_seed": 1}))
    assert other_seed not in (clean_dir, permuted_dir)
    clean, permuted = KnowledgeGraph.load(clean_dir), KnowledgeGraph.load(permuted_dir)
    assert [(head, tail) for head, _, tail in permuted.triples] == [(head, tail) for head, _, tail in clean.triples]
    assert Counter(pid for _, pid, _ in permuted.triples) == Counter(pid for _, pid, _ in clean.triples)
    changed = sum(a[1] != b[1] for a, b in zip(clean.triples, permuted.triples))
    assert changed > len(clean.triples) / 2
    assert permuted.relations == clean.relations
    assert {qid: (e.label, e.type) for qid, e in permuted.entities.items()} == {
        qid: (e.label, e.type) for qid, e in clean.entities.items()
    }
    for name in ("entities.jsonl", "relations.tsv"):
        assert (permuted_dir / name).read_bytes() == (clean_dir / name).read_bytes()
    # kam+kg's map is relation-blind: the same adjacency.
    assert all(permuted.neighbours(qid) == clean.neighbours(qid) for qid in clean.qids)


def test_the_instance_of_edges_keep_their_relation(tmp_path):
    from knowledge_lm.knowledge.prepare import relations_permuted_kg

    kg_dir = tmp_path / "kg"
    kg_dir.mkdir()
    triples = [(f"Q{n}", "P31" if n % 3 == 0 else f"P{n % 5}", f"Q{n + 1}") for n in range(30)]
    (kg_dir / "triples.tsv").write_text("".join(f"{h}\t{p}\t{t}\n" for h, p, t in triples))
    permuted = KnowledgeGraph.load(relations_permuted_kg(kg_dir, 0, tmp_path / "cache"))
    assert [t for t in permuted.triples if t[1] == "P31"] == [t for t in triples if t[1] == "P31"]
    assert any(a != b for a, b in zip(permuted.triples, triples))


@pytest.mark.parametrize("kind", ["transe", "rotate"])
def test_knowbert_trains_its_embedding_on_the_permuted_kg(tokenizer, cache, monkeypatch, kind):
    """The relations-permuted control retrains the cell's own KG embedding kind on the permuted graph."""
    from knowledge_lm.knowledge.kg_embeddings import embeddings_cache_path
    from knowledge_lm.methods import knowbert

    trained = []
    monkeypatch.setattr(knowbert, "cached_embeddings", lambda k, kg, *a, **kw: trained.append((k, kg)) or "embeddings")
    for knowledge in ({"kg_embedding": kind}, {"kg_embedding": kind, "permute_relations": True}):
        data = data_module(tokenizer, cache, knowledge)
        assert knowbert.load_entity_table(prepared_kg_dir(data), cache, kind=kind)[0] == "embeddings"
    (clean_kind, clean), (permuted_kind, permuted) = trained
    assert clean_kind == permuted_kind == kind
    assert clean.triples != permuted.triples
    assert permuted.triples == KnowledgeGraph.load(prepared_kg_dir(data)).triples
    assert embeddings_cache_path(kind, clean, cache) != embeddings_cache_path(kind, permuted, cache)


def test_kg_text_says_the_permuted_relations(tokenizer, cache):
    from knowledge_lm.methods.kg_text import KgFacts, KgText, verbalise

    knowledge = {"permute_relations": True}
    manifest = prepare(
        data_module(tokenizer, cache, knowledge), tokenizer, KnowledgeConfig(**knowledge), cache, progress=False
    )
    data = data_module(tokenizer, cache, knowledge)
    data.setup()
    kg = KgText.load_kg(data)
    assert str(prepared_kg_dir(data)) == manifest["kg_dir"]
    clean = KnowledgeGraph.load(prepared_kg_dir(data_module(tokenizer, cache)))
    facts = KgFacts(kg)
    checked = 0
    for (head, pid, tail), (_, original, _) in zip(kg.triples, clean.triples):
        if pid == original:
            continue
        said = set(verbalise([head], {}, facts))
        name = lambda relation: f"{kg.entities[head].label} {kg.relations[relation].replace('_', ' ')}"  # noqa: E731
        assert f"{name(pid)} {kg.entities[tail].label}." in said
        assert f"{name(original)} {kg.entities[tail].label}." not in said
        checked += 1
        if checked == 20:
            break
    assert checked


# -- links shuffled in the test split ----------------------------------------------------------


def test_test_shuffled_keeps_train_and_dev_and_shuffles_test_as_the_shuffled_control(tokenizer, cache):
    clean = features(tokenizer, cache, {})
    shuffled = features(tokenizer, cache, {"shuffle_links": 1.0})
    test_shuffled = features(tokenizer, cache, {"shuffle_links": 1.0, "shuffle_splits": ["test"]})
    for split in ("train", "dev"):
        assert test_shuffled[split] == clean[split]
        assert shuffled[split] != clean[split]
    top = lambda rows: [link["candidates"][0][0] for row in rows for link in row["links"]]  # noqa: E731
    ner = lambda rows: [row.get("ner") for row in rows]  # noqa: E731
    # The same test links and NER spans as the shuffled control's; features read off train (an entity's document
    # frequency) differ, since the shuffled control's train links are shuffled too.
    assert top(test_shuffled["test"]) == top(shuffled["test"]) != top(clean["test"])
    assert ner(test_shuffled["test"]) == ner(shuffled["test"])
    assert sum(a != b for a, b in zip(top(test_shuffled["test"]), top(clean["test"]))) > len(top(clean["test"])) / 2


def test_shuffle_splits_names_splits_the_dataset_has(tokenizer, tmp_path):
    from knowledge_lm.core.errors import KlmError

    knowledge = {"shuffle_links": 1.0, "shuffle_splits": ["test"]}
    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=tmp_path, max_length=MAX_LENGTH, **SIZES)
    data.labelled_splits = lambda: {
        split: records for split, records in GeneratedDataModule.labelled_splits(data).items() if split != "test"
    }
    with pytest.raises(KlmError, match="has no test split"):
        prepare(data, tokenizer, KnowledgeConfig.from_dict(knowledge), tmp_path, progress=False)


# -- KAM's entity map under the shuffled control -------------------------------------------------


def test_the_shuffled_control_moves_kams_entity_map_off_the_mentions(tokenizer, cache):
    from knowledge_lm.methods.kam import knowledge_maps

    clean = features(tokenizer, cache, {})["test"]
    shuffled = features(tokenizer, cache, {"shuffle_links": 1.0})["test"]
    spans = lambda rows: [[tuple(span["tokens"]) for span in row["ner"]] for row in rows]  # noqa: E731
    assert sum(map(len, spans(clean))) > len(clean) / 2  # the tiny task's texts have named entities
    assert [len(row) for row in spans(shuffled)] == [len(row) for row in spans(clean)]
    assert [[s["label"] for s in row["ner"]] for row in shuffled] == [[s["label"] for s in row["ner"]] for row in clean]
    pairs = [(a, b) for row_a, row_b in zip(spans(clean), spans(shuffled)) for a, b in zip(row_a, row_b)]
    assert sum(a != b for a, b in pairs) > 0.8 * len(pairs)
    # The phrases and words stay: only the entity map changes.
    assert [row["phrases"] for row in shuffled] == [row["phrases"] for row in clean]
    maps = [knowledge_maps(rows, MAX_LENGTH, maps=("entity", "phrase"))[:, 0] for rows in (clean, shuffled)]
    changed = [not torch.equal(a, b) for a, b in zip(*maps)]
    assert sum(changed) > 0.8 * sum(bool(row) for row in spans(clean))
    mentions = lambda rows: [{t for link in row["links"] for t in link["tokens"]} for row in rows]  # noqa: E731
    on_mentions = lambda rows: sum(  # noqa: E731
        bool(set(span) & tokens) for row, tokens in zip(spans(rows), mentions(rows)) for span in row
    )
    assert on_mentions(shuffled) < 0.2 * on_mentions(clean)
