"""``--kg PATH|NAME``: a Wikidata5M folder as distributed, or a triples TSV with a labels file, read as the shared KG
is, converted once, and driving linking, TransE, KAM's KG map and kg-text alike."""

import json

import pytest
from helpers import write
from test_answers import write_fewrel

from knowledge_lm.cli import main
from knowledge_lm.core.errors import KlmError
from knowledge_lm.data.fewrel import RELATIONS as FEWREL_RELATIONS
from knowledge_lm.data.fewrel import FewRelDataModule
from knowledge_lm.knowledge.kg import KnowledgeGraph
from knowledge_lm.knowledge.kg_embeddings import cached_transe
from knowledge_lm.knowledge.kg_formats import resolve_kg
from knowledge_lm.knowledge.prepare import KnowledgeConfig, entity_linker, knowledge_graph_dir

P155 = FEWREL_RELATIONS[0]


def write_wikidata5m(folder):
    """A tiny Wikidata5M: transductive splits (one gzip-compressed, a fact repeated across them), entity and
    relation aliases, in the distributed files' names and formats (no headers)."""
    write(folder / "wikidata5m_transductive_train.txt", f"Q42\tP69\tQ691283\nQ42\tP31\tQ5\nQ000\t{P155}\tQ010\n")
    write(folder / "wikidata5m_transductive_valid.txt", "Q42\tP31\tQ5\nQ691283\tP17\tQ145\n", compress=True)
    write(folder / "wikidata5m_transductive_test.txt", "Q145\tP31\tQ6256\n")
    write(
        folder / "wikidata5m_entity.txt",
        "Q42\tDouglas Adams\tDouglas Noël Adams\tDNA\nQ691283\tSt John's College, Cambridge\tSt John's\n"
        "Q145\tUnited Kingdom\tUK\tBritain\nQ5\thuman\nQ6256\tcountry\n",
    )
    write(folder / "wikidata5m_relation.txt", "P69\teducated at\talma mater\nP31\tinstance of\tis a\nP17\tcountry\n")
    return folder


def test_a_wikidata5m_folder_reads_as_a_kg_converted_once(tmp_path):
    folder = resolve_kg(str(write_wikidata5m(tmp_path / "w5m")), None, tmp_path / "cache")
    kg = KnowledgeGraph.load(folder)
    assert len(kg.triples) == 5  # the repeated fact once
    assert kg.entities["Q42"].label == "Douglas Adams"
    assert kg.entities["Q42"].surface_forms == ["Douglas Noël Adams", "DNA"]
    assert kg.relations["P69"] == "educated at" and kg.entities["Q145"].type == "Q6256"
    assert resolve_kg(str(tmp_path / "w5m"), None, tmp_path / "cache") == folder
    data_dir = tmp_path / "data"
    (data_dir / "wikidata5m").mkdir(parents=True)
    write_wikidata5m(data_dir / "wikidata5m")
    assert KnowledgeGraph.load(resolve_kg("wikidata5m", data_dir, tmp_path / "cache")).triples == kg.triples
    with pytest.raises(KlmError, match="does not exist"):
        resolve_kg(str(tmp_path / "nope"), None, tmp_path / "cache")
    with pytest.raises(KlmError, match="neither triples.tsv nor Wikidata5M"):
        resolve_kg(str(tmp_path / "data"), None, tmp_path / "cache")


def test_a_triples_tsv_with_a_labels_file(tmp_path):
    write(tmp_path / "facts.tsv", "Q1\tP17\tQ2\n")
    write(tmp_path / "labels.tsv", "qid\tlabel\nQ1\tParis\tCity of Light\nQ2\tFrance\n")
    kg = KnowledgeGraph.load(resolve_kg(str(tmp_path / "facts.tsv"), None, tmp_path / "cache"))
    assert kg.triples == [("Q1", "P17", "Q2")] and kg.entities["Q1"].surface_forms == ["City of Light"]


def test_the_named_kg_drives_linking_transe_and_the_kg_every_method_reads(tmp_path):
    write_wikidata5m(tmp_path / "w5m")
    write_fewrel(tmp_path)
    data = FewRelDataModule(data_dir=tmp_path)
    config = KnowledgeConfig(kg_dir=str(tmp_path / "w5m"), linking="alias")
    kg = KnowledgeGraph.load(knowledge_graph_dir(data, config, tmp_path / "cache"))
    assert ("Q000", P155, "Q010") not in kg.triples and ("Q42", "P69", "Q691283") in kg.triples  # answers removed
    _, linker = entity_linker(data, data.read_labelled(), kg, config)
    [mention] = linker.link("DNA studied there.")
    assert mention.candidates == [("Q42", 1.0)]
    embeddings = cached_transe(kg, tmp_path / "cache" / "kg_embeddings", progress=False, epochs=2)
    assert embeddings.matrix.shape[0] >= len(kg)


def test_cli_prepare_takes_kg(capsys, tmp_path):
    write_wikidata5m(tmp_path / "w5m")
    write_fewrel(tmp_path)
    args = ["prepare", "--coverage", "--dataset", "fewrel", "--tasks", "main", "--data-dir", str(tmp_path)]
    code = main([*args, "--kg", str(tmp_path / "w5m"), "--results-dir", str(tmp_path / "results")])
    assert code == 0, capsys.readouterr().err
    coverage = json.loads((tmp_path / "results" / "coverage" / "fewrel.json").read_text())
    assert coverage["kg"] == str(tmp_path / "w5m") and coverage["tasks"]["main"]["splits"]["test"]["examples"] == 16
