"""Where the project's folders are: results, runs and the cache resolve from the project root, not from the working
folder, so every command sees the same store from any folder of the project; the sweep configs (``benchmarks/``)
from ``--benchmarks-dir``, the source checkout, or the installed package's data."""

import os
import sysconfig
from pathlib import Path

from knowledge_lm.core.errors import KlmError

BENCHMARKS_ENV = "KLM_BENCHMARKS_DIR"  # klm --benchmarks-dir sets it, so that worker processes see it too
# Where a wheel's data files put benchmarks/ (pyproject.toml's [tool.setuptools.data-files]), under a scheme's "data".
INSTALLED_BENCHMARKS = Path("share") / "knowledge-lm" / "benchmarks"

# Backbones for smoke runs: their cells go to a scratch store (``SCRATCH_RESULTS``) unless --results-dir names one.
SCRATCH_BACKBONES = ("tiny", "tiny-mpnet", "tiny-roberta")  # backbones.TINY_BACKBONES
SCRATCH_RESULTS = "results-scratch"


def project_root() -> Path:
    """``$KLM_HOME`` (an existing folder: a typo is an error, never a new project made there), else the git work
    tree that holds the working folder (its nearest folder up with a ``.git``, as git finds it), else the working
    folder."""
    home = os.environ.get("KLM_HOME")
    if home:
        path = Path(home).expanduser()
        if not path.is_dir():
            raise KlmError(f"KLM_HOME {path}: {'not a folder' if path.exists() else 'no such folder'} (make it first)")
        return path
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return here


def project_path(name: str) -> Path:
    """``name`` (results, runs, leaderboards, ...) under ``project_root``."""
    return project_root() / name


def benchmarks_dir() -> Path:
    """The sweep configs' folder: ``$KLM_BENCHMARKS_DIR``, else ``benchmarks/`` of the source checkout this package
    runs from, else the copy a non-editable install placed under its prefix (``INSTALLED_BENCHMARKS``)."""
    chosen = os.environ.get(BENCHMARKS_ENV)
    if chosen:
        path = Path(chosen).expanduser()
        if not path.is_dir():
            raise KlmError(f"benchmarks directory {path} ({BENCHMARKS_ENV} or --benchmarks-dir) does not exist")
        return path
    candidates = [Path(__file__).resolve().parents[2] / "benchmarks"]
    schemes = (sysconfig.get_default_scheme(), sysconfig.get_preferred_scheme("user"))
    candidates += [Path(sysconfig.get_path("data", scheme)) / INSTALLED_BENCHMARKS for scheme in schemes]
    for path in candidates:
        if (path / "tables.yaml").is_file():
            return path
    raise KlmError(f"no benchmarks/ folder found (looked in {', '.join(map(str, candidates))}): pass --benchmarks-dir")
