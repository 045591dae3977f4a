"""A cell's training curve: Lightning's CSVLogger by default under ``<results>/logs/<cell key>/``, another logger
by the ``logger`` setting, and ``klm status`` says where it is."""

import csv
import importlib.util

import pytest
import yaml

from knowledge_lm.cli import main
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.results import result_files
from knowledge_lm.run.config import TrainConfig, validate_sweep
from knowledge_lm.sweep.plan import sweep_cells

SWEEP = {
    "name": "logs",
    "dataset": "generated",
    "methods": ["baseline"],
    "fractions": [1.0],
    "seeds": [1],
    "backbone": "tiny",
    "dataset_options": {"train_size": 80, "dev_size": 20, "test_size": 20},
    "train": {"batch_size": 8, "epochs": 1, "min_steps": 1, "evaluations": 2, "max_length": 48},
}


def test_a_cell_logs_loss_learning_rate_and_dev_metric_per_evaluation(tmp_path, capsys, monkeypatch):
    from knowledge_lm.run.cell import run_cell

    sweep = validate_sweep(SWEEP, "test")
    [cell] = sweep_cells(sweep)
    results = tmp_path / "results"
    result = run_cell(
        cell, sweep.train_config(cell.task), results_dir=results, runs_dir=tmp_path / "runs", progress=False,
        dataset_options=sweep.variant_options(""),
    )  # fmt: skip
    with open(cell.log_dir(results) / "version_0" / "metrics.csv") as handle:
        rows = list(csv.DictReader(handle))
    dev = [row for row in rows if row["dev/accuracy"]]
    assert [float(row["dev/accuracy"]) for row in dev] == pytest.approx(
        [evaluation["metrics"]["dev"]["accuracy"] for evaluation in result["evaluations"]]
    )
    assert any(row["train/task"] for row in rows) and any(row["lr-AdamW/pg1"] for row in rows)
    assert [path for path, _ in result_files(results)] == [cell.result_path(results)]  # logs are no result

    monkeypatch.setenv("COLUMNS", "400")  # the status table's paths on one line each
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump(SWEEP))  # the cell's own settings: status finds it done, with its log
    runs = str(tmp_path / "runs")
    code = main(["status", "--config", str(config), "--results-dir", str(results), "--runs-dir", runs])
    assert code == 0 and str(cell.log_dir(results) / "version_0") in capsys.readouterr().out


def test_logger_setting_is_checked():
    assert TrainConfig.from_dict({"logger": "none"}).logger == "none"
    with pytest.raises(KlmError, match="logger='paper' is not one of csv, tensorboard, wandb, none"):
        TrainConfig.from_dict({"logger": "paper"})


@pytest.mark.parametrize("logger, package", [("tensorboard", "tensorboard"), ("wandb", "wandb")])
def test_a_missing_logger_package_is_one_line(logger, package):
    if importlib.util.find_spec(package) or (logger == "tensorboard" and importlib.util.find_spec("tensorboardX")):
        pytest.skip(f"{package} is installed")
    with pytest.raises(KlmError, match=f"logger={logger} needs the package {package}: pip install {package}"):
        TrainConfig.from_dict({"logger": logger})
