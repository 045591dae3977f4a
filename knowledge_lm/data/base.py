"""The shared base of every dataset: task specs, labelled splits, fraction subsets, cached tokenization.

A dataset subclasses :class:`TaskDataModule`, declares its tasks and implements ``spec`` and
``read_splits``; everything after reading (subsets, tokenization cache, padding, loaders) lives here.
"""

import hashlib
import inspect
import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar

import pytorch_lightning as pl
from datasets import Dataset, disable_progress_bars, load_from_disk
from torch.utils.data import DataLoader
from torch.utils.data import Dataset as TorchDataset

from knowledge_lm.core.backbones import tokenizer_fingerprint
from knowledge_lm.core.caches import set_aside_cache
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import default_cache_dir, resolve_data_dir
from knowledge_lm.core.registry import TASK_KINDS
from knowledge_lm.core.subsets import check_fraction, fraction_subset, subset_hash
from knowledge_lm.knowledge.answers import AnswerFact
from knowledge_lm.knowledge.prepare import KnowledgeConfig, load_prepared
from knowledge_lm.tasks.padding import as_columns

SELECTION_SPLIT = "dev"


@dataclass(frozen=True)
class TaskSpec:
    """What a task predicts and how it is scored (metric names as in ``knowledge_lm.tasks.metrics``)."""

    name: str
    kind: str  # a registered task kind (knowledge_lm/tasks): classification, regression, ...
    labels: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ("accuracy",)
    main_metric: str = "accuracy"

    @property
    def num_labels(self) -> int:
        return len(self.labels) if self.labels else 1

    def label_id(self, raw, where: str) -> int | float:
        """The training target for a raw label; ``where`` ("file:line") goes into the error."""
        if self.kind == "regression":
            try:
                return float(raw)
            except (TypeError, ValueError):
                raise KlmError(f"{where}: bad label {raw!r} (expected a number)") from None
        text = str(raw).strip()
        if text in self.labels:
            return self.labels.index(text)
        raise KlmError(f"{where}: bad label {raw!r} (expected one of {', '.join(self.labels)})")


def hold_out(records: list[dict], rows: int, seed: int = 0, strata=None) -> tuple[list[dict], list[dict]]:
    """(train, dev) for a dataset without a dev split: a seeded draw of ``rows`` rows (at most a tenth, at
    least one) becomes dev, so model selection never sees the reported split. With ``strata`` (a label or
    key per record) the draw is stratified by it, rounded per stratum, and independent of the records'
    order, where dev has room for a row of every stratum."""
    size = min(rows, max(1, len(records) // 10))
    if strata is None or len(set(strata)) > size:
        chosen = set(random.Random(seed).sample(range(len(records)), size))
    else:
        ids = [record["id"] for record in records]
        chosen = set(fraction_subset(ids, strata, size / len(records), seed).tolist())
    return (
        [record for index, record in enumerate(records) if index not in chosen],
        [record for index, record in enumerate(records) if index in chosen],
    )


class StaticPadding:
    """A tokenizer whose batches have few distinct lengths: every batch ``length`` tokens long, or its longest
    text rounded up to a multiple of ``multiple``; all else delegated. Set as a data module's ``tokenizer`` after its
    set-up (the encodings and prepared features keep their keys): under CUDA graphs each new shape is captured again,
    and a method's knowledge tensors follow the padded length (``knowledge_batch``)."""

    def __init__(self, tokenizer, length: int | None = None, multiple: int | None = None):
        self.tokenizer, self.length, self.multiple = tokenizer, length, multiple

    def padded_width(self, longest: int) -> int:
        """The length a batch whose longest sequence has ``longest`` tokens is padded to."""
        if self.length:
            return max(self.length, longest)
        return -(-longest // self.multiple) * self.multiple if self.multiple else longest

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


class ColumnBatches(TorchDataset):
    """An Arrow dataset read a batch at a time: the loader's ``__getitems__`` takes one slice of the table and
    hands on its columns as Arrow arrays (name → one value per example), never a dict per row."""

    def __init__(self, dataset: Dataset):
        self.dataset, self.arrow = dataset, dataset.with_format("arrow")

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        return self.dataset[index]

    def __getitems__(self, indices: list[int]) -> dict:
        table = self.arrow[indices]
        return {name: table.column(name).combine_chunks() for name in table.column_names}


class GatedLoader(DataLoader):
    """A loader whose iteration yields its batches only where ``gate()`` holds as it starts. The iterator is made
    either way, so the global random stream advances as for a plain loader. (Lightning re-creates a loader with its
    own sampler under DDP from the arguments it was made with: ``gate`` stays.)"""

    def __init__(self, *args, gate: Callable[[], bool], **kwargs):
        super().__init__(*args, **kwargs)
        self.gate = gate

    def __iter__(self):
        iterator = super().__iter__()
        return iterator if self.gate() else iter(())


class TaskDataModule(pl.LightningDataModule):
    """One task of one dataset, tokenized, with its train split cut to ``fraction``.

    Records are dicts with ``id``, ``text_a``, ``text_b`` (or None) and ``label`` (already an id or
    a float); datasets may add fields that knowledge methods read. ``read_splits`` returns only
    labelled splits: ``train``, ``dev`` (model selection) and any further test splits.
    """

    name: ClassVar[str]
    tasks: ClassVar[tuple[str, ...]]
    split_origins: ClassVar[dict[str, str]] = {}  # split → what it is, as the pages' protocol line names it
    # Whether the reported split's examples fall in groups scored apart (``example_groups``).
    has_example_groups: ClassVar[bool] = False
    # The encodings a sweep worker keeps (``keep_encodings``), by their disk cache path (dataset, task, records,
    # tokenizer, maximum length); None: every set-up loads them from disk.
    kept_encodings: ClassVar[dict | None] = None

    def __init__(
        self,
        task: str | None = None,
        tokenizer=None,
        data_dir=None,
        fraction: float = 1.0,
        subset_seed: int = 0,
        batch_size: int = 32,
        eval_batch_size: int = 128,
        max_length: int = 128,
        cache_dir=None,
        num_workers: int = 0,
        knowledge: dict | None = None,
    ):
        super().__init__()
        self.task = task or self.tasks[0]
        if self.task not in self.tasks:
            raise KlmError(f"unknown task {self.task!r} of dataset {self.name!r}; known: {', '.join(self.tasks)}")
        self.tokenizer = tokenizer
        self.data_dir = resolve_data_dir(data_dir)
        self.fraction = check_fraction(fraction)
        self.subset_seed = subset_seed
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.max_length = max_length
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 0:
            raise KlmError(f"dataset option num_workers={num_workers!r}: expected a whole number ≥ 0")
        self.num_workers = num_workers
        # Loader processes of the train split where the run sets them (``run.trainer``: under CUDA graphs, whose
        # step is bound by the host, collating in a worker overlaps the step).
        self.train_workers = 0
        self.knowledge = knowledge  # a KnowledgeConfig as a dict: features from `klm prepare` join each example
        # How a method wants a batch's knowledge: by default the decoded per-example dicts; a method may set
        # a picklable ``(knowledge, sequence_length) -> tensors`` here (in its ``setup``) so that the loader,
        # its workers included, builds them rather than the training step.
        self.knowledge_batch = None
        # Whether an evaluation under way scores the splits after the selection split (set by the trainer: the
        # model's ``evaluates_every_split``); None: always.
        self.evaluation_gate: Callable[[], bool] | None = None
        self.knowledge_features: list[dict] | None = None  # every split's decoded features, set up with the data
        self.knowledge_spans: dict[str, tuple[int, int]] = {}  # split → its rows of knowledge_features
        self.task_spec = self.spec(self.task)
        self._task_kind = None
        self.splits = None  # read by ``read_labelled``
        self.encoded = None  # tokenized by ``setup``

    # The constructor's parameters that every cell sets itself (not dataset options of a sweep).
    RUN_PARAMETERS: ClassVar[tuple[str, ...]] = (
        "self", "task", "tokenizer", "data_dir", "fraction", "subset_seed", "batch_size", "eval_batch_size",
        "max_length", "cache_dir", "num_workers", "knowledge",
    )  # fmt: skip

    @classmethod
    def resolved_options(cls, options: dict) -> dict:
        """A sweep's dataset ``options`` (less ``knowledge``) with the dataset's defaults for those it leaves out:
        what its cells read their data with, so that naming a default and leaving it out are the same cell."""
        parameters = inspect.signature(cls.__init__).parameters.values()
        defaults = {
            parameter.name: parameter.default
            for parameter in parameters
            if parameter.name not in cls.RUN_PARAMETERS
            and parameter.default is not inspect.Parameter.empty
            and parameter.kind is not inspect.Parameter.VAR_KEYWORD
        }
        return {**defaults, **options}

    @staticmethod
    def keep_encodings():
        """From now on this process keeps every split it tokenizes or loads in memory: a sweep worker's cells of one
        task (any fraction, seed or method) share them."""
        if TaskDataModule.kept_encodings is None:
            TaskDataModule.kept_encodings = {}

    @classmethod
    def spec(cls, task: str) -> TaskSpec:
        raise NotImplementedError

    def read_splits(self) -> dict[str, list[dict]]:
        raise NotImplementedError

    # -- reading, checked -------------------------------------------------------------------
    def read_labelled(self) -> dict[str, list[dict]]:
        """``labelled_splits``, read once."""
        if self.splits is None:
            self.splits = self.labelled_splits()
        return self.splits

    def labelled_splits(self) -> dict[str, list[dict]]:
        splits = self.read_splits()
        for required in ("train", SELECTION_SPLIT):
            if required not in splits:
                raise KlmError(f"{self.name}/{self.task}: no {required} split")
        for split, records in splits.items():
            if not records:
                raise KlmError(f"{self.name}/{self.task}: the {split} split is empty")
        return splits

    def answer_facts(self, splits: dict[str, list[dict]]) -> list[AnswerFact]:
        """The KG facts that are the answers of ``splits``' examples, kept out of the KG a knowledge method sees
        (``knowledge.answers``); none where the labels are no KG facts."""
        return []

    @property
    def eval_split_names(self) -> list[str]:
        return [split for split in self.splits if split != "train"]

    @classmethod
    def split_origin(cls, task: str, split: str, split_version: str) -> str:
        """What ``split`` of ``task`` was under ``split_version`` (a result's); "" where not written down."""
        return cls.split_origins.get(split, "")

    @property
    def split_version(self) -> str:
        """The version of how this task's splits are cut: results of different versions are never averaged."""
        return "1"

    @property
    def report_split(self) -> str:
        """Test where a labelled test split exists, otherwise dev."""
        return "test" if "test" in self.splits else SELECTION_SPLIT

    def train_subset(self):
        """The indices of the train split's rows that a cell trains on: its ``fraction``, stratified by the task
        kind's strata, drawn with ``subset_seed``."""
        train = self.read_labelled()["train"]
        ids = [record["id"] for record in train]
        return fraction_subset(ids, self.task_kind.strata(train), self.fraction, self.subset_seed)

    # -- tokenization, cached on disk --------------------------------------------------------
    @property
    def task_kind(self):
        if self._task_kind is None:
            self._task_kind = TASK_KINDS.get(self.task_spec.kind)(self.task_spec)
        return self._task_kind

    def encoding_key(self, records: list[dict]) -> str:
        """What a split's encoding depends on: its records, the tokenizer and the maximum length."""
        key = hashlib.sha256()
        key.update(json.dumps(records, sort_keys=True, default=str).encode())
        key.update(f"{tokenizer_fingerprint(self.tokenizer)}:{self.max_length}".encode())
        return key.hexdigest()[:16]

    def _cache_path(self, split: str, records: list[dict]) -> Path:
        return self.cache_dir / "tokenized" / self.name / self.task / f"{split}-{self.encoding_key(records)}"

    def tokenize(self, split: str, records: list[dict]):
        """The split's encoding: from the disk cache (written first where missing), or from memory where this
        process keeps encodings (``keep_encodings``). Callers derive new datasets from it, never change it."""
        path = self._cache_path(split, records)
        kept = TaskDataModule.kept_encodings
        if kept is not None and path in kept:
            return kept[path]
        encoded = self.tokenize_on_disk(path, records)
        if kept is not None:
            kept[path] = encoded
        return encoded

    def tokenize_on_disk(self, path: Path, records: list[dict]):
        """The encoding of ``records`` stored at ``path``, written first where missing; a stored one that does not
        read (a corrupt ``.arrow`` file) or holds another number of rows is set aside and written again."""
        disable_progress_bars()
        if path.exists():
            try:
                stored = load_from_disk(str(path))
                if stored.num_rows == len(records):
                    return stored
                why = f"{stored.num_rows} rows for {len(records)} records"
            except Exception as error:  # pyarrow's and datasets' own errors: truncated, garbage, files missing
                why = f"{type(error).__name__}: {error}"
            set_aside_cache(path, why)
        dataset = Dataset.from_dict(self.task_kind.encode(records, self.tokenizer, self.max_length))
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(path.name + f".tmp{os.getpid()}")
        dataset.save_to_disk(str(staging))
        try:
            os.replace(staging, path)
        except OSError:  # a concurrent cell wrote the same cache entry first: keep theirs
            shutil.rmtree(staging, ignore_errors=True)
        return load_from_disk(str(path))

    # -- Lightning hooks -------------------------------------------------------------------
    def setup(self, stage: str | None = None):
        if self.encoded is not None:
            return
        if self.tokenizer is None:
            raise KlmError("a tokenizer is needed to set up a data module")
        train = self.read_labelled()["train"]
        indices = self.train_subset()
        self.subset_hash = subset_hash([record["id"] for record in train], indices)
        self.train_size = len(indices)
        encoded = {split: self.tokenize(split, records) for split, records in self.splits.items()}
        if self.knowledge is not None:
            features = load_prepared(self, self.tokenizer, KnowledgeConfig.from_dict(self.knowledge), self.cache_dir)
            # Decoded once here, the rows carry an index into them: decoding each example's JSON in every
            # batch cost more than a MiniLM training step.
            self.knowledge_features, self.knowledge_spans = [], {}
            for split, dataset in encoded.items():
                start = len(self.knowledge_features)
                self.knowledge_features += features[split]
                self.knowledge_spans[split] = (start, len(self.knowledge_features))
                encoded[split] = dataset.add_column("knowledge", list(range(start, len(self.knowledge_features))))
        encoded["train"] = encoded["train"].select(indices)
        self.encoded = encoded

    def _collate(self, columns):
        columns = as_columns(columns)
        knowledge = (
            [self.knowledge_features[index] for index in columns.pop("knowledge")] if "knowledge" in columns else None
        )
        batch = self.task_kind.collate(columns, self.tokenizer)
        if knowledge is not None:
            batch["knowledge"] = (
                self.knowledge_batch(knowledge, batch["input_ids"].shape[-1])
                if self.knowledge_batch is not None
                else knowledge
            )
        return batch

    def entity_frequencies(self, split: str) -> list[int | None] | None:
        """Per example of ``split``: the highest document frequency (over the train split) among its linked
        entities, None without one (the x-axis of the SI+SR paper's Fig. 1a/5a); None without knowledge features."""
        if split not in self.knowledge_spans:
            return None
        start, end = self.knowledge_spans[split]
        return [
            max((link.get("df", 0) for link in row.get("links") or []), default=None)
            for row in self.knowledge_features[start:end]
        ]

    def example_groups(self, split: str) -> list[str] | None:
        """Per example of ``split``: the group it is scored in besides the whole split (the generated task's
        statement family), or None where the dataset has no groups."""
        return None

    def knowledge_rows(self):
        """Every example's decoded knowledge features, all splits (train: the whole split, not the subset)."""

        if self.knowledge is None:
            return
        if self.knowledge_features is not None:
            yield from self.knowledge_features
            return
        features = load_prepared(self, self.tokenizer, KnowledgeConfig.from_dict(self.knowledge), self.cache_dir)
        for rows in features.values():
            yield from rows

    def _loader(
        self, dataset, shuffle: bool, batch_size: int, gate: Callable[[], bool] | None = None, workers: int = 0
    ):
        # Not persistent: a worker forked at every epoch draws the random stream as a loader without one does.
        workers = max(workers, self.num_workers)
        options = dict(batch_size=batch_size, shuffle=shuffle, collate_fn=self._collate, num_workers=workers)
        if gate is not None:
            return GatedLoader(ColumnBatches(dataset), gate=gate, **options)
        return DataLoader(ColumnBatches(dataset), **options)

    def train_dataloader(self):
        return self._loader(self.encoded["train"], True, self.batch_size, workers=self.train_workers)

    def val_dataloader(self):
        """Each evaluation split's loader; those of the splits after the selection split (dev) run only where
        ``evaluation_gate`` lets them: a result reports them at its selected evaluation alone."""
        return [
            self.evaluation_loader(split, None if split == SELECTION_SPLIT else self.evaluation_gate)
            for split in self.eval_split_names
        ]

    def evaluation_loader(self, split: str, gate: Callable[[], bool] | None = None) -> DataLoader:
        """The loader the model evaluates ``split`` with (a ``GatedLoader`` of ``gate`` where given). Before ``setup``
        it tokenizes that split alone, without knowledge features: what recomputing the split's gold needs
        (``knowledge_lm.report.gold``), not the train split's tokenization."""
        if self.encoded is not None:
            return self._loader(self.encoded[split], False, self.eval_batch_size, gate)
        if self.tokenizer is None:
            raise KlmError("a tokenizer is needed to tokenize a split")
        return self._loader(self.tokenize(split, self.read_labelled()[split]), False, self.eval_batch_size)
