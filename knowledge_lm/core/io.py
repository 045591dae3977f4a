"""Reading the datasets' files: gzip-transparent, and every problem reported as one line naming the file."""

import csv
import gzip
import json
import lzma
import os
import typing
import zlib
from contextlib import contextmanager
from pathlib import Path

import yaml

from knowledge_lm.core.errors import KlmError

DEFAULT_SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path | None:
    """The data directory: the option, else ``$DATA_DIR``, else ``../shared/data`` beside the checkout.

    Returns None when none of them is given or exists, so that callers may fall back to the HF hub.
    """
    chosen = data_dir or os.environ.get("DATA_DIR")
    if chosen:
        path = Path(chosen).expanduser()
        if not path.is_dir():
            raise KlmError(f"data directory {path} does not exist")
        return path
    return DEFAULT_SHARED_DATA if DEFAULT_SHARED_DATA.is_dir() else None


def default_cache_dir() -> Path:
    """Where computed data is cached (tokenized splits, knowledge features, gold, leaderboard state):
    ``$KLM_CACHE_DIR``, else ``.cache/knowledge-lm`` under the project root (``project_root``)."""
    from knowledge_lm.core.paths import project_path

    return Path(os.environ.get("KLM_CACHE_DIR") or project_path(".cache") / "knowledge-lm")


def find_file(data_dir: Path | None, *candidates: str) -> Path | None:
    """The first of ``candidates`` (relative paths, each tried also with ``.gz``) found under ``data_dir``."""
    if data_dir is None:
        return None
    for candidate in candidates:
        for name in (candidate, candidate + ".gz"):
            path = data_dir / name
            if path.is_file():
                return path
    return None


def find_split_files(
    data_dir: Path | None,
    folders: tuple[str, ...],
    title: str,
    note: str = "",
    splits: tuple[str, ...] = ("train", "dev", "test"),
) -> dict[str, Path]:
    """``<split>.json`` (plain or .gz) for every split, from the first of ``folders`` under ``data_dir`` that
    holds a train file; the error names what was expected."""
    if data_dir is not None:
        for folder in folders:
            root = data_dir / folder
            found = {split: find_file(root, f"{split}.json") for split in splits}
            if found[splits[0]] is not None:
                missing = [f"{split}.json" for split, path in found.items() if path is None]
                if missing:
                    raise KlmError(f"{root}: missing {title} file(s) {', '.join(missing)} (plain or .gz)")
                return found
    names = [f"{split}.json" for split in splits]
    expected = ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
    raise KlmError(
        f"no {title} data under {data_dir or 'any data directory'}: expected {folders[0]}/ holding {expected}"
        f"{note} (set --data-dir or DATA_DIR)"
    )


@contextmanager
def open_text(path: Path):
    """A text file (gzip- or xz-compressed where its name ends in .gz or .xz) to read in a ``with`` block; bytes
    that are not UTF-8, or a compressed stream cut short, fail as one line naming the file."""
    path = Path(path)
    # utf-8-sig: MRPC's header starts with a byte-order mark.
    if path.suffix == ".gz":
        handle = gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    elif path.suffix == ".xz":
        handle = lzma.open(path, "rt", encoding="utf-8-sig", newline="")
    else:
        handle = open(path, encoding="utf-8-sig", newline="")
    try:
        with handle:
            yield handle
    except UnicodeDecodeError as error:
        raise KlmError(f"{path}: not UTF-8 text (byte {error.object[error.start]:#04x}: {error.reason})") from None
    except (EOFError, gzip.BadGzipFile, zlib.error, lzma.LZMAError) as error:
        kind = "xz" if path.suffix == ".xz" else "gzip"
        raise KlmError(f"{path}: truncated or corrupt {kind} file ({error})") from None


def read_tsv(
    path: Path, header: bool = True, min_columns: int = 1
) -> tuple[list[str] | None, list[tuple[int, list[str]]]]:
    """Rows of a TSV as ``(line_number, fields)``; GLUE's TSVs hold unbalanced quotes, so no quoting."""
    rows = []
    with open_text(path) as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        names = None
        for line_number, fields in enumerate(reader, start=1):
            if not fields or fields == [""]:
                continue
            if header and names is None:
                names = fields
                continue
            if len(fields) < min_columns:
                raise KlmError(
                    f"{path}:{line_number}: expected at least {min_columns} tab-separated columns, got {len(fields)}"
                )
            rows.append((line_number, fields))
    return names, rows


def column_index(path: Path, names: list[str] | None, column: str) -> int:
    if not names or column not in names:
        raise KlmError(f"{path}: missing column {column!r} (header: {', '.join(names or [])})")
    return names.index(column)


def read_json(path: Path):
    with open_text(path) as handle:
        try:
            return json.load(handle)
        except json.JSONDecodeError as error:
            raise KlmError(f"{path}:{error.lineno}: malformed JSON ({error.msg})") from None


class UniqueKeys:
    """A YAML loader's part that refuses a mapping naming a key twice (YAML keeps the last silently: a config with
    ``backbone: tiny`` and later ``backbone: minilm`` would run on MiniLM)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults`: keys given after it override its own
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, typing.Hashable) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (line {key_node.start_mark.line + 1})", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


# libyaml's parser where PyYAML was built with it: ten times faster (a page build reads references.yaml, 100 kB,
# several times), but its errors are worded otherwise: ``parse_yaml`` reads a text it refuses again in Python.
FAST_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class UniqueKeyLoader(UniqueKeys, yaml.SafeLoader):
    """YAML's safe loader, refusing a key named twice in one mapping."""


class FastUniqueKeyLoader(UniqueKeys, FAST_SAFE_LOADER):
    """``UniqueKeyLoader`` on libyaml's parser."""


def parse_yaml(text: str, unique_keys: bool = True):
    """``text``'s YAML, safely loaded (with ``unique_keys``, a key named twice in one mapping refused) by libyaml's
    parser where there is one; an error (``yaml.YAMLError``) is the Python parser's, as its words are read_yaml's."""
    try:
        return yaml.load(text, Loader=FastUniqueKeyLoader if unique_keys else FAST_SAFE_LOADER)
    except yaml.YAMLError:
        return yaml.load(text, Loader=UniqueKeyLoader if unique_keys else yaml.SafeLoader)


def read_yaml(path: Path):
    """A YAML file's contents; a file that is binary, not UTF-8, malformed or names a key twice in one mapping fails
    as one line naming the file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise KlmError(f"{path}: cannot read ({error.strerror})") from None
    if b"\0" in data:
        raise KlmError(f"{path}: a binary file, not YAML text")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise KlmError(f"{path}: not UTF-8 text (byte {data[error.start]:#04x} at offset {error.start})") from None
    try:
        return parse_yaml(text)
    except yaml.YAMLError as error:
        problem = getattr(error, "problem", None)
        mark = getattr(error, "problem_mark", None)
        if isinstance(error, yaml.constructor.ConstructorError) and problem and problem.startswith("duplicate key"):
            raise KlmError(f"{path}: {problem}") from None
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise KlmError(f"{path}: malformed YAML ({str(error).splitlines()[0]}{where})") from None


def read_jsonl(path: Path) -> list[tuple[int, dict]]:
    records = []
    with open_text(path) as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                records.append((line_number, json.loads(line)))
            except json.JSONDecodeError as error:
                raise KlmError(f"{path}:{line_number}: malformed JSON line ({error.msg})") from None
    return records
