"""Extractive QA in the SQuAD v1.1 JSON format, as SearchQA and Quasar-T are usually distributed.

Files, in ``<data_dir>/<task>/`` for task ``searchqa``, ``quasart`` or ``squad``, each plain or
gzip-compressed: ``train.json``, ``dev.json`` and optionally ``test.json``, each
``{"data": [{"paragraphs": [{"context", "qas": [{"id", "question", "answers": [{"text",
"answer_start"}]}]}]}]}``. ``dev`` selects the model; results are reported on ``test`` where it
exists, else on dev. Every question needs at least one answer (v1.1 has no unanswerable questions).
An answer whose ``answer_start`` does not point at its text is looked up in the context (the first
occurrence); one not found there keeps its text for scoring but trains towards "no answer".
"""

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import find_file, read_json
from knowledge_lm.data.base import TaskDataModule, TaskSpec

TASKS = ("searchqa", "quasart", "squad")
FILES = {"train": "train.json", "dev": "dev.json", "test": "test.json"}
OPTIONAL_SPLITS = ("test",)


def located_start(context: str, text: str, start) -> int:
    """``start`` when the context holds ``text`` there, else its first occurrence, else -1."""
    if isinstance(start, int) and context[start : start + len(text)] == text:
        return start
    return context.find(text)


def expect(value, kind: type, where: str, what: str):
    if not isinstance(value, kind):
        raise KlmError(f"{where}: expected {what}, got {type(value).__name__}")
    return value


def read_squad_json(path, task: str, split: str) -> list[dict]:
    """Records of a SQuAD-v1.1-format file; structural errors name the file and the JSON path."""
    data = expect(read_json(path), dict, str(path), 'an object with "data"')
    records = []
    for article_index, article in enumerate(expect(data.get("data"), list, f"{path}: data", "a list")):
        article_where = f"{path}: data[{article_index}]"
        paragraphs = expect(
            expect(article, dict, article_where, "an object").get("paragraphs"),
            list,
            f"{article_where}.paragraphs",
            "a list",
        )
        for paragraph_index, paragraph in enumerate(paragraphs):
            paragraph_where = f"{article_where}.paragraphs[{paragraph_index}]"
            expect(paragraph, dict, paragraph_where, "an object")
            context = expect(paragraph.get("context"), str, f"{paragraph_where}.context", "a string")
            for qa_index, qa in enumerate(expect(paragraph.get("qas"), list, f"{paragraph_where}.qas", "a list")):
                qa_where = f"{paragraph_where}.qas[{qa_index}]"
                expect(qa, dict, qa_where, "an object")
                question = expect(qa.get("question"), str, f"{qa_where}.question", "a string")
                answers = expect(qa.get("answers"), list, f"{qa_where}.answers", "a list")
                if not answers:
                    raise KlmError(f"{qa_where}: no answers (SQuAD v1.1 format needs at least one)")
                gold = []
                for answer_index, answer in enumerate(answers):
                    answer_where = f"{qa_where}.answers[{answer_index}]"
                    expect(answer, dict, answer_where, "an object")
                    text = expect(answer.get("text"), str, f"{answer_where}.text", "a string")
                    gold.append({"text": text, "start": located_start(context, text, answer.get("answer_start"))})
                key = qa.get("id", f"{article_index}-{paragraph_index}-{qa_index}")
                records.append(
                    {"id": f"{task}-{split}-{key}", "text_a": question, "text_b": context, "answers": gold, "label": 0}
                )
    return records


class SquadFormatDataModule(TaskDataModule):
    name = "squad_format"
    split_origins = {"dev": "the task's dev.json", "test": "the task's test.json"}
    tasks = TASKS

    @classmethod
    def spec(cls, task: str) -> TaskSpec:
        if task not in TASKS:
            raise KlmError(f"unknown task {task!r} of dataset 'squad_format'; known: {', '.join(TASKS)}")
        return TaskSpec(task, "extractive_qa", (), ("exact_match", "f1"), "f1")

    def read_splits(self) -> dict[str, list[dict]]:
        folder = self.data_dir / self.task if self.data_dir else None
        found = {split: find_file(folder, name) for split, name in FILES.items()}
        missing = [FILES[split] for split, path in found.items() if path is None and split not in OPTIONAL_SPLITS]
        if missing:
            raise KlmError(
                f"no {self.task} data: expected {', '.join(missing)} (plain or .gz; test.json optional) "
                f"in {folder or f'<data_dir>/{self.task}'} (set --data-dir or DATA_DIR)"
            )
        return {split: read_squad_json(path, self.task, split) for split, path in found.items() if path is not None}
