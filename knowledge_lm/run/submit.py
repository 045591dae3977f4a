"""Cells as jobs of a cluster scheduler, through submitit (``klm bench --executor slurm``; the ``[slurm]`` extra).

Each cell is one job running the same process the local runner starts (``python -m knowledge_lm.run.cell``), with
``devices`` tasks and GPUs on one node: under SLURM, Lightning reads each task's rank from the scheduler, and
global rank 0 writes the result. The jobs of a sweep go in as one job array; the runner waits for them all.
"""

import os
import shutil
import subprocess
from pathlib import Path

from knowledge_lm.core.errors import KlmError

# submitit's own default is a 5-minute limit: far too short for a cell.
DEFAULT_PARAMETERS = {"timeout_min": 24 * 60}


def run_command(command: list[str], log: str, env: dict[str, str]) -> int:
    """A job's body: ``command`` (a cell's process) with ``env`` over the job's environment, its output appended
    to ``log``; returns its exit code."""
    with open(log, "a") as handle:
        return subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env={**os.environ, **env}).returncode


def make_executor(cluster: str, folder: Path, devices: int, parameters: dict | None = None):
    """A submitit executor for ``cluster`` (``slurm``; ``local`` runs the jobs as processes here) writing its job
    files under ``folder``; on SLURM each job gets ``devices`` tasks and GPUs; then ``parameters`` (submitit's
    ``update_parameters``: ``slurm_partition``, ``timeout_min``, ``cpus_per_task``, ...)."""
    try:
        import submitit
    except ImportError:
        raise KlmError(f"--executor {cluster} needs submitit: pip install 'knowledge-lm[slurm]'") from None
    if cluster == "slurm" and shutil.which("sbatch") is None:
        raise KlmError("--executor slurm: no sbatch on this machine's PATH; submit from a SLURM login node")
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
    scheduled = {"tasks_per_node": devices, "gpus_per_node": devices} if cluster == "slurm" else {}
    settings = {**DEFAULT_PARAMETERS, **scheduled, **(parameters or {})}
    try:
        executor.update_parameters(**settings)
    except (NameError, ValueError, TypeError) as error:
        raise KlmError(f"--executor-option: {str(error).splitlines()[0]}") from None
    return executor
