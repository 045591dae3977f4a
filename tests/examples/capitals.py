"""capitals: whether a statement about a capital city is true, one TSV file per split."""

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import find_file, read_tsv
from knowledge_lm.data.base import TaskDataModule, TaskSpec

SPEC = TaskSpec("main", "classification", labels=("false", "true"))


class CapitalsDataModule(TaskDataModule):
    """Statements about capitals, true or false: ``<data_dir>/capitals/{train,dev,test}.tsv``, each line a
    statement, a tab and its label."""

    name = "capitals"
    tasks = ("main",)
    split_origins = {"dev": "capitals/dev.tsv", "test": "capitals/test.tsv"}

    @classmethod
    def spec(cls, task: str) -> TaskSpec:
        return SPEC

    def read_splits(self) -> dict[str, list[dict]]:
        splits = {}
        for split in ("train", "dev", "test"):
            path = find_file(self.data_dir, f"capitals/{split}.tsv")
            if path is None:
                raise KlmError(f"no capitals/{split}.tsv under {self.data_dir} (set --data-dir or DATA_DIR)")
            _, rows = read_tsv(path, header=False, min_columns=2)
            splits[split] = [
                {
                    "id": f"{split}-{line}",
                    "text_a": text,
                    "text_b": None,
                    "label": SPEC.label_id(label, f"{path}:{line}"),
                }
                for line, (text, label, *_) in rows
            ]
        return splits
