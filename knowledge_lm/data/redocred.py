"""Re-DocRED and DocRED: document-level relation extraction over 96 Wikidata relations (task kind "docre").

The tasks, files, relations and records: ``DocREDDataModule``.
"""

import random

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import find_file, read_json
from knowledge_lm.data.base import TaskDataModule, TaskSpec, hold_out
from knowledge_lm.knowledge.answers import AnswerFact

RELATIONS = (
    "P6",
    "P17",
    "P19",
    "P20",
    "P22",
    "P25",
    "P26",
    "P27",
    "P30",
    "P31",
    "P35",
    "P36",
    "P37",
    "P39",
    "P40",
    "P50",
    "P54",
    "P57",
    "P58",
    "P69",
    "P86",
    "P102",
    "P108",
    "P112",
    "P118",
    "P123",
    "P127",
    "P131",
    "P136",
    "P137",
    "P140",
    "P150",
    "P155",
    "P156",
    "P159",
    "P161",
    "P162",
    "P166",
    "P170",
    "P171",
    "P172",
    "P175",
    "P176",
    "P178",
    "P179",
    "P190",
    "P194",
    "P205",
    "P206",
    "P241",
    "P264",
    "P272",
    "P276",
    "P279",
    "P355",
    "P361",
    "P364",
    "P400",
    "P403",
    "P449",
    "P463",
    "P488",
    "P495",
    "P527",
    "P551",
    "P569",
    "P570",
    "P571",
    "P576",
    "P577",
    "P580",
    "P582",
    "P585",
    "P607",
    "P674",
    "P676",
    "P706",
    "P710",
    "P737",
    "P740",
    "P749",
    "P800",
    "P807",
    "P840",
    "P937",
    "P1001",
    "P1056",
    "P1198",
    "P1336",
    "P1344",
    "P1365",
    "P1366",
    "P1376",
    "P1412",
    "P1441",
    "P3373",
)
LABELS = ("NA",) + RELATIONS
SPECS = {task: TaskSpec(task, "docre", LABELS, ("f1", "ign_f1"), "f1") for task in ("revised", "docred")}

FOLDERS = {"revised": "redocred", "docred": "docred"}
FILES = {"revised": ("dev_revised.json", "test_revised.json"), "docred": ("train_annotated.json", "dev.json")}
SPLIT_SEED = 0
SPLIT_SIZES = {"train": 700, "dev": 100, "test": 200}  # of Re-DocRED's 1,000 documents
DOCRED_DEV_SIZE = 300  # held out of train_annotated


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def split_documents(count: int, seed: int = SPLIT_SEED) -> dict[str, list[int]]:
    """Document indices of each split: one seeded shuffle cut in ``SPLIT_SIZES`` proportions of ``count``."""
    order = list(range(count))
    random.Random(seed).shuffle(order)
    total = sum(SPLIT_SIZES.values())
    dev_start = round(count * SPLIT_SIZES["train"] / total)
    test_start = dev_start + round(count * SPLIT_SIZES["dev"] / total)
    return {
        "train": sorted(order[:dev_start]),
        "dev": sorted(order[dev_start:test_start]),
        "test": sorted(order[test_start:]),
    }


def fact_keys(records: list[dict]) -> set[tuple[str, str, int]]:
    """(head mention name, tail mention name, relation) for every mention pair of every fact: the official
    scorer's training facts."""
    return {
        (head_mention["name"], tail_mention["name"], relation)
        for record in records
        for head, tail, relation in record["label"]
        for head_mention in record["entities"][head]["mentions"]
        for tail_mention in record["entities"][tail]["mentions"]
    }


def mark_in_train(records: list[dict], train_keys: set) -> list[dict]:
    for record in records:
        record["in_train"] = [
            any(
                (head_mention["name"], tail_mention["name"], relation) in train_keys
                for head_mention in record["entities"][head]["mentions"]
                for tail_mention in record["entities"][tail]["mentions"]
            )
            for head, tail, relation in record["label"]
        ]
    return records


def document_text(sentences: list[list[str]]) -> tuple[str, list[list[int]]]:
    """The tokens joined by single spaces, and each token's character offset, per sentence."""
    offsets, position = [], 0
    for sentence in sentences:
        offsets.append([])
        for token in sentence:
            offsets[-1].append(position)
            position += len(token) + 1
    return " ".join(token for sentence in sentences for token in sentence), offsets


class DocREDDataModule(TaskDataModule):
    """Re-DocRED (task ``revised``) and DocRED (task ``docred``) as document-level relation extraction.

    Tasks and files (each plain or gzip-compressed):

    * ``revised`` (default): Re-DocRED's ``dev_revised.json`` and ``test_revised.json`` (500 documents each,
      the 1,000 documents of DocRED dev re-annotated) from ``<data_dir>/redocred/``. There is no train file
      here, so the 1,000 documents (dev_revised then test_revised, in file order) are shuffled once with
      seed 0 and cut 700 ``train`` / 100 ``dev`` / 200 ``test``: a pure function of the two files.
    * ``docred``: the official DocRED release in ``<data_dir>/docred/``: ``train_annotated.json`` (3,053
      documents) gives ``train`` less 300 documents drawn with seed 0 as ``dev`` (model selection), and
      DocRED's ``dev.json`` is ``test`` (its own ``test.json`` is unlabelled and not read).

    Relations: the 96 of DocRED's ``rel_info.json`` (read, where present, from the task's folder or the
    other one, and checked against :data:`RELATIONS`) sorted by property number, after ``NA`` at index 0.

    Records: ``text_a`` the document's tokens joined by single spaces; ``entities`` one per vertexSet entry,
    ``start``/``end`` the first mention's character span (a gold link candidate; DocRED has no QIDs, so
    ``qid`` is None), ``mentions`` every mention's span with its ``name`` and ``sent_id``; ``label`` the
    deduplicated facts ``[head, tail, relation index]``; ``in_train`` per fact, whether it is "in train"
    as DocRED's Ign F1 defines it: some (head mention name, tail mention name, relation) of it is such a key
    of a fact of the training documents outside the record's own split (``revised``: the 700 train
    documents; ``docred``: dev against the train split, test against all of train_annotated, as the official
    scorer does). Train keys come from the full train split, whatever the train fraction, so Ign F1 means
    the same at every fraction.
    """

    name = "redocred"
    split_origins = {
        "dev": "documents held out of the train documents (seed 0)",
        "test": "Re-DocRED documents never trained on (revised) or DocRED dev (docred)",
    }
    tasks = ("revised", "docred")

    @classmethod
    def spec(cls, task: str) -> TaskSpec:
        if task not in SPECS:
            raise KlmError(f"unknown task {task!r} of dataset 'redocred'; known: {', '.join(cls.tasks)}")
        return SPECS[task]

    def read_splits(self) -> dict[str, list[dict]]:
        first, second = self.find_files()
        self.check_relations()
        if self.task == "revised":
            documents = self.read_file(first) + self.read_file(second)
            splits = {
                split: [documents[index] for index in indices]
                for split, indices in split_documents(len(documents)).items()
            }
            train_keys = fact_keys(splits["train"])
            return {split: mark_in_train(records, train_keys) for split, records in splits.items()}
        train_annotated = self.read_file(first)
        train, dev = hold_out(train_annotated, DOCRED_DEV_SIZE, SPLIT_SEED)
        train_keys = fact_keys(train)
        return {
            "train": mark_in_train(train, train_keys),
            "dev": mark_in_train(dev, train_keys),
            "test": mark_in_train(self.read_file(second), fact_keys(train_annotated)),
        }

    def answer_facts(self, splits: dict[str, list[dict]]) -> list[AnswerFact]:
        """Each document's gold facts, its entities known by their mention names (DocRED has no QIDs)."""

        def names(entity: dict) -> tuple[str, ...]:
            return tuple(sorted({mention["name"] for mention in entity["mentions"]}))

        return [
            AnswerFact(names(record["entities"][head]), LABELS[relation], names(record["entities"][tail]), by_name=True)
            for records in splits.values()
            for record in records
            for head, tail, relation in record["label"]
        ]

    # -- finding the files ------------------------------------------------------------------
    def find_files(self):
        folder, names = FOLDERS[self.task], FILES[self.task]
        root = self.data_dir / folder if self.data_dir is not None else None
        found = [find_file(root, name) for name in names]
        if all(found):
            return found
        raise KlmError(
            f"no {'Re-DocRED' if self.task == 'revised' else 'DocRED'} data under "
            f"{root or 'any data directory'}: expected {folder}/ holding {' and '.join(names)} "
            f"(plain or .gz; set --data-dir or DATA_DIR)"
        )

    def check_relations(self):
        """rel_info.json, where present, must name exactly the relations of the spec."""
        folders = [FOLDERS[self.task]] + [folder for folder in FOLDERS.values() if folder != FOLDERS[self.task]]
        for folder in folders:
            path = find_file(self.data_dir / folder, "rel_info.json")
            if path is not None:
                relations = read_json(path)
                if not isinstance(relations, dict) or set(relations) != set(RELATIONS):
                    raise KlmError(f"{path}: expected an object naming DocRED's 96 relations (P6 … P3373)")
                return

    # -- reading ----------------------------------------------------------------------------
    def read_file(self, path) -> list[dict]:
        documents = read_json(path)
        if not isinstance(documents, list):
            raise KlmError(f"{path}: expected a JSON array of documents, got a {type(documents).__name__}")
        stem = path.name.removesuffix(".gz").removesuffix(".json")
        return [
            self.record(f"{self.name}-{stem}-{index}", document, f"{path}: document {index}")
            for index, document in enumerate(documents)
        ]

    def record(self, record_id: str, document, where: str) -> dict:
        if not isinstance(document, dict):
            raise KlmError(f"{where}: expected an object, got a {type(document).__name__}")
        missing = [key for key in ("title", "sents", "vertexSet", "labels") if key not in document]
        if missing:
            raise KlmError(f"{where}: missing key(s) {', '.join(missing)}")
        sentences = document["sents"]
        if not (
            isinstance(sentences, list)
            and sentences
            and all(
                isinstance(sentence, list) and all(isinstance(token, str) for token in sentence)
                for sentence in sentences
            )
        ):
            raise KlmError(f"{where}: 'sents' must be a non-empty list of token lists")
        text, offsets = document_text(sentences)
        if not isinstance(document["vertexSet"], list) or not document["vertexSet"]:
            raise KlmError(f"{where}: 'vertexSet' must be a non-empty list of entities")
        entities = [
            self.entity(mentions, sentences, offsets, f"{where}, entity {index}")
            for index, mentions in enumerate(document["vertexSet"])
        ]
        if not isinstance(document["labels"], list):
            raise KlmError(f"{where}: 'labels' must be a list of facts")
        facts = sorted(
            {
                self.fact(label, len(entities), f"{where}, label {index}")
                for index, label in enumerate(document["labels"])
            }
        )
        return {
            "id": record_id,
            "title": document["title"],
            "text_a": text,
            "text_b": None,
            "label": [list(fact) for fact in facts],
            "entities": entities,
        }

    def entity(self, mentions, sentences, offsets, where: str) -> dict:
        if not isinstance(mentions, list) or not mentions:
            raise KlmError(f"{where}: expected a non-empty list of mentions")
        spans = []
        for mention in mentions:
            if not isinstance(mention, dict) or not {"name", "sent_id", "pos"} <= mention.keys():
                raise KlmError(f"{where}: expected mentions with name, sent_id and pos, got {mention!r:.80}")
            sentence, position = mention["sent_id"], mention["pos"]
            if not (is_int(sentence) and 0 <= sentence < len(sentences)):
                raise KlmError(
                    f"{where}: mention {mention['name']!r} has sent_id {sentence!r}, "
                    f"outside the document's {len(sentences)} sentences"
                )
            tokens = sentences[sentence]
            if not (
                isinstance(position, list)
                and len(position) == 2
                and all(map(is_int, position))
                and 0 <= position[0] < position[1] <= len(tokens)
            ):
                raise KlmError(
                    f"{where}: mention {mention['name']!r} has pos {position!r}, not a token span "
                    f"of sentence {sentence} ({len(tokens)} tokens)"
                )
            start = offsets[sentence][position[0]]
            end = offsets[sentence][position[1] - 1] + len(tokens[position[1] - 1])
            spans.append({"start": start, "end": end, "name": str(mention["name"]), "sent_id": sentence})
        return {
            "qid": None,
            "start": spans[0]["start"],
            "end": spans[0]["end"],
            "name": spans[0]["name"],
            "type": mentions[0].get("type"),
            "mentions": spans,
        }

    def fact(self, label, entity_count: int, where: str) -> tuple[int, int, int]:
        if not isinstance(label, dict) or not {"h", "t", "r"} <= label.keys():
            raise KlmError(f"{where}: expected an object with h, t and r")
        for role in ("h", "t"):
            if not (is_int(label[role]) and 0 <= label[role] < entity_count):
                raise KlmError(
                    f"{where}: {role} = {label[role]!r} is not one of the document's {entity_count} entities"
                )
        if label["h"] == label["t"]:
            raise KlmError(f"{where}: head and tail are the same entity {label['h']}")
        if label["r"] not in RELATIONS:
            raise KlmError(f"{where}: unknown relation {label['r']!r} (not among DocRED's 96)")
        return label["h"], label["t"], LABELS.index(label["r"])
