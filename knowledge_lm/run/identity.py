"""A cell's identity: everything that can change its numbers, beside what its key names.

A cell's key (``Cell.key``) names its method, dataset, task, fraction, seed, backbone (a local folder's label holds
its weights' checksum) and variant. What else the numbers depend on is its identity, a flat mapping compared
setting by setting: the training settings less those that change how a cell runs but not what it learns
(``EXECUTION_SETTINGS``), the method's options, the dataset's options with its defaults filled in, the knowledge
options of a method that reads knowledge, and the records it trained and was evaluated on (``data.<split>``: the
sha256 a result records, compared where the run has read the data).

A stored result counts as done only where its identity equals the one the run would use now. Otherwise the cell is
another one, stored beside it under a variant named by a short hash of the differences (``cfg-3f2a1c``, or
``<variant>-cfg-3f2a1c``), and the plan names them (``lr 5e-05 → 0.001, epochs 3 → 30``). Configs, ``--set``, make
variables and defaults all reach a cell through its ``TrainConfig`` and dataset options, so this one comparison
covers them all.
"""

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from knowledge_lm.core.registry import DATASETS, METHODS
from knowledge_lm.core.results import BadResult, Cell, read_result
from knowledge_lm.knowledge.prepare import KnowledgeConfig
from knowledge_lm.run.config import EXECUTION_SETTINGS, Sweep, TrainConfig

# Defaults that results stored before cells recorded their identity were trained under, where today's differ:
# setting (as an identity key) → the value such a result had without naming it.
DEFAULTS_BEFORE_IDENTITY: dict[str, object] = {
    "knowledge.keep_answers": True,  # the KG held the evaluation examples' answers until they were removed
}
DATA_PREFIX = "data."


def plain(value):
    """``value`` as JSON gives it back (tuples as lists, keys as strings): a stored identity compares equal."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def field_defaults(cls) -> dict:
    """A dataclass's fields set on construction, by name, at their defaults."""
    return {
        f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(cls)
        if f.init
    }


def train_identity(train: dict, method: str) -> dict:
    """The settings of ``train`` (``TrainConfig``'s fields; absent ones at their defaults) that change what a cell
    of ``method`` learns, its method options among them as ``method_options.<name>`` (less the options the method
    declares it has no use for, its ``inert_options``)."""
    defaults = field_defaults(TrainConfig)
    values = {**defaults, **{name: value for name, value in train.items() if name in defaults}}
    identity = {name: value for name, value in values.items() if name not in EXECUTION_SETTINGS}
    inert = METHODS.get(method).inert_options
    options = {**field_defaults(METHODS.get(method).options_class), **(identity.pop("method_options") or {})}
    identity.update({f"method_options.{name}": value for name, value in options.items() if name not in inert})
    return identity


_RESOLVED: dict[str, dict] = {}


def dataset_identity(dataset: str, method: str, options: dict) -> dict:
    """A cell's dataset options with the dataset's defaults filled in (``dataset.<name>``), and its knowledge
    options with ``KnowledgeConfig``'s (``knowledge.<name>``) where ``method`` reads knowledge."""
    options = dict(options or {})
    knowledge = options.pop("knowledge", None) or {}
    key = json.dumps([dataset, options], sort_keys=True, default=str)
    if key not in _RESOLVED:
        _RESOLVED[key] = DATASETS.get(dataset).resolved_options(options)
    identity = {f"dataset.{name}": value for name, value in _RESOLVED[key].items()}
    if METHODS.entry(method).needs_knowledge:
        resolved = dataclasses.asdict(KnowledgeConfig.from_dict(knowledge))
        if not DATASETS.entry(dataset).labels_are_kg_facts:
            del resolved["keep_answers"]  # no answers to keep: its KG is the same either way
        identity.update({f"knowledge.{name}": value for name, value in resolved.items()})
    return identity


def cell_identity(cell: Cell, train: TrainConfig | dict, dataset_options: dict, data_hashes=None) -> dict:
    """What ``cell`` trained with ``train`` on ``dataset_options`` (and the records of ``data_hashes``, split →
    sha256, where read) is, beside its key."""
    train = dataclasses.asdict(train) if isinstance(train, TrainConfig) else dict(train)
    identity = {**train_identity(train, cell.method), **dataset_identity(cell.dataset, cell.method, dataset_options)}
    identity.update({f"{DATA_PREFIX}{split}": digest for split, digest in (data_hashes or {}).items()})
    return plain(identity)


def stored_identity(result: dict) -> dict:
    """The identity a stored result records (``config.identity``), or, for one from before results recorded it,
    the identity its config gives, its unnamed settings at ``DEFAULTS_BEFORE_IDENTITY``'s values; with the records
    it read (``data.data_hashes``) either way. A result that records no training settings gives only its records."""
    data_hashes = (result.get("data") or {}).get("data_hashes")
    recorded = result["config"].get("identity")
    if recorded is None and "train" not in result["config"]:
        recorded = {}  # written by hand or another tool: its settings unknown, it is taken by its key alone
    elif recorded is None:
        cell = Cell(**{**result["cell"], "fraction": float(result["cell"]["fraction"])})
        config = result["config"]
        recorded = cell_identity(cell, config.get("train") or {}, config.get("dataset_options") or {})
        named = {name for name in recorded if name in DEFAULTS_BEFORE_IDENTITY}
        recorded.update({name: DEFAULTS_BEFORE_IDENTITY[name] for name in named if not named_in(config, name)})
    recorded = dict(recorded)
    recorded.update({f"{DATA_PREFIX}{split}": digest for split, digest in (data_hashes or {}).items()})
    return plain(recorded)


def named_in(config: dict, name: str) -> bool:
    """Whether a stored config names the identity key ``name`` itself (rather than leaving it at its default)."""
    group, _, option = name.partition(".")
    if group == "knowledge":
        return option in ((config.get("dataset_options") or {}).get("knowledge") or {})
    if group == "dataset":
        return option in (config.get("dataset_options") or {})
    if group == "method_options":
        return option in ((config.get("train") or {}).get("method_options") or {})
    return name in (config.get("train") or {})


@dataclass(frozen=True)
class Difference:
    """One setting on which a stored result and a run differ."""

    name: str
    stored: object
    now: object

    def __str__(self) -> str:
        def shown(value):
            return str(value)[:8] if self.name.startswith(DATA_PREFIX) else json.dumps(value, default=str)

        return f"{self.name} {shown(self.stored)} → {shown(self.now)}".replace('"', "")


def differences(stored: dict, now: dict, defaults: dict | None = None) -> list[Difference]:
    """The settings on which ``stored`` and ``now`` differ, sorted by name. A setting the stored identity has no
    name for (one added since, or a result that records none) is at ``DEFAULTS_BEFORE_IDENTITY``'s value where
    listed, else at its default (``defaults``: the identity of a cell of all defaults); the records (``data.*``)
    are compared only where both sides read them. A stored identity of no settings (a result that records none)
    is compared by its records alone."""
    if not any(not name.startswith(DATA_PREFIX) for name in stored):  # settings unknown: its records alone
        now = {name: value for name, value in now.items() if name.startswith(DATA_PREFIX)}
    found = []
    for name in sorted(now):
        if name in stored:
            before = stored[name]
        elif name.startswith(DATA_PREFIX):
            continue
        else:
            before = DEFAULTS_BEFORE_IDENTITY.get(name, (defaults or {}).get(name, now[name]))
        if before != now[name]:
            found.append(Difference(name, before, now[name]))
    return found


def default_identity(cell: Cell) -> dict:
    """The identity of ``cell`` trained with every default: what a stored identity without a setting had."""
    return cell_identity(cell, {}, {})


def variant_tag(found: list[Difference]) -> str:
    """The variant part of cells that differ from the stored ones by ``found``: ``cfg-`` and a short hash of the
    settings as the run has them."""
    text = json.dumps({difference.name: difference.now for difference in found}, sort_keys=True, default=str)
    return "cfg-" + hashlib.sha256(text.encode()).hexdigest()[:6]


def joined(variant: str, tag: str) -> str:
    return f"{variant}-{tag}" if variant else tag


def stored_at(cell: Cell, results_dir: Path) -> dict | None:
    """The identity of the result stored under ``cell``'s key, or None where none (or an unreadable one) is."""
    path = cell.stored_result_path(results_dir)
    if not path.is_file():
        return None
    try:
        return stored_identity(read_result(path, results_dir))
    except BadResult:
        return None


@dataclass(frozen=True)
class PlannedCell:
    """A sweep's cell as a run takes it: ``cell`` the key it runs or is stored under, ``asked`` the sweep's own
    (they differ where the result stored under ``asked``'s key was trained otherwise: ``found`` says how)."""

    cell: Cell
    asked: Cell
    found: tuple[Difference, ...] = ()


def identify(cell: Cell, sweep: Sweep, overrides: dict, results_dir: Path, data_hashes=None) -> PlannedCell:
    """``cell`` of ``sweep`` (run with ``overrides``) under the key whose stored result has its identity, or under
    which none is stored yet: its own; else its variant joined with the tag of its differences from the result
    stored under its own key; else with a tag of its whole identity. The sweep learns the variant's name
    (``Sweep.aliases``), so its settings and options are found under it."""
    stored = stored_at(cell, results_dir)
    if stored is None or (not data_hashes and not any(not name.startswith(DATA_PREFIX) for name in stored)):
        return PlannedCell(cell, cell)  # nothing to compare: the method and dataset modules (torch) stay unloaded
    now = cell_identity(
        cell, sweep.train_config(cell.task, overrides, cell.variant), sweep.variant_options(cell.variant), data_hashes
    )
    defaults = default_identity(cell)
    if not differences(stored, now, defaults):
        return PlannedCell(cell, cell)
    found = tuple(differences(stored, now, defaults))
    whole = "cfg-" + hashlib.sha256(json.dumps(now, sort_keys=True).encode()).hexdigest()[:6]
    for tag in (variant_tag(list(found)), whole):
        renamed = dataclasses.replace(cell, variant=joined(cell.variant, tag))
        other = stored_at(renamed, results_dir)
        if other is None or not differences(other, now, defaults):
            break
    sweep.aliases[renamed.variant] = cell.variant
    return PlannedCell(renamed, cell, found)
