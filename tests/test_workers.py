"""Sweep workers: cells run back to back in one process per slot give what a process per cell gives; a cell that
raises or takes its worker down is recorded failed, and the sweep goes on."""

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch
from helpers import stored_result

from knowledge_lm.core.caches import NOTICES_ENV
from knowledge_lm.core.results import predictions_path, read_predictions, write_json_atomic
from knowledge_lm.run.claims import read_claim
from knowledge_lm.run.config import validate_sweep
from knowledge_lm.sweep.plan import cell_state, failure_message, sweep_cells
from knowledge_lm.sweep.runner import run_cells, run_sweep, worker_pool


def tiny_sweep(name: str, seeds, fractions=(1.0,), epochs: int = 1):
    return validate_sweep(
        {
            "name": name,
            "dataset": "generated",
            "methods": ["baseline"],
            "fractions": list(fractions),
            "seeds": list(seeds),
            "backbone": "tiny",
            "dataset_options": {"train_size": 160, "dev_size": 40, "test_size": 40},
            "train": {"batch_size": 8, "epochs": epochs, "min_steps": 1, "evaluations": 3, "max_length": 48},
        },
        "test",
    )


@pytest.mark.slow  # about 90 s on 2 cores: four processes import torch (one worker, three cell processes)
def test_cells_in_a_worker_equal_cells_in_processes_of_their_own(tmp_path):
    sweep = tiny_sweep("same", seeds=(1, 2), fractions=(1.0, 0.5))
    cells = [cell for cell in sweep_cells(sweep) if not (cell.fraction == 0.5 and cell.seed == 2)]
    only = {cell.key for cell in cells}  # two seeds of one fraction, and another fraction: the caches are shared
    for way, isolate, jobs in (("workers", False, 1), ("processes", True, 3)):
        counts = run_sweep(
            sweep, results_dir=tmp_path / way / "results", runs_dir=tmp_path / way / "runs", only=only, jobs=jobs,
            isolate_cells=isolate, gpus=[],
        )  # fmt: skip
        assert counts["finished"] == 3, way

    def stored(cell, way: str) -> tuple[dict, dict]:
        path = cell.result_path(tmp_path / way / "results")
        return json.loads(path.read_text()), read_predictions(predictions_path(path))

    for cell in cells:
        (worked, worked_predictions), (alone, alone_predictions) = stored(cell, "workers"), stored(cell, "processes")
        assert worked["data"] == alone["data"] and worked["budget"] == alone["budget"]  # subset and split hashes
        assert worked["backbone"] == alone["backbone"]
        for split, metrics in alone["metrics"].items():
            assert worked["metrics"][split] == pytest.approx(metrics, abs=1e-6)
        for worked_evaluation, alone_evaluation in zip(worked["evaluations"], alone["evaluations"], strict=True):
            assert worked_evaluation["step"] == alone_evaluation["step"]
            assert worked_evaluation["metrics"]["dev"] == pytest.approx(alone_evaluation["metrics"]["dev"], abs=1e-6)
        assert worked_predictions["predicted"] == alone_predictions["predicted"]
        assert worked_predictions["gold_sha256"] == alone_predictions["gold_sha256"]


def kill_when_claimed(run_dir, killed: list):
    """Kill (SIGKILL) the process that claims ``run_dir``'s cell, once it has trained a step or so."""
    deadline = time.time() + 120
    while time.time() < deadline:
        claim = read_claim(run_dir)
        if claim is not None and isinstance(claim["pid"], int):
            time.sleep(0.5)
            os.kill(claim["pid"], signal.SIGKILL)
            killed.append(claim["pid"])
            return
        time.sleep(0.05)


@pytest.mark.slow  # about 30 s on 2 cores: the worker imports torch twice (started, and again after its kill)
def test_a_failing_cell_and_a_killed_worker_are_recorded_and_the_sweep_goes_on(tmp_path):
    results, runs = tmp_path / "results", tmp_path / "runs"
    raising, killed_cell, last = sweep_cells(tiny_sweep("crash", seeds=(1, 2, 3), epochs=4))
    # A checkpoint that loads as tensors but is no Lightning checkpoint: the cell raises as it resumes.
    raising.run_dir(runs).mkdir(parents=True)
    torch.save({"not": torch.zeros(1)}, raising.run_dir(runs) / "last.ckpt")
    killed = []
    killer = threading.Thread(target=kill_when_claimed, args=(killed_cell.run_dir(runs), killed))
    killer.start()
    counts = run_sweep(tiny_sweep("crash", seeds=(1, 2, 3), epochs=4), results_dir=results, runs_dir=runs, gpus=[])
    killer.join()
    assert counts == {"done_before": 0, "finished": 1, "failed": 2, "elsewhere": 0}
    assert cell_state(raising, results, runs) == "failed" and "KeyError" in failure_message(raising, runs)
    assert killed and killed[0] != os.getpid()  # the worker held the claim
    assert cell_state(killed_cell, results, runs) == "failed"
    assert f"worker (pid {killed[0]}) ended with signal SIGKILL" in failure_message(killed_cell, runs)
    assert cell_state(last, results, runs) == "done"  # on the worker started again


@pytest.mark.slow  # about 25 s on 2 cores: a worker process imports torch and trains two sweeps' cells
def test_sweeps_sharing_a_pool_run_in_its_workers_which_outlive_each_sweep(tmp_path):
    """A ``--table``'s configs share one set of workers: the second sweep's cell runs in the worker that ran the
    first's, which imported once."""
    results, runs = tmp_path / "results", tmp_path / "runs"
    with worker_pool(1, runs, gpus=[]) as pool:
        first = run_sweep(tiny_sweep("first", seeds=(1,)), results_dir=results, runs_dir=runs, pool=pool, gpus=[])
        [worker] = pool
        pid = worker.process.pid
        assert first["finished"] == 1 and worker.alive()
        second = run_sweep(tiny_sweep("second", seeds=(2,)), results_dir=results, runs_dir=runs, pool=pool, gpus=[])
        assert second["finished"] == 1 and worker.process.pid == pid
    assert not worker.alive()


def full_log_write(*args, **kwargs):
    """What a cell's print does where its log's disk is full: an ``OSError`` naming no file."""
    with open("/dev/full", "w") as full:
        print("a cell's output", file=full, flush=True)


def test_a_worker_whose_log_is_on_a_full_disk_replies_why(tmp_path, monkeypatch, capfd):
    import io
    import sys

    from knowledge_lm.sweep import worker
    from knowledge_lm.sweep.runner import cell_spec

    for name in ("die_with_parent", "keep_backbones_loaded", "output_to"):
        monkeypatch.setattr(worker, name, lambda *args: None)
    monkeypatch.setattr(worker.TaskDataModule, "keep_encodings", lambda: None)
    monkeypatch.setattr(worker, "run_spec", full_log_write)
    [cell] = sweep_cells(tiny_sweep("full", seeds=(1,)))
    cell.run_dir(tmp_path / "runs").mkdir(parents=True)
    spec = cell_spec(
        cell, tiny_sweep("full", seeds=(1,)), overrides={}, data_dir=None, results_dir=tmp_path / "results",
        runs_dir=tmp_path / "runs", progress=False,
    )  # fmt: skip
    monkeypatch.setattr(sys, "stdin", io.StringIO(spec.to_json() + "\n"))
    assert worker.serve(os.getppid()) == 0
    reply = json.loads(capfd.readouterr().out)
    assert reply["status"] == 1 and 0 <= time.time() - reply["began"] < 60  # when it began the cell
    assert reply["error"] == f"no space left on device: {cell.run_dir(tmp_path / 'runs') / 'log.txt'}"


class FakeSlot:
    """A slot whose cells end at once: ``outcomes`` (cell key → exit status and how) says how; one that finishes
    has its result written."""

    def __init__(self, runs_dir, outcomes: dict, results_dir):
        self.env, self.progress, self.error = {NOTICES_ENV: str(runs_dir / "notices")}, False, {}
        self.outcomes, self.results_dir, self.spec = outcomes, results_dir, None

    def start(self, spec):
        if isinstance(self.outcomes[spec.cell.key], OSError):
            raise self.outcomes[spec.cell.key]
        self.spec = spec

    def ended(self):
        status, how = self.outcomes[self.spec.cell.key]
        if status == 0:
            write_json_atomic(self.spec.cell.result_path(self.results_dir), stored_result(self.spec.cell))
        return status, how


def run_fake_cells(tmp_path, outcomes_by_seed: dict) -> dict:
    sweep = tiny_sweep("fake", seeds=tuple(outcomes_by_seed))
    cells = sweep_cells(sweep)
    outcomes = {cell.key: outcomes_by_seed[cell.seed] for cell in cells}
    counts = {"finished": 0, "failed": 0, "elsewhere": 0}
    slot = FakeSlot(tmp_path / "runs", outcomes, tmp_path / "results")
    run_cells(
        [slot], cells, sweep, overrides={}, data_dir=None, results_dir=tmp_path / "results",
        runs_dir=tmp_path / "runs", reruns=set(), counts=counts, elsewhere={},
    )  # fmt: skip
    return counts


def test_a_cell_that_ended_on_a_full_disk_is_failed_with_its_cause(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    claim = tmp_path / "runs" / "claim.json"
    full = f"no space left on device: {claim}"
    counts = run_fake_cells(tmp_path, {1: (1, full), 2: OSError(errno.ENOSPC, "No space left on device", str(claim))})
    assert counts["failed"] == 2 and set(counts["failures"].values()) == {full}
    said = "".join(capsys.readouterr().err.split())  # however the console wraps the long path
    assert said.count("".join(full.split())) == 2


def test_without_a_terminal_each_ended_cell_is_a_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    counts = run_fake_cells(tmp_path, {1: (0, ""), 2: (1, "boom"), 3: (0, "")})
    assert (counts["finished"], counts["failed"]) == (2, 1)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[")]
    assert lines == [
        "[1/3] finished generated/facts/baseline/tiny/f1-s1 in 0s",
        "[2/3] failed generated/facts/baseline/tiny/f1-s2 in 0s",
        "[3/3] finished generated/facts/baseline/tiny/f1-s3 in 0s",
    ]


def test_the_first_cell_started_when_its_worker_began_it(tmp_path):
    """A worker still importing when the runner hands it a cell begins it later: the start-up counts until then."""
    from knowledge_lm.sweep.startup import CELL_SPANS

    class ImportingWorker(FakeSlot):
        began = []

        def start(self, spec):
            super().start(spec)
            self.began.append(time.time() + 0.5)

    sweep = tiny_sweep("importing", seeds=(1,))
    slot = ImportingWorker(tmp_path / "runs", {cell.key: (0, "") for cell in sweep_cells(sweep)}, tmp_path / "results")
    handed = time.time()
    run_cells(
        [slot], sweep_cells(sweep), sweep, overrides={}, data_dir=None, results_dir=tmp_path / "results",
        runs_dir=tmp_path / "runs", reruns=set(), counts={"finished": 0, "failed": 0, "elsewhere": 0}, elsewhere={},
    )  # fmt: skip
    assert CELL_SPANS[-1][0] == slot.began[0] > handed + 0.4


def test_on_a_terminal_the_bar_counts_the_cells(tmp_path, capsys, monkeypatch):
    from knowledge_lm.sweep import runner

    monkeypatch.setattr(runner.console, "_force_terminal", True)
    run_fake_cells(tmp_path, {1: (0, ""), 2: (0, "")})
    assert "] finished" not in capsys.readouterr().err


class EndedProcess:
    """A worker process that has exited with ``code``."""

    def __init__(self, code: int):
        self.code, self.pid, self.waited = code, 4242, False

    def poll(self):
        return self.code

    def wait(self, timeout=None):
        self.waited = True
        return self.code


def test_a_worker_whose_gpu_stopped_is_waited_for_and_the_next_cell_gets_a_new_one(tmp_path):
    from queue import Queue

    from knowledge_lm.sweep.runner import Worker
    from knowledge_lm.sweep.worker import device_lost

    assert not device_lost()  # no GPU here: nothing to lose
    worker = Worker({}, False, tmp_path / "worker.log")
    worker.process, worker.replies = EndedProcess(1), Queue()
    reply = {"key": "k", "status": 1, "began": 1.0, "error": "AcceleratorError: CUDA error: an illegal memory access"}
    worker.replies.put({**reply, "worker_ends": "its GPU stopped running work"})
    assert worker.ended() == (1, reply["error"])
    assert worker.process.waited and not worker.alive()  # so ``start`` launches a new worker for the next cell


@pytest.mark.slow  # about 10 s on 2 cores: the worker's process imports torch
def test_a_worker_ends_after_a_cell_that_left_its_gpu_unusable(tmp_path):
    script = """
import os, sys, types
import knowledge_lm.sweep.worker as worker
worker.device_lost = lambda: True
worker.run_logged = lambda spec, error, own_output: error.update(error="AcceleratorError: CUDA error") or 1
cell = lambda line: types.SimpleNamespace(cell=types.SimpleNamespace(key=line.strip()))
worker.CellSpec = types.SimpleNamespace(from_json=cell)
sys.exit(worker.serve(os.getppid()))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], input="first\nsecond\n", capture_output=True, text=True, timeout=120
    )
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 1 and [reply["key"] for reply in replies] == ["first"]  # the second is not taken
    assert replies[0]["worker_ends"] == "its GPU stopped running work"
