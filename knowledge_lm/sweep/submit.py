"""Cells as jobs of a cluster scheduler, through submitit (``klm bench --executor slurm``; the ``[slurm]`` extra).

Each cell is one job running the same process the local runner starts (``python -m knowledge_lm.run.cell``), with
``devices`` tasks on one node (and as many GPUs where the partition has GPUs): under SLURM, Lightning reads each
task's rank from the scheduler, and global rank 0 writes the result. The jobs of a sweep go in as one job array; the
runner waits for them all, reading from the queue (``squeue``, no accounting needed) which jobs ended and how, and
from SLURM's accounting (``sacct``, where the cluster keeps one) how those ended that the queue has forgotten.
"""

import os
import shutil
import signal
import subprocess
from pathlib import Path

from knowledge_lm.core.errors import KlmError
from knowledge_lm.run.claims import CLAIMED_EXIT, is_stale, read_claim

# submitit's own default is a 5-minute limit: far too short for a cell.
DEFAULT_PARAMETERS = {"timeout_min": 24 * 60}
QUEUED_FILE = "queued.json"  # in a submitted cell's run directory until its job starts: {"job": "<id>_<task>"}
# squeue's states of a job not yet ended (the rest, COMPLETED, CANCELLED, TIMEOUT, FAILED, ..., have ended).
LIVE_STATES = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING"}


def run_command(command: list[str], log: str, env: dict[str, str], result: str = "") -> int:
    """A job's body: ``command`` (a cell's process) with ``env`` over the job's environment, its output appended
    to ``log``; returns its exit code. Where the cell's ``result`` is stored already, or another live process holds
    the cell's claim (both while the job waited in the queue), it returns ``CLAIMED_EXIT`` at once, leaving the run
    folder as it is (a finished cell's is gone). SLURM's warning of the time limit stops the cell as Ctrl-C does."""
    run_dir = Path(log).parent
    claim = read_claim(run_dir)
    if (result and Path(result).is_file()) or (claim is not None and not is_stale(claim)):
        return CLAIMED_EXIT
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / QUEUED_FILE).unlink(missing_ok=True)
    with open(log, "a") as handle:
        # SLURM's warning of the time limit (submitit's --signal USR2, 90 s before it; sent to every process of the
        # job, the cell's ignores it): the cell saves a checkpoint and stops as on Ctrl-C (INTERRUPTED_EXIT), for a
        # rerun to resume, instead of submitit failing the job.
        process = subprocess.Popen(
            command,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            preexec_fn=lambda: signal.signal(signal.SIGUSR2, signal.SIG_IGN),
        )
        signal.signal(signal.SIGUSR2, lambda *_: process.send_signal(signal.SIGINT))
        return process.wait()


def partition_has_gpus(partition: str | None) -> bool:
    """Whether the nodes of SLURM's ``partition`` (default: the default partition) have GPU gres (``sinfo``)."""
    command = ["sinfo", "-h", "-o", "%G"] + (["-p", partition] if partition else [])
    try:
        listed = subprocess.run(command, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "gpu" in listed


def make_executor(cluster: str, folder: Path, devices: int, parameters: dict | None = None):
    """A submitit executor for ``cluster`` (``slurm``; ``local`` runs the jobs as processes here) writing its job
    files under ``folder``; on SLURM each job gets ``devices`` tasks, and as many GPUs where the partition has GPU
    gres (a CPU-only partition gets none: DDP over CPU processes); then ``parameters`` (submitit's
    ``update_parameters``: ``slurm_partition``, ``timeout_min``, ``cpus_per_task``, ``gpus_per_node``, ...)."""
    try:
        import submitit
    except ImportError:
        raise KlmError(f"--executor {cluster} needs submitit: pip install 'knowledge-lm[slurm]'") from None
    if cluster == "slurm" and shutil.which("sbatch") is None:
        raise KlmError("--executor slurm: no sbatch on this machine's PATH; submit from a SLURM login node")
    parameters = parameters or {}
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
    scheduled = {}
    if cluster == "slurm":
        scheduled = {"tasks_per_node": devices}
        if partition_has_gpus(parameters.get("slurm_partition")):
            scheduled["gpus_per_node"] = devices
    settings = {**DEFAULT_PARAMETERS, **scheduled, **parameters}
    try:
        executor.update_parameters(**settings)
    except (NameError, ValueError, TypeError) as error:
        raise KlmError(f"--executor-option: {str(error).splitlines()[0]}") from None
    return executor


def queue_states() -> dict[str, str] | None:
    """SLURM's state of each job it still knows (``"<array>_<task>"`` → ``RUNNING``, ``CANCELLED``, ...: ended jobs
    stay listed for ``MinJobAge`` seconds); None where there is no ``squeue`` or it does not answer."""
    if shutil.which("squeue") is None:
        return None
    try:
        listed = subprocess.run(
            ["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if listed.returncode != 0:
        return None
    return dict(line.split("|", 1) for line in listed.stdout.splitlines() if "|" in line)


def accounted_states(job_ids: list[str]) -> dict[str, str]:
    """SLURM's accounting's state of each job of ``job_ids`` it holds (``"<array>_<task>"`` or ``"<job>"`` →
    ``CANCELLED``, ``TIMEOUT``, ...: ``sacct``), for jobs the queue forgot (``MinJobAge`` after they ended); {} where
    the cluster keeps no accounting or ``sacct`` does not answer. A task cancelled while the rest of its array
    waits leaves no record here either."""
    if not job_ids or shutil.which("sacct") is None:
        return {}
    arrays = sorted({str(job_id).split("_")[0] for job_id in job_ids})
    command = ["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ",".join(arrays)]
    try:
        listed = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if listed.returncode != 0:  # "Slurm accounting storage is disabled"
        return {}
    states = {}
    for line in listed.stdout.splitlines():
        record, _, state = line.partition("|")
        for job_id in array_tasks(record):
            states[job_id] = (state.split() or [""])[0]  # "CANCELLED by 0" → CANCELLED
    return states


def array_tasks(record: str) -> list[str]:
    """The job ids of one ``sacct`` record: ``123_[0,2-3%4]`` (an array's tasks that share it, ``%`` the limit of
    tasks running at once) → ``123_0``, ``123_2``, ``123_3``; ``123_4`` or ``123`` → itself."""
    array, _, tasks = record.partition("_[")
    if not tasks:
        return [record]
    ids = []
    for part in tasks.rstrip("]").split("%")[0].split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (last or first).isdigit():
            ids.extend(f"{array}_{task}" for task in range(int(first), int(last or first) + 1))
    return ids


def ended_reason(job, state: str | None) -> str:
    """Why ``job`` (a submitit job) ended without a result: SLURM's ``state`` (``left the queue`` where it knows the
    job no more) and the telling line of its task 0's error stream (``job_error_line``), where it wrote one."""
    words = f"job {job.job_id} {state or 'left the queue'}"
    if not job_log(job).is_file():
        return f"{words} before it started (no output)" if state in (None, "CANCELLED") else words
    line = job_error_line(job)
    return f"{words}: {line}" if line else words


def job_error_line(job) -> str:
    """The line of ``job``'s error stream (its task 0's) that says why it stopped: SLURM's ``*** JOB ... ***``
    notice, else the last exception's line (``...Error: ...``), else its last line; "" where it has none."""
    try:
        lines = [line.strip() for line in job_log(job).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    telling = [line for line in lines if line.startswith("slurmstepd") and "***" in line]
    telling = telling or [line for line in lines if "Error: " in line and not line.startswith(("File ", "^"))]
    return (telling or lines or [""])[-1][:300]


def job_log(job) -> Path:
    """The error stream of ``job``'s task 0 (submitit's ``<id>_0_log.err``)."""
    return Path((job.task(0) if job.num_tasks > 1 else job).paths.stderr)


def cancel_hint(job_ids: list[str]) -> str:
    """``scancel`` of the arrays of ``job_ids``."""
    arrays = sorted({str(job_id).split("_")[0] for job_id in job_ids})
    return "scancel " + " ".join(arrays)


def array_line(job_ids: list[str]) -> str:
    """``job 123_[0-4]``: the job ids of one submission, by array."""
    arrays: dict[str, list[int]] = {}
    for job_id in map(str, job_ids):
        array, _, task = job_id.partition("_")
        arrays.setdefault(array, []).extend([int(task)] if task.isdigit() else [])
    return ", ".join(
        f"job {array}_[{min(tasks)}-{max(tasks)}]" if tasks else f"job {array}" for array, tasks in arrays.items()
    )
