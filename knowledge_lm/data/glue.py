"""GLUE: nine sentence(-pair) tasks, from the shared data folder, the official GLUE download, or the hub.

The splits and where the files are looked for: ``GlueDataModule``.
"""

from knowledge_lm.core.backbones import offline
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import column_index, find_file, read_json, read_jsonl, read_tsv
from knowledge_lm.data.base import TaskDataModule, TaskSpec, hold_out

BINARY = ("0", "1")
NLI2 = ("entailment", "not_entailment")
SPECS = {
    "cola": TaskSpec("cola", "classification", BINARY, ("matthews", "accuracy"), "matthews"),
    "sst2": TaskSpec("sst2", "classification", BINARY),
    "mrpc": TaskSpec("mrpc", "classification", BINARY, ("f1", "accuracy"), "f1"),
    "stsb": TaskSpec("stsb", "regression", (), ("pearson", "spearman"), "pearson"),
    "qqp": TaskSpec("qqp", "classification", BINARY, ("f1", "accuracy"), "f1"),
    "mnli": TaskSpec("mnli", "classification", ("entailment", "neutral", "contradiction")),
    "qnli": TaskSpec("qnli", "classification", NLI2),
    "rte": TaskSpec("rte", "classification", NLI2),
    "wnli": TaskSpec("wnli", "classification", BINARY),
}

TASK_DIRS = {
    "cola": "CoLA",
    "sst2": "SST-2",
    "mrpc": "MRPC",
    "stsb": "STS-B",
    "qqp": "QQP",
    "mnli": "MNLI",
    "qnli": "QNLI",
    "rte": "RTE",
    "wnli": "WNLI",
}

# Columns (text_a, text_b, label) of the official GLUE TSVs, by header name; CoLA has no header: indices.
TSV_COLUMNS = {
    "cola": (3, None, 1),
    "sst2": ("sentence", None, "label"),
    "mrpc": ("#1 String", "#2 String", "Quality"),
    "stsb": ("sentence1", "sentence2", "score"),
    "qqp": ("question1", "question2", "is_duplicate"),
    "mnli": ("sentence1", "sentence2", "gold_label"),
    "qnli": ("question", "sentence", "label"),
    "rte": ("sentence1", "sentence2", "label"),
    "wnli": ("sentence1", "sentence2", "label"),
}
# Text columns of nyu-mll/glue on the hub (its label column is "label", an index into the spec's labels).
HUB_COLUMNS = {
    "cola": ("sentence", None),
    "sst2": ("sentence", None),
    "mrpc": ("sentence1", "sentence2"),
    "stsb": ("sentence1", "sentence2"),
    "qqp": ("question1", "question2"),
    "mnli": ("premise", "hypothesis"),
    "qnli": ("question", "sentence"),
    "rte": ("sentence1", "sentence2"),
    "wnli": ("sentence1", "sentence2"),
}

# split -> file name (without .gz) in each layout, and split -> hub split; the reader follows the suffix.
# A task whose files give no "dev" gets one held out of its train split (HELD_OUT_TASKS only).
SMALL_FILES = {"train": "train.tsv", "dev": "dev.tsv"}
SAMPLE_FILES = {"train": "train_subset_powerfulpromptft_train.json", "dev": "train_subset_powerfulpromptft_dev.json"}
SHARED_FILES = {
    "qnli": {**SAMPLE_FILES, "test": "dev.tsv"},
    "mnli": {**SAMPLE_FILES, "test": "validation_matched.jsonl", "test_mismatched": "validation_mismatched.jsonl"},
    "qqp": SAMPLE_FILES,
}
OFFICIAL_FILES = {
    "qnli": {"train": "train.tsv", "test": "dev.tsv"},
    "mnli": {"train": "train.tsv", "test": "dev_matched.tsv", "test_mismatched": "dev_mismatched.tsv"},
    "qqp": {"train": "train.tsv", "test": "dev.tsv"},
}
HUB_SPLITS = {
    "qnli": {"train": "train", "validation": "test"},
    "mnli": {"train": "train", "validation_matched": "test", "validation_mismatched": "test_mismatched"},
    "qqp": {"train": "train", "validation": "test"},
}
HELD_OUT_TASKS = ("qnli", "mnli", "qqp")
HELD_OUT_ROWS = 1000
HELD_OUT_SEED = 0


class GlueDataModule(TaskDataModule):
    """The nine GLUE tasks as one dataset, each task its own splits.

    Splits. GLUE's test sets are unlabelled, so GLUE's labelled dev set is the reported ``test`` split and
    models are selected on a ``dev`` split held out of GLUE train, never on what is reported. CoLA, SST-2,
    MRPC, STS-B, RTE and WNLI: a tenth of train, at most 1,000 rows, drawn with seed 0 and stratified by
    label (by quantile bin for STS-B), is held out as ``dev`` (split version 2; version 1 selected and
    reported on GLUE dev). For QNLI, MNLI and QQP the shared data holds no full train set, only
    PowerfulPromptFT's 9,999-row samples of GLUE *train*, cut 8,999 / 1,000: the 8,999 rows are ``train``
    and the 1,000 held-out rows ``dev``, and GLUE's own labelled dev set becomes ``test`` (QNLI
    ``dev.tsv``; MNLI ``validation_matched`` as ``test`` and ``validation_mismatched`` as
    ``test_mismatched``; QQP's dev set is not in the shared data, so QQP has no test). Where the full
    train set of those three is read instead (the official layout or the hub), the split meanings stay
    the same: 1,000 rows of train, drawn as for the small tasks, are held out as ``dev``.

    Files are looked for, in order, in ``<data_dir>/glue_<task>/`` (the shared layout), then
    ``<data_dir>/<TaskDir>/`` and ``<data_dir>/glue_data/<TaskDir>/`` (what ``download_glue_data.py``
    writes), each file plain or gzip-compressed; with none of them, ``nyu-mll/glue`` on the hub unless offline.
    """

    name = "glue"
    split_origins = {
        "dev": "a part of GLUE train held out, seeded",
        "test": "GLUE's labelled dev set",
        "test_mismatched": "GLUE's MNLI dev mismatched",
    }
    tasks = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")

    @classmethod
    def spec(cls, task: str) -> TaskSpec:
        if task not in SPECS:
            raise KlmError(f"unknown task {task!r} of dataset 'glue'; known: {', '.join(cls.tasks)}")
        return SPECS[task]

    def read_splits(self) -> dict[str, list[dict]]:
        files = self.find_files()
        if files is None:
            splits = self.read_hub()
        else:
            splits = {split: self.read_file(split, path) for split, path in files.items()}
        if self.task not in HELD_OUT_TASKS:
            splits["test"] = splits.pop("dev")
        if "dev" not in splits:
            strata = self.task_kind.strata(splits["train"])
            splits["train"], splits["dev"] = hold_out(splits["train"], HELD_OUT_ROWS, HELD_OUT_SEED, strata)
        return splits

    @property
    def split_version(self) -> str:
        return "1" if self.task in HELD_OUT_TASKS else "2"

    @classmethod
    def split_origin(cls, task: str, split: str, split_version: str) -> str:
        if split_version == "1" and task not in HELD_OUT_TASKS and split == "dev":  # selected on GLUE dev itself
            return "GLUE's labelled dev set"
        return super().split_origin(task, split, split_version)

    # -- finding the files ------------------------------------------------------------------
    def find_files(self):
        """split -> path from the first layout whose folder exists, or None when no folder does."""
        if self.data_dir is None:
            return None
        task_dir = TASK_DIRS[self.task]
        layouts = [
            (self.data_dir / f"glue_{self.task}", SHARED_FILES.get(self.task, SMALL_FILES)),
            (self.data_dir / task_dir, OFFICIAL_FILES.get(self.task, SMALL_FILES)),
            (self.data_dir / "glue_data" / task_dir, OFFICIAL_FILES.get(self.task, SMALL_FILES)),
        ]
        for root, names in layouts:
            if not root.is_dir():
                continue
            found = {split: find_file(root, name) for split, name in names.items()}
            missing = [names[split] for split, path in found.items() if path is None]
            if missing:
                raise KlmError(f"{root}: missing GLUE {self.task} file(s) {', '.join(missing)} (plain or .gz)")
            return found
        return None

    def missing_data_message(self) -> str:
        return (
            f"no GLUE {self.task} data under {self.data_dir or 'any data directory'}: expected "
            f"glue_{self.task}/ or the official {TASK_DIRS[self.task]}/ layout (set --data-dir or DATA_DIR)"
        )

    # -- reading ----------------------------------------------------------------------------
    def record(self, split: str, key, text_a, text_b, raw_label, where: str) -> dict:
        return {
            "id": f"{self.task}-{split}-{key}",
            "text_a": text_a,
            "text_b": text_b,
            "label": self.task_spec.label_id(raw_label, where),
        }

    def hub_label(self, raw):
        """The spec's label name for a hub-style integer label (other values go on to fail label_id)."""
        labels = self.task_spec.labels
        if labels and isinstance(raw, int) and 0 <= raw < len(labels):
            return labels[raw]
        return raw

    def read_file(self, split: str, path) -> list[dict]:
        name = path.name.removesuffix(".gz")
        if name.endswith(".jsonl"):
            return self.read_hub_jsonl(split, path)
        if name.endswith(".json"):
            return self.read_sample_json(split, path)
        return self.read_glue_tsv(split, path)

    def read_glue_tsv(self, split: str, path) -> list[dict]:
        text_a, text_b, label = TSV_COLUMNS[self.task]
        headed = isinstance(label, str)
        names, rows = read_tsv(path, header=headed)
        if headed:
            text_a, label = column_index(path, names, text_a), column_index(path, names, label)
            text_b = column_index(path, names, text_b) if text_b is not None else None
        needed = 1 + max(index for index in (text_a, text_b, label) if index is not None)
        records = []
        for line, fields in rows:
            if len(fields) < needed:
                raise KlmError(f"{path}:{line}: expected at least {needed} tab-separated columns, got {len(fields)}")
            records.append(
                self.record(
                    split,
                    line,
                    fields[text_a],
                    None if text_b is None else fields[text_b],
                    fields[label],
                    f"{path}:{line}",
                )
            )
        return records

    def read_sample_json(self, split: str, path) -> list[dict]:
        """PowerfulPromptFT's samples: one JSON object keyed "0".., values {text_a, text_b, label name}."""
        data = read_json(path)
        if not isinstance(data, dict):
            raise KlmError(f"{path}: expected a JSON object keyed by row number, got a {type(data).__name__}")
        records = []
        for key, row in data.items():
            where = f"{path}: record {key}"
            if not isinstance(row, dict) or not {"text_a", "text_b", "label"} <= row.keys():
                raise KlmError(f"{where}: expected an object with text_a, text_b and label")
            records.append(self.record(split, key, row["text_a"], row["text_b"], row["label"], where))
        return records

    def read_hub_jsonl(self, split: str, path) -> list[dict]:
        """A hub split exported as JSON lines (MNLI: premise, hypothesis, label 0/1/2, idx)."""
        text_a, text_b = HUB_COLUMNS[self.task]
        wanted = [column for column in (text_a, text_b, "label") if column is not None]
        records = []
        for line, row in read_jsonl(path):
            where = f"{path}:{line}"
            if not isinstance(row, dict) or not set(wanted) <= row.keys():
                raise KlmError(f"{where}: expected an object with {', '.join(wanted)}")
            records.append(
                self.record(
                    split, line, row[text_a], row[text_b] if text_b else None, self.hub_label(row["label"]), where
                )
            )
        return records

    def read_hub(self) -> dict[str, list[dict]]:
        if offline():
            raise KlmError(self.missing_data_message())
        try:
            from datasets import load_dataset

            dataset = load_dataset("nyu-mll/glue", self.task)
        except Exception as error:  # anything from the network or the hub becomes one line
            reason = " ".join(str(error).split()) or type(error).__name__
            raise KlmError(f"{self.missing_data_message()}; the hub (nyu-mll/glue) failed too: {reason}") from None
        text_a, text_b = HUB_COLUMNS[self.task]
        splits = {}
        for hub_split, split in HUB_SPLITS.get(self.task, {"train": "train", "validation": "dev"}).items():
            part = dataset[hub_split]
            seconds = part[text_b] if text_b else [None] * len(part)
            splits[split] = [
                self.record(
                    split,
                    index,
                    first,
                    second,
                    self.hub_label(label),
                    f"nyu-mll/glue {self.task} {hub_split} row {index}",
                )
                for index, (first, second, label) in enumerate(zip(part[text_a], seconds, part["label"]))
            ]
        return splits
