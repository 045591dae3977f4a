"""What a cell is run from: the hand-off from the sweep runner to a cell's process or a worker, and on to the cell."""

import dataclasses
import json
import os
from dataclasses import dataclass, field

from knowledge_lm.core.results import Cell
from knowledge_lm.run.config import TrainConfig

MPS_VARIABLE = "KLM_MPS"  # "1" in the environment of the cells an MPS daemon of their sweep serves


@dataclass(frozen=True)
class CellSpec:
    """One cell with everything its run needs: its training settings (checked), where its data is read and its
    result, checkpoints and logs are written, its dataset options, whether it shows progress bars, and the process
    it ends with (``parent_pid``: the runner; None: none watched, as a scheduler's job or a test). It crosses
    processes as one JSON object (``to_json``, ``from_json``)."""

    cell: Cell
    train: TrainConfig = field(default_factory=TrainConfig)
    data_dir: str | None = None
    results_dir: str = "results"
    runs_dir: str = "runs"
    dataset_options: dict = field(default_factory=dict)
    progress: bool = True
    parent_pid: int | None = None

    def to_dict(self) -> dict:
        """Plain data: the cell's and the training settings' fields, the rest as they are."""
        return {
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
            "cell": dataclasses.asdict(self.cell),
            "train": dataclasses.asdict(self.train),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, values: dict) -> "CellSpec":
        """A spec from plain data (``to_dict``'s); absent keys take their defaults, the training settings are
        checked (``TrainConfig.from_dict``)."""
        known = {f.name for f in dataclasses.fields(cls)}
        rest = {name: value for name, value in values.items() if name in known and name not in ("cell", "train")}
        if rest.get("dataset_options") is None:
            rest.pop("dataset_options", None)
        return cls(
            cell=Cell(**values["cell"]),
            train=TrainConfig.from_dict(values.get("train") or {}),
            **rest,
        )

    @classmethod
    def from_json(cls, text: str) -> "CellSpec":
        return cls.from_dict(json.loads(text))


def mps_in_use() -> bool:
    """Whether this cell runs under an MPS daemon its sweep set up for it (``knowledge_lm.sweep.mps``), as its
    result records it."""
    return os.environ.get(MPS_VARIABLE) == "1"
