"""klm prepare: features computed once, found again by key, read by training without spaCy or the KG."""

import json
import subprocess
import sys

import pytest

from knowledge_lm.cli import main
from knowledge_lm.core.errors import KlmError
from knowledge_lm.data.generated import GeneratedDataModule
from knowledge_lm.knowledge.prepare import KnowledgeConfig, load_prepared, prepare, split_keys

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
from knowledge_lm.core.backbones import tiny_tokenizer
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


@pytest.mark.slow  # about 12 s on 2 cores: a fresh interpreter imports torch and Lightning to read the batches
def test_training_batches_carry_knowledge_without_spacy(prepared):
    cache, _ = prepared
    out = subprocess.run(
        [sys.executable, "-c", TRAINING_SIDE, str(cache), json.dumps(SIZES)], capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_other_config_or_tokenizer_length_needs_its_own_prepare(prepared, tokenizer):
    cache, _ = prepared
    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=cache, max_length=32, knowledge={}, **SIZES)
    with pytest.raises(KlmError, match="run `klm prepare --dataset generated"):
        data.setup()
    with pytest.raises(KlmError, match="run `klm prepare"):
        load_prepared(
            GeneratedDataModule(tokenizer=tokenizer, cache_dir=cache, max_length=48, **SIZES),
            tokenizer,
            KnowledgeConfig(pmi_top_k=3),
            cache,
        )


@pytest.mark.parametrize(
    "options, message",
    [
        ({"linker": "gold"}, "unknown knowledge option"),
        ({"linking": "psychic"}, "expected one of"),
        ({"shuffle_links": 1.5}, "shuffle_links: expected a share within"),
        ({"link_noise": -0.1}, "link_noise: expected a share within"),
        ({"shuffle_links": 1.0, "shuffle_splits": ["validation"]}, "shuffle_splits .*expected split names"),
        ({"shuffle_links": 1.0, "shuffle_splits": []}, "shuffle_splits .*expected split names"),
        ({"shuffle_splits": ["test"]}, "shuffle_splits: it restricts shuffle_links"),
        ({"kg_embedding": "complex"}, "kg_embedding 'complex': expected one of transe, rotate"),
    ],
)
def test_bad_knowledge_options(options, message):
    with pytest.raises(KlmError, match=message):
        KnowledgeConfig.from_dict(options)


def test_the_kg_embedding_kind_changes_no_feature_and_no_stored_cell():
    from knowledge_lm.knowledge.kg_embeddings import KINDS
    from knowledge_lm.knowledge.prepare import KG_EMBEDDINGS, split_key
    from knowledge_lm.run.identity import dataset_identity

    assert KG_EMBEDDINGS == tuple(KINDS)
    records = [{"id": "a", "text_a": "x"}]
    rotate = KnowledgeConfig.from_dict({"kg_embedding": "rotate"})
    assert split_key(records, "tok", 48, rotate, "kg") == split_key(records, "tok", 48, KnowledgeConfig(), "kg")
    assert dataset_identity("generated", "knowbert", {})["knowledge.kg_embedding"] == "transe"


def test_gold_linking_on_a_dataset_without_links(tmp_path, tokenizer, shared_data):
    from knowledge_lm.data.glue import GlueDataModule

    data = GlueDataModule(task="rte", tokenizer=tokenizer, data_dir=shared_data, cache_dir=tmp_path)
    with pytest.raises(KlmError, match="no gold entity links"):
        prepare(data, tokenizer, KnowledgeConfig(linking="gold"), tmp_path, progress=False)


def test_cli_prepare_missing_kg_dir(capsys, tmp_path):
    code = main(
        [
            "prepare",
            "--dataset",
            "generated",
            "--backbone",
            "tiny",
            "--kg-dir",
            str(tmp_path / "nope"),
            "--cache-dir",
            str(tmp_path),
        ]
    )
    assert code == 2 and "does not exist" in capsys.readouterr().err


def gold_mask(row: dict) -> list[bool]:
    """KnowBERT's reading of a prepared example: which of its links count as gold for the linking loss."""
    from knowledge_lm.methods.knowbert import knowledge_tensors

    index = {
        qid: number
        for number, qid in enumerate(sorted({qid for link in row["links"] for qid, _ in link["candidates"]}), 1)
    }
    tensors = knowledge_tensors([row], 48, index)
    assert len(row["links"]) == tensors.gold.shape[1] and all(link["tokens"] for link in row["links"])
    return tensors.gold[0].tolist()


def noisy_prepared(tmp_path, tokenizer, **options):
    from knowledge_lm.knowledge.kg import KnowledgeGraph

    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=tmp_path, max_length=48, **SIZES)
    config = KnowledgeConfig(**options)
    manifest = prepare(data, tokenizer, config, tmp_path, progress=False)
    return (
        data.labelled_splits(),
        load_prepared(data, tokenizer, config, tmp_path),
        KnowledgeGraph.load(manifest["kg_dir"]),
    )


def test_noisy_links_rank_a_wrong_entity_of_another_type_first_and_are_not_gold(tmp_path, tokenizer):
    splits, features, kg = noisy_prepared(tmp_path, tokenizer, link_noise=0.25)
    for split, records in splits.items():
        noisy = total = 0
        for record, row in zip(records, features[split]):
            for link, gold, is_gold in zip(row["links"], record["entities"], gold_mask(row)):
                total += 1
                if link["candidates"] == [[gold["qid"], 1.0]]:
                    assert is_gold
                    continue
                noisy += 1
                qids, priors = [qid for qid, _ in link["candidates"]], [prior for _, prior in link["candidates"]]
                assert qids[1] == gold["qid"] and len(qids) > 2 and not is_gold
                assert kg.entities[qids[0]].type != kg.entities[gold["qid"]].type
                assert (
                    sum(priors) == pytest.approx(1.0, abs=1e-5)
                    and priors == sorted(priors, reverse=True)
                    and priors[0] < 1.0
                )
        assert noisy == round(0.25 * total)


def test_shuffled_links_keep_the_type_and_the_form_of_gold_links(tmp_path, tokenizer):
    splits, features, kg = noisy_prepared(tmp_path, tokenizer, shuffle_links=0.5)
    for split, records in splits.items():
        replacements, pairs = {}, set()
        for number, (record, row) in enumerate(zip(records, features[split])):
            assert all(gold_mask(row))
            for link, gold in zip(row["links"], record["entities"]):
                pairs.add((number, gold["qid"]))
                ((qid, prior),) = link["candidates"]
                assert prior == 1.0 and kg.entities[qid].type == kg.entities[gold["qid"]].type
                if qid != gold["qid"]:
                    assert replacements.setdefault((number, gold["qid"]), qid) == qid
        assert len(replacements) == round(0.5 * len(pairs))


def test_every_corruption_level_and_seed_has_its_own_features(tmp_path, tokenizer):
    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=tmp_path, max_length=48, **SIZES)
    options = [
        {},
        {"shuffle_links": 0.5},
        {"shuffle_links": 1.0},
        {"link_noise": 0.2},
        {"link_noise": 0.2, "noise_seed": 1},
        {"shuffle_links": 1.0, "shuffle_splits": ["test"]},
        {"shuffle_links": 1.0, "shuffle_splits": ["dev", "test"]},
        {"permute_relations": True},
        {"permute_relations": True, "noise_seed": 1},
    ]
    folders = {split_keys(data, tokenizer, KnowledgeConfig.from_dict(option), tmp_path)[2] for option in options}
    assert len(folders) == len(options)


def test_pmi_from_a_named_corpus(tmp_path, tokenizer):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(["zorblat was born in spring"] * 6 + ["an unrelated line"] * 6))
    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=tmp_path, max_length=48, **SIZES)
    config = KnowledgeConfig(pmi_corpus=str(corpus), pmi_min_count=2)
    prepare(data, tokenizer, config, tmp_path, progress=False)
    rows = load_prepared(data, tokenizer, config, tmp_path)["train"]
    neighbours = {word for row in rows for word in row["pmi_neighbours"]}
    assert "zorblat" in neighbours and neighbours <= set(corpus.read_text().split())


def direct_pmi_features(word_texts: list[str], neighbours: list[str], statistics, tokenizer) -> tuple[list, list]:
    """KAM's pmi_pairs and pmi_expansion computed per example from the corpus statistics: the reference the
    stored-then-derived features must equal."""
    matrix = statistics.normalised_pmi_matrix(word_texts + neighbours) if word_texts or neighbours else []
    pairs = [
        [i, j, round(float(matrix[i][j]), 4)]
        for i in range(len(word_texts))
        for j in range(i + 1, len(word_texts))
        if matrix[i][j] > 0 and word_texts[i] != word_texts[j]
    ]
    pieces = tokenizer(neighbours, add_special_tokens=False)["input_ids"] if neighbours else []
    n = len(word_texts)
    expansion = [
        {
            "word": word,
            "ids": ids,
            "pmi": [[i, round(float(matrix[n + k][i]), 4)] for i in range(n) if matrix[n + k][i] > 0],
        }
        for k, (word, ids) in enumerate(zip(neighbours, pieces))
        if ids
    ]
    return pairs, expansion


def test_derived_pmi_features_equal_the_direct_computation(prepared, tokenizer):
    from knowledge_lm.core.io import read_jsonl
    from knowledge_lm.knowledge.pmi import PmiTable
    from knowledge_lm.knowledge.prepare import PMI_TABLE, pmi_statistics

    cache, _ = prepared
    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=cache, max_length=48, **SIZES)
    splits, _, folder = split_keys(data, tokenizer, KnowledgeConfig(), cache)
    statistics = pmi_statistics(KnowledgeConfig(), splits["train"])
    vocabulary = PmiTable.load(folder / PMI_TABLE).vocabulary
    loaded = load_prepared(data, tokenizer, KnowledgeConfig(), cache)
    compared = 0
    for split, records in splits.items():
        for record, (_, stored), row in zip(records, read_jsonl(folder / f"{split}.jsonl.xz"), loaded[split]):
            words = [vocabulary[number] for number in stored["pmi_words"]]
            assert len(words) == len(row["words"]) and all(word in record["text_a"].lower() for word in words)
            assert row["pmi_neighbours"] == [vocabulary[number] for number in stored["pmi_neighbours"]]
            pairs, expansion = direct_pmi_features(words, row["pmi_neighbours"], statistics, tokenizer)
            assert row["pmi_pairs"] == pairs and row["pmi_expansion"] == expansion
            assert set(row) == {"id", "links", "ner", "phrases", "words", "dependencies"} | {
                "pmi_neighbours",
                "pmi_pairs",
                "pmi_expansion",
            }
            compared += bool(pairs) + bool(expansion)
    assert compared


def test_derived_pmi_features_of_repeated_unknown_and_neighbour_words(tokenizer):
    from knowledge_lm.knowledge.pmi import CorpusStatistics
    from knowledge_lm.knowledge.prepare import with_pmi_features

    statistics = CorpusStatistics.from_texts(["The cat sat.", "the cat ran", "A dog ran", "the dog sat"], min_count=1)
    words = ["the", "cat", "zebra", "the", "dog", "ran", "a"]
    for neighbours in (["sat", "dog", "zebra"], [], ["a"]):
        features = {"words": [{"segment": 0, "tokens": [i + 1]} for i in range(len(words))], "pmi_words": words}
        row = with_pmi_features({**features, "pmi_neighbours": neighbours}, statistics, tokenizer)
        pairs, expansion = direct_pmi_features(words, neighbours, statistics, tokenizer)
        assert row["pmi_pairs"] == pairs and row["pmi_expansion"] == expansion and row["pmi_neighbours"] == neighbours
        assert "pmi_words" not in row
    assert any(value == 1.0 for word in expansion for _, value in word["pmi"])  # "a", a neighbour and a word


def test_entity_span_mentions_lie_within_ner_spans_and_have_their_own_features(tmp_path, tokenizer):
    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=tmp_path, max_length=48, **SIZES)
    spans, ngrams = KnowledgeConfig(linking="alias", mentions="entities"), KnowledgeConfig(linking="alias")
    prepare(data, tokenizer, spans, tmp_path, progress=False)
    assert split_keys(data, tokenizer, spans, tmp_path)[2] != split_keys(data, tokenizer, ngrams, tmp_path)[2]
    linked = 0
    for rows in load_prepared(data, tokenizer, spans, tmp_path).values():
        for row in rows:
            ner = [(span["start"], span["end"]) for span in row["ner"] if span["segment"] == 0]
            for link in row["links"]:
                linked += 1
                assert any(start <= link["start"] < link["end"] <= end for start, end in ner)
    assert linked
    with pytest.raises(KlmError, match="knowledge mentions 'words'"):
        KnowledgeConfig.from_dict({"mentions": "words"})
