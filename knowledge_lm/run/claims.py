"""Claims: which process trains a cell, so that a cell trains in one process at a time, whoever starts it.

A claim is a file in the cell's run directory (``claim.json``: host, pid, start time, a token), created atomically
with its content (written beside it, then hard-linked to its name: of processes racing for a cell, on one machine
or several sharing the directory, one wins; a full disk leaves no claim). Its holder touches it every
``HEARTBEAT_S`` seconds; its modification time is the heartbeat. A claim is stale when its heartbeat is older than
``STALE_AFTER_S``, or, on this host, when its process is gone, or at once where it is empty or unreadable (no
process writes one so); a stale claim is taken over (one taker wins). The holder releases it when the cell
finishes or fails. Standard library only: ``klm status`` reads claims without importing torch.
"""

import errno
import fcntl
import json
import os
import socket
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from knowledge_lm.core.errors import KlmError

CLAIM_FILE = "claim.json"
HEARTBEAT_S = 10.0
STALE_AFTER_S = 120.0  # twelve missed heartbeats: a process stopped that long has lost its cell
TAKEOVER_LOCK = ".claim.lock"
CLAIMED_EXIT = 3  # a cell process's exit status where another process holds its cell or has finished it
# A cell stopped by Ctrl-C (SIGINT): its checkpoint saved, no failure recorded; as a shell reports SIGINT.
INTERRUPTED_EXIT = 130


class CellClaimed(KlmError):
    """The cell is claimed by another live process (or finished while this one waited for it)."""


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def read_claim(run_dir: Path) -> dict | None:
    """The claim on a run directory's cell, with its ``heartbeat_age`` in seconds; None where there is none. An
    empty or unreadable claim (left by a full disk, or by a version that wrote claims in place) reads as
    ``unreadable``, held by an unknown process."""
    path = Path(run_dir) / CLAIM_FILE
    try:
        age = time.time() - path.stat().st_mtime
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("token"), str):
        record = {"unreadable": True}
    return {"host": "?", "pid": None, "token": None, **record, "heartbeat_age": max(0.0, age)}


def is_stale(claim: dict) -> bool:
    """Unreadable, no heartbeat for ``STALE_AFTER_S`` seconds, or a process of this host that is gone."""
    if claim.get("unreadable") or claim["heartbeat_age"] > STALE_AFTER_S:
        return True
    return claim["host"] == socket.gethostname() and isinstance(claim["pid"], int) and not process_alive(claim["pid"])


def describe(claim: dict) -> str:
    """``host:pid, heartbeat N s ago``: who holds a claim."""
    return f"{claim['host']}:{claim['pid']}, heartbeat {claim['heartbeat_age']:.0f} s ago"


class Claim:
    """This process's claim on a cell (``claim_cell``): heartbeats from a daemon thread until ``release``. Should
    another process take the claim over (this one stopped beyond ``STALE_AFTER_S``), this process exits at once:
    two processes never go on training one cell."""

    def __init__(self, path: Path, record: dict):
        self.path, self.record = path, record
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="klm-claim-heartbeat", daemon=True)
        self._thread.start()

    def held(self) -> bool:
        current = read_claim(self.path.parent)
        return current is not None and current["token"] == self.record["token"]

    def _beat(self):
        while not self._stopped.wait(HEARTBEAT_S):
            if not self.held():
                print(f"error: {self.path.parent}: this process lost its claim on the cell; stopping", file=sys.stderr)
                os._exit(1)
            try:
                os.utime(self.path)
            except FileNotFoundError:
                continue  # released (or taken) since the check: the next wait ends or the next check decides

    def release(self):
        self._stopped.set()
        if self.held():
            self.path.unlink(missing_ok=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def claim_cell(run_dir: Path) -> Claim:
    """Claim the cell of ``run_dir`` for this process, taking over a stale claim; ``CellClaimed`` where another
    live process holds it."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / CLAIM_FILE
    record = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "token": uuid.uuid4().hex,
    }
    for _ in range(5):
        if place_claim(path, record):
            return Claim(path, record)
        holder = read_claim(run_dir)
        if holder is not None and not is_stale(holder):
            raise CellClaimed(f"running elsewhere ({describe(holder)})")
        if holder is not None:
            take_over(run_dir, holder)
    holder = read_claim(run_dir)
    raise CellClaimed(f"running elsewhere ({describe(holder) if holder else 'claimed and released meanwhile'})")


def place_claim(path: Path, record: dict) -> bool:
    """Write ``record`` as the claim at ``path`` where there is none (True), in one step: written and synced beside
    it, then hard-linked to its name (which fails where a claim is there: False). Where the write fails (a full
    disk), an ``OSError`` naming ``path``, and nothing left behind. On a filesystem without hard links the claim
    is created exclusively and then written (empty for that moment), removed where the write fails."""
    staging = path.with_name(f".{path.name}.{record['token']}.tmp")
    try:
        write_synced(staging, record, "w")
        try:
            os.link(staging, path)
        except OSError as error:
            if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.ENOSYS):  # FileExistsError among them
                raise
            write_synced(path, record, "x")
    except FileExistsError:
        return False
    except OSError as error:
        raise OSError(error.errno, error.strerror, str(path)) from error
    finally:
        staging.unlink(missing_ok=True)
    return True


def write_synced(path: Path, record: dict, mode: str):
    """``record`` as JSON at ``path`` (``mode`` "x": created only where there is none), synced; a file this call
    created and could not fill is removed."""
    with open(path, mode) as out:
        try:
            json.dump(record, out)
            out.flush()
            os.fsync(out.fileno())
        except OSError:
            Path(path).unlink(missing_ok=True)
            raise


def take_over(run_dir: Path, stale: dict):
    """Remove the stale claim ``stale``, unless another process has replaced it meanwhile: takers are serialised
    by a lock, and each removes only the claim it found stale (same token, still stale)."""
    with open(run_dir / TAKEOVER_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        current = read_claim(run_dir)
        if current is not None and current["token"] == stale["token"] and is_stale(current):
            (run_dir / CLAIM_FILE).unlink(missing_ok=True)
