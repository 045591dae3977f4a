"""``klm bench --executor slurm`` against a running SLURM (``make test-slurm``: ``.ci/slurm.sh`` starts a one-node
cluster with a CPU-only partition, first without accounting, then with it for the tests marked ``slurm_accounting``).
Each test is skipped, with the reason, where no SLURM answers; each waits a bounded time."""

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from test_cell_claims import tiny_sweep_config

from knowledge_lm.run.config import validate_sweep
from knowledge_lm.sweep.plan import cell_status, sweep_cells

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parents[1]
LIMIT_S = 300  # a klm bench of these tests' tiny cells; a hang ends here


def slurm_missing() -> str:
    """Why the tests cannot reach a SLURM here, or "" where they can."""
    try:
        import submitit  # noqa: F401
    except ImportError:
        return "submitit is not installed (pip install 'knowledge-lm[slurm]')"
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return "no SLURM here (no sbatch/sinfo on PATH); make test-slurm starts one"
    try:
        listed = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer in 10 s"
    if listed.returncode != 0 or not {"idle", "mix", "alloc"} & set(listed.stdout.split()):
        return f"no SLURM node up: sinfo: {' '.join((listed.stderr or listed.stdout).strip().splitlines()[-1:])}"
    return ""


@pytest.fixture(scope="module", autouse=True)
def slurm():
    reason = slurm_missing()
    if reason and os.environ.get("SLURM_TESTS_RUN"):  # make test-slurm, .ci/run: the SLURM they started must answer
        pytest.fail(f"SLURM started, but {reason}")
    if reason:
        pytest.skip(f"SLURM tests not run: {reason}")


@pytest.fixture
def accounting():
    """SLURM's accounting (``sacct`` answers): a test that needs it fails where ``make test-slurm`` started SLURM
    with it and it does not answer, and is skipped elsewhere."""
    listed = subprocess.run(["sacct", "-n", "-X", "-o", "JobID"], capture_output=True, text=True, timeout=10)
    if listed.returncode != 0:
        reason = f"no SLURM accounting: sacct: {' '.join(listed.stderr.strip().splitlines()[-1:])}"
        if os.environ.get("SLURM_TESTS_RUN"):
            pytest.fail(f"SLURM started for the tests marked slurm_accounting, but {reason}")
        pytest.skip(f"{reason} (.ci/slurm.sh start --accounting starts SLURM with it)")


def bench(tmp_path: Path, config: Path, *args: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "knowledge_lm.cli", "bench", "--config", str(config), "--no-leaderboard"]
    return subprocess.Popen(
        [*command, "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs")]
        + ["--executor", "slurm", *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(runner: subprocess.Popen, limit_s: float = LIMIT_S) -> str:
    """The output of ``runner`` once it ended; a runner still going after ``limit_s`` is a hang: killed, failed."""
    try:
        return runner.communicate(timeout=limit_s)[0]
    except subprocess.TimeoutExpired:
        runner.kill()
        pytest.fail(f"klm bench hung (> {limit_s} s):\n{runner.communicate()[0]}")


def cells(config: Path):
    return sweep_cells(validate_sweep(yaml.safe_load(config.read_text()), str(config)))


def queue(job_state: str = "") -> list[str]:
    """The ids of the jobs in the queue (of ``job_state``, where given: ``all`` lists the ended jobs it remembers
    too)."""
    state = ["-t", job_state] if job_state else []
    listed = subprocess.run(["squeue", "-h", "-r", "-o", "%i", *state], capture_output=True, text=True, timeout=10)
    return listed.stdout.split()


def wait_for(condition, limit_s: float, what: str):
    deadline = time.time() + limit_s
    while not condition():
        if time.time() > deadline:
            pytest.fail(f"waited {limit_s} s for {what}")
        time.sleep(0.2)


def test_a_sweep_runs_as_a_job_array_on_a_cpu_partition_and_a_rerun_submits_nothing(tmp_path):
    config = tiny_sweep_config(tmp_path, seeds=[1, 2], steps=2)
    output = finish(bench(tmp_path, config))
    assert "finished 2, failed 0" in output and "no cell ran" not in output, output  # no gres asked on a CPU node
    assert "_[0-1]" in output, output  # the job id and array range
    assert all(cell.result_path(tmp_path / "results").is_file() for cell in cells(config))
    assert not [cell for cell in cells(config) if cell.run_dir(tmp_path / "runs").exists()]  # nothing left behind
    again = bench(tmp_path, config)
    output = finish(again)
    assert again.returncode == 0 and "submitted" not in output, output


def test_a_ddp_cell_runs_as_two_gloo_processes(tmp_path):
    config = tiny_sweep_config(tmp_path, seeds=[1], steps=2)
    runner = bench(tmp_path, config, "--set", "devices=2")
    output = finish(runner)
    assert runner.returncode == 0 and "finished 1, failed 0" in output, output  # task 0's result, not results()
    [cell] = cells(config)
    assert cell.result_path(tmp_path / "results").is_file()
    # Two tasks, each the cell's process, both done: rank 1 joined rank 0's (gloo, on CPU) process group, else it
    # would have claimed the cell itself, and one of them found it claimed (CLAIMED_EXIT).
    outcomes = [
        pickle.loads(path.read_bytes()) for path in sorted((tmp_path / "runs" / "submitit").glob("*_result.pkl"))
    ]
    assert outcomes == [("success", 0), ("success", 0)], outcomes


def test_two_simultaneous_submissions_and_two_shards_share_the_cells(tmp_path):
    config = tiny_sweep_config(tmp_path, seeds=[1, 2], steps=2)
    runners = [
        bench(tmp_path, config),
        bench(tmp_path, config, "--shard", "1/2"),
        bench(tmp_path, config, "--shard", "2/2"),
    ]
    outputs = [finish(runner) for runner in runners]
    assert [runner.returncode for runner in runners] == [0, 0, 0], outputs
    finished = [int(output.split("finished ")[-1].split(",")[0]) for output in outputs]
    assert sum(finished) == 2, outputs  # a cell two jobs trained would count twice


def test_ctrl_c_leaves_a_queued_job_and_a_job_cancelled_while_pending_is_reported(tmp_path):
    config = tiny_sweep_config(tmp_path, seeds=[1], steps=2)
    [cell] = cells(config)
    later = ["--executor-option", "slurm_additional_parameters={begin: now+3600}"]  # pending for an hour
    runner = bench(tmp_path, config, *later)
    wait_for(lambda: queue("PENDING"), 60, "the job to be queued")
    [job] = queue("PENDING")
    wait_for(lambda: (cell.run_dir(tmp_path / "runs") / "queued.json").is_file(), 30, "the queued mark")
    assert cell_status(cell, tmp_path / "results", tmp_path / "runs") == ("queued", f"job {job}")
    runner.send_signal(signal.SIGINT)
    output = " ".join(finish(runner, 60).split())
    assert runner.returncode == 130 and f"`scancel {job.split('_')[0]}` cancels them" in output, output
    assert queue("PENDING") == [job]  # it keeps its place in the queue
    subprocess.run(["scancel", job], check=True, timeout=10)

    runner = bench(tmp_path, config, *later)
    wait_for(lambda: queue("PENDING"), 60, "the job to be queued")
    [job] = queue("PENDING")
    subprocess.run(["scancel", job], check=True, timeout=10)
    output = finish(runner, 120)  # without accounting, a cancelled pending job once left klm waiting for ever
    assert runner.returncode == 1 and f"job {job} CANCELLED before it started" in output, output
    assert cell_status(cell, tmp_path / "results", tmp_path / "runs")[0] == "missing"


@pytest.mark.slurm_accounting
def test_a_job_cancelled_while_pending_is_reported_from_the_accounting_once_the_queue_forgot_it(tmp_path, accounting):
    config = tiny_sweep_config(tmp_path, seeds=[1], steps=2)
    [cell] = cells(config)
    runner = bench(tmp_path, config, "--executor-option", "slurm_additional_parameters={begin: now+3600}")
    wait_for(lambda: queue("PENDING"), 60, "the job to be queued")
    [job] = queue("PENDING")
    wait_for(lambda: (cell.run_dir(tmp_path / "runs") / "queued.json").is_file(), 30, "the queued mark")
    # The runner looks away (a suspended login session) while the job is cancelled and the queue forgets it
    # (MinJobAge: 10-20 s here): only the accounting still knows how it ended.
    runner.send_signal(signal.SIGSTOP)
    try:
        subprocess.run(["scancel", job], check=True, timeout=10)
        wait_for(lambda: job not in queue("all"), 60, "the queue to forget the cancelled job")
    finally:
        runner.send_signal(signal.SIGCONT)
    output = " ".join(finish(runner, 120).split())  # rich folds long lines
    assert runner.returncode == 1 and f"job {job} CANCELLED before it started" in output, output  # not "left the queue"
    assert cell_status(cell, tmp_path / "results", tmp_path / "runs")[0] == "missing"


def test_a_time_limit_then_scancel_then_a_rerun_resumes_from_the_checkpoint(tmp_path):
    config = tiny_sweep_config(tmp_path, seeds=[1], steps=100, checkpoint_every=5)
    [cell] = cells(config)
    run_dir, results = cell.run_dir(tmp_path / "runs"), tmp_path / "results"
    runner = bench(tmp_path, config)
    wait_for(lambda: (run_dir / "last.ckpt").is_file() or runner.poll() is not None, LIMIT_S, "a checkpoint")
    [job] = queue()
    # SLURM's warning of the time limit, sent as SLURM sends it (submitit asks for it 90 s before the limit, which
    # SLURM counts in minutes): the cell saves its checkpoint and stops.
    subprocess.run(["scancel", "--signal=USR2", job], check=True, timeout=10)
    output = " ".join(finish(runner, 120).split())  # rich folds long lines
    assert runner.returncode == 1 and f"job {job}" in output and "a rerun resumes it" in output, output
    assert cell_status(cell, results, tmp_path / "runs")[0] == "partial"

    runner = bench(tmp_path, config)
    wait_for(lambda: queue("RUNNING") or runner.poll() is not None, 60, "the job to start")
    [job] = queue()
    subprocess.run(["scancel", job], check=True, timeout=10)
    output = finish(runner, 120)
    assert runner.returncode == 1 and f"✗ {cell.key}: job {job}" in output, output  # the job's state or its cell's

    again = bench(tmp_path, config)
    output = finish(again)
    assert again.returncode == 0 and "finished 1" in output, output
    assert json.loads(cell.result_path(results).read_text())["resumed_from_checkpoint"] is True
