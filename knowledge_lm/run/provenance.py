"""Provenance of a run: the commit, library versions and device it ran on, and the store's record of a
pretraining checkpoint. What cells, ``klm speed`` and the pretraining drivers write beside their numbers."""

import hashlib
import json
import os
import platform
import re
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import torch

from knowledge_lm.core.backbones import weights_checksum
from knowledge_lm.core.results import PRETRAINING_DIR, compact_time, write_json_atomic

REPO_ROOT = Path(__file__).resolve().parents[2]
# A record's canonical JSON (what json.dumps with these options gives), made once: SST-2's 66k train records hash in
# 0.2 s instead of 0.33 s, a runner's check before its first cell.
RECORD_JSON = json.JSONEncoder(sort_keys=True, default=str, separators=(",", ":"))
# What a result's dirty flag covers: the code, the sweep and table configs, the package's pins. A set-up that passes
# KLM_GIT_DIRTY (a tree copied without its .git) computes it over the same paths.
DIRTY_PATHS = ("knowledge_lm", "benchmarks", "pyproject.toml")


def git_commit(root: Path = REPO_ROOT) -> dict:
    """The commit the code ran at, and whether ``DIRTY_PATHS`` differ from it (uncommitted or untracked files).
    ``KLM_GIT_COMMIT`` wins where set: a copy of the tree on a GPU machine may carry a stale .git of its own, whose
    HEAD is not the code that runs."""
    if os.environ.get("KLM_GIT_COMMIT"):
        return {"commit": os.environ["KLM_GIT_COMMIT"], "dirty": os.environ.get("KLM_GIT_DIRTY") == "1"}
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--", *DIRTY_PATHS], cwd=root, capture_output=True, text=True
            ).stdout.strip()
        )
        return {"commit": commit, "dirty": dirty}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": "unknown", "dirty": False}


def project_version(pyproject: Path) -> str | None:
    """The ``[project]`` version of a ``pyproject.toml`` naming the knowledge-lm project; None otherwise."""
    try:
        return project_version_text(Path(pyproject).read_text())
    except OSError:
        return None


def project_version_text(text: str) -> str | None:
    """``project_version`` of a ``pyproject.toml``'s text (read by lines: Python 3.10 has no tomllib)."""
    fields, in_project = {}, False
    for line in text.splitlines():
        if re.match(r"\[[^\]]+\]\s*$", line):
            in_project = line.strip() == "[project]"
        elif in_project and (found := re.match(r'(name|version)\s*=\s*"([^"]*)"', line)):
            fields[found[1]] = found[2]
    return fields.get("version") if fields.get("name") == "knowledge-lm" else None


def package_version() -> str | None:
    """The version of the knowledge-lm code that runs: its tree's ``pyproject.toml`` where it runs from a source
    tree (a copy run without ``pip install`` has no package metadata: what left the version null), else the
    installed distribution's."""
    found = project_version(REPO_ROOT / "pyproject.toml")
    if found is not None:
        return found
    try:
        return metadata.version("knowledge-lm")
    except metadata.PackageNotFoundError:
        return None


def records_sha256(records: list[dict]) -> str:
    """The sha256 of a split's records as canonical JSON: what the cell read of a split, whatever file or
    generator it came from."""
    digest = hashlib.sha256()
    for record in records:
        digest.update(RECORD_JSON.encode(record).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def versions() -> dict:
    """The versions of Python and the libraries a run used."""
    found = {"python": platform.python_version()}
    for package in ("torch", "pytorch-lightning", "transformers", "torchmetrics", "datasets"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    found["knowledge-lm"] = package_version()
    return found


def measured_now() -> dict:
    """What a speed record states beside its numbers: the commit and library versions it ran at, and when."""
    return {
        "git": git_commit(),
        "versions": versions(),
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def device_record(precision: str, devices: int) -> dict:
    """The accelerator a cell ran on, as its result records it."""
    if torch.cuda.is_available():
        return {
            "accelerator": "cuda",
            "name": torch.cuda.get_device_name(0),
            "count": devices,
            "precision": precision,
            "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }
    return {
        "accelerator": "cpu",
        "name": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "count": 1,
        "precision": precision,
    }


def device_name() -> str:
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU ({platform.machine()})"


def record_pretraining(checkpoint: Path, results_dir: Path, **provenance) -> Path:
    """The store's record of a pretraining run: the checkpoint's ``manifest.json`` (objectives, corpus hash,
    steps, losses) with the commit, device and versions it ran on (``provenance`` overrides them), under
    ``results/pretraining/<checkpoint name>.json``; the checkpoint itself (weights) stays out of the store.
    ``checkpoint_checksum`` is the weights checksum that the results of cells fine-tuned from it name
    (``backbone.checksum``). A record of an earlier run under the same name is kept: the new one is then named
    ``<checkpoint name>-<time>.json``."""
    checkpoint = Path(checkpoint)
    record = {
        **json.loads((checkpoint / "manifest.json").read_text()),
        "checkpoint": checkpoint.name,
        "checkpoint_checksum": weights_checksum(checkpoint),
        "git": git_commit(),
        "device": device_name(),
        "versions": versions(),
        "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **provenance,
    }
    path = Path(results_dir) / PRETRAINING_DIR / f"{checkpoint.name}.json"
    if path.is_file() and json.loads(path.read_text()).get("checkpoint_checksum") != record["checkpoint_checksum"]:
        path = path.with_name(f"{checkpoint.name}-{compact_time(record['recorded_at'])}.json")
    write_json_atomic(path, record)
    return path
