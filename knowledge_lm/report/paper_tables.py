"""The seed papers' tables and figures as data, read and checked from ``benchmarks/tables/<paper>.yaml``.

One file per paper: its ``paper`` id, ``title``, ``texts`` (sentences that several tables' ``differs`` share, as
YAML anchors) and ``tables``, its tables and figures in the paper's order, each under the slug of its page
(``leaderboards/papers/<slug>.md``) with the fields of ``PaperTable`` (its ``sections`` those of ``Section``,
``Column`` and ``Row``). A table's ``sweeps`` are what ``klm bench --table <slug>`` runs; ``benchmarks/tables.yaml``
names the other groups of sweeps (``sweep_groups``). A bad entry fails as one line naming the file and its key.
"""

import functools
from dataclasses import dataclass, field
from pathlib import Path

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.io import read_yaml
from knowledge_lm.core.paths import benchmarks_dir

COVERED, PARTIAL, NOT_RUNNABLE, NOT_COVERED, NO_NUMBERS, NOT_RUN = (
    "covered",
    "partial",
    "not runnable here",
    "not covered",
    "no numbers",
    "not run",
)
STATUSES = (COVERED, PARTIAL, NOT_RUNNABLE, NOT_COVERED, NO_NUMBERS, NOT_RUN)


@dataclass(frozen=True)
class Column:
    """One column of a paper's table: the paper's ``(dataset, task, metric)`` at ``fraction``, and ours
    (None where the suite has no such data) in ``variant`` ("" for none); ``split``: an evaluation split other than
    the report split (MNLI's ``test_mismatched``: the paper's number under the reference's ``metrics_by_split``),
    "" for the report split. In YAML: ``fraction`` 1.0 unless given; ``paper`` and ``ours`` as
    ``[dataset, task, metric]``, left out where there are none."""

    label: str
    fraction: float
    paper: tuple[str, str, str] | None
    ours: tuple[str, str, str] | None = None
    variant: str = ""
    split: str = ""


@dataclass(frozen=True)
class Row:
    """One of our rows: ``method`` (each of its pretraining checkpoints a row of its own) in ``variant``; None
    (the default): each column's variant. In YAML: the method's name, or ``{method, variant, label}``."""

    method: str
    variant: str | None = None
    label: str = ""


@dataclass(frozen=True)
class Section:
    title: str
    columns: tuple[Column, ...]
    rows: tuple[Row, ...] = ()
    average: bool = False  # GLUE's Avg column: the mean over the section's columns, where a row has them all
    params: bool = False  # GLUE's #Params column


@dataclass(frozen=True)
class PaperTable:
    """A table or figure of a seed paper, its page and its status (one of ``STATUSES``; a table with sections takes
    its cells' own). ``sources``: the prefixes of the reference rows' ``source`` (``benchmarks/references.yaml``) it
    shows, all rows of the first, of the others only those of a method the page runs; ``unrecorded_rows``: the
    paper's rows that references.yaml does not record. ``sweeps``: the sweep configs (``benchmarks/<name>.yaml``)
    that fill it, by the ``--table`` name that runs them (in YAML a list, run as its slug, or a mapping of names where
    its parts run apart). ``differs``: in YAML a text, or texts joined by spaces."""

    slug: str
    paper: str
    paper_title: str
    name: str
    caption: str
    status: str
    why: str
    sources: tuple[str, ...] = ()
    unrecorded_rows: tuple[str, ...] = ()
    sweeps: dict[str, tuple[str, ...]] = field(default_factory=dict)
    sections: tuple[Section, ...] = ()
    differs: str = ""
    command: str = ""
    spectra: tuple[tuple[str, str, tuple[str, ...]], ...] = ()  # (dataset, task, methods) whose spectra it shows


FILE_KEYS = ("paper", "title", "texts", "tables")
TABLE_KEYS = (
    "name",
    "caption",
    "status",
    "why",
    "sweeps",
    "sources",
    "unrecorded_rows",
    "sections",
    "spectra",
    "differs",
    "command",
)
SECTION_KEYS = ("title", "columns", "rows", "average", "params")
COLUMN_KEYS = ("label", "fraction", "paper", "ours", "variant", "split")
ROW_KEYS = ("method", "variant", "label")
SPECTRUM_KEYS = ("dataset", "task", "methods")


def tables_dir() -> Path:
    return benchmarks_dir() / "tables"


def paper_tables() -> tuple[PaperTable, ...]:
    """Every seed paper's tables and figures (``tables_dir``), the papers in the order of their ids."""
    return tables_in(tables_dir())


@functools.cache
def tables_in(directory: Path) -> tuple[PaperTable, ...]:
    """The tables of every ``*.yaml`` in ``directory`` (none where it does not exist), each slug and each
    ``--table`` name of their sweeps once."""
    read = sorted(((read_tables_file(path), path) for path in directory.glob("*.yaml")), key=paper_order)
    seen: dict[str, Path] = {}
    for tables, path in read:
        for table in tables:
            for name in dict.fromkeys([table.slug, *table.sweeps]):
                if name in seen:
                    raise KlmError(f"{path}: tables: {table.slug}: {name} is a table of {seen[name]} too")
                seen[name] = path
    return tuple(table for tables, _ in read for table in tables)


def paper_order(read: tuple[tuple[PaperTable, ...], Path]) -> tuple[str, str]:
    tables, path = read
    return tables[0].paper, path.name


def sweep_groups() -> dict[str, list[str]]:
    """Every ``--table`` name and the sweep configs it runs: the paper tables' ``sweeps``, then the groups of
    ``benchmarks/tables.yaml`` (a mapping of names to config lists), each name once."""
    groups = {name: list(configs) for table in paper_tables() for name, configs in table.sweeps.items()}
    path = benchmarks_dir() / "tables.yaml"
    named = read_yaml(path)
    if not isinstance(named, dict) or not all(is_texts(configs) for configs in named.values()):
        raise KlmError(f"{path}: expected a mapping of table names to config lists")
    for name, configs in named.items():
        if name in groups:
            raise KlmError(f"{path}: {name}: a paper table's sweeps already (benchmarks/tables/)")
        groups[str(name)] = configs
    return groups


def read_tables_file(path: Path) -> tuple[PaperTable, ...]:
    """The tables of one paper's file, each checked; a one-line ``KlmError`` naming the file and the key otherwise."""
    raw = read_yaml(path)
    try:
        checked(raw, "", FILE_KEYS, ("paper", "title", "tables"))
        paper, title = text(raw["paper"], "paper"), text(raw["title"], "title")
        if not isinstance(raw.get("texts", {}), dict) or not all(map(is_text, raw.get("texts", {}).values())):
            raise KlmError("texts: a mapping of names to texts is expected")
        if not isinstance(raw["tables"], dict) or not raw["tables"]:
            raise KlmError("tables: a mapping of slugs to tables is expected")
        configs = path.parent.parent
        return tuple(parsed_table(str(slug), entry, paper, title, configs) for slug, entry in raw["tables"].items())
    except KlmError as error:
        raise KlmError(f"{path}: {error}") from None


def parsed_table(slug: str, entry, paper: str, title: str, configs: Path) -> PaperTable:
    """``slug``'s table from its YAML mapping; ``configs``: the folder its sweeps' configs are in."""
    where = f"tables: {slug}"
    checked(entry, where, TABLE_KEYS, ("name", "caption", "status", "why"))
    if entry["status"] not in STATUSES:
        raise KlmError(f"{where}.status: {entry['status']!r} is none of {', '.join(STATUSES)}")
    sweeps = entry.get("sweeps", {})
    sweeps = {slug: sweeps} if isinstance(sweeps, list) else sweeps
    if not isinstance(sweeps, dict) or not all(is_texts(names) for names in sweeps.values()):
        raise KlmError(f"{where}.sweeps: a list of sweep configs, or a mapping of table names to them, is expected")
    for names in sweeps.values():
        for name in names:
            if not (configs / f"{name}.yaml").is_file():
                raise KlmError(f"{where}.sweeps: no sweep config {configs / name}.yaml")
    differs = entry.get("differs", "")
    differs = " ".join(texts(differs, f"{where}.differs")) if isinstance(differs, list) else differs
    return PaperTable(
        slug,
        paper,
        title,
        text(entry["name"], f"{where}.name"),
        text(entry["caption"], f"{where}.caption"),
        entry["status"],
        text(entry["why"], f"{where}.why"),
        texts(entry.get("sources", []), f"{where}.sources"),
        texts(entry.get("unrecorded_rows", []), f"{where}.unrecorded_rows"),
        {str(name): tuple(names) for name, names in sweeps.items()},
        tuple(parsed_section(s, f"{where}.sections[{i}]") for i, s in enumerate(listed(entry, "sections", where))),
        text(differs, f"{where}.differs"),
        text(entry.get("command", ""), f"{where}.command"),
        tuple(parsed_spectrum(s, f"{where}.spectra[{i}]") for i, s in enumerate(listed(entry, "spectra", where))),
    )


def parsed_section(entry, where: str) -> Section:
    checked(entry, where, SECTION_KEYS, ("title", "columns"))
    return Section(
        text(entry["title"], f"{where}.title"),
        tuple(parsed_column(c, f"{where}.columns[{i}]") for i, c in enumerate(listed(entry, "columns", where))),
        tuple(parsed_row(r, f"{where}.rows[{i}]") for i, r in enumerate(listed(entry, "rows", where))),
        flag(entry.get("average", False), f"{where}.average"),
        flag(entry.get("params", False), f"{where}.params"),
    )


def parsed_column(entry, where: str) -> Column:
    checked(entry, where, COLUMN_KEYS, ("label",))
    fraction = entry.get("fraction", 1.0)
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise KlmError(f"{where}.fraction: a share of the train set in (0, 1] is expected")
    return Column(
        text(entry["label"], f"{where}.label"),
        float(fraction),
        score(entry.get("paper"), f"{where}.paper"),
        score(entry.get("ours"), f"{where}.ours"),
        text(entry.get("variant", ""), f"{where}.variant"),
        text(entry.get("split", ""), f"{where}.split"),
    )


def parsed_row(entry, where: str) -> Row:
    if isinstance(entry, str):
        return Row(entry)
    checked(entry, where, ROW_KEYS, ("method",))
    variant = entry.get("variant")
    return Row(
        text(entry["method"], f"{where}.method"),
        None if variant is None else text(variant, f"{where}.variant"),
        text(entry.get("label", ""), f"{where}.label"),
    )


def parsed_spectrum(entry, where: str) -> tuple[str, str, tuple[str, ...]]:
    checked(entry, where, SPECTRUM_KEYS, SPECTRUM_KEYS)
    return (
        text(entry["dataset"], f"{where}.dataset"),
        text(entry["task"], f"{where}.task"),
        texts(entry["methods"], f"{where}.methods"),
    )


def checked(entry, where: str, keys: tuple[str, ...], required: tuple[str, ...]) -> None:
    """That ``entry`` is a mapping of ``keys`` alone, ``required`` among them."""
    at = f"{where}: " if where else ""
    if not isinstance(entry, dict):
        raise KlmError(f"{at}a mapping of {', '.join(keys)} is expected")
    unknown = sorted(str(key) for key in entry if key not in keys)
    missing = [key for key in required if key not in entry]
    if unknown:
        raise KlmError(f"{at}unknown key(s) {', '.join(unknown)} (known: {', '.join(keys)})")
    if missing:
        raise KlmError(f"{at}missing {', '.join(missing)}")


def listed(entry: dict, key: str, where: str) -> list:
    value = entry.get(key, [])
    if not isinstance(value, list):
        raise KlmError(f"{where}.{key}: a list is expected")
    return value


def is_text(value) -> bool:
    return isinstance(value, str)


def is_texts(value) -> bool:
    return isinstance(value, list) and all(map(is_text, value))


def text(value, where: str) -> str:
    if not is_text(value):
        raise KlmError(f"{where}: a text is expected, not {value!r}")
    return value


def texts(value, where: str) -> tuple[str, ...]:
    if not is_texts(value):
        raise KlmError(f"{where}: a list of texts is expected")
    return tuple(value)


def flag(value, where: str) -> bool:
    if not isinstance(value, bool):
        raise KlmError(f"{where}: true or false is expected")
    return value


def score(value, where: str) -> tuple[str, str, str] | None:
    if value is None:
        return None
    if not is_texts(value) or len(value) != 3:
        raise KlmError(f"{where}: [dataset, task, metric] is expected")
    return tuple(value)
