"""A sweep's inputs checked before any work, the same way by ``klm bench`` (its dry run too), ``klm status`` and
``klm prepare``: its dataset and knowledge options, its method options, the backbones of the cells it runs, and the
train examples its fractions leave. Each bad input is one line (a ``KlmError``)."""

import inspect
import math
import typing
from pathlib import Path

from knowledge_lm.core.backbones import BUILT_IN, WEIGHT_FILES, check_backbone
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.options import coerce_option, option_kinds
from knowledge_lm.core.registry import DATASETS
from knowledge_lm.run.config import Sweep, check_method_options

# A data module's parameters that a cell sets itself (from the cell and its training settings), never a dataset
# option.
CELL_PARAMETERS = (
    "self",
    "task",
    "tokenizer",
    "data_dir",
    "cache_dir",
    "fraction",
    "subset_seed",
    "batch_size",
    "eval_batch_size",
    "max_length",
)
# The fewest train examples a fraction may leave: fewer trains on noise (a batch of one or two examples), and its
# scores say nothing about the method.
MIN_TRAIN_EXAMPLES = 5  # Re-DocRED at 1 %: 7 of its 700 train documents, a committed setting


def accepted_dataset_options(dataset_class) -> dict[str, typing.Any] | None:
    """The options a dataset's data module takes, name → declared type (``inspect.Parameter.empty`` where none is
    declared): the keywords of its constructor and of the constructors it hands its other keywords to, less those a
    cell sets (``CELL_PARAMETERS``); None where a constructor takes any keyword at all."""
    accepted = {}
    for cls in dataset_class.__mro__:
        if "__init__" not in cls.__dict__:
            continue
        init = cls.__dict__["__init__"]
        declared = typing.get_type_hints(init)
        parameters = inspect.signature(init).parameters.values()
        for parameter in parameters:
            keyword = parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
            if keyword and parameter.name not in CELL_PARAMETERS:
                accepted.setdefault(parameter.name, declared.get(parameter.name, inspect.Parameter.empty))
        if not any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters):
            return accepted
    return None


def check_dataset_options(sweep: Sweep, data_dir=None) -> None:
    """Every variant's dataset options: named among the data module's own (``accepted_dataset_options``), each of
    its declared type, the ``knowledge`` options a ``KnowledgeConfig``, and the values the data module checks as it
    is made (e.g. the generated world's sizes) in range; else one line naming the option. No data is read; the
    dataset's module is imported only where the sweep gives options."""
    from knowledge_lm.knowledge.prepare import KnowledgeConfig

    source = sweep.source or f"sweep {sweep.name!r}"
    for variant in sweep.variants:
        options = sweep.variant_options(variant)
        if not options:
            continue
        where = source + (f" (variant {variant})" if variant else "")
        dataset_class = DATASETS.get(sweep.dataset)
        accepted = accepted_dataset_options(dataset_class)
        if accepted is not None:
            unknown = sorted(set(options) - set(accepted))
            if unknown:
                raise KlmError(
                    f"{where}: unknown dataset option(s) {', '.join(unknown)} of dataset {sweep.dataset!r}; "
                    f"known: {', '.join(sorted(accepted))}"
                )
            for name, value in options.items():
                expected = accepted[name]
                if expected is inspect.Parameter.empty or name == "knowledge":
                    continue
                try:
                    coerce_option(value, expected)
                except ValueError:
                    kind = option_kinds(expected)
                    raise KlmError(f"{where}: dataset option {name}={value!r} is not {kind}") from None
        knowledge = options.get("knowledge")
        if knowledge is not None and not isinstance(knowledge, dict):
            raise KlmError(f"{where}: dataset option knowledge must be a mapping of options; got {knowledge!r}")
        try:
            KnowledgeConfig.from_dict(knowledge)
            dataset_class(task=sweep.tasks[0], data_dir=data_dir, **options)  # its own checks, reading no data
        except KlmError as error:
            raise KlmError(f"{where}: {error}") from None


def check_sweep(sweep: Sweep, overrides: dict | None = None, data_dir=None) -> None:
    """What a sweep's cells will be given, checked without reading any data: its dataset and knowledge options
    (``check_dataset_options``) and its method options with ``overrides`` (``check_method_options``)."""
    check_dataset_options(sweep, data_dir)
    check_method_options(sweep, sweep.source or f"sweep {sweep.name!r}", overrides)


def check_backbone_ready(name: str) -> None:
    """A backbone that cells are about to train: known (``check_backbone``: the packaged MiniLM's checksum, a local
    model directory with its ``config.json``, a hub name only online), and a local directory's weights there and
    readable (the header of a ``model.safetensors``, the archive of a ``pytorch_model.bin``); else one line."""
    import json
    import zipfile

    check_backbone(name)
    if name in BUILT_IN:
        return
    folder = Path(name).expanduser()
    if not folder.is_dir():
        return  # a hub name, reachable
    safetensors, pickled = folder / "model.safetensors", folder / "pytorch_model.bin"
    if safetensors.is_file():
        try:
            with open(safetensors, "rb") as handle:
                size = int.from_bytes(handle.read(8), "little")
                if not 2 <= size <= safetensors.stat().st_size - 8:
                    raise ValueError("bad header size")
                header = json.loads(handle.read(size))
            if not isinstance(header, dict):
                raise ValueError("header is not a mapping")
        except (OSError, ValueError, UnicodeDecodeError):
            raise KlmError(f"backbone {name!r}: {safetensors} is not readable safetensors weights") from None
    elif pickled.is_file():
        if not zipfile.is_zipfile(pickled):
            raise KlmError(f"backbone {name!r}: {pickled} is not a readable PyTorch weights archive")
    elif not any(folder.glob("*.index.json")):  # sharded weights: the loader reads them by their index
        raise KlmError(f"backbone {name!r}: {folder} holds no weights ({' or '.join(WEIGHT_FILES)})")


def check_train_sizes(sweep: Sweep, train_sizes: dict[str, int]) -> None:
    """Each fraction below 1 leaves at least ``MIN_TRAIN_EXAMPLES`` of every task's ``train_sizes`` (its train
    examples: the data read); else one line naming the fraction, the task and the minimum. A train split smaller
    than the minimum at fraction 1 is the dataset's size, and runs."""
    for task, size in train_sizes.items():
        for fraction in sweep.fractions:
            left = math.floor(fraction * size + 0.5)
            if fraction < 1 and left < min(MIN_TRAIN_EXAMPLES, size):
                raise KlmError(
                    f"{sweep.source or sweep.name}: fraction {fraction:g} of {sweep.dataset} {task} leaves about "
                    f"{left} of its {size} train examples, fewer than {MIN_TRAIN_EXAMPLES} (the fewest a cell trains "
                    f"on); use a fraction of at least {math.ceil(MIN_TRAIN_EXAMPLES / size * 1000) / 1000:g}"
                )
