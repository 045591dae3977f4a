"""Collation from columns: every task kind's batches equal those ``DataCollatorWithPadding`` (``tokenizer.pad``)
gives for the same examples, the loader reads Arrow slices, and static padding keeps its widths."""

import pytest
import torch
from datasets import Dataset
from test_docre import SPEC as DOCRE_SPEC
from test_docre import two_documents
from test_qa import MC_RECORDS, QA_SPEC, qa_record
from test_relation import TRICKY as RELATION_RECORDS
from transformers import DataCollatorWithPadding

from knowledge_lm.core.registry import TASK_KINDS
from knowledge_lm.data.base import ColumnBatches, StaticPadding, TaskSpec
from knowledge_lm.data.cosmosqa import SPEC as COSMOS_SPEC
from knowledge_lm.data.semeval import SemEvalDataModule
from knowledge_lm.tasks.base import ENCODER_INPUTS
from knowledge_lm.tasks.extractive_qa import NOT_CONTEXT
from knowledge_lm.tasks.padding import as_columns, pad

PAIRS = [("A short one .", "And its pair ."), ("A much longer sentence with many more words in it .", "Short .")]
SEQUENCE_RECORDS = [{"id": str(i), "text_a": a, "text_b": b, "label": i} for i, (a, b) in enumerate(PAIRS)]
TYPING_TEXTS = [("Paris is big .", "Paris"), ("They met the president of a very large company .", "president")]
TYPING_RECORDS = [
    {"text_a": text, "label": [1], "mention": {"start": text.index(m), "end": text.index(m) + len(m)}}
    for text, m in TYPING_TEXTS
]
QA_RECORDS = [
    qa_record("Where?", "It is in Rome .", "Rome", "a"),
    qa_record("Who came first?", "Long ago , before anyone else , Alice came first and Bob came later .", "Alice", "b"),
]


def kinds_and_records():
    spec = TaskSpec("main", "classification", ("a", "b"), ("accuracy",), "accuracy")
    regression = TaskSpec("main", "regression", (), ("pearson",), "pearson")
    typing = TaskSpec("main", "typing", ("a", "b"), ("strict_accuracy",), "strict_accuracy")
    return {
        "classification": (spec, SEQUENCE_RECORDS),
        "regression": (regression, [{**record, "label": 0.5 + record["label"]} for record in SEQUENCE_RECORDS]),
        "relation": (SemEvalDataModule.spec("main"), RELATION_RECORDS),
        "relation_mean": (SemEvalDataModule.spec("mean_pool"), RELATION_RECORDS),
        "typing": (typing, TYPING_RECORDS),
        "extractive_qa": (QA_SPEC, QA_RECORDS),
        "multiple_choice": (COSMOS_SPEC, MC_RECORDS),
        "document_relation": (DOCRE_SPEC, two_documents()),
    }


def rows(columns: dict) -> list[dict]:
    return [dict(zip(columns, values)) for values in zip(*columns.values())]


def reference_encoder_inputs(kind_name: str, features: list[dict], tokenizer) -> dict:
    """The encoder inputs as the collation before columns padded them: DataCollatorWithPadding's."""
    if kind_name == "multiple_choice":
        features = [
            {name: feature[name][choice] for name in ENCODER_INPUTS if name in feature}
            for feature in features
            for choice in range(len(feature["input_ids"]))
        ]
    return DataCollatorWithPadding(tokenizer)(
        [{name: feature[name] for name in ENCODER_INPUTS if name in feature} for feature in features]
    )


@pytest.mark.parametrize("kind_name", list(kinds_and_records()))
def test_every_kind_pads_as_data_collator_with_padding(kind_name, tokenizer):
    spec, records = kinds_and_records()[kind_name]
    kind = TASK_KINDS.get(spec.kind)(spec)
    columns = kind.encode(records, tokenizer, 48)
    from_columns = kind.collate(columns, tokenizer)
    from_rows = kind.collate(rows(columns), tokenizer)
    arrow = ColumnBatches(Dataset.from_dict(columns)).__getitems__(list(range(len(records))))
    from_arrow = kind.collate(as_columns(arrow), tokenizer)
    reference = reference_encoder_inputs(kind_name, rows(columns), tokenizer)
    assert set(reference) <= set(from_columns)
    for name, expected in reference.items():
        assert from_columns[name].dtype == expected.dtype and torch.equal(from_columns[name], expected), name
    for other in (from_rows, from_arrow):
        assert from_columns.keys() == other.keys()
        for name, value in from_columns.items():
            assert torch.equal(value, other[name]) if torch.is_tensor(value) else value == other[name], name


@pytest.mark.parametrize("kind_name", ["classification", "regression", "relation", "relation_mean"])
def test_sequence_and_relation_batches_equal_the_collator_on_whole_rows(kind_name, tokenizer):
    spec, records = kinds_and_records()[kind_name]
    kind = TASK_KINDS.get(spec.kind)(spec)
    columns = kind.encode(records, tokenizer, 48)
    batch = kind.collate(columns, tokenizer)
    expected = DataCollatorWithPadding(tokenizer)(
        [{name: value for name, value in row.items() if name != "entity_spans"} for row in rows(columns)]
    )
    expected["labels"] = expected["labels"].to(torch.float32 if kind_name == "regression" else torch.long)
    for name, value in expected.items():
        assert batch[name].dtype == value.dtype and torch.equal(batch[name], value), name


def test_qa_offsets_padded_with_not_context(tokenizer):
    kind = TASK_KINDS.get(QA_SPEC.kind)(QA_SPEC)
    columns = kind.encode(QA_RECORDS, tokenizer, 48)
    batch = kind.collate(columns, tokenizer)
    width = batch["input_ids"].shape[1]
    expected = [offsets + [list(NOT_CONTEXT)] * (width - len(offsets)) for offsets in columns["offsets"]]
    assert batch["offsets"].tolist() == expected


@pytest.mark.parametrize("length, multiple", [(40, None), (None, 8)])
def test_static_padding_widths_equal_the_tokenizers(length, multiple, tokenizer):
    spec, records = kinds_and_records()["classification"]
    kind = TASK_KINDS.get(spec.kind)(spec)
    columns = kind.encode(records, tokenizer, 40)
    batch = kind.collate(columns, StaticPadding(tokenizer, length=length, multiple=multiple))
    options = {"padding": "max_length", "max_length": length} if length else {"pad_to_multiple_of": multiple}
    token_rows = [{name: row[name] for name in ENCODER_INPUTS} for row in rows(columns)]
    expected = tokenizer.pad(token_rows, return_tensors="pt", **options)
    for name in ENCODER_INPUTS:
        assert torch.equal(batch[name], expected[name]), name


def test_left_padding_and_item_tensors():
    assert pad([[1, 2], [3]], 0, left=True).tolist() == [[1, 2], [0, 3]]
    assert pad([[[1, 1]], []], -1, width=2).tolist() == [[[1, 1], [-1, -1]], [[-1, -1], [-1, -1]]]


def test_loader_batches_are_arrow_slices_in_the_same_order(tokenizer):
    dataset = Dataset.from_dict({"input_ids": [[1] * (i % 5 + 1) for i in range(10)], "labels": list(range(10))})
    wrapped = ColumnBatches(dataset)
    assert len(wrapped) == 10 and wrapped[3] == dataset[3]
    columns = as_columns(wrapped.__getitems__([4, 1]))
    assert columns["input_ids"].to_pylist() == [[1] * 5, [1, 1]] and columns["labels"] == [4, 1]
    seen = []
    torch.manual_seed(0)
    for batch in torch.utils.data.DataLoader(wrapped, batch_size=4, shuffle=True, collate_fn=as_columns):
        assert torch.equal(pad(batch["input_ids"], 0), pad(batch["input_ids"].to_pylist(), 0))
        seen += batch["labels"]
    torch.manual_seed(0)
    order = [row["labels"] for row in torch.utils.data.DataLoader(dataset, batch_size=None, shuffle=True)]
    assert seen == order
