"""SemEval-2010 Task 8 and Open Entity: counts, entity offsets, malformed files, the shared data."""

import json
from collections import Counter
from pathlib import Path

import pytest
from helpers import SHARED, needs_shared, write

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import DATASETS
from knowledge_lm.core.subsets import fraction_subset
from knowledge_lm.data.openentity import ENTITY_TYPES, OpenEntityDataModule
from knowledge_lm.data.semeval import RELATION_LABELS, SemEvalDataModule


# -- SemEval-2010 Task 8 ----------------------------------------------------------------------
def semeval_block(number: int, sentence: str, label: str, comment: str = "") -> str:
    return f'{number}\t"{sentence}"\n{label}\nComment:{comment}\n\n'


GOOD_TRAIN = "".join(
    [
        semeval_block(1, "The <e1>child</e1> was wrapped into the <e2>cradle</e2>.", "Other"),
        semeval_block(2, 'A "quoted" <e1>author</e1> uses a <e2>disassembler</e2>.', "Instrument-Agency(e2,e1)", " x"),
        semeval_block(3, "<e1>Audits</e1> were about <e2>waste and recycling</e2>", "Message-Topic(e1,e2)"),
    ]
)
GOOD_TEST = semeval_block(8001, "The <e1>company</e1> fabricates plastic <e2>chairs</e2>.", "Product-Producer(e2,e1)")


def read_semeval(data_dir) -> dict[str, list[dict]]:
    return SemEvalDataModule(data_dir=data_dir).labelled_splits()


def test_semeval_registered_with_its_labels():
    assert DATASETS.get("semeval2010") is SemEvalDataModule
    spec = SemEvalDataModule.spec("main")
    assert spec.labels == RELATION_LABELS == tuple(sorted(RELATION_LABELS))
    assert spec.num_labels == 19 and "Other" in spec.labels and spec.main_metric == "semeval_macro_f1"
    with pytest.raises(KlmError, match="unknown task"):
        SemEvalDataModule(task="relations")


@pytest.mark.parametrize("layout", ["semeval2010_task8", ".", "SemEval2010_task8_all_data"])
@pytest.mark.parametrize("compress", [False, True])
def test_semeval_reads_the_release_format(tmp_path, layout, compress):
    if layout == "SemEval2010_task8_all_data":
        write(tmp_path / layout / "SemEval2010_task8_training" / "TRAIN_FILE.TXT", GOOD_TRAIN, compress)
        write(tmp_path / layout / "SemEval2010_task8_testing_keys" / "TEST_FILE_FULL.TXT", GOOD_TEST, compress)
    else:
        write(tmp_path / layout / "TRAIN_FILE.TXT", GOOD_TRAIN, compress)
        write(tmp_path / layout / "TEST_FILE_FULL.TXT", GOOD_TEST.replace("\n", "\r\n"), compress)
    splits = read_semeval(tmp_path)
    assert [len(splits[split]) for split in ("train", "dev", "test")] == [2, 1, 1]
    records = {record["id"]: record for records in splits.values() for record in records}
    quoted = records["semeval2010-2"]
    assert quoted["text_a"] == 'A "quoted" author uses a disassembler.' and quoted["text_b"] is None
    assert quoted["label"] == RELATION_LABELS.index("Instrument-Agency(e2,e1)")
    assert quoted["entities"] == [
        {"start": 11, "end": 17, "mention": "author", "role": "e1"},
        {"start": 25, "end": 37, "mention": "disassembler", "role": "e2"},
    ]
    assert records["semeval2010-3"]["entities"][1]["mention"] == "waste and recycling"
    assert records["semeval2010-8001"]["text_a"] == "The company fabricates plastic chairs."


@pytest.mark.parametrize(
    "bad_block, line, message",
    [
        ('4\t"No tags at all."\nOther\nComment:\n\n', 13, "missing or unclosed entity tag"),
        ('4\t"Only <e1>one</e1> tag."\nOther\nComment:\n\n', 13, "e2"),
        ('4\t"<e1>a <e2>b</e2></e1>."\nOther\nComment:\n\n', 13, "opened inside"),
        ('4\t"<e1>a</e1> <e2>b</e2> </e1>"\nOther\nComment:\n\n', 13, "without a matching"),
        ('4\t"<e1>a</e1> <e2>b</e2>\nOther\nComment:\n\n', 13, "double quotes"),
        ("4\t<e1>a</e1> <e2>b</e2>\nOther\nComment:\n\n", 13, "double quotes"),
        ('4 "<e1>a</e1> <e2>b</e2>"\nOther\nComment:\n\n', 13, "double quotes"),
        ('4\t"<e1>a</e1> <e2>b</e2>"\nCause-Effect(e3,e1)\nComment:\n\n', 14, "bad label"),
        ('4\t"<e1>a</e1> <e2>b</e2>"\n\n', 13, "no label line"),
        ('4\t"<e1>a</e1> <e2>b</e2>"\nOther\nComment:\n5\t"<e1>c</e1> <e2>d</e2>"\n\n', 16, "blank line"),
        ('1\t"<e1>a</e1> <e2>b</e2>"\nOther\nComment:\n\n', 13, "appears twice"),
    ],
)
def test_semeval_rejects_malformed_blocks(tmp_path, bad_block, line, message):
    train = write(tmp_path / "semeval2010_task8" / "TRAIN_FILE.TXT", GOOD_TRAIN + bad_block)
    write(tmp_path / "semeval2010_task8" / "TEST_FILE_FULL.TXT", GOOD_TEST)
    with pytest.raises(KlmError, match=message) as error:
        read_semeval(tmp_path)
    assert str(error.value).startswith(f"{train}:{line}:")


def test_semeval_missing_files(tmp_path):
    with pytest.raises(KlmError, match="no SemEval-2010 Task 8 data"):
        read_semeval(tmp_path)
    write(tmp_path / "semeval2010_task8" / "TRAIN_FILE.TXT", GOOD_TRAIN)
    with pytest.raises(KlmError, match="missing SemEval-2010 Task 8 file TEST_FILE_FULL.TXT"):
        read_semeval(tmp_path)


@needs_shared
def test_semeval_shared_data():
    splits = read_semeval(SHARED)
    assert {split: len(records) for split, records in splits.items()} == {"train": 7200, "dev": 800, "test": 2717}
    assert len(SemEvalDataModule.spec("main").labels) == 19
    labels = Counter(record["label"] for records in splits.values() for record in records)
    assert len(labels) == 19 and labels[RELATION_LABELS.index("Other")] == 1864
    ids = [record["id"] for records in splits.values() for record in records]
    assert len(set(ids)) == 10717
    assert {record["id"] for record in splits["dev"]} == {record["id"] for record in read_semeval(SHARED)["dev"]}
    for records in splits.values():
        for record in records:
            assert "<e1>" not in record["text_a"] and "</e2>" not in record["text_a"]
            assert [entity["role"] for entity in record["entities"]] == ["e1", "e2"]
            for entity in record["entities"]:
                assert record["text_a"][entity["start"] : entity["end"]] == entity["mention"] != ""
    first = next(record for record in splits["train"] + splits["dev"] if record["id"] == "semeval2010-1")
    assert [entity["mention"] for entity in first["entities"]] == ["configuration", "elements"]
    assert first["label"] == RELATION_LABELS.index("Component-Whole(e2,e1)")


@needs_shared
def test_semeval_tokenizes_through_the_base(tokenizer, tmp_path):
    module = SemEvalDataModule(tokenizer=tokenizer, data_dir=SHARED, fraction=0.1, cache_dir=tmp_path)
    module.setup()
    assert module.train_size == pytest.approx(720, abs=10)
    assert next(iter(module.train_dataloader()))["labels"].shape[0] == 32


# -- Open Entity ------------------------------------------------------------------------------
def openentity_item(**changes) -> dict:
    item = {
        "sent": "Tushar Gandhi said he would visit Bombay .",
        "start": 19,
        "end": 21,
        "labels": ["person", "entity"],
        "ents": [["Q5625256", 0, 13, 0.56], ["Q1156", 34, 40, 0.34]],
    }
    item.update(changes)
    return item


def write_openentity(root: Path, train: list, compress: bool = False):
    for split in ("train", "dev", "test"):
        write(root / f"{split}.json", json.dumps(train if split == "train" else [openentity_item()]), compress)


def read_openentity(data_dir) -> dict[str, list[dict]]:
    return OpenEntityDataModule(data_dir=data_dir).labelled_splits()


def test_openentity_registered_as_typing():
    assert DATASETS.get("openentity") is OpenEntityDataModule
    spec = OpenEntityDataModule.spec("main")
    assert spec.kind == "typing" and spec.labels == ENTITY_TYPES == tuple(sorted(ENTITY_TYPES))
    assert len(spec.labels) == 9 and spec.main_metric == "micro_f1" in spec.metrics
    assert {"micro_precision", "micro_recall", "strict_accuracy", "loose_macro_f1", "ling_weld_loose_macro_f1"} <= set(
        spec.metrics
    )


@pytest.mark.parametrize("layout", ["openentity", "OpenEntity", "."])
def test_openentity_reads_ernie_layout(tmp_path, layout):
    write_openentity(
        tmp_path / layout, [openentity_item(), openentity_item(labels=[], ents=[])], compress=layout == "openentity"
    )
    splits = read_openentity(tmp_path)
    assert [len(splits[split]) for split in ("train", "dev", "test")] == [2, 1, 1]
    record, unlabelled = splits["train"]
    assert record["id"] == "openentity-train-0" and record["text_b"] is None
    assert record["label"] == [ENTITY_TYPES.index("entity"), ENTITY_TYPES.index("person")]
    assert record["text_a"][record["mention"]["start"] : record["mention"]["end"]] == "he"
    assert [record["text_a"][entity["start"] : entity["end"]] for entity in record["entities"]] == [
        "Tushar Gandhi",
        "Bombay",
    ]
    assert record["entities"][0] == {"qid": "Q5625256", "start": 0, "end": 13, "score": 0.56}
    assert unlabelled["label"] == [] and unlabelled["entities"] == []


@pytest.mark.parametrize(
    "bad_item, message",
    [
        ({"sent": "x", "start": 0, "end": 1, "labels": []}, "missing key.*ents"),
        (openentity_item(end=99), "mention offsets"),
        (openentity_item(start=5, end=5), "mention offsets"),
        (openentity_item(start="19"), "mention offsets"),
        (openentity_item(labels=["person", "animal"]), "bad label 'animal'"),
        (openentity_item(labels="person"), "'labels' must be a list"),
        (openentity_item(labels=[["person"]]), "'labels' must be a list of types"),
        (openentity_item(ents=[["Q1", 30, 50, 0.1]]), "linked entity Q1 offsets"),
        (openentity_item(ents=[["Q1", 0, 4]]), "bad linked entity"),
        (openentity_item(sent=""), "non-empty string"),
        ("not an object", "expected an object"),
    ],
)
def test_openentity_rejects_malformed_records(tmp_path, bad_item, message):
    write_openentity(tmp_path / "openentity", [openentity_item(), bad_item])
    with pytest.raises(KlmError, match=message) as error:
        read_openentity(tmp_path)
    assert str(error.value).startswith(f"{tmp_path / 'openentity' / 'train.json'}: record 1:")


def test_openentity_rejects_bad_files(tmp_path):
    with pytest.raises(KlmError, match="no Open Entity data"):
        read_openentity(tmp_path)
    write(tmp_path / "openentity" / "train.json", "[]")
    with pytest.raises(KlmError, match="missing Open Entity file.*dev.json"):
        read_openentity(tmp_path)
    write(tmp_path / "openentity" / "dev.json", "{}")
    write(tmp_path / "openentity" / "test.json", "[")
    with pytest.raises(KlmError, match="expected a JSON array"):
        read_openentity(tmp_path)


@needs_shared
def test_openentity_shared_data():
    splits = read_openentity(SHARED)
    assert {split: len(records) for split, records in splits.items()} == {"train": 1998, "dev": 1998, "test": 1998}
    assert sum(bool(record["entities"]) for record in splits["train"]) == 1560
    types = Counter(ENTITY_TYPES[type_id] for record in splits["train"] for type_id in record["label"])
    assert types["person"] == 824 and set(types) <= set(ENTITY_TYPES)
    for records in splits.values():
        for record in records:
            assert record["label"] == sorted(set(record["label"]))
            assert 0 <= record["mention"]["start"] < record["mention"]["end"] <= len(record["text_a"])
    first = splits["train"][0]
    assert first["text_a"][first["mention"]["start"] : first["mention"]["end"]] == "Web users"
    assert [first["text_a"][entity["start"] : entity["end"]] for entity in first["entities"]][-1] == "Google Maps"


@needs_shared
def test_openentity_list_labels_stratify():
    train = read_openentity(SHARED)["train"]
    indices = fraction_subset([record["id"] for record in train], [record["label"] for record in train], 0.1, seed=0)
    assert 150 < len(indices) < 300
