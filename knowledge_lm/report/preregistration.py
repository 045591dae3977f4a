"""Pre-registered worlds: a world of the generated task declared in a committed file
(``benchmarks/preregistered/<name>.yaml``: its world, methods, controls, seeds, settings and verdict rules) before
any of its cells ran. The report calls a verdict of such a world "confirmed" only where every cell of it ran at or
after the declaration's first commit (``git merge-base --is-ancestor``), with the declared settings, and no change
was made to the declaration after a cell ran; otherwise the world is "exploratory" and the page says why. Without
git the check cannot be made: the world is "unverified", never confirmed.
"""

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import parse_yaml
from knowledge_lm.core.paths import benchmarks_dir
from knowledge_lm.core.registry import METHODS

PREREGISTERED_DIR = "preregistered"  # under benchmarks/
PREFIX = "prereg-"  # a pre-registered world's variant starts so; its controls add the control's name
KEYS = {"name", "world", "dataset", "task", "generator", "backbone", "fraction", "methods", "controls", "seeds"}
KEYS |= {"dataset_options", "train", "sweeps", "verdict_rules", "description"}
MIN_DECLARED_SEEDS = 5  # ``comparisons.MIN_SEEDS``: a verdict needs five seed pairs, fixed before the first run

CONFIRMED, EXPLORATORY, UNVERIFIED, DECLARED = "confirmed", "exploratory", "unverified", "declared, not run yet"


@dataclass(frozen=True)
class Declaration:
    """A pre-registered world (its file's fields; ``world`` is the variant of its cells)."""

    path: Path
    name: str
    world: str
    dataset: str
    task: str
    generator: str
    backbone: str
    fraction: float
    methods: tuple[str, ...]
    controls: tuple[str, ...]
    seeds: tuple[int, ...]
    dataset_options: dict
    train: dict
    sweeps: tuple[str, ...]
    verdict_rules: str


@dataclass(frozen=True)
class WorldStatus:
    """What a pre-registered world's cells allow: ``CONFIRMED``, ``EXPLORATORY``, ``UNVERIFIED`` or ``DECLARED``,
    and why, in words."""

    word: str
    why: str

    def text(self) -> str:
        return f"{self.word}: {self.why}" if self.why else self.word


def declarations_dir() -> Path:
    return benchmarks_dir() / PREREGISTERED_DIR


def load_declaration(path: Path) -> Declaration:
    """The declaration of ``path``, checked: known and required fields, a world variant starting with ``PREFIX``,
    at least ``MIN_DECLARED_SEEDS`` seeds, sweeps that exist; a one-line ``KlmError`` naming the file otherwise."""
    try:
        entry = parse_yaml(path.read_text(), unique_keys=False)
    except yaml.YAMLError as error:
        raise KlmError(f"{path}: not YAML ({' '.join(str(error).split())})") from None
    if not isinstance(entry, dict):
        raise KlmError(f"{path}: a mapping of {sorted(KEYS)} is expected")
    unknown, missing = sorted(set(entry) - KEYS), sorted(KEYS - {"description"} - set(entry))
    if unknown or missing:
        raise KlmError(f"{path}: {f'unknown fields {unknown}' if unknown else f'missing fields {missing}'}")
    if not str(entry["world"]).startswith(PREFIX):
        raise KlmError(f"{path}: world {entry['world']!r} must start with {PREFIX!r}")
    seeds = entry["seeds"]
    if not isinstance(seeds, list) or len(set(seeds)) < MIN_DECLARED_SEEDS:
        raise KlmError(f"{path}: seeds: at least {MIN_DECLARED_SEEDS} distinct seeds are expected, got {seeds!r}")
    absent = [sweep for sweep in entry["sweeps"] if not (benchmarks_dir().parent / sweep).is_file()]
    if absent:
        raise KlmError(f"{path}: sweeps: no such file {absent[0]}")
    return Declaration(
        path=path,
        name=str(entry["name"]),
        world=str(entry["world"]),
        dataset=str(entry["dataset"]),
        task=str(entry["task"]),
        generator=str(entry["generator"]),
        backbone=str(entry["backbone"]),
        fraction=float(entry["fraction"]),
        methods=tuple(entry["methods"]),
        controls=tuple(entry["controls"]),
        seeds=tuple(int(seed) for seed in seeds),
        dataset_options=dict(entry["dataset_options"]),
        train=dict(entry["train"]),
        sweeps=tuple(entry["sweeps"]),
        verdict_rules=str(entry["verdict_rules"]),
    )


def load_declarations(directory: Path | None = None) -> list[Declaration]:
    """Every declaration under ``directory`` (``benchmarks/preregistered/``), by file name; two of one world are an
    error."""
    directory = declarations_dir() if directory is None else Path(directory)
    found = [load_declaration(path) for path in sorted(directory.glob("*.yaml"))] if directory.is_dir() else []
    worlds = [declaration.world for declaration in found]
    if len(set(worlds)) < len(worlds):
        raise KlmError(f"{directory}: two declarations of one world ({', '.join(sorted(worlds))})")
    return found


def git(repo: Path, *args: str) -> subprocess.CompletedProcess | None:
    """``git -C repo ARGS``; None where git cannot run there (not installed, not a repository)."""
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
    except OSError:
        return None


def file_commits(path: Path) -> list[str] | None:
    """The commits that changed ``path``, oldest first; None where git is unavailable, [] where it was never
    committed."""
    found = git(path.parent, "log", "--format=%H", "--", path.name)
    if found is None or found.returncode != 0:
        return None
    return list(reversed(found.stdout.split()))


def is_ancestor(repo: Path, older: str, newer: str) -> bool | None:
    """Whether commit ``older`` is ``newer`` or one of its ancestors; None where git cannot tell (a commit unknown
    to this repository)."""
    found = git(repo, "merge-base", "--is-ancestor", older, newer)
    if found is None or found.returncode not in (0, 1):
        return None
    return found.returncode == 0


def world_cells(frame: pd.DataFrame, declaration: Declaration) -> pd.DataFrame:
    """The cells of ``frame`` that belong to the declared world: its own variant and any of its controls'."""
    return frame[(frame["variant"] == declaration.world) | frame["variant"].str.startswith(f"{declaration.world}-")]


def declared_in(declared, recorded) -> bool:
    """Whether every key ``declared`` gives has the same value in ``recorded`` (recursively for mappings)."""
    if isinstance(declared, dict):
        return isinstance(recorded, dict) and all(
            declared_in(value, recorded.get(key)) for key, value in declared.items()
        )
    return declared == recorded


def run_options(dataset_options: dict, method: str) -> dict:
    """The declared ``dataset_options`` as a cell of ``method`` runs them: without knowledge options for a method
    that reads no knowledge (the baseline), as the runner drops them (``run.trainer.method_dataset_options``)."""
    if METHODS.entry(method).needs_knowledge:
        return dataset_options
    return {name: value for name, value in dataset_options.items() if name != "knowledge"}


def settings_differ(cells: pd.DataFrame, declaration: Declaration) -> str:
    """The first way ``cells`` were not run as declared, in words; "" where they all were."""
    for row in cells.drop_duplicates(["method", "variant", "seed", "fraction"]).itertuples():
        where = f"{row.cell_method} [{row.variant}] seed {row.seed}"
        config = json.loads(row.config) if row.config else {}
        if row.cell_method not in declaration.methods and row.cell_method != "baseline":
            return f"{where}: method not declared"
        if row.seed not in declaration.seeds:
            return f"{where}: seed not declared"
        if row.fraction != declaration.fraction or row.dataset != declaration.dataset or row.task != declaration.task:
            return f"{where}: another dataset, task or fraction"
        if row.variant != declaration.world and row.variant[len(declaration.world) + 1 :] not in declaration.controls:
            return f"{where}: control not declared"
        if not declared_in(run_options(declaration.dataset_options, row.cell_method), config.get("dataset_options")):
            return f"{where}: dataset options differ from the declaration's"
        if not declared_in(declaration.train, config.get("train")):
            return f"{where}: training settings differ from the declaration's"
    return ""


def world_status(frame: pd.DataFrame, declaration: Declaration) -> WorldStatus:
    """What the cells of ``declaration``'s world in ``frame`` allow (``WorldStatus``): confirmed only where every
    cell ran at or after the declaration's first commit, with the declared settings, and the declaration was not
    changed after a cell ran."""
    cells = world_cells(frame, declaration)
    if cells.empty:
        return WorldStatus(DECLARED, f"declared in {declaration.path.name}; no cell has run")
    commits = file_commits(declaration.path)
    if commits is None:
        return WorldStatus(UNVERIFIED, "git is unavailable here, so the cells' commits cannot be checked")
    if not commits:
        return WorldStatus(EXPLORATORY, f"{declaration.path.name} was never committed")
    repo, first = declaration.path.parent, commits[0]
    cell_commits = sorted(set(cells["commit"]))
    for commit in cell_commits:
        after = is_ancestor(repo, first, commit)
        if after is None:
            return WorldStatus(UNVERIFIED, f"commit {commit} of a cell is unknown to this repository")
        if not after:
            return WorldStatus(EXPLORATORY, f"a cell ran at {commit}, before the declaration's first commit")
    for change in commits[1:]:
        if any(is_ancestor(repo, commit, change) for commit in cell_commits):
            return WorldStatus(EXPLORATORY, f"the declaration was changed at {change[:10]}, after a cell ran")
    edited = git(repo, "diff", "--quiet", "HEAD", "--", declaration.path.name)
    if edited is not None and edited.returncode == 1:
        return WorldStatus(EXPLORATORY, "the declaration has uncommitted changes made after its cells ran")
    differ = settings_differ(cells, declaration)
    if differ:
        return WorldStatus(EXPLORATORY, differ)
    return WorldStatus(CONFIRMED, f"every cell ran after {declaration.path.name} was committed ({first[:10]})")


def world_statuses(frame: pd.DataFrame, declarations: list[Declaration] | None = None) -> dict[str, WorldStatus]:
    """World variant → ``world_status`` of each declaration (``load_declarations``) of ``frame``'s dataset."""
    declarations = load_declarations() if declarations is None else declarations
    datasets = set(frame["dataset"]) if not frame.empty else set()
    return {
        declaration.world: world_status(frame, declaration)
        for declaration in declarations
        if declaration.dataset in datasets
    }
