"""A cell's experiment does not depend on how many processes ran it: DDP splits the configured batch over them,
so the global batch, the optimiser steps and the epochs are the single-device protocol's."""

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.results import Cell, load_results
from knowledge_lm.run.cell import run_cell
from knowledge_lm.run.config import TrainConfig

PROTOCOL = ("steps_per_epoch", "max_steps", "eval_every_steps", "epochs", "global_batch_size")


@pytest.mark.parametrize("batch_size", [32, 30])
@pytest.mark.parametrize("train_size", [100, 1000, 9999])
def test_the_budget_of_every_world_size_that_splits_the_batch_is_the_single_devices(batch_size, train_size):
    single = TrainConfig(batch_size=batch_size).budget(train_size)
    for devices, num_nodes in ((2, 1), (3, 1), (4, 1), (2, 2)):
        train = TrainConfig(batch_size=batch_size, devices=devices, num_nodes=num_nodes)
        if batch_size % train.world_size:
            continue  # refused: see the test below
        budget = train.budget(train_size)
        assert {key: budget[key] for key in PROTOCOL} == {key: single[key] for key in PROTOCOL}
        assert budget["per_device_batch_size"] * train.world_size == batch_size
        assert budget["devices"] == devices and budget.get("nodes", 1) == num_nodes


def test_min_steps_binds_the_same_on_any_world_size():
    single = TrainConfig(batch_size=32, min_steps=100).budget(64)  # 2 steps an epoch: min_steps binds
    double = TrainConfig(batch_size=32, min_steps=100, devices=2).budget(64)
    assert single["max_steps"] == double["max_steps"] == 100 and single["epochs"] == double["epochs"] == 50
    assert (single["per_device_batch_size"], double["per_device_batch_size"]) == (32, 16)


@pytest.mark.parametrize(("batch_size", "devices", "nearest"), [(32, 3, "30 or 33"), (30, 4, "28 or 32"), (1, 2, "2")])
def test_a_batch_that_does_not_split_over_the_processes_fails_in_one_line(batch_size, devices, nearest):
    with pytest.raises(KlmError, match=f"does not split evenly over {devices} processes.*e.g. {nearest}$"):
        TrainConfig.from_dict({"batch_size": batch_size, "devices": devices}, where="sweep s")
    with pytest.raises(KlmError, match="^sweep s: batch_size"):
        TrainConfig.from_dict({"batch_size": batch_size, "devices": devices}, where="sweep s")


@pytest.mark.slow  # about 30 s on 2 cores: two processes each import torch and Lightning
def test_a_two_process_ddp_cell_trains_the_single_process_cells_steps_and_epochs(tmp_path):
    """Two gloo processes on the CPU (Lightning's launcher restarts ``knowledge_lm.run.cell`` for rank 1)."""
    cell = Cell("baseline", "generated", "facts", 1.0, 1, "tiny")
    # 37 examples: 5 steps of 8 an epoch on one process, and 5 of 4 over each process's 19 (DDP's sampler pads).
    options = {"train_size": 37, "dev_size": 8, "test_size": 8}
    train = {"batch_size": 8, "epochs": 2, "min_steps": 1, "evaluations": 2, "max_length": 32}
    single = run_cell(
        cell,
        TrainConfig.from_dict(train),
        results_dir=tmp_path / "single",
        runs_dir=tmp_path / "runs-single",
        dataset_options=options,
        progress=False,
    )
    spec = {
        "cell": asdict(cell),
        "train": {**train, "devices": 2},
        "results_dir": str(tmp_path / "ddp"),
        "runs_dir": str(tmp_path / "runs-ddp"),
        "dataset_options": options,
        "progress": False,
    }
    root = Path(__file__).resolve().parents[1]
    path = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, "-m", "knowledge_lm.run.cell", json.dumps(spec)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    [ddp] = load_results(tmp_path / "ddp")
    assert {key: ddp["budget"][key] for key in PROTOCOL} == {key: single["budget"][key] for key in PROTOCOL}
    assert (single["budget"]["per_device_batch_size"], ddp["budget"]["per_device_batch_size"]) == (8, 4)
    # What the trainer ran, not only what was planned: evaluations at the same optimiser steps and epochs.
    trained = [(e["step"], e["epoch"]) for e in single["evaluations"]]
    assert trained == [(e["step"], e["epoch"]) for e in ddp["evaluations"]] == [(5, 0), (10, 1)]
