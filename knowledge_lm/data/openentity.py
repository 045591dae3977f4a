"""Open Entity: typing one mention of a sentence with any of 9 general types (multi-label).

Files: ERNIE's release, ``train.json``, ``dev.json`` and ``test.json`` (1,998 examples each, plain or
gzip-compressed), looked for in ``<data_dir>/openentity/`` (the shared layout), ``<data_dir>/OpenEntity/``
(ERNIE's) and ``<data_dir>`` itself. Each file is one JSON array of
``{sent, start, end, labels, ents: [[qid, start, end, score], ...]}``: character offsets into
``sent`` (end exclusive), the gold types, and TAGME's Wikidata links with their scores. FIGER
(``knowledge_lm.data.figer``) comes in the same layout and shares this reader.

Records: ``label`` is the sorted list of type ids (possibly empty: about a fifth of Open Entity's
mentions have no general type), ``mention`` the typed span and ``entities`` the linked spans, all
offsets into ``text_a`` (= ``sent``). The task kind is "typing" (``knowledge_lm.tasks.typing``:
types above the threshold, none forced), scored as ERNIE and KnowBERT report Open Entity: micro
precision, recall and F1 over (mention, type) pairs, main metric micro-F1.
"""

from typing import ClassVar

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import find_split_files, read_json
from knowledge_lm.data.base import TaskDataModule, TaskSpec

ENTITY_TYPES = ("entity", "event", "group", "location", "object", "organization", "person", "place", "time")
SPEC = TaskSpec(
    "main",
    "typing",
    ENTITY_TYPES,
    ("micro_f1", "micro_precision", "micro_recall", "strict_accuracy", "loose_macro_f1", "ling_weld_loose_macro_f1"),
    "micro_f1",
)

SPLITS = ("train", "dev", "test")
REQUIRED_KEYS = ("sent", "start", "end", "labels", "ents")


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_span(start, end, text: str, what: str, where: str):
    if not (is_int(start) and is_int(end) and 0 <= start < end <= len(text)):
        raise KlmError(
            f"{where}: {what} offsets [{start!r}, {end!r}) are not a span of the {len(text)}-character sentence"
        )


class ErnieTypingDataModule(TaskDataModule):
    """Entity typing data in ERNIE's layout; subclasses name the dataset, its folders and its spec."""

    title: ClassVar[str]  # the dataset's name in messages
    folders: ClassVar[tuple[str, ...]]  # under the data directory, tried in order

    def read_splits(self) -> dict[str, list[dict]]:
        return {split: self.read_file(split, path) for split, path in self.find_files().items()}

    def find_files(self) -> dict:
        return find_split_files(self.data_dir, self.folders, self.title, splits=SPLITS)

    def read_items(self, path) -> list:
        data = read_json(path)
        if not isinstance(data, list):
            raise KlmError(f"{path}: expected a JSON array of examples, got a {type(data).__name__}")
        return data

    def read_file(self, split: str, path) -> list[dict]:
        return [
            self.record(split, index, item, f"{path}: record {index}")
            for index, item in enumerate(self.read_items(path))
        ]

    def record(self, split: str, index: int, item, where: str) -> dict:
        check_item(item, where)
        sentence = item["sent"]
        type_ids = sorted({self.task_spec.label_id(name, where) for name in item["labels"]})
        entities = []
        for link in item["ents"]:
            if not (
                isinstance(link, list)
                and len(link) == 4
                and isinstance(link[0], str)
                and isinstance(link[3], (int, float))
                and not isinstance(link[3], bool)
            ):
                raise KlmError(f"{where}: bad linked entity {link!r} (expected [qid, start, end, score])")
            qid, start, end, score = link
            check_span(start, end, sentence, f"linked entity {qid}", where)
            entities.append({"qid": qid, "start": start, "end": end, "score": float(score)})
        return {
            "id": f"{self.name}-{split}-{index}",
            "text_a": sentence,
            "text_b": None,
            "label": type_ids,
            "mention": {"start": item["start"], "end": item["end"]},
            "entities": entities,
        }


def check_item(item, where: str):
    """The shape of one example, before its types are looked up."""
    if not isinstance(item, dict):
        raise KlmError(f"{where}: expected an object, got a {type(item).__name__}")
    missing = [key for key in REQUIRED_KEYS if key not in item]
    if missing:
        raise KlmError(f"{where}: missing key(s) {', '.join(missing)}")
    if not isinstance(item["sent"], str) or not item["sent"]:
        raise KlmError(f"{where}: 'sent' must be a non-empty string")
    check_span(item["start"], item["end"], item["sent"], "mention", where)
    if not (isinstance(item["labels"], list) and all(isinstance(name, str) for name in item["labels"])):
        raise KlmError(f"{where}: 'labels' must be a list of types")
    if not isinstance(item["ents"], list):
        raise KlmError(f"{where}: 'ents' must be a list of [qid, start, end, score]")


class OpenEntityDataModule(ErnieTypingDataModule):
    name = "openentity"
    split_origins = {"dev": "ERNIE's dev.json", "test": "ERNIE's test.json"}
    tasks = ("main",)
    title = "Open Entity"
    folders = ("openentity", "OpenEntity", ".")

    @classmethod
    def spec(cls, task: str) -> TaskSpec:
        return SPEC
