"""Graceful interrupts and full disks (issue 29, item 7): Ctrl-C saves the running cells' checkpoints and ends in
one line with status 130; checkpoints are written atomically; a result the store cannot take is kept and named;
failed.json carries the real error."""

import errno
import json
import signal

import pytest
import pytorch_lightning as pl
import torch

from knowledge_lm.core.results import FAILURE_FILE, LAST_CHECKPOINT, Cell, predictions_path
from knowledge_lm.run import cell as cell_module
from knowledge_lm.run.claims import INTERRUPTED_EXIT
from knowledge_lm.run.config import TrainConfig
from knowledge_lm.run.spec import CellSpec

CELL = Cell("baseline", "generated", "facts", 1.0, 1, "tiny")
SIZES = {"train_size": 16, "dev_size": 8, "test_size": 8}


def spec(tmp_path, max_steps=6) -> CellSpec:
    train = TrainConfig(batch_size=4, max_steps=max_steps, evaluations=1, max_length=32, checkpoint_minutes=60)
    return CellSpec(
        cell=CELL,
        train=train,
        results_dir=str(tmp_path / "results"),
        runs_dir=str(tmp_path / "runs"),
        dataset_options=SIZES,
        progress=False,
    )


class CtrlC(pl.Callback):
    """Ctrl-C as Lightning sees it, after ``step`` optimiser steps."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == self.step:
            raise KeyboardInterrupt


@pytest.fixture
def sigint_kept():
    """Lightning ignores SIGINT after an interrupt; the test process gets its handler back."""
    handler = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, handler)


def test_ctrl_c_saves_the_cells_checkpoint_and_it_resumes(tmp_path, monkeypatch, sigint_kept):
    build_trainer = cell_module.build_trainer
    monkeypatch.setattr(
        cell_module,
        "build_trainer",
        lambda *args, callbacks=(), **kwargs: build_trainer(*args, callbacks=[*callbacks, CtrlC(3)], **kwargs),
    )
    assert cell_module.run_spec(spec(tmp_path)) == INTERRUPTED_EXIT
    run_dir = CELL.run_dir(tmp_path / "runs")
    saved = torch.load(run_dir / LAST_CHECKPOINT, map_location="cpu", weights_only=True)
    assert saved["global_step"] == 3
    assert not (run_dir / FAILURE_FILE).exists()  # not a failure: the cell resumes
    assert [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")] == []
    monkeypatch.setattr(cell_module, "build_trainer", build_trainer)
    assert cell_module.run_spec(spec(tmp_path)) == 0
    result = json.loads(CELL.result_path(tmp_path / "results").read_text())
    assert result["resumed_from_checkpoint"] is True


def test_a_cell_that_trains_to_its_end_writes_no_checkpoint(tmp_path, monkeypatch):
    """Its result is written next and its run directory emptied: a checkpoint at the end would be deleted unread."""
    from knowledge_lm.methods.trainer import WeightsOnlyCheckpointIO

    saved = []
    monkeypatch.setattr(WeightsOnlyCheckpointIO, "save_checkpoint", lambda self, checkpoint, path, *_: saved.append(1))
    assert cell_module.run_spec(spec(tmp_path)) == 0
    assert CELL.result_path(tmp_path / "results").is_file() and saved == []


def test_one_process_runs_skip_cluster_detection_but_keep_slurm(monkeypatch):
    from lightning_fabric.plugins.environments import LightningEnvironment

    from knowledge_lm.methods.trainer import one_process_environment

    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    monkeypatch.delenv("SLURM_JOB_NAME", raising=False)
    [environment] = one_process_environment(1)
    assert isinstance(environment, LightningEnvironment)
    assert one_process_environment(2) == []
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("SLURM_JOB_NAME", "klm")
    assert one_process_environment(1) == []


def test_checkpoints_are_written_atomically(tmp_path, monkeypatch):
    from knowledge_lm.methods.trainer import WeightsOnlyCheckpointIO

    path = tmp_path / LAST_CHECKPOINT
    WeightsOnlyCheckpointIO().save_checkpoint({"global_step": 1}, path)

    def disk_full(checkpoint, target):  # Lightning's own write: the bytes, then the file; the disk fills midway
        with open(target, "wb") as handle:
            handle.write(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("lightning_fabric.plugins.io.torch_io._atomic_save", disk_full)
    with pytest.raises(OSError):
        WeightsOnlyCheckpointIO().save_checkpoint({"global_step": 2}, path)
    assert torch.load(path, weights_only=True)["global_step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == [LAST_CHECKPOINT]


def test_a_result_the_store_cannot_take_is_kept_and_moved_in_later(tmp_path, monkeypatch, capsys):
    results = tmp_path / "results"
    write_json_atomic = cell_module.write_json_atomic

    def full_results_disk(path, payload):
        if results in path.parents:
            raise OSError(errno.ENOSPC, "No space left on device")
        write_json_atomic(path, payload)

    monkeypatch.setattr(cell_module, "write_json_atomic", full_results_disk)
    error = {}
    assert cell_module.run_spec(spec(tmp_path, max_steps=2), error) == 1
    kept = CELL.run_dir(tmp_path / "runs") / cell_module.UNSAVED_DIR
    assert (kept / "result.json").is_file() and predictions_path(kept / "result.json").is_file()
    assert str(kept) in capsys.readouterr().err
    failure = json.loads((CELL.run_dir(tmp_path / "runs") / FAILURE_FILE).read_text())
    assert "No space left on device" in failure["error"] and "kept at" in failure["error"]
    assert "ResultNotWritten" in failure["traceback"] and error["error"] == failure["error"]
    assert not CELL.result_path(results).exists() and not predictions_path(CELL.result_path(results)).exists()

    monkeypatch.setattr(cell_module, "write_json_atomic", write_json_atomic)
    monkeypatch.setattr(cell_module, "train_cell", lambda *args: pytest.fail("trained again"))
    assert cell_module.run_spec(spec(tmp_path, max_steps=2)) == 0
    assert json.loads(CELL.result_path(results).read_text())["cell"]["method"] == "baseline"
    assert predictions_path(CELL.result_path(results)).is_file()
    assert not CELL.run_dir(tmp_path / "runs").exists()


def test_a_failure_the_cell_could_not_record_carries_its_log_tail(tmp_path):
    from knowledge_lm.sweep.runner import record_process_failure

    run_dir = CELL.run_dir(tmp_path / "runs")
    run_dir.mkdir(parents=True)
    (run_dir / "log.txt").write_text("Traceback (most recent call last):\n  ...\nOSError: [Errno 28] No space left\n")
    record_process_failure(CELL, tmp_path / "runs", "its process ended with exit code 1")
    failure = json.loads((run_dir / FAILURE_FILE).read_text())
    assert "exit code 1" in failure["error"] and "No space left" in failure["traceback"]


class EndsInterrupted:
    """A job slot whose cell stops as a cell stopped by Ctrl-C does, once asked how it is."""

    progress = False

    def __init__(self, tmp_path):
        self.env = {"KLM_NOTICES": str(tmp_path / "slot.notices")}
        self.polls = 0

    def start(self, spec):
        pass

    def ended(self):
        self.polls += 1
        return (INTERRUPTED_EXIT, "exit code 130") if self.polls > 1 else None

    def interrupt(self):
        pass


def test_ctrl_c_in_the_runner_waits_for_the_cells_and_says_how_many_resume(tmp_path, monkeypatch, capsys):
    from knowledge_lm.cli import main
    from knowledge_lm.run.config import Sweep
    from knowledge_lm.sweep import runner
    from knowledge_lm.sweep.plan import sweep_cells

    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(runner.time, "sleep", sleep)
    sweep = Sweep(name="t", dataset="generated", tasks=["facts"], methods=["baseline"], fractions=[1.0], seeds=[1, 2])
    cells = sweep_cells(sweep)
    counts = {"finished": 0, "failed": 0}
    slots = [EndsInterrupted(tmp_path), EndsInterrupted(tmp_path)]
    with pytest.raises(runner.SweepInterrupted) as interrupted:
        runner.run_cells(
            slots,
            cells,
            sweep,
            overrides={},
            data_dir=None,
            results_dir=tmp_path / "r",
            runs_dir=tmp_path / "runs",
            reruns=set(),
            counts=counts,
            elsewhere={},
        )
    assert interrupted.value.resumable == 2 and counts == {"finished": 0, "failed": 0}
    assert not any(CELL.run_dir(tmp_path / "runs").parent.rglob(FAILURE_FILE))

    def bench(args):
        raise runner.SweepInterrupted(2)

    monkeypatch.setattr("knowledge_lm.cli.bench.command_bench", bench)
    capsys.readouterr()
    assert main(["bench", "--dataset", "generated", "--method", "baseline"]) == 130
    assert capsys.readouterr().err.strip().splitlines() == ["interrupted: 2 cells will resume"]


class RecordsSpecs:
    """A job slot that finishes each cell at once (writing a stand-in result) and keeps the specs it was given."""

    progress = False

    def __init__(self, tmp_path, started: list):
        self.env = {"KLM_NOTICES": str(tmp_path / "slot.notices")}
        self.started, self.spec = started, None

    def alive(self):
        return True

    def start(self, spec):
        self.started.append(spec)
        self.spec = spec
        path = spec.cell.result_path(spec.results_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")

    def ended(self):
        return (0, "exit code 0")


def test_a_tables_sweeps_run_as_one_queue_longest_first_each_with_its_settings(tmp_path):
    from knowledge_lm.run.config import validate_sweep
    from knowledge_lm.sweep.runner import run_sweeps_together

    def sweep(name, fraction, max_length):
        return validate_sweep(
            {
                "name": name,
                "dataset": "generated",
                "methods": ["baseline"],
                "fractions": [fraction],
                "seeds": [1, 2],
                "backbone": "tiny",
                "dataset_options": {"train_size": 200, "dev_size": 40, "test_size": 40},
                "train": {"max_length": max_length},
            },
            "test",
        )

    started: list = []
    pool = [RecordsSpecs(tmp_path, started)]
    counts = run_sweeps_together(
        [sweep("short", 0.1, 32), sweep("long", 1.0, 48)],
        {},
        pool=pool,
        data_dir=None,
        results_dir=tmp_path / "results",
        runs_dir=tmp_path / "runs",
        jobs=1,
    )
    assert counts["finished"] == 4 and counts["failed"] == 0
    assert [(spec.cell.fraction, spec.train.max_length) for spec in started] == [(1.0, 48)] * 2 + [(0.1, 32)] * 2
