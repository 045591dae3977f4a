"""Every sweep config under benchmarks/ validates, and one cell per (method, task) smoke-runs on a tiny backbone."""

import pytest

from knowledge_lm.cell import run_cell
from knowledge_lm.config import BENCHMARKS_DIR, load_sweep
from knowledge_lm.results import Cell

CONFIGS = sorted(path for path in BENCHMARKS_DIR.glob("*.yaml") if path.name != "references.yaml")


def test_there_are_configs():
    assert {path.stem for path in CONFIGS} >= {"glue", "generated"}


@pytest.mark.parametrize("path", CONFIGS, ids=[path.stem for path in CONFIGS])
def test_config_validates_and_smoke_runs(path, tmp_path, shared_data):
    sweep = load_sweep(path)
    for method in sweep.methods:
        for task in sweep.tasks:
            cell = Cell(method, sweep.dataset, task, min(sweep.fractions), sweep.seeds[0], "tiny")
            train = sweep.train_config(task, {"max_steps": 2, "evaluations": 1, "batch_size": 4})
            result = run_cell(cell, train, data_dir=shared_data, results_dir=tmp_path / "results",
                              runs_dir=tmp_path / "runs", dataset_options=sweep.dataset_options, progress=False)
            assert result["budget"]["max_steps"] == 2
            assert set(result["metrics"]) == {"train"} ^ ({"train"} | set(result["data"]["eval_sizes"]))
