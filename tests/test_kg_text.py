"""kg-text: the verbalised facts (order, naming, budget, the position oracle), the merged input layout, the
zeroed control, a cell."""

import random

import pytest
import torch

from knowledge_lm.data.generated import GeneratedDataModule, generate
from knowledge_lm.knowledge.kg import Entity, KnowledgeGraph
from knowledge_lm.knowledge.prepare import KnowledgeConfig, prepare
from knowledge_lm.methods.kg_text import (
    FACT_IDS,
    KgFacts,
    KgText,
    Segment,
    append_facts,
    fact_positions,
    fact_tensors,
    input_order_oracle,
    linked_entities,
    position_views,
    segments,
    stump,
    surface_forms,
    verbalise,
    verbalised_facts,
    within_budget,
)

SIZES = {"train_size": 40, "dev_size": 10, "test_size": 10}


def small_kg() -> KgFacts:
    entities = [
        Entity("Q1", "Zorba Alto", ["Zorba Alto", "Zorba"], "person"),
        Entity("Q2", "Kelmar", [], "city"),
        Entity("Q3", "Tranu", [], "country"),
        Entity("Q4", "Acme", [], "company"),
        Entity("Q5", "Bo", [], "person"),
        Entity("Q6", "Mira", [], "city"),
        Entity("Q7", "Ada"),
        Entity("Q8", "human"),
    ]
    triples = [
        ("Q1", "R1", "Q2"),
        ("Q2", "R2", "Q3"),
        ("Q1", "R3", "Q4"),
        ("Q4", "R4", "Q2"),
        ("Q5", "R1", "Q2"),
        ("Q6", "R2", "Q3"),
        ("Q7", "P31", "Q8"),
        ("Q7", "R1", "Q2"),
    ]
    relations = {"R1": "born_in", "R2": "located_in", "R3": "works_for", "R4": "headquartered_in", "P31": "instance of"}
    return KgFacts(KnowledgeGraph(triples, entities, relations))


def link(qid: str, start: int, end: int, segment: int = 0) -> dict:
    return {"segment": segment, "start": start, "end": end, "candidates": [[qid, 1.0], ["Q5", 0.0]], "tokens": [1]}


def test_linked_facts_come_first_then_types_1_hop_2_hop_incoming():
    record = {"id": "a", "text_a": "Zorba was born in Tranu.", "text_b": None}
    row = {"id": "a", "links": [link("Q3", 18, 23), link("Q1", 0, 5)]}  # out of text order on purpose
    linked = linked_entities(row)
    assert linked == ["Q1", "Q3"]
    assert list(verbalise(linked, surface_forms(row, record), small_kg())) == [
        "Zorba born in Kelmar.",
        "Kelmar located in Tranu.",  # the path joining the two linked entities
        "Zorba is a person.",
        "Tranu is a country.",  # types, entities by id
        "Zorba works for Acme.",  # outgoing (born in Kelmar: said already)
        "Acme headquartered in Kelmar.",  # 2-hop from Zorba (Kelmar located in Tranu: said already)
        "Mira located in Tranu.",  # incoming; Bo born in Kelmar is an edge of no linked entity
    ]


def test_the_order_does_not_depend_on_the_order_of_the_linked_entities():
    kg = small_kg()
    linked = ["Q1", "Q2", "Q3", "Q4", "Q7"]
    surfaces = {qid: qid.lower() for qid in linked}
    between, rest = verbalised_facts(linked, surfaces, kg)
    # Q1→Q2, Q1→Q4, the path Q1→Q4→Q2, Q2→Q3, paths to Q3; an entity's edges by the other end's id.
    assert [key for key, _ in between] == [
        ("Q1", "R1", "Q2"),
        ("Q2", "R2", "Q3"),
        ("Q1", "R3", "Q4"),
        ("Q4", "R4", "Q2"),
        ("Q7", "R1", "Q2"),
    ]
    expected = list(verbalise(linked, surfaces, kg))
    for seed in range(5):
        shuffled = random.Random(seed).sample(linked, len(linked))
        assert [key for key, _ in verbalised_facts(shuffled, surfaces, kg)[0]] == [key for key, _ in between]
        assert list(verbalise(shuffled, surfaces, kg)) == expected


def test_a_linked_entity_is_named_as_in_the_text_and_others_by_label():
    record = {"id": "b", "text_a": "Does Acme employ him?", "text_b": "Zorba Alto works for Acme."}
    row = {"id": "b", "links": [link("Q4", 5, 9), link("Q1", 0, 10, segment=1)]}
    surfaces = surface_forms(row, record)
    assert surfaces == {"Q4": "Acme", "Q1": "Zorba Alto"}
    facts = list(verbalise(linked_entities(row), {"Q4": "ACME corp", "Q1": "Zo"}, small_kg()))
    assert facts[:3] == ["Zo works for ACME corp.", "Zo is a person.", "ACME corp is a company."]
    assert "Zo born in Kelmar." in facts and "ACME corp headquartered in Kelmar." in facts


def test_an_instance_of_class_is_the_type_and_is_not_said_twice():
    facts = list(verbalise(["Q7"], {"Q7": "Ada"}, small_kg()))
    assert facts == ["Ada is a human.", "Ada born in Kelmar.", "Kelmar located in Tranu."]


def test_budget_keeps_the_linked_facts_and_stops_at_the_first_other_fact_that_does_not_fit():
    facts = [[1, 2, 3], [4, 5, 6, 7], [8]]
    assert within_budget([], facts, 8) == ([1, 2, 3, 4, 5, 6, 7, 8], 3)
    assert within_budget([], facts, 7) == ([1, 2, 3, 4, 5, 6, 7], 2)
    assert within_budget([], facts, 6) == ([1, 2, 3], 1)  # the short third fact would fit, but comes after
    assert within_budget([], facts, 2) == ([], 0)
    assert within_budget([[9, 9]], facts, 6) == ([9, 9, 1, 2, 3], 2)
    assert within_budget([[9, 9], [9, 9, 9]], facts, 2) == ([9, 9, 9, 9, 9], 2)  # linked facts over budget


def test_a_tiny_budget_never_cuts_a_linked_fact(tokenizer):
    kg = small_kg()
    examples = [(["Q1", "Q3"], {}), (["Q7"], {}), ([], {})]
    kept = segments(examples, kg, tokenizer, fact_tokens=1)
    between = [key for key, _ in verbalised_facts(["Q1", "Q3"], {}, kg)[0]]
    assert kept[0].keys == between == [("Q1", "R1", "Q2"), ("Q2", "R2", "Q3")] and kept[0].linked == 2
    sentences = ["Zorba Alto born in Kelmar.", "Kelmar located in Tranu."]
    assert kept[0].ids == [
        token for ids in tokenizer(sentences, add_special_tokens=False)["input_ids"] for token in ids
    ]
    assert kept[0].offered > 2 and kept[1].keys == [] and kept[1].offered > 0  # cut: the rest
    assert kept[2] == Segment([], [], 0, 0)


def test_linked_facts_beyond_the_backbones_positions_are_refused(tokenizer):
    from types import SimpleNamespace

    from knowledge_lm.core.errors import KlmError

    record = {"id": "a", "text_a": "Zorba was born in Tranu.", "text_b": None}
    row = {"id": "a", "links": [link("Q1", 0, 5), link("Q3", 18, 23)]}
    data = SimpleNamespace(
        read_labelled=lambda: {"dev": [record]}, knowledge_spans={"dev": (0, 1)}, knowledge_features=[row], max_length=8
    )
    model = tiny_kg_text(fact_tokens=1)
    stats, fact_ids = model.verbalise_rows(data, small_kg(), tokenizer, positions=64)
    assert stats["examples_linked_facts_over_budget"] == 1 and stats["linked_facts_per_example"] == 2
    assert len(fact_ids[0]) > 2 and FACT_IDS not in row  # both linked facts and the [SEP]; the row as it was
    with pytest.raises(KlmError, match="facts between linked entities take"):
        model.verbalise_rows(data, small_kg(), tokenizer, positions=16)


def test_fact_positions_see_where_facts_are_not_what_they_say():
    segment = Segment([("Q1", "R1", "Q2"), ("Q2", "R2", "Q3"), ("Q1", "P31", "Q8")], [1, 2, 3, 4, 5, 6], 2, 9)
    assert fact_positions(segment, ["Q1", "Q3"]) == {
        "facts": 3,
        "linked_facts": 2,
        "edges_between_linked": 0,
        "first_edge_between_linked": -1,
    }
    assert fact_positions(segment, ["Q2", "Q3"])["first_edge_between_linked"] == 1
    renamed = Segment([("Q1", "R9", "Q2"), ("Q2", "R8", "Q3"), ("Q1", "P31", "Q8")], [1, 2, 3, 4, 5, 6], 2, 9)
    assert fact_positions(renamed, ["Q1", "Q3"]) == fact_positions(segment, ["Q1", "Q3"])


def test_the_stump_finds_the_best_single_feature_threshold():
    rows = [dict.fromkeys(("facts", "linked_facts", "first_edge_between_linked"), 0) for _ in range(6)]
    for row, edges in zip(rows, [0, 0, 1, 2, 2, 0]):
        row["edges_between_linked"] = edges
    assert stump(rows, [0, 0, 1, 1, 1, 1]) == ("edges_between_linked", 0.0, 1)  # 5 of 6
    assert stump(rows[:2], [1, 1]) == (None, 0.0, 1)


ORACLE_SIZES = {"train_size": 1500, "dev_size": 20, "test_size": 1000}


def test_the_input_order_oracle_finds_the_leak_of_easy_negatives(tokenizer):
    # Without hard negatives, a true claim's entities are joined by linked facts and a false one's are not.
    accuracies = input_order_oracle(generate(**ORACLE_SIZES, negatives="easy"), tokenizer)
    assert set(accuracies) == {"text", "type", "one_hop", "two_hop"}
    assert accuracies["one_hop"] >= 0.95 and accuracies["two_hop"] >= 0.95


def test_a_classifier_on_fact_positions_alone_is_at_chance(tokenizer):
    data = generate(**ORACLE_SIZES)
    accuracies = input_order_oracle(data, tokenizer)
    assert accuracies["one_hop"] <= 0.6 and accuracies["two_hop"] <= 0.6, accuracies
    tree = pytest.importorskip("sklearn.tree")
    views = position_views(data, tokenizer, ("train", "test"))
    for family in ("one_hop", "two_hop"):
        fit, score = (
            (
                [list(row.values()) for kind, row, _ in views[split] if kind == family],
                [label for kind, _, label in views[split] if kind == family],
            )
            for split in ("train", "test")
        )
        classifier = tree.DecisionTreeClassifier(max_depth=3, random_state=0).fit(*fit)
        assert classifier.score(*score) <= 0.6, family


def texts_and_facts(tokenizer):
    texts = ["alpha beta gamma delta epsilon zeta", "eta", "theta iota kappa"]
    facts = ["Zorba born in Kelmar. Kelmar located in Tranu.", "Acme is a company.", ""]
    ids = [tokenizer(fact, add_special_tokens=False)["input_ids"] for fact in facts]
    rows = [{FACT_IDS: fact_ids + [tokenizer.sep_token_id] if fact_ids else []} for fact_ids in ids]
    return texts, facts, rows


def test_facts_follow_each_rows_text_and_the_text_keeps_its_positions(tokenizer):
    texts, facts, rows = texts_and_facts(tokenizer)
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    merged = append_facts(dict(batch), fact_tensors(rows, pad_id=tokenizer.pad_token_id), tokenizer.pad_token_id, True)
    width = merged["input_ids"].shape[1]
    assert width == batch["input_ids"].shape[1] + max(len(row[FACT_IDS]) for row in rows)
    for index, (text, fact) in enumerate(zip(texts, facts)):
        # What the tokenizer makes of the pair: [CLS] text [SEP] facts [SEP], token types 0 then 1.
        alone = tokenizer(text, fact) if fact else tokenizer(text)
        length = len(alone["input_ids"])
        assert merged["input_ids"][index, :length].tolist() == alone["input_ids"]
        assert merged["token_type_ids"][index, :length].tolist() == alone["token_type_ids"]
        assert merged["attention_mask"][index].tolist() == [1] * length + [0] * (width - length)
        assert merged["input_ids"][index, length:].tolist() == [tokenizer.pad_token_id] * (width - length)
        assert merged["token_type_ids"][index, length:].tolist() == [0] * (width - length)
        text_length = int(batch["attention_mask"][index].sum())
        assert torch.equal(merged["input_ids"][index, :text_length], batch["input_ids"][index, :text_length])


def tiny_kg_text(**options) -> KgText:
    from knowledge_lm.core.backbones import load_backbone

    encoder, _, _ = load_backbone("tiny", seed=0)
    return KgText(encoder, GeneratedDataModule.spec("facts"), **options).eval()


def test_encode_gives_each_row_the_states_of_its_text_read_with_its_facts(tokenizer):
    texts, facts, rows = texts_and_facts(tokenizer)
    model = tiny_kg_text()
    batch = dict(tokenizer(texts, padding=True, return_tensors="pt"))
    with torch.no_grad():
        states = model.encode({**batch, "knowledge": rows})
        assert states.shape[:2] == batch["input_ids"].shape  # the head reads the text's width
        for index, (text, fact) in enumerate(zip(texts, facts)):
            alone = tokenizer(text, fact, return_tensors="pt") if fact else tokenizer(text, return_tensors="pt")
            expected = model.encoder(**alone).last_hidden_state[0]
            text_length = int(batch["attention_mask"][index].sum())
            torch.testing.assert_close(states[index, :text_length], expected[:text_length], atol=1e-5, rtol=1e-5)


def test_zero_knowledge_gives_no_facts_and_the_baselines_states(tokenizer):
    texts, _, rows = texts_and_facts(tokenizer)
    model = tiny_kg_text(zero_knowledge=True)
    assert fact_tensors(rows, zeroed=True).ids.shape == (3, 0)
    batch = dict(tokenizer(texts, padding=True, return_tensors="pt"))
    with torch.no_grad():
        torch.testing.assert_close(model.encode({**batch, "knowledge": rows}), model.encoder(**batch).last_hidden_state)


def test_bad_options_are_refused():
    from knowledge_lm.core.errors import KlmError

    with pytest.raises(KlmError, match="fact_tokens"):
        tiny_kg_text(fact_tokens=0)
    with pytest.raises(KlmError, match="not verbalised"):
        fact_tensors([{"links": []}])


@pytest.fixture(scope="module")
def prepared_cache(tmp_path_factory, tokenizer):
    cache = tmp_path_factory.mktemp("kg-text-cache")
    prepare(
        GeneratedDataModule(tokenizer=tokenizer, cache_dir=cache, max_length=32, **SIZES),
        tokenizer,
        KnowledgeConfig(),
        cache,
        progress=False,
    )
    return cache


def test_wiring_verbalises_the_generated_task_with_the_texts_names(prepared_cache, tokenizer):
    from knowledge_lm.run.trainer import wire_knowledge

    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=prepared_cache, max_length=32, knowledge={}, **SIZES)
    data.setup()
    model = tiny_kg_text(fact_tokens=48)
    wire_knowledge(model, data)
    assert all(len(row[FACT_IDS]) <= 48 + 1 for row in data.knowledge_features)
    start, _ = data.knowledge_spans["dev"]
    checked = 0
    for offset, record in enumerate(data.splits["dev"]):
        if record["kind"] != "one_hop" or not record["label"]:
            continue
        # A true one-hop claim "{s} <verb> {o}." is an edge between its two linked entities: a linked fact,
        # never cut.
        subject, claimed = (link["mention"] for link in record["entities"])
        kg = data.knowledge_graph
        head, tail = (link["qid"] for link in record["entities"])
        relation = kg.relations[
            next(pid for triple_head, pid, triple_tail in kg.triples if (triple_head, triple_tail) == (head, tail))
        ].replace("_", " ")
        first_fact = tokenizer(f"{subject} {relation} {claimed}.", add_special_tokens=False)["input_ids"]
        ids = data.knowledge_features[start + offset][FACT_IDS]
        assert any(ids[index : index + len(first_fact)] == first_fact for index in range(len(ids))), record["text_a"]
        checked += 1
    assert checked
    batch = next(iter(data.val_dataloader()[0]))
    assert batch["knowledge"].ids.shape[0] == len(batch["input_ids"])
    stats = model.method_stats()
    assert 0 < stats["examples_with_facts"] <= 1 and stats["fact_tokens_per_example"] <= 48


def test_kg_text_trains_as_a_cell(prepared_cache, tmp_path):
    from knowledge_lm.core.results import Cell
    from knowledge_lm.run.cell import run_cell
    from knowledge_lm.run.config import TrainConfig

    train = TrainConfig(batch_size=8, max_steps=3, evaluations=1, max_length=32)
    result = run_cell(
        Cell("kg-text", "generated", "facts", 1.0, 1, "tiny"),
        train,
        results_dir=tmp_path / "r",
        runs_dir=tmp_path / "runs",
        progress=False,
        dataset_options={**SIZES, "cache_dir": str(prepared_cache), "knowledge": {}},
    )
    assert result["cell"]["method"] == "kg-text" and "accuracy" in result["metrics"]["test"]
    assert result["method_stats"]["examples_with_facts"] > 0
    assert set(result["metrics_by_group"]) <= {"text", "type", "one_hop", "two_hop"}
    assert set(result["dev_metrics_by_group"]) <= {"text", "type", "one_hop", "two_hop"}
    assert result["dev_metrics_by_group"] and all("accuracy" in g for g in result["dev_metrics_by_group"].values())
