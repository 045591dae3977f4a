"""Sweep configs (``benchmarks/*.yaml``) and the training settings of one cell, validated on load."""

import dataclasses
import importlib.util
import json
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from knowledge_lm.core.backbones import CAPTURED_MODEL_TYPES, check_backbone_name
from knowledge_lm.core.errors import KlmError, check_name
from knowledge_lm.core.io import read_yaml
from knowledge_lm.core.options import coerce_fields, is_union
from knowledge_lm.core.paths import benchmarks_dir
from knowledge_lm.core.registry import DATASETS, METHODS, cannot_run
from knowledge_lm.core.subsets import check_fraction


def setting_kind(expected) -> str:
    """What values of the training setting type ``expected`` look like, in words (for error messages)."""
    if is_union(expected):
        return " or ".join(setting_kind(member) for member in typing.get_args(expected))
    if typing.get_origin(expected) is typing.Literal:
        return " or ".join(str(choice) for choice in typing.get_args(expected))
    return {bool: "boolean"}.get(expected, expected.__name__)


# Counts a cell divides by or loops over: zero or less is a typo, never a setting.
POSITIVE_SETTINGS = ("batch_size", "eval_batch_size", "max_length", "evaluations", "devices", "num_nodes")
# Settings with a range: name → (lower test, upper bound, upper bound allowed), and the range in words.
RANGES = {
    "lr": (lambda v: v > 0, math.inf, False),
    "weight_decay": (lambda v: v >= 0, math.inf, False),
    "warmup_ratio": (lambda v: v >= 0, 1, True),
    "dropout": (lambda v: v >= 0, 1, False),
    "epochs": (lambda v: v >= 1, math.inf, False),
    "min_steps": (lambda v: v >= 0, math.inf, False),
    "max_steps": (lambda v: v >= 0, math.inf, False),
    "checkpoint_minutes": (lambda v: v > 0, math.inf, False),
    "checkpoint_every_steps": (lambda v: v >= 0, math.inf, False),
    "subset_seed": (lambda v: v >= 0, math.inf, False),
}
RANGE_TEXT = {
    "lr": "must be a finite number > 0, e.g. 3e-5",
    "weight_decay": "must be ≥ 0",
    "warmup_ratio": "must be in [0, 1]",
    "dropout": "must be in [0, 1)",
    "epochs": "must be at least 1",
    "min_steps": "must be ≥ 0",
    "max_steps": "must be ≥ 0 (0: no cap)",
    "checkpoint_minutes": "must be a finite number > 0",
    "checkpoint_every_steps": "must be ≥ 0 (0: by checkpoint_minutes)",
    "subset_seed": "must be ≥ 0",
}
# Lightning's precision settings (auto: bf16-mixed on GPU, 32-true on CPU).
PRECISIONS = ("auto", "32-true", "32", "16-mixed", "16", "bf16-mixed", "bf16", "bf16-true", "16-true", "64-true", "64")
# The fewest steps of a cell that compile=auto replays as CUDA graphs, per way of making them (a method's
# ``cuda_graphs``; benchmarks/notes/speed.md). Compiling the layers (reduce-overhead) costs a cell seconds: on an
# H200, GLUE cells of at most 730 steps ran slower with it than eager, SST-2's of 4150 steps a fifth faster.
# Capturing the step (or the encoder) costs a warm-up step per padded shape: every GLUE cell of the grid, 150 steps
# and more, ran faster captured (leaderboards/speed.md).
CUDA_GRAPH_MIN_STEPS = {"cuda-graphs": 150, "reduce-overhead": 2000}
# A train loader worker is forked at every epoch (about 80 ms on the H200 host: RTE 1 %'s 150 one-batch epochs
# took 12 s longer with one); it repays that only over epochs of many batches.
TRAIN_WORKER_MIN_BATCHES = 100
CUDA_GRAPH_PADDING = 16  # batches' length multiple under CUDA graphs (one graph per length)
# torch.compile's modes, and "cuda-graphs": nothing compiled, the training step (or the plain encoder) captured.
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs", "cuda-graphs")


# A training logger → the packages it writes with, any one of which will do (none: Lightning's own).
LOGGERS = {"csv": (), "tensorboard": ("tensorboard", "tensorboardX"), "wandb": ("wandb",), "none": ()}


def check_logger(name: str, where: str) -> None:
    """The training setting ``logger``: a known one, whose package is installed (looked up, not imported)."""
    if name not in LOGGERS:
        raise KlmError(f"{where}: training setting logger={name!r} is not one of {', '.join(LOGGERS)}")
    packages = LOGGERS[name]
    if packages and not any(importlib.util.find_spec(package) for package in packages):
        raise KlmError(
            f"{where}: training setting logger={name} needs the package {packages[0]}: pip install {packages[0]}"
        )


@dataclass(frozen=True)
class TrainConfig:
    lr: float = 5e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    dropout: float = 0.1
    # The optimiser step's batch, whatever the devices: DDP splits it evenly over the cell's processes, so the
    # steps and epochs of a cell do not depend on how many GPUs ran it.
    batch_size: int = 32
    eval_batch_size: int = 128
    max_length: int = 128
    epochs: int = 3
    min_steps: int = 100  # the budget grows as the fraction shrinks: at least this many optimizer steps
    evaluations: int = 10  # dev (and test) evaluations per run, evenly spaced
    subset_seed: int = 0
    precision: str = "auto"  # bf16-mixed on GPU, 32-true on CPU
    devices: int = 1  # GPUs per node (DDP within the cell)
    num_nodes: int = 1  # nodes of one cell (DDP across them): launch `klm cell` on each under torchrun or srun
    checkpoint_minutes: float = 2.0
    checkpoint_every_steps: int = 0  # overrides checkpoint_minutes when > 0
    max_steps: int = 0  # a hard cap (smoke tests); 0 means none
    # Single-label classification only: weight each class's cross-entropy by the inverse of its share of the train
    # subset (n / (classes × count)), so learning the label prior alone lowers the loss no more than chance.
    class_balance: bool = False
    # torch.compile each transformer layer's forward (and a method's own modules): less host time per step
    # (a MiniLM step on a GPU is bound by it), for a compilation at the start of every run. "auto": on one GPU,
    # CUDA graphs for cells long enough to repay them, of the methods measured equal in metrics and faster with
    # them, made as the method's ``cuda_graphs`` says; else eager; resolved per cell (``TrainConfig.resolved``)
    # and recorded so.
    compile: bool | Literal["auto"] = "auto"
    # torch.compile's mode for those layers ("reduce-overhead" replays them as CUDA graphs, one per shape), or
    # "cuda-graphs": nothing compiled; a method whose step is the task's loss alone has its whole training step
    # (forward, backward, clipping, update) captured as one CUDA graph per padded batch shape, another the plain
    # encoder's forward and backward (``TaskModel.compile_modules``).
    compile_mode: str = "default"
    # Each batch padded to its longest text rounded up to this multiple (0: not rounded; under CUDA graphs, 16):
    # few shapes, so few CUDA graphs to capture. Padding is masked: the metrics do not change.
    pad_to_multiple_of: int = 0
    # Where the training curve goes (loss, learning rate, dev metrics per evaluation), under
    # <results>/logs/<cell key>/: csv (Lightning's CSVLogger), tensorboard, wandb, or none.
    logger: str = "csv"
    method_options: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, values: dict, where: str = "config") -> "TrainConfig":
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise KlmError(f"{where}: unknown training setting(s) {', '.join(unknown)}; known: {', '.join(known)}")

        def refused(name, value, expected) -> str:
            return f"{where}: training setting {name}={value!r} is not a {setting_kind(expected)}"

        checked = coerce_fields(cls, values, refused, ints_as_floats=True)
        check_logger(checked.get("logger", "csv"), where)
        for name in POSITIVE_SETTINGS:
            if name in checked and checked[name] < 1:
                raise KlmError(f"{where}: training setting {name}={checked[name]} must be at least 1")
        for name, (low, high, closed_high) in RANGES.items():
            value = checked.get(name)
            if value is not None and not (low(value) and (value <= high if closed_high else value < high)):
                raise KlmError(f"{where}: training setting {name}={value} {RANGE_TEXT[name]}")
        if checked.get("precision", "auto") not in PRECISIONS:
            raise KlmError(
                f"{where}: training setting precision={checked['precision']!r} is not one of {', '.join(PRECISIONS)}"
            )
        if checked.get("pad_to_multiple_of", 0) < 0:
            raise KlmError(f"{where}: training setting pad_to_multiple_of={checked['pad_to_multiple_of']} must be ≥ 0")
        if checked.get("compile_mode", "default") not in COMPILE_MODES:
            raise KlmError(
                f"{where}: training setting compile_mode={checked['compile_mode']!r} is not one of "
                f"{', '.join(COMPILE_MODES)}"
            )
        config = cls(**checked)
        try:
            config.per_device_batch_size
        except KlmError as error:
            raise KlmError(f"{where}: {error}") from None
        return config

    def resolved(self, method_class, on_gpu: bool, steps: int, model_type: str = "bert") -> "TrainConfig":
        """These settings with ``compile="auto"`` made concrete for a cell of ``method_class`` that trains ``steps``
        steps of a backbone of ``model_type``: CUDA graphs, made as the method's ``cuda_graphs`` says, where the cell
        trains on one GPU and is long enough to repay their making (``CUDA_GRAPH_MIN_STEPS``), and the encoder
        captures (``CAPTURED_MODEL_TYPES``, for "cuda-graphs"), else eager."""
        if self.compile != "auto":
            return self
        mode = getattr(method_class, "cuda_graphs", None)
        if mode == "cuda-graphs" and model_type not in CAPTURED_MODEL_TYPES:
            mode = None
        graphs = on_gpu and self.world_size == 1 and mode is not None and steps >= CUDA_GRAPH_MIN_STEPS[mode]
        return dataclasses.replace(self, compile=graphs, compile_mode=mode if graphs else self.compile_mode)

    @property
    def cuda_graphs(self) -> bool:
        """Whether training steps replay as CUDA graphs: ``compile`` true (not "auto"), in reduce-overhead (the
        layers compiled) or cuda-graphs (the step or the encoder captured)."""
        return self.compile is True and self.compile_mode in ("reduce-overhead", "cuda-graphs")

    @property
    def padding_multiple(self) -> int:
        """What each batch's length is rounded up to (``pad_to_multiple_of``; 0: its longest text)."""
        if self.pad_to_multiple_of:
            return self.pad_to_multiple_of
        return CUDA_GRAPH_PADDING if self.cuda_graphs else 0

    @property
    def world_size(self) -> int:
        """The processes (GPUs) one cell trains on: ``devices`` on each of ``num_nodes``."""
        return self.devices * self.num_nodes

    @property
    def per_device_batch_size(self) -> int:
        """Each process's share of ``batch_size``; a batch that does not split evenly over ``world_size`` fails,
        since DDP averages equal per-process batches (gradient accumulation cannot mend it: its micro-batches
        over all processes still number a multiple of ``world_size``)."""
        if self.batch_size % self.world_size:
            lower = self.batch_size // self.world_size * self.world_size
            nearest = " or ".join(str(b) for b in (lower, lower + self.world_size) if b > 0)
            raise KlmError(
                f"batch_size {self.batch_size} does not split evenly over {self.world_size} processes "
                f"(devices × num_nodes); use a multiple of {self.world_size}, e.g. {nearest}"
            )
        return self.batch_size // self.world_size

    def budget(self, train_size: int) -> dict:
        """Steps for a train split of ``train_size``: ``epochs`` passes, at least ``min_steps``, of ``batch_size``
        examples each, on any number of devices (each process's loader holds ``ceil(train_size / world_size)``
        examples in batches of ``per_device_batch_size``: ``ceil(train_size / batch_size)`` of them)."""
        steps_per_epoch = math.ceil(train_size / self.batch_size)
        planned = max(self.epochs * steps_per_epoch, self.min_steps)
        every = math.ceil(planned / self.evaluations)
        max_steps = every * self.evaluations
        if self.max_steps:
            max_steps = min(max_steps, self.max_steps)
            every = min(every, max_steps)
        budget = {
            "steps_per_epoch": steps_per_epoch,
            "max_steps": max_steps,
            "eval_every_steps": every,
            "epochs": round(max_steps / steps_per_epoch, 3),
            "global_batch_size": self.batch_size,
            "per_device_batch_size": self.per_device_batch_size,
            "devices": self.devices,
        }
        if self.num_nodes > 1:
            budget["nodes"] = self.num_nodes
        return budget


SWEEP_KEYS = {
    "name",
    "dataset",
    "tasks",
    "methods",
    "fractions",
    "seeds",
    "backbone",
    "train",
    "task_train",
    "dataset_options",
    "variants",
    "description",
    "method_backbones",
    "fraction_seeds",
}


@dataclass
class Sweep:
    name: str
    dataset: str
    tasks: list[str]
    methods: list[str]
    fractions: list[float]
    seeds: list[int]
    backbone: str = "minilm"
    train: dict = field(default_factory=dict)
    task_train: dict = field(default_factory=dict)
    dataset_options: dict = field(default_factory=dict)
    # name → dataset-option overrides (the ``knowledge`` mapping merged key by key) and ``method_options``
    # overrides (e.g. KAM's α); each variant is its own set of cells. The default, one unnamed variant, is
    # the sweep as written.
    variants: dict = field(default_factory=lambda: {"": {}})
    description: str = ""
    # method → its own backbone (e.g. each ERICA ablation fine-tunes the checkpoint pretrained with its
    # objectives); the others use ``backbone``.
    method_backbones: dict = field(default_factory=dict)
    # fraction → its own seeds (e.g. 5 seeds at 100 %, the sweep's ``seeds`` elsewhere).
    fraction_seeds: dict = field(default_factory=dict)
    source: str = ""  # where the sweep was read from (its file), for error messages
    # variant → the sweep's variant it is a renaming of: cells whose stored namesakes were trained otherwise run
    # under a variant of their own (``knowledge_lm.run.identity.identify``), with the settings of the variant named.
    aliases: dict = field(default_factory=dict, repr=False, compare=False)
    # (task, overrides as JSON, variant) → its TrainConfig, checked once (``train_config``); a copy made with
    # ``dataclasses.replace`` starts its own.
    parsed: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def backbone_for(self, method: str) -> str:
        return self.method_backbones.get(method, self.backbone)

    def seeds_for(self, fraction: float) -> list[int]:
        return self.fraction_seeds.get(fraction, self.seeds)

    def variant_options(self, variant: str) -> dict:
        variant = self.aliases.get(variant, variant)
        overrides = {k: v for k, v in self.variants[variant].items() if k != "method_options"}
        options = {**self.dataset_options, **{k: v for k, v in overrides.items() if k != "knowledge"}}
        if "knowledge" in overrides or "knowledge" in self.dataset_options:
            options["knowledge"] = {
                **(self.dataset_options.get("knowledge") or {}),
                **(overrides.get("knowledge") or {}),
            }
        return options

    def train_values(self, task: str, overrides: dict | None = None, variant: str = "") -> dict:
        values = {**self.train, **self.task_train.get(task, {}), **(overrides or {})}
        method_options = self.variants.get(self.aliases.get(variant, variant), {}).get("method_options")
        if method_options:
            values["method_options"] = {**(values.get("method_options") or {}), **method_options}
        return values

    def train_config(self, task: str, overrides: dict | None = None, variant: str = "") -> TrainConfig:
        """The training settings of ``task``'s cells in ``variant`` with ``overrides`` (``--set``), checked once per
        sweep (``TrainConfig.from_dict``; a bad value is a one-line error)."""
        key = (task, json.dumps(overrides or {}, sort_keys=True, default=str), variant)
        if key not in self.parsed:
            where = f"sweep {self.name!r}, task {task}" + (f", variant {variant}" if variant else "")
            self.parsed[key] = TrainConfig.from_dict(self.train_values(task, overrides, variant), where=where)
        return self.parsed[key]

    def devices_per_cell(self, overrides: dict | None = None) -> int:
        """The GPUs a cell of the sweep trains on: the most its tasks' settings ask for (a variant changes none)."""
        return max(self.train_config(task, overrides).devices for task in self.tasks)


def parse_fractions(text) -> list[float]:
    """The fractions of ``text`` (a comma-separated string or a list), each once, in their first order."""
    items = text.split(",") if isinstance(text, str) else list(text)
    try:
        if not items or any(str(item).strip() == "" for item in items):
            raise ValueError(text)
        return list(dict.fromkeys(check_fraction(float(item)) for item in items))
    except (TypeError, ValueError):
        raise KlmError(f"fractions {text!r}: expected numbers in (0, 1], e.g. 0.01,0.1,1") from None


# The largest seed every random generator a cell seeds takes (numpy's legacy seeding: 0 … 2**32 - 1).
MAX_SEED = 2**32 - 1


def parse_seeds(text) -> list[int]:
    """The seeds of ``text`` (a comma-separated string or a list), each once, in their first order."""
    items = text.split(",") if isinstance(text, str) else list(text)
    try:
        seeds = list(dict.fromkeys(int(item) for item in items))
    except (TypeError, ValueError):
        raise KlmError(f"seeds {text!r}: expected integers, e.g. 1,2,3") from None
    if not seeds or min(seeds) < 0:
        raise KlmError(f"seeds {text!r}: expected integers ≥ 0, e.g. 1,2,3")
    if max(seeds) > MAX_SEED:
        raise KlmError(f"seeds {text!r}: expected integers ≤ {MAX_SEED} (what the random generators take)")
    return seeds


def listed(raw: dict, key: str, where: str, example: str, items=str, text: bool = False) -> list | str | None:
    """``raw[key]`` where it is a non-empty list of ``items`` (or, with ``text``, the comma-separated string the
    command line gives), else a one-line error naming the file and key (an empty list too: it names nothing to run,
    and never stands for the defaults); None where the key is absent."""
    value = raw.get(key)
    if value is None or (text and isinstance(value, str)):
        return value
    if not isinstance(value, list) or not all(isinstance(item, items) and not isinstance(item, bool) for item in value):
        raise KlmError(f"{where}: {key} must be a list, e.g. {key}: {example}; got {value!r}")
    if not value:
        raise KlmError(f"{where}: {key} must name at least one {key.removesuffix('s')}, e.g. {key}: {example}")
    return value


def or_default(value, default):
    """``value``, or ``default`` where it is absent (None); an empty string (``--fractions ''``) stays, for its parser
    to refuse."""
    return default if value is None else value


def from_file(parse, value, where: str):
    """``parse(value)``; its error names the file ``where`` a list came from (the command line's text is its own)."""
    try:
        return parse(value)
    except KlmError as error:
        if isinstance(value, str):
            raise
        raise KlmError(f"{where}: {error}") from None


def mapping(raw: dict, key: str, where: str) -> dict:
    """``raw[key]`` where it is a mapping (absent: empty), else a one-line error naming the file and key."""
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise KlmError(f"{where}: {key} must be a mapping (key: value lines), got {value!r}")
    return dict(value)


def checked_methods(raw: dict, where: str) -> list[str]:
    """The sweep's methods: at least one, each registered and able to run on the sweep's dataset."""
    methods = listed(raw, "methods", where, "[baseline, kam]")
    if not methods:
        raise KlmError(f"{where}: methods must name at least one method, e.g. methods: [baseline, kam]")
    methods = list(dict.fromkeys(methods))  # a method named twice runs once
    for method in methods:
        METHODS.check(method)
        reason = cannot_run(method, raw["dataset"])
        if reason:
            raise KlmError(f"{where}: method {method!r} cannot run on {raw['dataset']}: {reason}")
    return methods


def set_method_backbones(sweep: Sweep, raw: dict, where: str) -> None:
    """``method_backbones``: the methods of the sweep that run on a backbone of their own."""
    backbones = raw["method_backbones"]
    if not isinstance(backbones, dict) or not all(isinstance(b, str) and b for b in backbones.values()):
        raise KlmError(f"{where}: method_backbones must map methods to backbones")
    strays = sorted(set(backbones) - set(sweep.methods))
    if strays:
        raise KlmError(f"{where}: method_backbones names method(s) {', '.join(strays)} the sweep does not run")
    sweep.method_backbones = {method: check_backbone_name(name) for method, name in backbones.items()}


def set_fraction_seeds(sweep: Sweep, raw: dict, where: str) -> None:
    """``fraction_seeds``: the seeds of the fractions that run other seeds than the sweep's."""
    by_fraction = raw["fraction_seeds"]
    if not isinstance(by_fraction, dict) or not by_fraction:
        raise KlmError(f"{where}: fraction_seeds must map fractions to seed lists, e.g. {{1.0: [1, 2, 3, 4, 5]}}")
    for fraction, seeds in by_fraction.items():
        (parsed,) = parse_fractions([fraction])
        if parsed not in sweep.fractions:
            raise KlmError(f"{where}: fraction_seeds names fraction {fraction} the sweep does not run")
        sweep.fraction_seeds[parsed] = parse_seeds(seeds)


def set_variants(sweep: Sweep, raw: dict, where: str) -> None:
    """``variants``: the sweep's named variants, each its dataset options (and method options)."""
    variants = raw["variants"]
    if (
        not isinstance(variants, dict)
        or not variants
        or not all(
            isinstance(name, str) and name and "/" not in name and isinstance(options, dict)
            for name, options in variants.items()
        )
    ):
        raise KlmError(f"{where}: variants must map non-empty names (no '/') to dataset-option mappings")
    sweep.variants = {check_name(f"{where}: variant", name): dict(options) for name, options in variants.items()}
    for name, options in sweep.variants.items():
        if not isinstance(options.get("method_options", {}), dict):
            raise KlmError(f"{where}: variant {name}: method_options must be a mapping")


def validate_sweep(raw: dict, where: str) -> Sweep:
    """The sweep config ``raw`` (read from ``where``) checked and parsed; bad input is a one-line error."""
    if not isinstance(raw, dict):
        raise KlmError(f"{where}: a sweep config is a YAML mapping")
    unknown = sorted(set(raw) - SWEEP_KEYS)
    if unknown:
        raise KlmError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(SWEEP_KEYS))}")
    for required in ("dataset", "methods"):
        if required not in raw:
            raise KlmError(f"{where}: missing key {required!r}")
    if not isinstance(raw["dataset"], str):
        raise KlmError(f"{where}: dataset must be a name, e.g. dataset: glue; got {raw['dataset']!r}")
    # Names and tasks are checked against the registries' entries (knowledge_lm.core.catalog): no method or dataset
    # module (nor torch) is imported to validate a sweep.
    known_tasks = DATASETS.entry(raw["dataset"]).tasks
    methods = checked_methods(raw, where)
    tasks = list(
        dict.fromkeys(
            listed(raw, "tasks", where, "[rte, mrpc]") or DATASETS.entry(raw["dataset"]).default_tasks or known_tasks
        )
    )
    for task in tasks:
        if task not in known_tasks:
            raise KlmError(
                f"{where}: unknown task {task!r} of dataset {raw['dataset']!r}; known: {', '.join(known_tasks)}"
            )
    sweep = Sweep(
        name=raw.get("name", Path(where).stem),
        dataset=raw["dataset"],
        tasks=tasks,
        methods=methods,
        fractions=from_file(
            parse_fractions,
            or_default(listed(raw, "fractions", where, "[0.01, 0.1, 1]", (int, float), True), [0.01, 0.1, 1.0]),
            where,
        ),
        seeds=from_file(
            parse_seeds, or_default(listed(raw, "seeds", where, "[1, 2, 3]", int, text=True), [1, 2, 3]), where
        ),
        backbone=check_backbone_name(str(raw.get("backbone", "minilm"))),
        train=mapping(raw, "train", where),
        task_train=mapping(raw, "task_train", where),
        dataset_options=mapping(raw, "dataset_options", where),
        description=raw.get("description", ""),
    )
    if raw.get("method_backbones") is not None:
        set_method_backbones(sweep, raw, where)
    if raw.get("fraction_seeds") is not None:
        set_fraction_seeds(sweep, raw, where)
    if raw.get("variants") is not None:
        set_variants(sweep, raw, where)
    for task in list(sweep.task_train):
        if task not in known_tasks:
            raise KlmError(f"{where}: task_train names unknown task {task!r}")
        sweep.task_train[task] = mapping(sweep.task_train, task, f"{where}: task_train")
    for task in tasks:
        for variant in sweep.variants:
            context = f"task {task}" + (f", variant {variant}" if variant else "")
            TrainConfig.from_dict(sweep.train_values(task, variant=variant), where=f"{where} ({context})")
    sweep.source = where
    return sweep


def chosen_sweep(
    config, dataset: str | None, *, method=None, tasks=None, fractions=None, seeds=None, backbone=None, table=False
) -> Sweep | None:
    """The sweep of a ``config`` file (or of ``dataset``'s own config) with the command line's choices merged in,
    each a comma-separated text where given: ``method`` (with ``table``, the methods of the config that it names;
    None where there are none), ``tasks``, ``fractions`` (a config's ``fraction_seeds`` kept for those), ``seeds``
    (for every fraction), ``backbone``; checked and parsed (``validate_sweep``)."""
    if config:
        raw, where = read_sweep_yaml(config), config
        if not isinstance(raw, dict):
            raise KlmError(f"{config}: a sweep config is a YAML mapping")
    elif dataset:
        raw, where = dict(dataset_defaults(dataset)), f"benchmarks/{dataset}.yaml"
        raw["dataset"] = dataset
        raw.setdefault("name", dataset)
    else:
        raise KlmError("name a --dataset (and --method), or a --config")
    if dataset and config and raw.get("dataset") != dataset:
        raise KlmError(f"--dataset {dataset} contradicts {config} (dataset {raw.get('dataset')})")
    if method is not None:  # given empty, an error (validate_sweep), never the default baseline
        chosen = list(dict.fromkeys(method.split(",")))
        # A table's configs keep only the chosen methods they list; one config runs the chosen methods.
        raw["methods"] = [m for m in raw.get("methods", ["baseline"]) if m in chosen] if table else chosen
        if not raw["methods"]:
            return None
        raw["name"] = f"{raw.get('name', raw.get('dataset'))}:{','.join(chosen)}"
        if isinstance(raw.get("method_backbones"), dict):  # the chosen methods' own backbones, as the config says
            raw["method_backbones"] = {m: b for m, b in raw["method_backbones"].items() if m in raw["methods"]} or None
    raw.setdefault("methods", ["baseline"])
    if tasks is not None:  # given empty, an error (validate_sweep), never the defaults
        raw["tasks"] = tasks.split(",") if tasks.strip() else [""]
    if fractions is not None:
        raw["fractions"] = fractions
        if isinstance(raw.get("fraction_seeds"), dict):
            wanted = set(parse_fractions(fractions))
            raw["fraction_seeds"] = {
                f: seeds for f, seeds in raw["fraction_seeds"].items() if parse_fractions([f])[0] in wanted
            } or None
    if seeds is not None:
        raw["seeds"] = seeds
        raw.pop("fraction_seeds", None)  # seeds typed on the command line apply to every fraction
    if backbone is not None:  # given empty, an error (validate_sweep), never the default MiniLM
        raw["backbone"] = backbone
    return validate_sweep(raw, where)


def check_method_options(sweep: Sweep, where: str, overrides: dict | None = None) -> None:
    """Every method's ``method_options`` in every variant and task (the sweep's, the task's and the variant's,
    and ``overrides``' as a cell would get them) built into the method's options dataclass, so that an unknown
    option or a value of the wrong type fails here, with one line, before any cell starts.

    Imports the method classes (torch with them) where there are options to check: called where a sweep is about
    to run, not in :func:`validate_sweep`. No options are every method's defaults, which it accepts; a sweep
    without options then starts its cells without the runner importing torch."""
    for variant in sweep.variants:
        for task in sweep.tasks:
            options = dict(sweep.train_values(task, overrides, variant).get("method_options") or {})
            if not options:
                continue
            for method in sweep.methods:
                context = (
                    f"method {method}"
                    + (f", variant {variant}" if variant else "")
                    + (f", task {task}" if "method_options" in sweep.task_train.get(task, {}) else "")
                )
                METHODS.get(method).options_class.from_dict(options, f"{where}: {context}")


# Settings that change how a cell runs but not what it learns (placement, checkpoints, logs, compilation, padding,
# evaluation batches): overriding them keeps the cell's key.
EXECUTION_SETTINGS = (
    "devices",
    "num_nodes",
    "checkpoint_minutes",
    "checkpoint_every_steps",
    "logger",
    "compile",
    "compile_mode",
    "pad_to_multiple_of",
    "eval_batch_size",
)


def read_sweep_yaml(path) -> dict:
    """A sweep config file's YAML (``read_yaml``: UTF-8 text, no key twice in a mapping)."""
    path = Path(path)
    if not path.is_file():
        raise KlmError(f"sweep config {path} does not exist")
    return read_yaml(path)


def load_sweep(path) -> Sweep:
    return validate_sweep(read_sweep_yaml(path), str(path))


def dataset_defaults(dataset: str) -> dict:
    """The dataset's own sweep config (``benchmarks/<dataset>.yaml``) as raw YAML, or ``{}``."""
    path = benchmarks_dir() / f"{dataset}.yaml"
    return read_sweep_yaml(path) if path.is_file() else {}


def check_data_dir(data_dir):
    """The ``--data-dir`` option checked up front, so a bad path fails before any cell starts."""
    from knowledge_lm.core.io import resolve_data_dir

    return resolve_data_dir(data_dir) if data_dir else None
