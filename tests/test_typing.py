"""Entity typing: scores against hand computations, decoding, mention pooling, a training step, FIGER's reader."""

import json
import math
from pathlib import Path

import pytest
import torch

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import DATASETS, TASK_KINDS
from knowledge_lm.core.subsets import fraction_subset
from knowledge_lm.data.base import TaskSpec
from knowledge_lm.data.figer import FigerDataModule
from knowledge_lm.data.openentity import ENTITY_TYPES, OpenEntityDataModule
from knowledge_lm.tasks.typing import (
    MentionHead,
    TypingTask,
    decode_types,
    typing_scores,
)

SCORE_NAMES = {
    f"{average}_{part}"
    for average in ("loose_macro", "ling_weld_loose_macro", "loose_micro", "micro")
    for part in ("precision", "recall", "f1")
} | {"strict_accuracy"}


def typing_kind(kind: str = "typing", labels=("a", "b", "c", "d")) -> TypingTask:
    return TASK_KINDS.get(kind)(TaskSpec("main", kind, tuple(labels), ("strict_accuracy",), "strict_accuracy"))


# -- scores -----------------------------------------------------------------------------------
def test_scores_by_hand():
    # Type 3 is never predicted; mention 2 has no gold type and no prediction.
    predicted = [[0], [0, 1], [], [2]]
    gold = [[0], [1], [], [0, 3]]
    scores = typing_scores(predicted, gold)
    assert set(scores) == SCORE_NAMES
    assert scores["strict_accuracy"] == pytest.approx(100 * 2 / 4)  # mentions 0 and 2
    # Macro: per-mention ratios summed, divided by all 4 mentions (ERNIE's denominators).
    macro_precision, macro_recall = (1 + 1 / 2 + 0 + 0) / 4, (1 + 1 + 0 + 0 / 2) / 4
    assert scores["loose_macro_precision"] == pytest.approx(100 * macro_precision)
    assert scores["loose_macro_recall"] == pytest.approx(100 * macro_recall)
    assert scores["loose_macro_f1"] == pytest.approx(
        100 * 2 * macro_precision * macro_recall / (macro_precision + macro_recall)
    )
    # Ling & Weld: precision over the 3 mentions with a prediction, recall over the 3 with a gold type.
    ling_weld_precision, ling_weld_recall = (1 + 1 / 2 + 0) / 3, (1 + 1 + 0 / 2) / 3
    assert scores["ling_weld_loose_macro_precision"] == pytest.approx(100 * ling_weld_precision)
    assert scores["ling_weld_loose_macro_recall"] == pytest.approx(100 * ling_weld_recall)
    assert scores["ling_weld_loose_macro_f1"] == pytest.approx(
        100 * 2 * ling_weld_precision * ling_weld_recall / (ling_weld_precision + ling_weld_recall)
    )
    # Micro: 2 correct (mention, type) pairs of 4 predicted and 4 gold.
    for average in ("loose_micro", "micro"):
        assert (
            scores[f"{average}_precision"]
            == scores[f"{average}_recall"]
            == scores[f"{average}_f1"]
            == pytest.approx(50)
        )


def test_micro_scores_match_sklearn():
    from sklearn.metrics import f1_score, precision_score, recall_score
    from sklearn.preprocessing import MultiLabelBinarizer

    predicted = [[0, 2], [1], [3], [], [0, 1, 2]]
    gold = [[0], [1, 2], [], [3], [0, 1]]
    binarizer = MultiLabelBinarizer(classes=range(4)).fit([])
    predicted_matrix, gold_matrix = binarizer.transform(predicted), binarizer.transform(gold)
    scores = typing_scores(predicted, gold)
    assert scores["micro_precision"] == pytest.approx(
        100 * precision_score(gold_matrix, predicted_matrix, average="micro")
    )
    assert scores["micro_recall"] == pytest.approx(100 * recall_score(gold_matrix, predicted_matrix, average="micro"))
    assert scores["micro_f1"] == pytest.approx(100 * f1_score(gold_matrix, predicted_matrix, average="micro"))


@pytest.mark.parametrize(
    "predicted, gold, strict",
    [
        ([[], []], [[], []], 100.0),  # nothing to find, nothing found
        ([[], []], [[0], [1, 2]], 0.0),  # nothing predicted
        ([[0], [1]], [[], []], 0.0),  # nothing to find
        ([], [], 0.0),  # an empty split
    ],
)
def test_empty_sets_give_zero_not_nan(predicted, gold, strict):
    scores = typing_scores(predicted, gold)
    assert scores["strict_accuracy"] == strict
    assert all(not math.isnan(value) for value in scores.values())
    assert all(value == 0.0 for name, value in scores.items() if name != "strict_accuracy")


def test_order_and_duplicates_do_not_matter():
    assert typing_scores([[2, 0, 0]], [[0, 2]]) == typing_scores([[0, 2]], [[2, 0]])
    assert typing_scores([[2, 0, 0]], [[0, 2]])["strict_accuracy"] == 100.0


def test_score_reports_the_specs_metrics():
    spec = OpenEntityDataModule.spec("main")
    scores = TASK_KINDS.get(spec.kind)(spec).score([[0], [1]], [[0], [2]])
    assert list(scores) == list(spec.metrics) and scores["micro_f1"] == pytest.approx(50)


# -- decoding -----------------------------------------------------------------------------------
LOGITS = torch.tensor([[2.0, -1.0, 0.5, -4.0], [-3.0, -0.5, -2.0, -1.0], [0.0, -1.0, -1.0, -0.2]])


def test_decode_threshold_without_fallback():
    # A logit of exactly 0 is sigmoid 0.5: not above the threshold.
    assert decode_types(LOGITS, at_least_one=False) == [[0, 2], [], []]
    assert typing_kind("typing").decode(LOGITS, {}) == [[0, 2], [], []]


def test_decode_falls_back_to_the_top_type():
    assert decode_types(LOGITS, at_least_one=True) == [[0, 2], [1], [0]]
    assert typing_kind("typing_at_least_one").decode(LOGITS, {}) == [[0, 2], [1], [0]]


def test_gold_and_loss_read_multi_hot_labels():
    kind = typing_kind()
    labels = torch.tensor([[1.0, 0, 1, 0], [0, 0, 0, 0]])
    assert kind.gold({"labels": labels}) == [[0, 2], []]
    logits = torch.zeros(2, 4, requires_grad=True)
    loss = kind.loss(logits, {"labels": labels})
    assert loss.item() == pytest.approx(math.log(2))


# -- mention pooling ------------------------------------------------------------------------------
TRICKY = [
    ("Émile Zola wrote Germinal in Médan .", "Émile Zola"),  # accents, mention at the start
    ("They finally met in São Paulo", "São Paulo"),  # mention at the very end, no final punctuation
    ("Café Müller's owner, Jürgen Groß-Köhler, left .", "Jürgen Groß-Köhler"),
    ("  Leading spaces and a naïve   reporter", "naïve   reporter"),
    ("x", "x"),
]


@pytest.mark.parametrize("text, mention", TRICKY)
def test_mention_tokens_are_exactly_the_mentions(tokenizer, text, mention):
    start = text.index(mention)
    record = {"text_a": text, "label": [1], "mention": {"start": start, "end": start + len(mention)}}
    kind = typing_kind()
    assert kind.texts([record]) == ([text], None)
    encoded = kind.encode([record], tokenizer, max_length=64)
    first, stop = encoded["mention_span"][0]
    tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"][0])
    assert tokens[first:stop] == tokenizer.tokenize(mention)
    assert encoded["labels"] == [[0, 1, 0, 0]]

    batch = kind.collate([{name: values[0] for name, values in encoded.items()}], tokenizer)
    assert batch["mention_mask"][0].nonzero().flatten().tolist() == list(range(first, stop))
    hidden = torch.arange(batch["input_ids"].shape[1], dtype=torch.float32).reshape(1, -1, 1).repeat(1, 1, 3)
    _, features = MentionHead(3, 4, 0.0)(hidden, batch)
    assert features[0].tolist() == pytest.approx([(first + stop - 1) / 2] * 3)


def test_collate_pads_a_batch(tokenizer):
    records = [
        {"text_a": text, "label": [], "mention": {"start": text.index(m), "end": text.index(m) + len(m)}}
        for text, m in TRICKY
    ]
    kind = typing_kind()
    encoded = kind.encode(records, tokenizer, max_length=64)
    batch = kind.collate(
        [{name: values[i] for name, values in encoded.items()} for i in range(len(records))], tokenizer
    )
    assert batch["labels"].dtype == torch.float32 and batch["labels"].shape == (5, 4)
    assert batch["mention_mask"].shape == batch["input_ids"].shape
    assert (batch["mention_mask"] <= batch["attention_mask"]).all()
    assert batch["mention_mask"].sum(1).tolist() == [stop - first for first, stop in encoded["mention_span"]]


def test_truncated_mention_falls_back_to_cls(tokenizer):
    text = "word " * 40 + "Paris"
    record = {"text_a": text, "label": [0], "mention": {"start": text.index("Paris"), "end": len(text)}}
    assert typing_kind().encode([record], tokenizer, max_length=16)["mention_span"] == [[0, 1]]


# -- a training step on Open Entity -----------------------------------------------------------------
def test_baseline_trains_on_openentity(shared_data, tmp_path):
    from knowledge_lm.core.backbones import load_backbone
    from knowledge_lm.methods.baseline import Baseline

    encoder, tokenizer, _ = load_backbone("tiny")
    data = OpenEntityDataModule(
        tokenizer=tokenizer, data_dir=shared_data, fraction=0.01, batch_size=8, cache_dir=tmp_path
    )
    data.setup()
    batch = next(iter(data.train_dataloader()))
    assert batch["labels"].shape == (8, len(ENTITY_TYPES)) and batch["labels"].dtype == torch.float32
    assert (batch["mention_mask"].sum(1) > 0).all()

    model = Baseline(encoder, data.task_spec)
    logits, features = model(batch)
    assert logits.shape == (8, len(ENTITY_TYPES)) and features.shape == (8, encoder.config.hidden_size)
    model.kind.loss(logits, batch).backward()
    assert model.head.classifier.out.weight.grad.abs().sum() > 0
    assert model.encoder.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    scores = model.kind.score(model.kind.decode(logits, batch), model.kind.gold(batch))
    assert list(scores) == list(data.task_spec.metrics)


def test_openentity_fractions_are_nested_and_stratified(shared_data):
    train = OpenEntityDataModule(data_dir=shared_data).labelled_splits()["train"]
    kind = typing_kind("typing", ENTITY_TYPES)
    strata = kind.strata(train)
    assert set(strata) == set(range(len(ENTITY_TYPES))) | {None}
    ids = [record["id"] for record in train]
    subsets = [set(fraction_subset(ids, strata, fraction, seed=0).tolist()) for fraction in (0.01, 0.1, 1.0)]
    assert subsets[0] < subsets[1] < subsets[2] == set(range(len(train)))
    assert 15 <= len(subsets[0]) <= 30 and 180 <= len(subsets[1]) <= 220
    # Mentions without a type are kept in their share.
    untyped = [index for index in subsets[1] if not train[index]["label"]]
    assert abs(len(untyped) / len(subsets[1]) - 354 / 1998) < 0.02


# -- FIGER ----------------------------------------------------------------------------------------
def figer_item(sent="Bob Dylan played in Duluth .", start=0, end=9, labels=("/person/artist", "/person"), ents=()):
    return {"sent": sent, "start": start, "end": end, "labels": list(labels), "ents": [list(e) for e in ents]}


def write_figer(root: Path, train: list, dev: list | None = None, test: list | None = None):
    root.mkdir(parents=True, exist_ok=True)
    for split, items in (("train", train), ("dev", dev or train[:1]), ("test", test or train[:1])):
        (root / f"{split}.json").write_text(json.dumps(items))


def test_figer_is_registered_with_its_scores():
    assert DATASETS.get("figer") is FigerDataModule
    spec = FigerDataModule.spec("main")
    assert spec.kind == "typing_at_least_one" and spec.main_metric == "strict_accuracy"
    assert set(spec.metrics) == {"strict_accuracy", "loose_macro_f1", "ling_weld_loose_macro_f1", "loose_micro_f1"}


def test_figer_missing_data_names_the_files(tmp_path):
    with pytest.raises(KlmError, match="no FIGER data.*figer/ holding train.json, dev.json and test.json"):
        FigerDataModule(data_dir=tmp_path).labelled_splits()
    (tmp_path / "figer").mkdir()
    (tmp_path / "figer" / "train.json").write_text("[]")
    with pytest.raises(KlmError, match="missing FIGER file.*dev.json, test.json"):
        FigerDataModule(data_dir=tmp_path).labelled_splits()


@pytest.mark.parametrize("layout", ["figer", "FIGER", "."])
def test_figer_reads_a_hand_written_release(tmp_path, tokenizer, layout):
    train = [
        figer_item(ents=[["Q392", 0, 9, 0.9]]),
        figer_item(start=20, end=26, labels=["/location/city", "/location"]),
        figer_item(sent="Duluth is cold .", start=0, end=6, labels=["/location"]),
    ]
    write_figer(tmp_path / layout, train, dev=[figer_item(labels=["/person"])])
    data = FigerDataModule(tokenizer=tokenizer, data_dir=tmp_path, cache_dir=tmp_path / "cache")
    splits = data.labelled_splits()
    types = ("/location", "/location/city", "/person", "/person/artist")
    assert data.task_spec.labels == types and data.task_spec.kind == "typing_at_least_one"
    assert [len(splits[split]) for split in ("train", "dev", "test")] == [3, 1, 1]
    first, city, _ = splits["train"]
    assert first["id"] == "figer-train-0" and first["label"] == [2, 3]
    assert first["entities"] == [{"qid": "Q392", "start": 0, "end": 9, "score": 0.9}]
    assert city["text_a"][city["mention"]["start"] : city["mention"]["end"]] == "Duluth" and city["label"] == [0, 1]
    assert splits["dev"][0]["label"] == [2]

    data.setup()
    batch = next(iter(data.val_dataloader()[0]))
    assert batch["labels"].tolist() == [[0.0, 0.0, 1.0, 0.0]]


def test_figer_rejects_a_type_unseen_in_train(tmp_path):
    write_figer(tmp_path / "figer", [figer_item()], test=[figer_item(labels=["/organization"])])
    with pytest.raises(KlmError, match=r"test.json: record 0: bad label '/organization'"):
        FigerDataModule(data_dir=tmp_path).labelled_splits()
