"""No answers in the KG: the KG a knowledge method sees on FewRel, LAMA and Re-DocRED holds no evaluation example's
answer, unless the keep_answers control asks for it."""

import json

import pytest
from helpers import SHARED, needs_shared

from knowledge_lm.data.fewrel import RELATIONS as FEWREL_RELATIONS
from knowledge_lm.data.fewrel import FewRelDataModule
from knowledge_lm.data.lama import lama_answer_facts
from knowledge_lm.data.redocred import DocREDDataModule
from knowledge_lm.knowledge.answers import ANSWERS_FILE, AnswerFact, answer_triples, kg_without_answers
from knowledge_lm.knowledge.kg import Entity, KnowledgeGraph
from knowledge_lm.knowledge.linking import AliasTable
from knowledge_lm.knowledge.prepare import KnowledgeConfig, files_fingerprint, knowledge_graph_dir, split_key
from knowledge_lm.run.trainer import method_dataset_options


def test_an_answer_is_its_relation_between_the_pair_either_way_by_qid_or_by_name():
    triples = [("Q1", "P26", "Q2"), ("Q2", "P26", "Q1"), ("Q1", "P40", "Q2"), ("Q3", "P26", "Q4"), ("Q5", "P19", "Q6")]
    aliases = AliasTable.from_entities([("Q5", "Ada", []), ("Q6", "London", ["Londres"]), ("Q7", "London, ON", [])])
    facts = [AnswerFact(("Q1",), "P26", ("Q2",)), AnswerFact(("Ada",), "P19", ("Londres", "nowhere"), by_name=True)]
    assert answer_triples(triples, facts, aliases) == {("Q1", "P26", "Q2"), ("Q2", "P26", "Q1"), ("Q5", "P19", "Q6")}


def test_the_copy_is_written_once_and_found_again_without_reading_the_kg(tmp_path):
    kg_dir = tmp_path / "kg"
    KnowledgeGraph([("Q1", "P26", "Q2"), ("Q2", "P17", "Q3")]).write_kg(kg_dir)
    facts = [AnswerFact(("Q1",), "P26", ("Q2",))]
    kg_id = files_fingerprint(kg_dir)
    folder = kg_without_answers(kg_dir, kg_id, facts, "toy", tmp_path / "cache")
    assert KnowledgeGraph.load(folder).triples == [("Q2", "P17", "Q3")]
    assert len(KnowledgeGraph.load(folder)) == 3  # the entities stay: only the answer edge goes
    assert json.loads((folder / ANSWERS_FILE).read_text())["removed"] == 1
    (kg_dir / "triples.tsv").unlink()  # found by its key: the KG is not read again
    assert kg_without_answers(kg_dir, kg_id, facts, "toy", tmp_path / "cache") == folder


def seen_triples(data_module, tmp_path, **options) -> set:
    """The triples of the KG every knowledge method reads on ``data_module`` (linking, TransE, KAM, kg-text)."""
    return set(KnowledgeGraph.load(knowledge_graph_dir(data_module, KnowledgeConfig(**options), tmp_path)).triples)


def write_fewrel(folder):
    """A val_wiki.json of 7 instances per relation (5 train, 1 dev, 1 test), instance i of relation r joining
    Q<r>0<i> to Q<r>1<i>."""
    data = {
        pid: [
            {"tokens": ["A", "and", "B"], "h": ["a", f"Q{n}0{i}", [[0]]], "t": ["b", f"Q{n}1{i}", [[2]]]}
            for i in range(7)
        ]
        for n, pid in enumerate(FEWREL_RELATIONS)
    }
    (folder / "fewrel").mkdir(parents=True)
    (folder / "fewrel" / "val_wiki.json").write_text(json.dumps(data))


def test_fewrel_answers_of_every_split_leave_a_given_kg(tmp_path):
    write_fewrel(tmp_path)
    kg_dir = tmp_path / "kg"
    answers = {(f"Q{n}0{i}", pid, f"Q{n}1{i}") for n, pid in enumerate(FEWREL_RELATIONS) for i in range(7)}
    others = {("Q000", "P31", "Q5"), ("Q101", "P26", "Q000")}  # another relation of a pair, another pair: kept
    KnowledgeGraph(sorted(answers | others)).write_kg(kg_dir)
    data = FewRelDataModule(data_dir=tmp_path)
    assert seen_triples(data, tmp_path, kg_dir=str(kg_dir)) == others
    assert seen_triples(data, tmp_path, kg_dir=str(kg_dir), keep_answers=True) == answers | others


def test_redocred_gold_facts_leave_the_kg_by_their_names(tmp_path):
    from test_docre import document, revised_dir

    revised_dir(tmp_path, [document(f"d{i}") for i in range(5)], [document(f"e{i}") for i in range(5)])
    kg_dir = tmp_path / "kg"
    names = [("Q1", "Alice Smith", ["Smith"]), ("Q2", "Paris", []), ("Q3", "France", []), ("Q4", "Paris Hilton", [])]
    KnowledgeGraph(
        [("Q1", "P19", "Q2"), ("Q2", "P17", "Q3"), ("Q1", "P27", "Q3"), ("Q4", "P19", "Q2"), ("Q1", "P31", "Q2")],
        [Entity(qid, label, forms) for qid, label, forms in names],
    ).write_kg(kg_dir)
    data = DocREDDataModule(data_dir=tmp_path)
    assert seen_triples(data, tmp_path, kg_dir=str(kg_dir)) == {("Q4", "P19", "Q2"), ("Q1", "P31", "Q2")}


@needs_shared
@pytest.mark.slow
def test_fewrel_kg_holds_no_answer_of_any_split(tmp_path):
    data = FewRelDataModule(data_dir=SHARED)
    answers = answer_triples(
        KnowledgeGraph.load(SHARED / "wikidata_kg").triples, data.answer_facts(data.read_labelled())
    )
    assert len(answers) > 11_000  # the shared KG was built from FewRel's facts: every example's answer is there
    assert not seen_triples(data, tmp_path) & answers
    assert not seen_triples(data, tmp_path, permute_relations=True) & answers
    assert answers <= seen_triples(data, tmp_path, keep_answers=True)  # the labelled control


@needs_shared
@pytest.mark.slow
def test_lama_probed_facts_leave_the_kg(tmp_path):
    facts = lama_answer_facts(SHARED / "lama")
    triples = KnowledgeGraph.load(SHARED / "wikidata_kg").triples
    assert len(answer_triples(triples, [f for f in facts if not f.by_name])) > 20_000
    folder = kg_without_answers(SHARED / "wikidata_kg", "shared", facts, "lama", tmp_path)
    aliases = AliasTable.from_entities_file(SHARED / "wikidata_kg" / "entities.jsonl.gz")
    assert not answer_triples(KnowledgeGraph.load(folder).triples, facts, aliases)


@needs_shared
@pytest.mark.slow
def test_redocred_kg_holds_no_gold_fact_under_any_candidate_of_its_names(tmp_path):
    data = DocREDDataModule(data_dir=SHARED)
    facts = data.answer_facts(data.read_labelled())
    aliases = AliasTable.from_entities_file(SHARED / "wikidata_kg" / "entities.jsonl.gz")
    assert answer_triples(KnowledgeGraph.load(SHARED / "wikidata_kg").triples, facts, aliases)
    assert not answer_triples(seen_triples(data, tmp_path), facts, aliases)


def test_results_on_answer_datasets_record_the_answer_policy_and_features_change_key():
    assert method_dataset_options("kam", {}, "fewrel") == {"knowledge": {"keep_answers": False}}
    assert method_dataset_options("kam", {"knowledge": {"keep_answers": True}}, "redocred") == {
        "knowledge": {"keep_answers": True}
    }
    assert method_dataset_options("kam", {}, "glue") == {"knowledge": {}}  # GLUE's cells stay what they were
    assert method_dataset_options("baseline", {}, "fewrel") == {}
    assert method_dataset_options("baseline", {"seed": 1, "knowledge": {"kg_embedding": "rotate"}}, "generated") == {
        "seed": 1
    }  # a variant's knowledge options are its knowledge methods'
    default, kept = KnowledgeConfig(), KnowledgeConfig(keep_answers=True)
    assert split_key([], "t", 8, default, "kg") == split_key([], "t", 8, KnowledgeConfig.from_dict({}), "kg")
    assert split_key([], "t", 8, default, "kg") != split_key([], "t", 8, kept, "kg")
