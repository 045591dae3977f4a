"""NVIDIA MPS for sweeps that pack several cells onto one GPU.

Cells side by side on one GPU time-slice it, each in its own CUDA context; under MPS their kernels run
concurrently (issue 31: 36 cells at ``--jobs 8`` took 83 s instead of 115 s). When a sweep runs more cells at once
than there are GPUs and ``nvidia-cuda-mps-control`` is installed, ``klm bench`` starts a control daemon for the
sweep, with its pipe and log folders under the runs folder, and quits it when the sweep ends, however it ends.
A daemon the user started (``CUDA_MPS_PIPE_DIRECTORY`` set) is left alone and used. Cells see ``KLM_MPS=1``
while one serves them and record it (``knowledge_lm.run.spec.mps_in_use``).
"""

import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console

from knowledge_lm.run.spec import MPS_VARIABLE

console = Console(stderr=True)

MPS_CONTROL = "nvidia-cuda-mps-control"
PIPE_VARIABLE, LOG_VARIABLE = "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"


def mps_decision(jobs: int, gpus: int, enabled: bool = True, environ=None, which=shutil.which) -> str:
    """What a sweep of ``jobs`` cells at a time over ``gpus`` GPUs does about MPS: ``"off"`` (turned off, or no
    GPU is shared), ``"missing"`` (no control program), ``"user"`` (the user's daemon serves it) or ``"start"``."""
    environ = os.environ if environ is None else environ
    if gpus >= 1 and environ.get(PIPE_VARIABLE):
        return "user"  # CUDA connects every cell to the user's daemon, whatever the jobs: the results must say so
    if not enabled or gpus < 1 or jobs <= gpus:
        return "off"
    return "start" if which(MPS_CONTROL) else "missing"


@contextmanager
def mps_for_sweep(jobs: int, runs_dir, enabled: bool = True, gpus: int | None = None):
    """MPS for the block's cells where ``mps_decision`` says so: the daemon's folders and ``KLM_MPS`` set in this
    process's environment (which cells inherit) for the block, the daemon quit after it. Yields whether MPS is on."""
    if gpus is None:
        from knowledge_lm.sweep.runner import visible_gpus

        gpus = len(visible_gpus()) if enabled and jobs > 1 else 0
    decision = mps_decision(jobs, gpus, enabled)
    if decision in ("off", "missing"):
        with environment({MPS_VARIABLE: None}):
            yield False
        return
    if decision == "user":
        with environment({MPS_VARIABLE: "1"}):
            yield True
        return
    folder = Path(runs_dir).resolve() / "mps"
    variables = {PIPE_VARIABLE: str(folder / "pipe"), LOG_VARIABLE: str(folder / "log")}
    for path in variables.values():
        Path(path).mkdir(parents=True, exist_ok=True)
    control_env = {**os.environ, **variables}
    started = subprocess.run([MPS_CONTROL, "-d"], env=control_env, capture_output=True, text=True)
    if started.returncode != 0:
        reason = started.stderr.strip() or f"exit {started.returncode}"
        console.print(f"[yellow]MPS daemon did not start ({reason}): cells share the GPUs without it[/]")
        with environment({MPS_VARIABLE: None}):
            yield False
        return
    console.print(f"MPS: {jobs} cells at a time on {gpus} GPU(s) share them through a daemon ({folder})")
    try:
        with environment({**variables, MPS_VARIABLE: "1"}):
            yield True
    finally:
        subprocess.run([MPS_CONTROL], input="quit\n", env=control_env, capture_output=True, text=True, timeout=60)


@contextmanager
def environment(values: dict[str, str | None]):
    """``values`` set in ``os.environ`` for the block (None: unset), the previous values back after it."""
    previous = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            set_variable(name, value)
        yield
    finally:
        for name, value in previous.items():
            set_variable(name, value)


def set_variable(name: str, value: str | None):
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
