"""Where the project's folders are: results, runs and the cache resolve from the project root, not from the working
folder, so every command sees the same store from any folder of the project."""

import os
from pathlib import Path

# Backbones for smoke runs: their cells go to a scratch store (``SCRATCH_RESULTS``) unless --results-dir names one.
SCRATCH_BACKBONES = ("tiny",)
SCRATCH_RESULTS = "results-scratch"


def project_root() -> Path:
    """``$KLM_HOME``, else the git work tree that holds the working folder (its nearest folder up with a ``.git``,
    as git finds it), else the working folder."""
    home = os.environ.get("KLM_HOME")
    if home:
        return Path(home).expanduser()
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return here


def project_path(name: str) -> Path:
    """``name`` (results, runs, leaderboards, ...) under ``project_root``."""
    return project_root() / name
