"""Document-level RE: F1 and Ign F1, Re-DocRED/DocRED reading and splits, the entity-pair head on a tiny backbone."""

import copy
import gzip
import json
from pathlib import Path

import pytest
import torch
from helpers import SHARED

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import DATASETS
from knowledge_lm.data.redocred import LABELS, RELATIONS, DocREDDataModule, fact_keys, mark_in_train, split_documents
from knowledge_lm.tasks.docre import DocumentRelationTask, EntityPairHead, f1, ign_f1

needs_shared = pytest.mark.skipif(not (SHARED / "redocred").is_dir(), reason="../shared/data/redocred is not here")
SPEC = DocREDDataModule.spec("revised")


def relation(pid: str) -> int:
    return LABELS.index(pid)


# -- scores -------------------------------------------------------------------------------------
def test_f1_and_ign_f1_by_hand():
    gold = [
        {"facts": [[0, 1, 1], [1, 0, 2], [0, 2, 3]], "in_train": [True, False, False]},
        {"facts": [[0, 1, 5]], "in_train": [False]},
    ]
    predictions = [
        [[0, 1, 1], [1, 0, 2], [2, 0, 4]],  # two correct, one of them in train; one wrong
        [[0, 1, 5], [1, 0, 5], [0, 1, 5]],
    ]  # one correct (predicted twice: counted once), one wrong
    # 5 predictions, 4 gold, 3 correct: P = 3/5, R = 3/4.
    assert f1(predictions, gold) == pytest.approx(100 * 2 * 0.6 * 0.75 / 1.35)
    # The correct in-train fact leaves the correct count and the predictions: P = 2/4; recall stays 3/4.
    assert ign_f1(predictions, gold) == pytest.approx(100 * 2 * 0.5 * 0.75 / 1.25)


def test_a_wrong_prediction_is_never_ignored():
    # A wrong prediction of an in-train fact's pair with another relation counts against precision.
    gold = [{"facts": [[0, 1, 1]], "in_train": [True]}]
    assert ign_f1([[[0, 1, 1], [0, 1, 2]]], gold) == 0.0  # the one correct fact is ignored, one wrong remains
    assert f1([[[0, 1, 1], [0, 1, 2]]], gold) == pytest.approx(100 * 2 * 0.5 * 1.0 / 1.5)


@pytest.mark.parametrize(
    "predictions, gold",
    [
        ([[]], [{"facts": [[0, 1, 1]], "in_train": [False]}]),  # no predictions
        ([[]], [{"facts": [], "in_train": []}]),  # nothing at all
        ([[[0, 1, 1]]], [{"facts": [[0, 1, 1]], "in_train": [True]}]),  # every prediction ignored
    ],
)
def test_empty_counts_score_zero_not_nan(predictions, gold):
    assert ign_f1(predictions, gold) == 0.0
    assert f1(predictions, gold) in (0.0, 100.0)


def test_the_kind_scores_what_the_spec_names():
    gold = [{"facts": [[0, 1, 1]], "in_train": [False]}]
    assert DocumentRelationTask(SPEC).score([[[0, 1, 1]]], gold) == {"f1": 100.0, "ign_f1": 100.0}


# -- reading --------------------------------------------------------------------------------------
def document(title: str, born=("Paris",), extra_label=None) -> dict:
    """Alice Smith, born in a city of France; the city's name is the document's own."""
    sentences = [["Alice", "Smith", "was", "born", "in", *born, "."], ["Smith", "lives", "in", "France", "."]]
    city_end = 5 + len(born)
    labels = [
        {"r": "P19", "h": 0, "t": 1, "evidence": [0]},
        {"r": "P27", "h": 0, "t": 2, "evidence": [0, 1]},
        {"r": "P17", "h": 1, "t": 2, "evidence": []},
    ]
    return {
        "title": title,
        "sents": sentences,
        "vertexSet": [
            [
                {"name": "Alice Smith", "sent_id": 0, "pos": [0, 2], "type": "PER"},
                {"name": "Smith", "sent_id": 1, "pos": [0, 1], "type": "PER"},
            ],
            [{"name": " ".join(born), "sent_id": 0, "pos": [5, city_end], "type": "LOC"}],
            [{"name": "France", "sent_id": 1, "pos": [3, 4], "type": "LOC"}],
        ],
        "labels": labels + ([extra_label] if extra_label else []),
    }


def write_json(path: Path, data, compress: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data)
    if compress:
        with gzip.open(path.with_name(path.name + ".gz"), "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text)
    return path


def revised_dir(tmp_path: Path, dev: list, test: list, compress: bool = False) -> Path:
    write_json(tmp_path / "redocred" / "dev_revised.json", dev, compress)
    write_json(tmp_path / "redocred" / "test_revised.json", test, compress)
    return tmp_path


def test_registered_with_97_labels():
    assert DATASETS.get("redocred") is DocREDDataModule
    assert SPEC.kind == "docre" and SPEC.labels[0] == "NA" and len(SPEC.labels) == 97
    assert SPEC.metrics == ("f1", "ign_f1") and SPEC.main_metric == "f1"
    assert list(RELATIONS) == sorted(RELATIONS, key=lambda pid: int(pid[1:]))
    assert DATASETS.entry("redocred").default_tasks == ("revised",)


def test_mention_spans_round_trip_to_names():
    record = DocREDDataModule().record("d", document("Paris", born=("New", "York", "City")), "here")
    assert record["text_a"] == "Alice Smith was born in New York City . Smith lives in France ."
    for entity in record["entities"]:
        assert entity["qid"] is None and (entity["start"], entity["end"]) == (
            entity["mentions"][0]["start"],
            entity["mentions"][0]["end"],
        )
        for mention in entity["mentions"]:
            assert record["text_a"][mention["start"] : mention["end"]] == mention["name"]
    assert [mention["name"] for mention in record["entities"][0]["mentions"]] == ["Alice Smith", "Smith"]
    assert record["label"] == sorted([[0, 1, relation("P19")], [0, 2, relation("P27")], [1, 2, relation("P17")]])


@pytest.mark.parametrize("compress", [False, True])
def test_revised_split_is_seeded_disjoint_and_stable(tmp_path, compress):
    documents = [document(f"doc {index}", born=(f"City{index}",)) for index in range(10)]
    data = DocREDDataModule(data_dir=revised_dir(tmp_path, documents[:5], documents[5:], compress))
    splits = data.labelled_splits()
    assert {split: len(records) for split, records in splits.items()} == {"train": 7, "dev": 1, "test": 2}
    ids = [record["id"] for records in splits.values() for record in records]
    assert len(set(ids)) == 10 and "redocred-test_revised-0" in ids
    assert data.labelled_splits() == splits

    split = split_documents(1000)
    assert {name: len(indices) for name, indices in split.items()} == {"train": 700, "dev": 100, "test": 200}
    assert sorted(index for indices in split.values() for index in indices) == list(range(1000))
    assert split == split_documents(1000) and split != split_documents(1000, seed=1)


def test_in_train_marks_facts_by_mention_names():
    reader = DocREDDataModule()
    train = [reader.record("train", document("t", born=("Paris",)), "here")]
    # Same names and relation, another document: in train. Another city: only the citizenship is shared.
    same = reader.record("same", document("s", born=("Paris",)), "here")
    other = reader.record("other", document("o", born=("Lyon",)), "here")
    keys = fact_keys(train)
    assert ("Smith", "France", relation("P27")) in keys  # every mention-name pair of a fact is a key
    mark_in_train([same, other], keys)
    assert same["in_train"] == [True, True, True]
    flags = dict(zip(map(tuple, other["label"]), other["in_train"]))
    assert flags == {(0, 1, relation("P19")): False, (0, 2, relation("P27")): True, (1, 2, relation("P17")): False}


def test_every_split_is_marked_against_the_train_split(tmp_path):
    documents = [document(f"doc {index}", born=(f"City{index}",)) for index in range(10)]
    splits = DocREDDataModule(data_dir=revised_dir(tmp_path, documents[:5], documents[5:])).labelled_splits()
    assert all(all(record["in_train"]) for record in splits["train"])
    for record in splits["dev"] + splits["test"]:
        # Alice Smith's citizenship is in every document, so in train; facts naming her own city are not.
        assert record["in_train"] == [relation_index == relation("P27") for _, _, relation_index in record["label"]]


def test_docred_layout_holds_out_dev_and_tests_on_dev(tmp_path):
    train = [document(f"doc {index}", born=(f"City{index}",)) for index in range(30)]
    write_json(tmp_path / "docred" / "train_annotated.json", train)
    write_json(tmp_path / "docred" / "dev.json", [document("dev 0", born=("City3",))])
    splits = DocREDDataModule(task="docred", data_dir=tmp_path).labelled_splits()
    assert {split: len(records) for split, records in splits.items()} == {"train": 27, "dev": 3, "test": 1}
    # The test document's city is City3's: in train_annotated, so all its facts are in train.
    assert splits["test"][0]["in_train"] == [True, True, True]


def malformed(change) -> list:
    documents = [document("good"), document("bad")]
    change(documents[1])
    return documents


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d["vertexSet"][1][0].update(pos=[5, 9]), r"pos \[5, 9\], not a token span"),
        (lambda d: d["vertexSet"][1][0].update(sent_id=2), "sent_id 2, outside"),
        (lambda d: d["labels"][0].update(h=3), "h = 3 is not one of the document's 3 entities"),
        (lambda d: d["labels"][0].update(t=-1), "t = -1"),
        (lambda d: d["labels"][0].update(r="P9999"), "unknown relation 'P9999'"),
        (lambda d: d.pop("vertexSet"), "missing key"),
        (lambda d: d["vertexSet"].append([]), "entity 3: expected a non-empty list of mentions"),
    ],
)
def test_malformed_documents_name_file_and_document(tmp_path, change, message):
    data_dir = revised_dir(tmp_path, [document("first")], malformed(change))
    with pytest.raises(KlmError, match=rf"test_revised\.json: document 1.*{message}"):
        DocREDDataModule(data_dir=data_dir).labelled_splits()


def test_missing_files_and_bad_rel_info(tmp_path):
    (tmp_path / "redocred").mkdir()
    with pytest.raises(KlmError, match="no Re-DocRED data under .*dev_revised.json and test_revised.json"):
        DocREDDataModule(data_dir=tmp_path).labelled_splits()
    revised_dir(tmp_path, [document("a")], [document("b")])
    write_json(tmp_path / "redocred" / "rel_info.json", {"P6": "head of government"})
    with pytest.raises(KlmError, match="rel_info.json: expected an object naming DocRED's 96 relations"):
        DocREDDataModule(data_dir=tmp_path).labelled_splits()


# -- encoding and the head ------------------------------------------------------------------------
def encoded_batch(tokenizer, records, max_length=64):
    kind = DocumentRelationTask(SPEC)
    columns = kind.encode(records, tokenizer, max_length)
    features = [{name: values[index] for name, values in columns.items()} for index in range(len(records))]
    return kind, kind.collate(copy.deepcopy(features), tokenizer)


def two_documents():
    reader = DocREDDataModule()
    records = [
        reader.record("a", document("a", born=("Paris",)), "here"),
        reader.record("b", document("b", born=("Lyon",), extra_label={"r": "P131", "h": 1, "t": 2}), "here"),
    ]
    records[1]["entities"].append({**records[1]["entities"][2], "name": "Europe"})  # an entity in no fact
    return mark_in_train(records, set())


def test_collate_builds_mentions_and_every_ordered_pair(tokenizer):
    kind, batch = encoded_batch(tokenizer, two_documents())
    assert batch["mention_mask"].shape[:2] == (2, 5) and batch["entity_mentions"].shape == (2, 4, 5)
    assert batch["entity_mentions"][0, 0].tolist() == [1, 1, 0, 0, 0]  # Alice Smith's two mentions
    first_mention = batch["mention_mask"][0, 0].nonzero().flatten().tolist()
    assert tokenizer.decode(batch["input_ids"][0, first_mention]) == "alice smith"
    assert len(batch["pair_document"]) == 3 * 2 + 4 * 3
    labels = batch["pair_labels"]
    assert labels.sum(-1).tolist() == [1] * 10 + [2] + [1] * 7  # (1, 2) of document b holds two relations
    pair = (batch["pair_document"] == 1) & (batch["pair_head"] == 1) & (batch["pair_tail"] == 2)
    assert labels[pair].nonzero()[:, 1].tolist() == sorted([relation("P17"), relation("P131")])
    assert labels[:, 0].sum() == 18 - 6  # NA: every pair without a fact
    assert kind.gold(batch)[1]["facts"] == two_documents()[1]["label"]


def test_truncation_drops_mentions_and_zeroes_their_entity(tokenizer):
    record = two_documents()[0]
    _, batch = encoded_batch(tokenizer, [record], max_length=8)  # France (second sentence) is cut off
    assert batch["entity_mentions"][0, 2].sum() == 0 and batch["entity_mentions"][0, 0].sum() == 1
    head = EntityPairHead(4, len(LABELS), 0.0)
    hidden = torch.randn(1, batch["input_ids"].shape[1], 4)
    entities = head.entities(hidden, batch)
    assert entities[0, 2].abs().sum() == 0 and entities[0, 0].abs().sum() > 0
    assert len(batch["pair_document"]) == 6  # France's pairs are still scored


def test_baseline_forward_backward_decode_and_score(tokenizer):
    from knowledge_lm.core.backbones import load_backbone
    from knowledge_lm.methods.baseline import Baseline

    encoder, tokenizer, _ = load_backbone("tiny")
    model = Baseline(encoder, SPEC)
    kind, batch = encoded_batch(tokenizer, two_documents())
    logits, features = model(batch)
    assert logits.shape == (18, len(LABELS)) and features.shape == (18, 2 * encoder.config.hidden_size)
    loss = model.kind.loss(logits, batch)
    assert torch.isfinite(loss) and loss > 0
    loss.backward()
    assert encoder.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert model.head.bilinear.weight.grad.abs().sum() > 0

    # A confident model: every gold relation above NA, NA on top elsewhere, decodes exactly the gold facts.
    perfect = torch.where(batch["pair_labels"] > 0, 5.0, -5.0)
    perfect[:, 0] = torch.where(batch["pair_labels"][:, 0] > 0, 5.0, 0.0)
    predictions = kind.decode(perfect, batch)
    assert [sorted(facts) for facts in predictions] == [record["label"] for record in two_documents()]
    assert kind.score(predictions, kind.gold(batch)) == {"f1": 100.0, "ign_f1": 100.0}
    assert kind.loss(perfect, batch) < loss


# -- the shared Re-DocRED files -------------------------------------------------------------------
@needs_shared
def test_reads_the_shared_redocred_files():
    splits = DocREDDataModule(data_dir=SHARED).labelled_splits()
    assert {split: len(records) for split, records in splits.items()} == {"train": 700, "dev": 100, "test": 200}
    ids = [record["id"] for records in splits.values() for record in records]
    assert len(set(ids)) == 1000
    assert sum(len(record["label"]) for records in splits.values() for record in records) == 17_284 + 17_448
    assert all(all(record["in_train"]) for record in splits["train"])
    assert (
        0
        < sum(flag for record in splits["test"] for flag in record["in_train"])
        < sum(len(record["label"]) for record in splits["test"])
    )
    # Mention names are DocRED's own strings: the joined tokens, up to spacing in all but a handful.
    mentions = [
        (record["text_a"][m["start"] : m["end"]], m["name"])
        for records in splits.values()
        for record in records
        for e in record["entities"]
        for m in e["mentions"]
    ]
    same = sum(span.replace(" ", "") == name.replace(" ", "") for span, name in mentions)
    assert same >= 0.999 * len(mentions)
