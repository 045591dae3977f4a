"""The runner: a killed cell resumes from its checkpoint; nothing is lost or run twice."""

import json
import subprocess
import time

import pytest
from helpers import stored_result

from knowledge_lm.core.errors import KlmError
from knowledge_lm.run.config import validate_sweep
from knowledge_lm.sweep.plan import cell_state, sweep_cells
from knowledge_lm.sweep.runner import cell_spec, run_sweep, spec_command


def small_sweep(**train):
    return validate_sweep(
        {
            "name": "resume",
            "dataset": "generated",
            "methods": ["baseline"],
            "fractions": [1.0],
            "seeds": [1, 2],
            "backbone": "tiny",
            "dataset_options": {"train_size": 160, "dev_size": 40, "test_size": 40},
            "train": {"batch_size": 8, "epochs": 1, "min_steps": 1, "evaluations": 6, "max_length": 48, **train},
        },
        "test",
    )


@pytest.mark.slow  # about 50 s on 2 cores: a cell process killed, two cells run; test_interrupts resumes in-process
def test_killed_cell_resumes_and_nothing_runs_twice(tmp_path):
    results, runs = tmp_path / "results", tmp_path / "runs"
    sweep = small_sweep(epochs=8, checkpoint_every_steps=7)
    killed = sweep_cells(sweep)[0]
    process = subprocess.Popen(
        spec_command(
            cell_spec(killed, sweep, overrides={}, data_dir=None, results_dir=results, runs_dir=runs, progress=False)
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    checkpoint = killed.run_dir(runs) / "last.ckpt"
    deadline = time.time() + 180
    while not checkpoint.is_file() and process.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    process.kill()
    process.wait()
    assert checkpoint.is_file(), "the cell never wrote a checkpoint before it was killed"
    assert not killed.result_path(results).exists()
    assert cell_state(killed, results, runs) == "partial"

    counts = run_sweep(sweep, results_dir=results, runs_dir=runs)
    assert counts == {"done_before": 0, "finished": 2, "failed": 0, "elsewhere": 0}
    result = json.loads(killed.result_path(results).read_text())
    assert result["resumed_from_checkpoint"] is True
    steps = [evaluation["step"] for evaluation in result["evaluations"]]
    assert steps == sorted(set(steps)), "an evaluation was lost or repeated"
    assert len(steps) == sweep.train["evaluations"] and steps[-1] == result["budget"]["max_steps"]
    assert sorted(p.name for p in results.rglob("*.json")) == ["f1-s1.json", "f1-s2.json"]
    assert not killed.run_dir(runs).exists()

    again = run_sweep(sweep, results_dir=results, runs_dir=runs)
    assert again == {"done_before": 2, "finished": 0, "failed": 0, "elsewhere": 0}


def launched_on(tmp_path, monkeypatch, gpus, jobs, overrides=None, seeds=(1, 2, 3, 4, 5)):
    """Which CUDA_VISIBLE_DEVICES each cell process got (the processes are stand-ins that fail at once)."""
    from knowledge_lm.run.config import validate_sweep
    from knowledge_lm.sweep import runner

    launched = []

    class Process:
        returncode = 1

        def __init__(self, command, env=None, **options):
            launched.append(env.get("CUDA_VISIBLE_DEVICES"))

        def poll(self):
            return 1

    monkeypatch.setattr(runner.subprocess, "Popen", Process)
    sweep = validate_sweep(
        {
            "dataset": "generated",
            "methods": ["baseline"],
            "fractions": [1.0],
            "seeds": list(seeds),
            "dataset_options": {"train_size": 40, "dev_size": 10, "test_size": 10},
        },
        "test",
    )
    runner.run_sweep(
        sweep,
        overrides,
        results_dir=tmp_path / "results",
        runs_dir=tmp_path / "runs",
        jobs=jobs,
        gpus=gpus,
        isolate_cells=True,
    )
    return launched


def test_the_cells_with_most_train_examples_start_first(tmp_path, monkeypatch, shared_data):
    from knowledge_lm.sweep import runner

    started = []

    class Process:
        returncode = 1

        def __init__(self, command, env=None, **options):
            spec = json.loads(command[-1])
            started.append((spec["cell"]["task"], spec["cell"]["fraction"]))

        def poll(self):
            return 1

    monkeypatch.setattr(runner.subprocess, "Popen", Process)
    sweep = validate_sweep(
        {"dataset": "glue", "tasks": ["rte", "sst2"], "methods": ["baseline"], "fractions": [0.1, 1.0], "seeds": [1]},
        "test",
    )
    run_sweep(
        sweep, data_dir=shared_data, results_dir=tmp_path / "r", runs_dir=tmp_path / "runs", gpus=[], isolate_cells=True
    )
    assert started == [("sst2", 1.0), ("sst2", 0.1), ("rte", 1.0), ("rte", 0.1)]  # 67k, 6.7k, 2.5k, 250 examples


def test_cells_spread_evenly_over_the_gpus(tmp_path, monkeypatch):
    assert launched_on(tmp_path, monkeypatch, ["0", "1"], jobs=4) == ["0", "1", "0", "1", "0"]
    assert launched_on(tmp_path, monkeypatch, [], jobs=2, seeds=(1,)) == [None]  # no GPU: nothing set


def test_ddp_cells_get_disjoint_gpu_groups(tmp_path, monkeypatch):
    from knowledge_lm.core.errors import KlmError

    assert launched_on(tmp_path, monkeypatch, ["0", "1", "2", "3"], jobs=2, overrides={"devices": 2}, seeds=(1, 2)) == [
        "0,1",
        "2,3",
    ]
    with pytest.raises(KlmError, match="wants 2 GPUs"):
        launched_on(tmp_path, monkeypatch, ["0"], jobs=1, overrides={"devices": 2}, seeds=(1,))


def test_a_cell_keeps_its_best_evaluations_predictions(tmp_path):
    import gzip

    from knowledge_lm.core.results import Cell, gold_sha256, load_results, predictions_path, read_gold
    from knowledge_lm.report.gold import report_gold, report_groups
    from knowledge_lm.run.cell import run_cell
    from knowledge_lm.run.config import TrainConfig

    cell = Cell("baseline", "generated", "facts", 1.0, 1, "tiny")
    result = run_cell(
        cell,
        TrainConfig(batch_size=8, max_steps=4, evaluations=2, max_length=32),
        results_dir=tmp_path / "results",
        runs_dir=tmp_path / "runs",
        dataset_options={"train_size": 40, "dev_size": 10, "test_size": 12},
        progress=False,
    )
    with gzip.open(predictions_path(cell.result_path(tmp_path / "results")), "rt") as stored:
        predictions = json.load(stored)
    assert predictions["split"] == result["report_split"] == "test"
    # The gold stays in the data: the file keeps its sha256, that of the gold recomputed from the result alone.
    gold = report_gold(result)
    assert "gold" not in predictions and predictions["gold_sha256"] == gold_sha256(gold)
    assert len(predictions["predicted"]) == len(gold) == 12
    # ... and the gold itself, with the split's statement families, once in the store's gold folder.
    stored = read_gold(tmp_path / "results", predictions["gold_sha256"])
    assert stored["gold"] == gold and stored["groups"] == report_groups(result)
    spectrum = predictions["singular_values"]  # of the 12 × hidden head features: 12 values, descending
    assert len(spectrum) == 12 and spectrum == sorted(spectrum, reverse=True) and spectrum[0] > 0
    accuracy = 100 * sum(p == g for p, g in zip(predictions["predicted"], gold)) / 12
    assert accuracy == pytest.approx(result["metrics"]["test"]["accuracy"])
    assert len(load_results(tmp_path / "results")) == 1  # the sidecar is not a result
    # Provenance: the package's version and a hash of every split's records as read.
    from knowledge_lm.core.registry import DATASETS
    from knowledge_lm.run.provenance import records_sha256

    assert result["versions"]["knowledge-lm"] is not None and isinstance(result["git"]["dirty"], bool)
    read = DATASETS.get("generated")(task="facts", **result["config"]["dataset_options"]).read_labelled()
    assert result["data"]["data_hashes"] == {split: records_sha256(records) for split, records in read.items()}


def test_klm_cell_runs_one_cell_in_process_and_refuses_a_wider_selection(tmp_path, capsys):
    """The entry a launcher starts on every node of a multi-node cell; the step budget counts every node's batch."""
    from knowledge_lm.cli import main
    from knowledge_lm.core.results import load_results
    from knowledge_lm.run.config import TrainConfig

    common = [
        "cell",
        "--dataset",
        "generated",
        "--method",
        "baseline",
        "--backbone",
        "tiny",
        "--results-dir",
        str(tmp_path / "results"),
        "--runs-dir",
        str(tmp_path / "runs"),
    ]
    assert main(common) == 2 and "the selection has 5" in capsys.readouterr().err
    smoke = ["--fractions", "0.01", "--seeds", "1", "--set", "max_steps=2", "--set", "evaluations=1"]
    assert main(common + smoke) == 0
    [result] = load_results(tmp_path / "results")
    assert result["cell"]["fraction"] == 0.01 and result["budget"]["max_steps"] == 2
    assert result["cell"]["variant"] == ""  # nothing stored under its key: it takes it
    assert main(common + smoke) == 0 and "already done" in capsys.readouterr().out
    assert main(common + smoke[:-1] + ["evaluations=2"]) == 0  # other settings: a cell of its own, beside it
    assert sorted(result["cell"]["variant"][:4] for result in load_results(tmp_path / "results")) == ["", "cfg-"]
    two_nodes = TrainConfig(batch_size=8, devices=2, num_nodes=2, epochs=1, min_steps=1).budget(320)
    assert two_nodes["steps_per_epoch"] == 40 and two_nodes["per_device_batch_size"] == 2 and two_nodes["nodes"] == 2


# About 20 s on 2 cores (a worker imports torch, then three cells train); moving a result aside and back is also
# covered, fast, by test_failed_rerun_leaves_the_old_result_in_place.
@pytest.mark.slow
def test_rerun_without_predictions_supersedes_old_results_and_keeps_them(tmp_path):
    """A result from before cells kept predictions runs again with --rerun-without-predictions; the old one moves
    under results/superseded/ (not a cell for the leaderboard), and a result with predictions is left alone."""
    from knowledge_lm.core.results import load_results, predictions_path

    results, runs = tmp_path / "results", tmp_path / "runs"
    sweep = small_sweep()
    assert run_sweep(sweep, results_dir=results, runs_dir=runs)["finished"] == 2
    old, kept = sweep_cells(sweep)
    predictions_path(old.result_path(results)).unlink()
    before = old.result_path(results).read_text()
    counts = run_sweep(sweep, results_dir=results, runs_dir=runs, rerun_without_predictions=True)
    assert counts == {"done_before": 1, "finished": 1, "failed": 0, "elsewhere": 0}
    assert predictions_path(old.result_path(results)).is_file() and len(load_results(results)) == 2
    [superseded] = (results / "superseded").rglob("*.json")
    assert superseded.read_text() == before and superseded.name.startswith("f1-s1.")


def test_failed_rerun_leaves_the_old_result_in_place(tmp_path, monkeypatch):
    """The old result moves to superseded/ only for the re-run's sake: when the re-run fails, it comes back."""
    from knowledge_lm.core.results import predictions_path
    from knowledge_lm.sweep import runner

    results, runs = tmp_path / "results", tmp_path / "runs"
    sweep = small_sweep()
    cell = sweep_cells(sweep)[0]
    result = cell.result_path(results)
    result.parent.mkdir(parents=True)
    result.write_text(json.dumps(stored_result(cell, finished_at="2026-01-01T00:00:00")))

    class FailingProcess:
        returncode = 1

        def __init__(self, command, env=None, **options):
            seen_by_cells.append(result.exists())

        def poll(self):
            return 1

    seen_by_cells = []
    monkeypatch.setattr(runner.subprocess, "Popen", FailingProcess)
    counts = runner.run_sweep(
        sweep, results_dir=results, runs_dir=runs, gpus=[], rerun_without_predictions=True, isolate_cells=True
    )
    assert seen_by_cells == [False, True]  # moved aside while its re-run ran, back before the next cell (seed 2)
    assert counts["failed"] == 2 and json.loads(result.read_text())["finished_at"] == "2026-01-01T00:00:00"
    assert not predictions_path(result).exists() and not list((results / "superseded").rglob("*.json"))


def test_training_losses_are_logged_every_log_every_n_steps():
    """Logging every step costs host time (and a device sync under a progress bar); a logger writes every n."""
    from types import SimpleNamespace

    from knowledge_lm.methods.task_model import logs_this_step

    every_50 = SimpleNamespace(log_every_n_steps=50)
    assert [step for step in range(120) if logs_this_step(SimpleNamespace(trainer=every_50, global_step=step))] == [
        49,
        99,
    ]
    assert logs_this_step(SimpleNamespace(trainer=None, global_step=3))  # outside a trainer: always


def test_fraction_seeds_give_a_fraction_its_own_seeds():
    sweep = validate_sweep(
        {
            "dataset": "generated",
            "methods": ["baseline"],
            "fractions": [0.1, 1.0],
            "seeds": [1, 2, 3],
            "fraction_seeds": {1: [1, 2, 3, 4, 5]},
        },
        "test",
    )
    seeds = {}
    for cell in sweep_cells(sweep):
        seeds.setdefault(cell.fraction, []).append(cell.seed)
    assert seeds == {0.1: [1, 2, 3], 1.0: [1, 2, 3, 4, 5]}
    with pytest.raises(KlmError, match="fraction_seeds names fraction 0.5"):
        validate_sweep({"dataset": "generated", "methods": ["baseline"], "fraction_seeds": {0.5: [1]}}, "test")


def test_method_chosen_on_the_command_line_keeps_the_configs_other_backbones_out(tmp_path):
    """``--method kam`` on a config whose method_backbones names ERICA's checkpoint: the sweep runs kam alone."""
    from knowledge_lm.cli import main
    from knowledge_lm.core.paths import benchmarks_dir

    config = str(benchmarks_dir() / "matrix_mrpc.yaml")
    assert main(["bench", "--config", config, "--method", "kam", "--results-dir", str(tmp_path), "--dry-run"]) == 0
