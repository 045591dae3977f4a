"""SemEval-2010 Task 8: relation classification between two marked nominals, 19 direction-aware labels.

Files: the official full release, ``TRAIN_FILE.TXT`` (8,000 sentences) and ``TEST_FILE_FULL.TXT``
(2,717, with gold labels), each plain or gzip-compressed, looked for in ``<data_dir>/semeval2010_task8/``
(the shared layout), then in ``<data_dir>`` itself, each also under the release's own folders
(``SemEval2010_task8_all_data/SemEval2010_task8_training/`` and ``.../SemEval2010_task8_testing_keys/``).
Each example is a block of lines: ``id<TAB>"sentence with <e1>..</e1> and <e2>..</e2>"``, the label,
``Comment: ...``, then a blank line.

The splits, records and scores: ``SemEvalDataModule``.
"""

import re

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import find_file, open_text
from knowledge_lm.data.base import TaskDataModule, TaskSpec, hold_out
from knowledge_lm.tasks.relation import RelationTasks

RELATION_LABELS = (
    "Cause-Effect(e1,e2)",
    "Cause-Effect(e2,e1)",
    "Component-Whole(e1,e2)",
    "Component-Whole(e2,e1)",
    "Content-Container(e1,e2)",
    "Content-Container(e2,e1)",
    "Entity-Destination(e1,e2)",
    "Entity-Destination(e2,e1)",
    "Entity-Origin(e1,e2)",
    "Entity-Origin(e2,e1)",
    "Instrument-Agency(e1,e2)",
    "Instrument-Agency(e2,e1)",
    "Member-Collection(e1,e2)",
    "Member-Collection(e2,e1)",
    "Message-Topic(e1,e2)",
    "Message-Topic(e2,e1)",
    "Other",
    "Product-Producer(e1,e2)",
    "Product-Producer(e2,e1)",
)
SPEC = TaskSpec("main", "relation", RELATION_LABELS, ("semeval_macro_f1", "accuracy"), "semeval_macro_f1")

FOLDERS = ("semeval2010_task8", ".")
FILES = {
    "train": (
        "TRAIN_FILE.TXT",
        "SemEval2010_task8_training/TRAIN_FILE.TXT",
        "SemEval2010_task8_all_data/SemEval2010_task8_training/TRAIN_FILE.TXT",
    ),
    "test": (
        "TEST_FILE_FULL.TXT",
        "SemEval2010_task8_testing_keys/TEST_FILE_FULL.TXT",
        "SemEval2010_task8_all_data/SemEval2010_task8_testing_keys/TEST_FILE_FULL.TXT",
    ),
}
DEV_SIZE = 800
DEV_SEED = 0

SENTENCE_LINE = re.compile(r'^(\d+)\t"(.*)"$')
ENTITY_TAG = re.compile(r"<(/?)(e[12])>")


def read_blocks(path) -> list[tuple[int, list[str]]]:
    """Runs of non-blank lines as ``(first line number, lines)``."""
    blocks, current, first_line = [], [], 0
    with open_text(path) as handle:
        for line_number, line in enumerate(handle, start=1):
            line = line.rstrip("\r\n")
            if line.strip():
                if not current:
                    first_line = line_number
                current.append(line)
            elif current:
                blocks.append((first_line, current))
                current = []
    if current:
        blocks.append((first_line, current))
    return blocks


def strip_entity_tags(tagged: str, where: str) -> tuple[str, list[dict]]:
    """The sentence without its ``<e1>``/``<e2>`` tags, and the two mentions' offsets into it."""
    pieces, opened, spans = [], {}, {}
    length, position = 0, 0
    for tag in ENTITY_TAG.finditer(tagged):
        pieces.append(tagged[position : tag.start()])
        length += tag.start() - position
        position = tag.end()
        closing, role = tag.group(1) == "/", tag.group(2)
        if not closing:
            if role in opened or role in spans:
                raise KlmError(f"{where}: <{role}> opened twice")
            if opened:
                raise KlmError(f"{where}: <{role}> opened inside <{next(iter(opened))}>")
            opened[role] = length
        else:
            if role not in opened:
                raise KlmError(f"{where}: </{role}> without a matching <{role}>")
            spans[role] = (opened.pop(role), length)
    pieces.append(tagged[position:])
    missing = [role for role in ("e1", "e2") if role not in spans]
    if missing or opened:
        raise KlmError(f"{where}: missing or unclosed entity tag(s) {', '.join(missing or opened)}")
    text = "".join(pieces)
    entities = []
    for role in ("e1", "e2"):
        start, end = spans[role]
        if start == end:
            raise KlmError(f"{where}: the {role} mention is empty")
        entities.append({"start": start, "end": end, "mention": text[start:end], "role": role})
    return text, entities


class SemEvalDataModule(RelationTasks, TaskDataModule):
    """SemEval-2010 Task 8 with a dev set held out of its train file.

    Splits. The release has no dev set: 800 sentences of the train file (a tenth for smaller files), drawn
    once with seed 0 over the file's order and not stratified, become ``dev``; the other 7,200 are
    ``train``, and the test file is ``test``.

    Records carry ``entities``: the two marked nominals as character offsets into ``text_a``, the sentence
    with its tags removed (roles e1, e2). Task ``main`` reads them through entity markers (kind "relation"),
    task ``mean_pool`` through mean-pooled entity states (kind "relation_mean"); see knowledge_lm/tasks/relation.py.
    Scored by the official measure, the scorer's macro-F1 over the nine relations (direction-aware, Other
    excluded), and accuracy over the 19 labels.
    """

    name = "semeval2010"
    split_origins = {"dev": "800 sentences held out of the train file (seed 0)", "test": "the official test file"}
    relation_spec = SPEC

    def read_splits(self) -> dict[str, list[dict]]:
        files = self.find_files()
        train, dev = hold_out(self.read_file(files["train"]), DEV_SIZE, DEV_SEED)
        return {"train": train, "dev": dev, "test": self.read_file(files["test"])}

    def find_files(self) -> dict:
        if self.data_dir is not None:
            for folder in FOLDERS:
                root = self.data_dir / folder
                found = {split: find_file(root, *names) for split, names in FILES.items()}
                if all(found.values()):
                    return found
                if any(found.values()):
                    missing = [FILES[split][0] for split, path in found.items() if path is None]
                    raise KlmError(f"{root}: missing SemEval-2010 Task 8 file {', '.join(missing)} (plain or .gz)")
        raise KlmError(
            f"no SemEval-2010 Task 8 data under {self.data_dir or 'any data directory'}: expected "
            f"semeval2010_task8/ holding TRAIN_FILE.TXT and TEST_FILE_FULL.TXT (set --data-dir or DATA_DIR)"
        )

    def read_file(self, path) -> list[dict]:
        records, seen_ids = [], set()
        for first_line, lines in read_blocks(path):
            where = f"{path}:{first_line}"
            sentence = SENTENCE_LINE.match(lines[0])
            if sentence is None:
                raise KlmError(
                    f'{where}: expected id<TAB>"sentence" with the sentence in double quotes, got {lines[0][:60]!r}'
                )
            if len(lines) < 2:
                raise KlmError(f"{where}: the block has no label line")
            if len(lines) > 3 or (len(lines) == 3 and not lines[2].startswith("Comment")):
                unexpected_line = first_line + (3 if lines[2].startswith("Comment") else 2)
                raise KlmError(f"{path}:{unexpected_line}: expected a blank line or 'Comment:' ending the block")
            sentence_id = sentence.group(1)
            if sentence_id in seen_ids:
                raise KlmError(f"{where}: sentence id {sentence_id} appears twice")
            seen_ids.add(sentence_id)
            text, entities = strip_entity_tags(sentence.group(2), where)
            label = SPEC.label_id(lines[1].strip(), f"{path}:{first_line + 1}")
            records.append(
                {
                    "id": f"semeval2010-{sentence_id}",
                    "text_a": text,
                    "text_b": None,
                    "label": label,
                    "entities": entities,
                }
            )
        if not records:
            raise KlmError(f"{path}: no examples")
        return records
