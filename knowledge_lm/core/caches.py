"""Caches that heal: a cache file or folder that does not read is named, set aside and rebuilt once, and what was
dropped is said on the console of the run that started the work, not only in a cell's log.

A cell runs in a worker or a process of its own whose output goes to its ``log.txt``, deleted when the cell
finishes. ``notice`` prints a line there and also appends it to the file named by ``KLM_NOTICES`` (set by the sweep
runner per job slot), which the runner prints and empties when the slot's cell ends (``take_notices``).
"""

import hashlib
import json
import os
import sys
import time
from pathlib import Path

NOTICES_ENV = "KLM_NOTICES"


def notice(message: str) -> None:
    """Say ``message`` (one line) on stderr, and to the runner's console where this process runs for one."""
    print(f"warning: {message}", file=sys.stderr, flush=True)
    target = os.environ.get(NOTICES_ENV)
    if target:
        try:
            with open(target, "a", encoding="utf-8") as handle:
                handle.write(message.replace("\n", " ") + "\n")
        except OSError:  # the console line is a courtesy: the message is in the log already
            pass


def take_notices(path: Path) -> list[str]:
    """The lines ``notice`` wrote to ``path`` since the last call, the file emptied."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        path.unlink()
    except OSError:
        return []
    return [line for line in lines if line.strip()]


def set_aside_cache(path: Path, why: str) -> Path | None:
    """Rename the unreadable cache file or folder ``path`` to ``<name>.corrupt-<UTC time>`` (never deleted), so that
    it is built again, and say so (``notice``). Returns where it went; None where another process moved it first."""
    path = Path(path)
    target = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}")
    try:
        path.rename(target)
    except FileNotFoundError:
        return None
    except OSError:  # a folder of that name exists already (set aside twice within a second)
        target = target.with_name(f"{target.name}-{os.getpid()}")
        path.rename(target)
    notice(f"{path}: corrupt cache ({why}); set aside as {target.name}, rebuilding it")
    return target


def read_cached_json(path: Path, valid=lambda value: True):
    """The JSON cache file ``path``; None where there is none, or where it does not parse or is not ``valid``
    (truncated, overwritten): then it is set aside (``set_aside_cache``) for the caller to build again."""
    path = Path(path)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        set_aside_cache(path, f"does not parse: {type(error).__name__}")
        return None
    if not valid(value):
        set_aside_cache(path, "not of its expected shape")
        return None
    return value


def file_record(path: Path) -> dict:
    """What a cache's manifest records of one of its files, to verify it before use (``damaged_file``)."""
    data = Path(path).read_bytes()
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def damaged_file(path: Path, record: dict | None) -> str | None:
    """Why the cache file ``path`` is not the one ``record`` (``file_record``) describes: no record, missing, of
    another size (truncated) or checksum; None where it is intact."""
    path = Path(path)
    if not isinstance(record, dict):
        return f"no record of {path.name}'s size and checksum"
    if not path.is_file():
        return f"{path.name} is missing"
    if path.stat().st_size != record.get("size"):
        return f"{path.name} is {path.stat().st_size} bytes, {record.get('size')} expected"
    if file_record(path)["sha256"] != record.get("sha256"):
        return f"{path.name} is not of its recorded checksum"
    return None
