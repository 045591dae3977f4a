"""Cosmos QA (Huang et al., 2019): commonsense reading comprehension, four answers per question.

Files, in ``<data_dir>/cosmosqa/``, each plain or gzip-compressed: the official CSVs, columns ``id,
context, question, answer0..answer3, label`` (label 0-3).

Splits. With ``train.csv`` present (the official release): ``train`` is train.csv less 1,000 rows
held out with seed 0 as ``dev`` (model selection), and ``valid.csv`` is ``test`` (the release's
test.jsonl is unlabelled and ignored). The shared data holds only ``valid.csv`` (2,985 questions on
2,445 paragraphs); its paragraphs are then drawn once, in a seed-0 shuffle, into ``test`` until it
holds ~600 questions, then ``dev`` until ~385, and the rest (~2,000) is ``train``. Questions on one
paragraph stay in one split, so test never asks about a paragraph seen in training; the sizes are
therefore close to, not exactly, 2,000 / 385 / 600 (a smaller file gets the same proportions).
"""

import csv
import random

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import find_file, open_text
from knowledge_lm.data.base import TaskDataModule, TaskSpec, hold_out

SPEC = TaskSpec("main", "multiple_choice", ("0", "1", "2", "3"), ("accuracy",), "accuracy")
COLUMNS = ("id", "context", "question", "answer0", "answer1", "answer2", "answer3", "label")
CHOICE_COLUMNS = COLUMNS[3:7]

HELD_OUT_ROWS = 1000
SPLIT_SEED = 0
# Of the 2,985 rows of valid.csv when it is all there is: test and dev shares, the rest is train.
DEV_TEST_ROWS = {"test": 600, "dev": 385}
VALID_ROWS = 2985


def read_cosmosqa_csv(path, spec: TaskSpec = SPEC) -> list[dict]:
    """Records of an official Cosmos QA CSV; any malformed row is a KlmError naming file:line."""
    records = []
    with open_text(path) as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        missing = [column for column in COLUMNS if column not in (header or [])]
        if missing:
            raise KlmError(f"{path}:1: missing column(s) {', '.join(missing)} (header: {', '.join(header or [])})")
        index = {column: header.index(column) for column in COLUMNS}
        line = reader.line_num + 1
        for fields in reader:
            where = f"{path}:{line}"
            line = reader.line_num + 1  # a quoted field may span lines: the next row starts after this one
            if not fields:
                continue
            if len(fields) != len(header):
                raise KlmError(f"{where}: expected {len(header)} comma-separated columns, got {len(fields)}")
            row = {column: fields[position] for column, position in index.items()}
            records.append(
                {
                    "id": row["id"],
                    "text_a": row["context"],
                    "text_b": row["question"],
                    "choices": [row[column] for column in CHOICE_COLUMNS],
                    "label": spec.label_id(row["label"], where),
                }
            )
    return records


def split_by_paragraph(records: list[dict], seed: int = SPLIT_SEED) -> dict[str, list[dict]]:
    """train/dev/test of one labelled file, whole paragraphs at a time (see the module's docstring)."""
    paragraphs = list(dict.fromkeys(record["text_a"] for record in records))
    random.Random(seed).shuffle(paragraphs)
    targets = {split: max(1, round(rows * len(records) / VALID_ROWS)) for split, rows in DEV_TEST_ROWS.items()}
    questions = {paragraph: 0 for paragraph in paragraphs}
    for record in records:
        questions[record["text_a"]] += 1
    assigned, filled = {}, {split: 0 for split in targets}
    for paragraph in paragraphs:
        split = next((split for split in targets if filled[split] < targets[split]), "train")
        assigned[paragraph] = split
        if split != "train":
            filled[split] += questions[paragraph]
    splits = {"train": [], "dev": [], "test": []}
    for record in records:
        splits[assigned[record["text_a"]]].append(record)
    return splits


class CosmosQADataModule(TaskDataModule):
    name = "cosmosqa"
    split_origins = {
        "dev": "paragraphs held out for selection (seed 0)",
        "test": "other paragraphs of Cosmos QA's labelled dev set",
    }
    tasks = ("main",)

    @classmethod
    def spec(cls, task: str) -> TaskSpec:
        if task not in cls.tasks:
            raise KlmError(f"unknown task {task!r} of dataset 'cosmosqa'; known: {', '.join(cls.tasks)}")
        return SPEC

    def read_splits(self) -> dict[str, list[dict]]:
        folder = self.data_dir / "cosmosqa" if self.data_dir else None
        valid = find_file(folder, "valid.csv")
        if valid is None:
            raise KlmError(
                f"no Cosmos QA data: expected valid.csv (and optionally train.csv), plain or .gz, "
                f"in {folder or '<data_dir>/cosmosqa'} (set --data-dir or DATA_DIR)"
            )
        train = find_file(folder, "train.csv")
        if train is None:
            return split_by_paragraph(read_cosmosqa_csv(valid, self.task_spec))
        train_records, dev_records = hold_out(read_cosmosqa_csv(train, self.task_spec), HELD_OUT_ROWS, SPLIT_SEED)
        return {"train": train_records, "dev": dev_records, "test": read_cosmosqa_csv(valid, self.task_spec)}
