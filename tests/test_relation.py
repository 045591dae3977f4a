"""Relation classification: the official scorers, entity markers and mean pooling, the head, FewRel, TACRED."""

import json
import random
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import torch
from helpers import SHARED, needs_shared
from sklearn.metrics import f1_score

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import DATASETS, TASK_KINDS
from knowledge_lm.data.base import TaskSpec
from knowledge_lm.data.fewrel import RELATIONS as FEWREL_RELATIONS
from knowledge_lm.data.fewrel import FewRelDataModule, split_instances
from knowledge_lm.data.semeval import RELATION_LABELS as SEMEVAL_LABELS
from knowledge_lm.data.semeval import SemEvalDataModule
from knowledge_lm.data.tacred import RELATION_LABELS as TACRED_LABELS
from knowledge_lm.data.tacred import TacredDataModule
from knowledge_lm.tasks.relation import (
    MarkerRelationTask,
    MeanPoolRelationTask,
    head_and_tail,
    insert_markers,
    macro_f1,
    semeval_macro_f1,
    tacred_micro_scores,
)

CE12, CE21, CW21, MT12 = "Cause-Effect(e1,e2)", "Cause-Effect(e2,e1)", "Component-Whole(e2,e1)", "Message-Topic(e1,e2)"


# -- scorers ----------------------------------------------------------------------------------
def perl_official_score(predicted, gold):
    """A line-by-line port of semeval2010_task8_scorer-v1.2.pl's (9+1)-way evaluation with direction."""

    def no_direction(label):
        return re.sub(r"\(e[12],e[12]\)$", "", label)

    confusion, proposed, answers = defaultdict(Counter), Counter(), Counter()
    for guess, answer in zip(predicted, gold):
        if guess == answer:
            confusion[no_direction(guess)][no_direction(answer)] += 1
            proposed[no_direction(guess)] += 1
        elif no_direction(guess) == no_direction(answer):
            confusion["WRONG_DIR"][no_direction(answer)] += 1
            proposed["WRONG_DIR"] += 1
        else:
            confusion[no_direction(guess)][no_direction(answer)] += 1
            proposed[no_direction(guess)] += 1
    for answer in gold:
        answers[no_direction(answer)] += 1
    macro = 0.0
    for label in sorted(answers):
        correct = confusion[label][label]
        precision = 0 if proposed[label] == 0 else correct / (proposed[label] + confusion["WRONG_DIR"][label])
        recall = 0 if answers[label] == 0 else correct / answers[label]
        if label != "Other":
            macro += 0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    return macro / (len(answers) - ("Other" in answers))


def test_semeval_score_matches_the_official_scorer_on_random_predictions():
    rng = random.Random(7)
    for _ in range(20):
        gold = [rng.choice(SEMEVAL_LABELS) for _ in range(300)]
        predicted = [answer if rng.random() < 0.5 else rng.choice(SEMEVAL_LABELS) for answer in gold]
        assert semeval_macro_f1(predicted, gold) == pytest.approx(perl_official_score(predicted, gold), abs=1e-12)


def test_semeval_score_edge_cases():
    # Cause-Effect: 1 right of 3 guesses (one has the wrong direction, one is gold Other), 2 gold: P 1/3, R 1/2.
    # Component-Whole: never found. Other is no class; the 7 relations absent from gold are not averaged.
    gold = [CE12, CE12, "Other", CW21]
    predicted = [CE12, CE21, CE12, "Other"]
    assert semeval_macro_f1(predicted, gold) == pytest.approx((0.4 + 0.0) / 2)
    # The right relation in the wrong direction is a wrong decision.
    assert semeval_macro_f1([CE21], [CE12]) == 0.0
    assert semeval_macro_f1([CE12], [CE12]) == 1.0
    # Finding Other earns nothing; guessing a relation absent from gold lowers nobody's precision.
    assert semeval_macro_f1([CE12, "Other", MT12], [CE12, "Other", "Other"]) == 1.0
    assert semeval_macro_f1(["Other", CE12], ["Other", "Other"]) == 0.0


def test_tacred_micro_scores():
    gold = ["no_relation", "per:age", "per:age", "org:founded", "no_relation"]
    predicted = ["per:age", "per:age", "no_relation", "org:founded", "no_relation"]
    scores = tacred_micro_scores(predicted, gold)
    # 3 guesses other than no_relation, 3 gold relations, 2 hits.
    assert scores == pytest.approx({"micro_precision": 2 / 3, "micro_recall": 2 / 3, "micro_f1": 2 / 3})
    # A no_relation hit counts nowhere: adding many changes nothing.
    assert tacred_micro_scores(predicted + ["no_relation"] * 50, gold + ["no_relation"] * 50) == scores
    # Predicting no_relation everywhere: the scorer's P = 1 and F1 = 0, never NaN.
    assert tacred_micro_scores(["no_relation"] * 5, gold) == {
        "micro_precision": 1.0,
        "micro_recall": 0.0,
        "micro_f1": 0.0,
    }
    assert tacred_micro_scores(["no_relation"], ["no_relation"]) == {
        "micro_precision": 1.0,
        "micro_recall": 0.0,
        "micro_f1": 0.0,
    }


def test_macro_f1_is_sklearns_over_the_labels_seen():
    rng = random.Random(3)
    gold = [rng.randrange(6) for _ in range(200)]
    predicted = [answer if rng.random() < 0.6 else rng.randrange(8) for answer in gold]
    assert macro_f1(predicted, gold) == pytest.approx(f1_score(gold, predicted, average="macro", zero_division=0))
    # The negative label is no class: its own F1 is not averaged (its wrong guesses still cost recall elsewhere).
    assert macro_f1([0, 1, 1], [0, 1, 2], negative=1) == 0.5


def test_kind_scores_the_specs_metrics_in_percent():
    kind = MarkerRelationTask(SemEvalDataModule.spec("main"))
    predicted = [SEMEVAL_LABELS.index(label) for label in [CE12, CE21, CE12, "Other"]]
    gold = [SEMEVAL_LABELS.index(label) for label in [CE12, CE12, "Other", CW21]]
    assert kind.score(predicted, gold) == pytest.approx({"semeval_macro_f1": 20.0, "accuracy": 25.0})
    tacred = MarkerRelationTask(TacredDataModule.spec("main"))
    assert tacred.score([0, 0], [1, 0]) == {"micro_f1": 0.0, "micro_precision": 100.0, "micro_recall": 0.0}
    with pytest.raises(KlmError, match="unknown relation metric"):
        MarkerRelationTask(TaskSpec("main", "relation", ("a", "b"), ("f1",), "f1"))


# -- markers and mean pooling ----------------------------------------------------------------
def record(text, head, tail, head_role="e1", tail_role="e2", label=0, **entity_fields):
    """A record whose head and tail are the first occurrences of the strings ``head`` and ``tail``."""
    entities = []
    for mention, role in ((head, head_role), (tail, tail_role)):
        start = text.index(mention)
        entities.append(
            {"start": start, "end": start + len(mention), "mention": mention, "role": role, **entity_fields}
        )
    return {"id": f"r-{len(text)}-{head}", "text_a": text, "text_b": None, "label": label, "entities": entities}


TRICKY = [
    record("Smith founded Acme.", "Smith", "Acme"),  # head at the start
    record("The cradle held the child", "child", "cradle"),  # head after tail, tail... head at the end
    record("New York-based Acme Corp sued IBM", "New York", "Acme Corp"),  # adjacent across a hyphen
    record("JohnSmith", "John", "Smith", "head", "tail"),  # adjacent without a space
    record("A storm caused damage.", "storm", "damage", "subj", "obj", type="NATURAL_EVENT"),
]


@pytest.mark.parametrize("example", TRICKY, ids=[r["text_a"] for r in TRICKY])
def test_markers_keep_entity_text_and_positions(example, tokenizer):
    head, tail = head_and_tail(example)
    marked = insert_markers(example["text_a"], head, tail)
    for entity, marker_position, marker in (
        (head, marked.opening_markers[0], "@"),
        (tail, marked.opening_markers[1], "#"),
    ):
        assert marked.text[marker_position] == marker
        start, end = marked.span(entity["start"], entity["end"])
        assert marked.text[start:end] == entity["mention"]
    # Every character of the original text keeps its place relative to the others.
    assert "".join(marked.text[marked.position(i)] for i in range(len(example["text_a"]))) == example["text_a"]

    kind = MarkerRelationTask(SemEvalDataModule.spec("main"))
    assert kind.texts([example]) == ([marked.text], None)
    encoded = kind.encode([example], tokenizer, 64)
    tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"][0])
    (head_start, head_end), (tail_start, tail_end) = encoded["entity_spans"][0]
    assert (
        (tokens[head_start], tokens[tail_start]) == ("@", "#")
        and head_end == head_start + 1
        and tail_end == tail_start + 1
    )
    if "type" in head:
        assert tokens[head_start : head_start + 5] == ["@", "*", "natural", "event", "*"]
        assert marked.text.startswith("A @ * natural event * storm @ caused # ^ natural event ^ damage #")
    else:
        first_head_token = tokenizer.tokenize(head["mention"])[0]
        assert tokens[head_start + 1] == first_head_token


def test_markers_map_knowledge_spans():
    example = record("Smith founded Acme in Ohio.", "Acme", "Smith")
    kind = MarkerRelationTask(SemEvalDataModule.spec("main"))
    text = kind.texts([example])[0][0]
    assert text == "# Smith # founded @ Acme @ in Ohio."
    spans = [(0, 5), (14, 18), (22, 26), (0, 26)]
    mapped = kind.map_char_spans(example, spans)
    assert [text[start:end] for start, end in mapped] == ["Smith", "Acme", "Ohio", "Smith # founded @ Acme @ in Ohio"]
    assert MeanPoolRelationTask(SemEvalDataModule.spec("mean_pool")).map_char_spans(example, spans) == spans


def test_mean_pool_takes_exactly_the_entity_tokens(tokenizer):
    kind = MeanPoolRelationTask(SemEvalDataModule.spec("mean_pool"))
    examples = [
        record("The disassembler was written by an author", "author", "disassembler"),
        record("Unbelievably long-winded explanations bored everyone", "long-winded explanations", "everyone"),
    ]
    assert kind.texts(examples)[0] == [example["text_a"] for example in examples]
    encoded = kind.encode(examples, tokenizer, 64)
    for example, ids, spans in zip(examples, encoded["input_ids"], encoded["entity_spans"]):
        for entity, (start, end) in zip(head_and_tail(example), spans):
            assert tokenizer.convert_ids_to_tokens(ids[start:end]) == tokenizer.tokenize(entity["mention"])


def test_truncated_entities(tokenizer):
    example = record("a b c d e f g h i j k l m n o p Paris", "a b", "Paris")
    for kind in (
        MarkerRelationTask(SemEvalDataModule.spec("main")),
        MeanPoolRelationTask(SemEvalDataModule.spec("mean_pool")),
    ):
        head_span, tail_span = kind.encode([example], tokenizer, 8)["entity_spans"][0]
        assert head_span[0] > 0 and tail_span == [0, 1]  # cut off: [CLS]
    cut = MeanPoolRelationTask(SemEvalDataModule.spec("mean_pool")).encode(
        [record("x y z a b c d e f", "x", "c d e f")], tokenizer, 8
    )
    assert cut["entity_spans"][0][1] == [6, 7]  # "c d e f" cut in the middle keeps "c"


def test_entity_roles_are_checked():
    example = record("Smith founded Acme.", "Smith", "Acme")
    example["entities"][1]["role"] = "e1"
    with pytest.raises(KlmError, match="expected one head entity"):
        head_and_tail(example)


# -- TACRED -------------------------------------------------------------------------------------
def tacred_item(index, tokens, subj, obj, relation, subj_type="PERSON", obj_type="ORGANIZATION"):
    return {
        "id": f"t{index}",
        "docid": "d",
        "token": tokens,
        "subj_start": subj[0],
        "subj_end": subj[1],
        "obj_start": obj[0],
        "obj_end": obj[1],
        "subj_type": subj_type,
        "obj_type": obj_type,
        "relation": relation,
    }


def write_tacred(folder: Path):
    folder.mkdir(parents=True)
    items = [
        tacred_item(
            0,
            ["Bill", "Gates", "-LRB-", "born", "1955", "-RRB-", "founded", "Microsoft", "."],
            (0, 1),
            (7, 7),
            "org:founded_by",
        ),
        tacred_item(1, ["Ann", "works", "at", "Acme", "Corp", "."], (0, 0), (3, 4), "per:employee_of"),
        tacred_item(2, ["Ann", "met", "Bob", "."], (0, 0), (2, 2), "no_relation", obj_type="PERSON"),
        tacred_item(
            3,
            ["Acme", "is", "in", "Ohio"],
            (0, 0),
            (3, 3),
            "org:stateorprovince_of_headquarters",
            subj_type="ORGANIZATION",
            obj_type="STATE_OR_PROVINCE",
        ),
    ]
    for split in ("train", "dev", "test"):
        (folder / f"{split}.json").write_text(json.dumps(items))
    return items


def test_tacred_missing_data_names_the_files_and_the_licence(tmp_path):
    with pytest.raises(KlmError, match=r"train\.json, dev\.json and test\.json.*LDC licence"):
        TacredDataModule(data_dir=tmp_path).labelled_splits()
    (tmp_path / "tacred").mkdir()
    (tmp_path / "tacred" / "train.json").write_text("[]")
    with pytest.raises(KlmError, match="missing TACRED file.*dev.json, test.json"):
        TacredDataModule(data_dir=tmp_path).labelled_splits()


def test_tacred_reads_the_official_json(tmp_path):
    write_tacred(tmp_path / "tacred")
    assert DATASETS.get("tacred") is TacredDataModule
    spec = TacredDataModule.spec("main")
    assert len(TACRED_LABELS) == len(set(TACRED_LABELS)) == 42 and spec.labels[0] == "no_relation"
    assert spec.main_metric == "micro_f1" and spec.kind == "relation"
    splits = TacredDataModule(data_dir=tmp_path).labelled_splits()
    first = splits["train"][0]
    assert first["text_a"] == "Bill Gates ( born 1955 ) founded Microsoft ."
    assert first["label"] == TACRED_LABELS.index("org:founded_by") and first["id"] == "tacred-t0"
    assert first["entities"] == [
        {"start": 0, "end": 10, "mention": "Bill Gates", "role": "head", "type": "PERSON"},
        {"start": 33, "end": 42, "mention": "Microsoft", "role": "tail", "type": "ORGANIZATION"},
    ]
    last = splits["test"][3]
    assert (
        MarkerRelationTask(spec).texts([last])[0][0] == "@ * organization * Acme @ is in # ^ state or province ^ Ohio #"
    )


def test_tacred_rejects_bad_records(tmp_path):
    items = write_tacred(tmp_path / "tacred")
    items[1]["relation"] = "per:favourite_colour"
    (tmp_path / "tacred" / "dev.json").write_text(json.dumps(items))
    with pytest.raises(KlmError, match=r"dev.json: record 1: bad label 'per:favourite_colour'"):
        TacredDataModule(data_dir=tmp_path).labelled_splits()
    items[1]["relation"], items[1]["obj_end"] = "no_relation", 9
    (tmp_path / "tacred" / "dev.json").write_text(json.dumps(items))
    with pytest.raises(KlmError, match=r"record 1: obj tokens \[3, 9\] are not a span"):
        TacredDataModule(data_dir=tmp_path).labelled_splits()


# -- the head through TaskModel -----------------------------------------------------------------
@pytest.mark.parametrize("task", ["main", "mean_pool"])
def test_head_trains_through_the_task_model(tmp_path, task):
    from knowledge_lm.core.backbones import load_backbone
    from knowledge_lm.methods.baseline import Baseline

    write_tacred(tmp_path / "tacred")
    encoder, tokenizer, _ = load_backbone("tiny")
    data = TacredDataModule(task=task, tokenizer=tokenizer, data_dir=tmp_path, batch_size=4)
    data.setup()
    batch = next(iter(data.val_dataloader()[0]))
    assert batch["entity_spans"].shape == (4, 2, 2) and batch["labels"].dtype == torch.long
    model = Baseline(encoder, data.task_spec, eval_splits=data.eval_split_names)
    assert type(model.kind) is TASK_KINDS.get({"main": "relation", "mean_pool": "relation_mean"}[task])
    hidden = model.encode(batch)
    logits, features = model.head(hidden, batch)
    assert logits.shape == (4, 42) and features.shape == (4, 2 * hidden.shape[-1])
    size = hidden.shape[-1]
    for row, spans in enumerate(batch["entity_spans"].tolist()):
        for slot, (start, end) in enumerate(spans):
            expected = hidden[row, start:end].mean(0)
            assert torch.allclose(features[row, slot * size : (slot + 1) * size], expected, atol=1e-6)
            if task == "main":
                assert (
                    end == start + 1
                    and tokenizer.convert_ids_to_tokens(int(batch["input_ids"][row, start])) == "@#"[slot]
                )
    loss = model.kind.loss(model(batch)[0], batch)
    loss.backward()
    assert model.head.classifier.dense.weight.grad.abs().sum() > 0
    assert encoder.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    predictions = model.kind.decode(logits, batch)
    assert set(model.kind.score(predictions, model.kind.gold(batch))) == {"micro_f1", "micro_precision", "micro_recall"}


# -- FewRel and SemEval ---------------------------------------------------------------------------
def test_fewrel_split_is_stratified_stable_and_disjoint():
    counts = {"P1": 700, "P2": 700, "P3": 55}
    split = split_instances(counts)
    assert [len(split["P1"][name]) for name in ("train", "dev", "test")] == [490, 70, 140]
    assert [len(split["P3"][name]) for name in ("train", "dev", "test")] == [38, 6, 11]
    for relation, count in counts.items():
        parts = split[relation]
        assert sorted(parts["train"] + parts["dev"] + parts["test"]) == list(range(count))
    assert split_instances(counts) == split and split_instances(counts, seed=1) != split


@needs_shared
def test_fewrel_shared_data():
    assert DATASETS.get("fewrel") is FewRelDataModule
    spec = FewRelDataModule.spec("main")
    assert spec.labels == FEWREL_RELATIONS and len(spec.labels) == 16 and spec.metrics == ("accuracy", "macro_f1")
    splits = FewRelDataModule(data_dir=SHARED).labelled_splits()
    assert {name: len(records) for name, records in splits.items()} == {"train": 7840, "dev": 1120, "test": 2240}
    for name, per_relation in (("train", 490), ("dev", 70), ("test", 140)):
        assert set(Counter(r["label"] for r in splits[name]).values()) == {per_relation}
    ids = [{r["id"] for r in records} for records in splits.values()]
    assert sum(map(len, ids)) == len(set().union(*ids)) == 11200
    assert FewRelDataModule(data_dir=SHARED).labelled_splits() == splits
    for example in splits["dev"]:
        head, tail = head_and_tail(example)
        assert all(
            example["text_a"][e["start"] : e["end"]] == e["mention"] and re.fullmatch(r"Q\d+", e["qid"])
            for e in (head, tail)
        )
    first = next(r for r in splits["train"] + splits["dev"] + splits["test"] if r["id"] == "fewrel-P177-0")
    assert [e["mention"] for e in first["entities"]] == ["Cape Girardeau Bridge", "Mississippi River"]
    assert [e["qid"] for e in first["entities"]] == ["Q5034838", "Q1497"]


@needs_shared
def test_semeval_markers_on_every_shared_sentence(tokenizer):
    spec = SemEvalDataModule.spec("main")
    assert (
        spec.kind == "relation"
        and spec.main_metric == "semeval_macro_f1"
        and SemEvalDataModule.spec("mean_pool").kind == "relation_mean"
    )
    splits = SemEvalDataModule(data_dir=SHARED).labelled_splits()
    kind = MarkerRelationTask(spec)
    for records in splits.values():
        for example in records:
            head, tail = head_and_tail(example)
            marked = insert_markers(example["text_a"], head, tail)
            assert [marked.text[slice(*marked.span(e["start"], e["end"]))] for e in (head, tail)] == [
                head["mention"],
                tail["mention"],
            ]
    encoded = kind.encode(splits["dev"], tokenizer, 128)
    for ids, (head_span, tail_span) in zip(encoded["input_ids"], encoded["entity_spans"]):
        assert tokenizer.convert_ids_to_tokens([ids[head_span[0]], ids[tail_span[0]]]) == ["@", "#"]
