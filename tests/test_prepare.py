"""klm prepare: features computed once, found again by key, read by training without spaCy or the KG."""

import json
import subprocess
import sys

import pytest

from knowledge_lm.cli import main
from knowledge_lm.data.generated import GeneratedDataModule
from knowledge_lm.errors import KlmError
from knowledge_lm.knowledge.prepare import KnowledgeConfig, load_prepared, prepare

SIZES = {"train_size": 40, "dev_size": 12, "test_size": 12}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, tokenizer):
    cache = tmp_path_factory.mktemp("knowledge-cache")
    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=cache, max_length=48, **SIZES)
    manifest = prepare(data, tokenizer, KnowledgeConfig(), cache, progress=False)
    return cache, manifest


def test_features_cover_every_example_with_aligned_tokens(prepared, tokenizer):
    cache, manifest = prepared
    assert manifest["gold_links"] and manifest["splits"]["train"]["linked_coverage"] == 1.0
    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=cache, max_length=48, **SIZES)
    features = load_prepared(data, tokenizer, KnowledgeConfig(), cache)
    splits = data.labelled_splits()
    for split, rows in features.items():
        assert [row["id"] for row in rows] == [record["id"] for record in splits[split]]
    record, row = splits["train"][0], features["train"][0]
    input_ids = tokenizer(record["text_a"], truncation=True, max_length=48)["input_ids"]
    for link, gold in zip(row["links"], record["entities"]):
        assert link["candidates"][0][0] == gold["qid"]
        pieces = tokenizer.decode([input_ids[i] for i in link["tokens"]]).replace(" ", "")
        assert pieces == gold["mention"].lower().replace(" ", "")
        assert link["df"] >= 1 and link["close"] >= 0
    assert row["words"] and row["phrases"] and len(row["pmi_neighbours"]) <= 10
    pairs = [pair for row in features["train"] for pair in row["pmi_pairs"]]
    assert pairs and all(0 <= i < j and 0 < value <= 1 for i, j, value in pairs)


def test_pmi_expansion_words_are_absent_from_the_text_and_stored_as_sub_words(prepared, tokenizer):
    from knowledge_lm.knowledge.pmi import tokenize_words

    cache, _ = prepared
    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=cache, max_length=48, **SIZES)
    rows = load_prepared(data, tokenizer, KnowledgeConfig(), cache)["train"]
    expanded = 0
    for record, row in zip(data.labelled_splits()["train"], rows):
        assert [word["word"] for word in row["pmi_expansion"]] == row["pmi_neighbours"]
        for word in row["pmi_expansion"]:
            assert word["word"] not in tokenize_words(record["text_a"])
            assert word["ids"] == tokenizer(word["word"], add_special_tokens=False)["input_ids"]
            assert all(0 <= index < len(row["words"]) and 0 < value <= 1 for index, value in word["pmi"])
        expanded += any(word["pmi"] for word in row["pmi_expansion"])
    assert expanded  # the tiny train split's PMI statistics (min_count 5) know a few words only


def test_second_prepare_reads_the_cache(prepared, tokenizer, monkeypatch):
    cache, manifest = prepared

    def no_annotation(*args, **kwargs):
        raise AssertionError("a cache hit must not annotate again")

    monkeypatch.setattr("knowledge_lm.knowledge.annotate.Annotator.annotate", no_annotation)
    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=cache, max_length=48, **SIZES)
    assert prepare(data, tokenizer, KnowledgeConfig(), cache, progress=False) == manifest


TRAINING_SIDE = """
import json, sys
from knowledge_lm.backbones import tiny_tokenizer
from knowledge_lm.data.generated import GeneratedDataModule
data = GeneratedDataModule(tokenizer=tiny_tokenizer(), cache_dir=sys.argv[1], max_length=48, knowledge={}, batch_size=4,
                           **json.loads(sys.argv[2]))
data.setup()
batch = next(iter(data.train_dataloader()))
assert len(batch["knowledge"]) == 4 and batch["input_ids"].shape[0] == 4
assert all(link["tokens"] for example in batch["knowledge"] for link in example["links"])
loaded = sorted(name for name in sys.modules if name.split(".")[0] in ("spacy", "stanza"))
assert not loaded, loaded
print("ok")
"""


def test_training_batches_carry_knowledge_without_spacy(prepared):
    cache, _ = prepared
    out = subprocess.run([sys.executable, "-c", TRAINING_SIDE, str(cache), json.dumps(SIZES)], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_other_config_or_tokenizer_length_needs_its_own_prepare(prepared, tokenizer):
    cache, _ = prepared
    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=cache, max_length=32, knowledge={}, **SIZES)
    with pytest.raises(KlmError, match="run `klm prepare --dataset generated"):
        data.setup()
    with pytest.raises(KlmError, match="run `klm prepare"):
        load_prepared(GeneratedDataModule(tokenizer=tokenizer, cache_dir=cache, max_length=48, **SIZES),
                      tokenizer, KnowledgeConfig(pmi_top_k=3), cache)


@pytest.mark.parametrize("options, message", [
    ({"linker": "gold"}, "unknown knowledge option"),
    ({"linking": "psychic"}, "expected one of"),
])
def test_bad_knowledge_options(options, message):
    with pytest.raises(KlmError, match=message):
        KnowledgeConfig.from_dict(options)


def test_gold_linking_on_a_dataset_without_links(tmp_path, tokenizer, shared_data):
    from knowledge_lm.data.glue import GlueDataModule

    data = GlueDataModule(task="rte", tokenizer=tokenizer, data_dir=shared_data, cache_dir=tmp_path)
    with pytest.raises(KlmError, match="no gold entity links"):
        prepare(data, tokenizer, KnowledgeConfig(linking="gold"), tmp_path, progress=False)


def test_cli_prepare_missing_kg_dir(capsys, tmp_path):
    code = main(["prepare", "--dataset", "generated", "--backbone", "tiny", "--kg-dir", str(tmp_path / "nope"),
                 "--cache-dir", str(tmp_path)])
    assert code == 2 and "does not exist" in capsys.readouterr().err


def test_link_noise_replaces_the_asked_share_with_other_types(tmp_path, tokenizer):
    from knowledge_lm.knowledge.kg import KnowledgeGraph

    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=tmp_path, max_length=48, **SIZES)
    config = KnowledgeConfig(link_noise=0.25)
    manifest = prepare(data, tokenizer, config, tmp_path, progress=False)
    kg = KnowledgeGraph.load(manifest["kg_dir"])
    features = load_prepared(data, tokenizer, config, tmp_path)
    for split, records in data.labelled_splits().items():
        pairs = [(link["candidates"][0][0], gold["qid"]) for record, row in zip(records, features[split])
                 for link, gold in zip(row["links"], record["entities"])]
        replaced = [(noisy, gold) for noisy, gold in pairs if noisy != gold]
        assert len(replaced) == round(0.25 * len(pairs))
        assert all(kg.entities[noisy].type != kg.entities[gold].type for noisy, gold in replaced)


def test_pmi_from_a_named_corpus(tmp_path, tokenizer):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(["zorblat was born in spring"] * 6 + ["an unrelated line"] * 6))
    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=tmp_path, max_length=48, **SIZES)
    config = KnowledgeConfig(pmi_corpus=str(corpus), pmi_min_count=2)
    prepare(data, tokenizer, config, tmp_path, progress=False)
    rows = load_prepared(data, tokenizer, config, tmp_path)["train"]
    neighbours = {word for row in rows for word in row["pmi_neighbours"]}
    assert "zorblat" in neighbours and neighbours <= set(corpus.read_text().split())
