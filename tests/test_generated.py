"""The generated default dataset: deterministic, balanced, knobs honoured, and answerable only from the KG."""

import json
import re
from collections import Counter

import pytest

from knowledge_lm.core import io
from knowledge_lm.core.errors import KlmError
from knowledge_lm.data.generated import GeneratedDataModule, export, generate
from knowledge_lm.knowledge.kg import KnowledgeGraph

SMALL = dict(train_size=600, dev_size=200, test_size=200, num_entities=400)

# Independent of the generator's own template table: what each template's claim follows in the KG.
TEMPLATE_PATHS = {
    "born_city": ("born_in",),
    "lives_city": ("lives_in",),
    "died_city": ("died_in",),
    "works_for": ("works_for",),
    "founded": ("founded",),
    "hq_city": ("headquartered_in",),
    "office_city": ("has_office_in",),
    "citizen": ("citizen_of",),
    "city_country": ("located_in",),
    "river_country": ("flows_through",),
    "born_country": ("born_in", "located_in"),
    "lives_country": ("lives_in", "located_in"),
    "died_country": ("died_in", "located_in"),
    "works_city": ("works_for", "headquartered_in"),
    "founded_city": ("founded", "headquartered_in"),
    "hq_country": ("headquartered_in", "located_in"),
    "office_country": ("has_office_in", "located_in"),
}


@pytest.fixture(scope="module")
def default():
    return generate()


@pytest.fixture(scope="module")
def redundant():
    return generate(redundancy=0.3, **SMALL)


@pytest.fixture(scope="module")
def noisy():
    return generate(link_noise=0.2, **SMALL)


def all_records(data):
    return [record for records in data.splits.values() for record in records]


def reached_from(graph, qid, path):
    """Entities reached along ``path`` (relation names) in a networkx MultiDiGraph."""
    frontier = {qid}
    for relation in path:
        frontier = {
            tail for head in frontier for _, tail, name in graph.out_edges(head, data="relation") if name == relation
        }
    return frontier


def kg_answer(record, graph, link_field="qid"):
    """The label read off the KG: a lookup model that gets the template and the entity links."""
    links = [link[link_field] for link in record["entities"]]
    subject = links[0]
    if record["kind"] == "text":  # "{s} ... {x}. {s} ... {y}."
        return int(links[1] == links[3])
    if record["kind"] == "type":
        claimed_type = re.search(r"is a (\w+)\.$", record["text_a"]).group(1)
        return int(graph.nodes[subject]["type"] == claimed_type)
    return int(links[-1] in reached_from(graph, subject, TEMPLATE_PATHS[record["template"]]))


def test_generation_is_deterministic(default):
    again = generate()  # no wall-time bound: on a loaded machine any bound fails at random
    assert again.splits == default.splits
    assert again.kg.triples == default.kg.triples and again.kg.entity_records() == default.kg.entity_records()
    other = generate(seed=1)
    assert other.splits != default.splits
    assert other.kg.triples != default.kg.triples


def test_records_share_keys_and_are_json(default):
    keys = {"id", "text_a", "text_b", "label", "kind", "template", "needs_knowledge", "redundant", "entities"}
    records = all_records(default)
    assert all(set(record) == keys for record in records)
    assert json.loads(json.dumps(records)) == records
    assert len({record["id"] for record in records}) == len(records)
    assert [len(default.splits[split]) for split in ("train", "dev", "test")] == [2000, 500, 500]


def test_labels_balanced(default):
    for records in default.splits.values():
        assert abs(sum(record["label"] for record in records) / len(records) - 0.5) <= 0.01


@pytest.mark.parametrize("share", [0.8, 0.5])
def test_knowledge_share(share):
    data = generate(knowledge_share=share, **SMALL) if share != 0.8 else generate()
    for records in data.splits.values():
        assert abs(sum(record["kind"] != "text" for record in records) / len(records) - share) <= 0.03
        knowledge = [record for record in records if record["kind"] != "text"]
        assert all(record["needs_knowledge"] for record in knowledge)  # redundancy 0


def test_redundancy(redundant):
    for records in redundant.splits.values():
        knowledge = [record for record in records if record["kind"] != "text"]
        assert abs(sum(record["redundant"] for record in knowledge) / len(knowledge) - 0.3) <= 0.03
        assert all(
            record["needs_knowledge"] == (record["kind"] != "text" and not record["redundant"]) for record in records
        )


def test_redundant_texts_state_the_needed_facts(redundant):
    kg = redundant.kg
    for record in redundant.splits["train"]:
        if not record["redundant"] or record["kind"] == "type":
            continue
        mentioned = {link["gold_qid"] for link in record["entities"]}
        subject, path = record["entities"][0]["gold_qid"], TEMPLATE_PATHS[record["template"]]
        hops = kg.follow(subject, path)
        assert all(set(hop) & mentioned for hop in hops), record["text_a"]


def test_link_noise(noisy, default):
    kg = noisy.kg
    for records in noisy.splits.values():
        links = [link for record in records for link in record["entities"]]
        wrong = [link for link in links if link["qid"] != link["gold_qid"]]
        assert abs(len(wrong) / len(links) - 0.2) <= 0.01
        assert all(kg.entities[link["qid"]].type != kg.entities[link["gold_qid"]].type for link in wrong)
    assert all(link["qid"] == link["gold_qid"] for record in all_records(default) for link in record["entities"])


def test_offsets_match_mentions(default, noisy):
    for data in (default, noisy):
        for record in all_records(data):
            for link in record["entities"]:
                assert record["text_a"][link["start"] : link["end"]] == link["mention"]
                assert link["mention"] in data.kg.entities[link["gold_qid"]].surface_forms


def test_surface_forms_name_one_entity_and_not_the_type(default):
    owner = {}
    for entity in default.kg.entities.values():
        for form in entity.surface_forms:
            for word in form.lower().split():
                assert owner.setdefault(word, entity.qid) == entity.qid
    type_words = {"person", "city", "country", "company", "river"}
    assert not type_words & set(owner)


def test_knowledge_texts_hide_the_deciding_facts(default, redundant):
    for data in (default, redundant):
        kg = data.kg
        for record in all_records(data):
            if not record["needs_knowledge"] or record["kind"] == "type":
                continue
            subject = record["entities"][0]["gold_qid"]
            hops = kg.follow(subject, TEMPLATE_PATHS[record["template"]])
            # Two hops hide the bridge; a false one-hop claim hides the true object.
            if len(hops) == 2:
                hidden = set(hops[0])
            else:
                hidden = set(hops[0]) if record["label"] == 0 else set()
            mentioned = {link["gold_qid"] for link in record["entities"]}
            assert not hidden & mentioned, record["text_a"]
            for qid in hidden:
                for form in kg.entities[qid].surface_forms:
                    assert not re.search(rf"\b{re.escape(form)}\b", record["text_a"]), record["text_a"]


def test_labels_follow_the_kg(default, redundant):
    for data in (default, redundant):
        graph = data.kg.graph
        for record in all_records(data):
            assert kg_answer(record, graph, "gold_qid") == record["label"], record


def test_dev_and_test_subjects_never_appear_in_train(default):
    in_train = {link["gold_qid"] for record in default.splits["train"] for link in record["entities"]}
    for split in ("dev", "test"):
        subjects = {record["entities"][0]["gold_qid"] for record in default.splits[split]}
        assert subjects and not subjects & in_train
    dev_subjects = {record["entities"][0]["gold_qid"] for record in default.splits["dev"]}
    test_subjects = {record["entities"][0]["gold_qid"] for record in default.splits["test"]}
    assert not dev_subjects & test_subjects


def test_text_alone_is_insufficient_but_the_kg_suffices(default):
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    train = default.splits["train"]
    test = [record for record in default.splits["test"] if record["needs_knowledge"]]
    vectorizer = CountVectorizer(ngram_range=(1, 2), lowercase=True)
    model = LogisticRegression(max_iter=2000).fit(
        vectorizer.fit_transform([record["text_a"] for record in train]), [record["label"] for record in train]
    )
    predictions = model.predict(vectorizer.transform([record["text_a"] for record in test]))
    bag_of_words_accuracy = sum(int(p == record["label"]) for p, record in zip(predictions, test)) / len(test)
    assert bag_of_words_accuracy < 0.65

    graph = default.kg.graph
    assert all(kg_answer(record, graph) == record["label"] for record in test)


def test_export_round_trip(tmp_path):
    knobs = dict(seed=3, redundancy=0.2, link_noise=0.1, **SMALL)
    folder = export(tmp_path, **knobs)
    assert sorted(path.name for path in folder.iterdir()) == [
        "dev.jsonl",
        "entities.jsonl",
        "knobs.json",
        "relations.tsv",
        "test.jsonl",
        "train.jsonl",
        "triples.tsv",
    ]
    assert (folder / "triples.tsv").read_text().splitlines()[0] == "head_qid\trelation_pid\ttail_qid"
    expected = generate(**knobs)
    module = GeneratedDataModule(data_dir=tmp_path)
    assert module.read_splits() == expected.splits
    assert module.knobs == expected.knobs
    kg = module.knowledge_graph
    assert kg.triples == expected.kg.triples and kg.entity_records() == expected.kg.entity_records()
    assert kg.relations == expected.kg.relations
    assert GeneratedDataModule(data_dir=tmp_path, seed=3).read_splits() == expected.splits
    with pytest.raises(KlmError, match="seed=3"):
        GeneratedDataModule(data_dir=tmp_path, seed=4).read_splits()


def test_module_generates_without_any_data_dir(monkeypatch, tmp_path, default):
    monkeypatch.delenv("DATA_DIR", raising=False)
    monkeypatch.setattr(io, "DEFAULT_SHARED_DATA", tmp_path / "absent")
    module = GeneratedDataModule()
    assert module.data_dir is None
    assert module.read_splits() == default.splits
    assert module.spec("facts").labels == ("false", "true") and module.task_spec.main_metric == "accuracy"
    # A data dir without a frozen version also generates, here with knobs passed through.
    assert GeneratedDataModule(data_dir=tmp_path, **SMALL).read_splits() == generate(**SMALL).splits


def test_bad_knobs_are_one_line_errors():
    with pytest.raises(KlmError, match="knowledge_share"):
        GeneratedDataModule(knowledge_share=1.5)
    with pytest.raises(KlmError, match="num_entities"):
        generate(num_entities=10)


def test_kg_reads_back_from_gzip(tmp_path, default):
    import gzip

    default.kg.write_kg(tmp_path)
    for name in ("triples.tsv", "entities.jsonl"):
        (tmp_path / f"{name}.gz").write_bytes(gzip.compress((tmp_path / name).read_bytes()))
        (tmp_path / name).unlink()
    assert KnowledgeGraph.load(tmp_path).triples == default.kg.triples


# -- version 2: a relational schema and hard negatives ------------------------------------------


def undirected(kg):
    import networkx as nx

    return nx.MultiGraph(kg.graph)


def claimed_object(record):
    return record["entities"][-1]["gold_qid"]


def test_several_relations_per_type_pair_and_one_edge_per_pair(default):
    from knowledge_lm.data.generated import FACT_TEMPLATES, RELATIONS

    assert [relation.pid for relation in RELATIONS] == [f"R{number}" for number in range(1, 11)]
    names = {(relation.head_type, relation.tail_type): [] for relation in RELATIONS}
    for relation in RELATIONS:
        names[relation.head_type, relation.tail_type].append(relation.name)
    assert names["person", "city"] == ["born_in", "lives_in", "died_in"]
    assert names["person", "company"] == ["works_for", "founded"]
    assert names["company", "city"] == ["headquartered_in", "has_office_in"]
    used = {default.kg.relations[pid] for _, pid, _ in default.kg.triples}
    assert used == {relation.name for relation in RELATIONS}
    graph = undirected(default.kg)
    assert all(graph.number_of_edges(head, tail) == 1 for head, _, tail in default.kg.triples)
    claims = [template.claim for template in FACT_TEMPLATES]
    assert len(set(claims)) == len(claims) and set(TEMPLATE_PATHS) == {template.name for template in FACT_TEMPLATES}


def test_objects_and_templates_as_frequent_in_true_as_in_false(default):
    for records in default.splits.values():
        counts = {0: Counter(), 1: Counter()}
        for record in records:
            if record["kind"] in ("one_hop", "two_hop"):
                counts[record["label"]][record["template"], claimed_object(record)] += 1
            elif record["kind"] == "type":
                counts[record["label"]][record["template"], record["text_a"].split()[-1]] += 1
        assert counts[0] == counts[1]


def test_hard_negatives_share_the_relation_blind_signature(default):
    kg, graph = default.kg, undirected(default.kg)
    single = {"citizen", "city_country", "river_country"}
    for split, records in default.splits.items():
        facts = [record for record in records if record["kind"] in ("one_hop", "two_hop")]
        assert facts and not {record["template"] for record in facts} & single, split
        for record in facts:
            subject, claimed = record["entities"][0]["gold_qid"], claimed_object(record)
            edges = graph.number_of_edges(subject, claimed)
            paths = len(list(nx_common_neighbors(graph, subject, claimed)))
            assert (edges, paths) == ((1, 0) if record["kind"] == "one_hop" else (0, 1)), record
            if record["label"] == 0:  # adjacent or two hops away through another relation (path)
                path = TEMPLATE_PATHS[record["template"]]
                reached = {qid for other in relation_paths(len(path)) for qid in kg.follow(subject, other)[-1]}
                assert claimed in reached and claimed not in kg.follow(subject, path)[-1], record


def relation_paths(length):
    """Every path of ``length`` relations (names) whose types chain."""
    from knowledge_lm.data.generated import RELATIONS

    if length == 1:
        return [(relation.name,) for relation in RELATIONS]
    return [(a.name, b.name) for a in RELATIONS for b in RELATIONS if a.tail_type == b.head_type]


def nx_common_neighbors(graph, first, second):
    import networkx as nx

    return nx.common_neighbors(graph, first, second)


def test_easy_negatives_keep_the_first_generator(default):
    easy = generate(negatives="easy", **SMALL)
    graph = undirected(easy.kg)
    templates = {record["template"] for record in all_records(easy)}
    assert {"citizen", "city_country", "river_country"} <= templates
    one_hop_false = [r for r in all_records(easy) if r["kind"] == "one_hop" and r["label"] == 0]
    adjacent = sum(graph.has_edge(r["entities"][0]["gold_qid"], claimed_object(r)) for r in one_hop_false)
    assert adjacent / len(one_hop_false) < 0.1  # any subject for which the claim is false: rarely a neighbour
    graph_default = undirected(default.kg)
    assert all(
        graph_default.has_edge(r["entities"][0]["gold_qid"], claimed_object(r))
        for r in all_records(default)
        if r["kind"] == "one_hop"
    )
    mixed = generate(negatives="mixed", **SMALL)
    assert mixed.splits != easy.splits and mixed.knobs.negatives == "mixed"
    assert {"citizen", "city_country", "river_country"} & {record["template"] for record in all_records(mixed)}


def test_negatives_knob_is_checked_and_a_frozen_first_version_reads_as_easy(tmp_path):
    with pytest.raises(KlmError, match="negatives must be one of hard, easy, mixed"):
        generate(negatives="medium")
    with pytest.raises(KlmError, match="negatives"):
        GeneratedDataModule(negatives="medium")
    assert GeneratedDataModule(**SMALL).split_version == "2"
    folder = export(tmp_path, negatives="mixed", **SMALL)
    assert json.loads((folder / "knobs.json").read_text())["negatives"] == "mixed"
    assert GeneratedDataModule(data_dir=tmp_path, negatives="mixed").knobs.negatives == "mixed"
    with pytest.raises(KlmError, match="negatives=mixed, not hard"):
        GeneratedDataModule(data_dir=tmp_path, negatives="hard").read_splits()
    knobs = json.loads((folder / "knobs.json").read_text())
    del knobs["negatives"]
    (folder / "knobs.json").write_text(json.dumps(knobs))
    module = GeneratedDataModule(data_dir=tmp_path)
    assert module.knobs.negatives == "easy" and module.split_version == "1"
