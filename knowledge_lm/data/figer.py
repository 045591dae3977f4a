"""FIGER (Ling & Weld 2012): typing one mention of a sentence with any of 113 fine-grained types.

Files: ERNIE's release, in Open Entity's layout (``knowledge_lm.data.openentity``, whose reader this
shares): ``train.json``, ``dev.json`` and ``test.json`` (plain or gzip-compressed), each one JSON array
of ``{sent, start, end, labels, ents}`` with types written as paths ("/person/artist"), looked for in
``<data_dir>/figer/``, ``<data_dir>/FIGER/`` (ERNIE's folder) and ``<data_dir>`` itself.

Types: the sorted set of types seen in the train file, as ERNIE's ``eval_figer.py`` builds its label
list, so type ids follow the release rather than a list written here; a dev or test type missing from
train is an error. Until the files are read, ``spec`` gives the scoring alone (no types).

The task kind is "typing_at_least_one" (every FIGER mention has a type, and ERNIE's FIGER evaluation
always predicts the top-scoring one), scored by FIGER's standard strict accuracy, loose macro-F1 and
loose micro-F1; main metric strict accuracy.
"""

import dataclasses

from knowledge_lm.data.base import TaskSpec
from knowledge_lm.data.openentity import ErnieTypingDataModule, check_item

SCORING = TaskSpec(
    "main",
    "typing_at_least_one",
    (),
    ("strict_accuracy", "loose_macro_f1", "ling_weld_loose_macro_f1", "loose_micro_f1"),
    "strict_accuracy",
)


class FigerDataModule(ErnieTypingDataModule):
    name = "figer"
    split_origins = {"dev": "ERNIE's dev.json", "test": "ERNIE's test.json"}
    tasks = ("main",)
    title = "FIGER"
    folders = ("figer", "FIGER", ".")

    @classmethod
    def spec(cls, task: str) -> TaskSpec:
        return SCORING

    def read_splits(self) -> dict[str, list[dict]]:
        items = {split: (path, self.read_items(path)) for split, path in self.find_files().items()}
        train_path, train_items = items["train"]
        for index, item in enumerate(train_items):
            check_item(item, f"{train_path}: record {index}")
        types = tuple(sorted({name.strip() for item in train_items for name in item["labels"]}))
        self.task_spec = dataclasses.replace(SCORING, labels=types)
        self._task_kind = None
        return {
            split: [
                self.record(split, index, item, f"{path}: record {index}") for index, item in enumerate(split_items)
            ]
            for split, (path, split_items) in items.items()
        }
