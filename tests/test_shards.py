"""``klm bench --shard K/N`` splits a sweep's cells by stable index, and ``--executor slurm`` submits each cell as a
submitit job (tested through submitit's local executor)."""

import json
import sys

import pytest

from knowledge_lm.cli import main
from knowledge_lm.core.errors import KlmError
from knowledge_lm.run.claims import CLAIMED_EXIT, claim_cell
from knowledge_lm.run.config import validate_sweep
from knowledge_lm.sweep import runner
from knowledge_lm.sweep.plan import parse_shard, shard_keys, sweep_cells
from knowledge_lm.sweep.runner import run_sweep
from knowledge_lm.sweep.submit import array_tasks, run_command


def small_sweep(seeds=(1, 2, 3, 4, 5)):
    return validate_sweep(
        {
            "name": "shards",
            "dataset": "generated",
            "methods": ["baseline"],
            "fractions": [0.5, 1.0],
            "seeds": list(seeds),
            "backbone": "tiny",
            "dataset_options": {"train_size": 80, "dev_size": 20, "test_size": 20},
            "train": {"batch_size": 8, "epochs": 1, "min_steps": 1, "evaluations": 1, "max_length": 48},
        },
        "test",
    )


def test_shards_partition_the_cells_by_sorted_key():
    cells = sweep_cells(small_sweep())
    shards = [shard_keys(cells, (k, 3)) for k in (1, 2, 3)]
    assert set().union(*shards) == {cell.key for cell in cells}
    assert sum(len(shard) for shard in shards) == len(cells)  # disjoint
    assert sorted(len(shard) for shard in shards) == [3, 3, 4]
    assert shard_keys(list(reversed(cells)), (2, 3)) == shards[1]  # the order the sweep lists them in is no matter
    assert sorted(shards[0])[0] == sorted(cell.key for cell in cells)[0]


@pytest.mark.parametrize("text", ["0/4", "5/4", "a/b", "1", "1/0", "-1/2"])
def test_bad_shard_is_one_line(capsys, tmp_path, text):
    with pytest.raises(KlmError, match=r"expected K/N with 1 ≤ K ≤ N"):
        parse_shard(text)
    code = main(["bench", "--dataset", "generated", f"--shard={text}", "--results-dir", str(tmp_path / "results")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"--shard {text!r}" in err[0] and not (tmp_path / "results").exists()


def test_a_shard_runs_its_cells_only(tmp_path, monkeypatch):
    started = []

    class FinishedProcess:
        returncode = 1

        def __init__(self, command, env=None, **options):
            started.append(json.loads(command[-1])["cell"]["seed"])

        def poll(self):
            return 1

    monkeypatch.setattr(runner.subprocess, "Popen", FinishedProcess)
    sweep = small_sweep(seeds=(1, 2))
    only = shard_keys(sweep_cells(sweep), (2, 2))
    counts = run_sweep(
        sweep, results_dir=tmp_path / "results", runs_dir=tmp_path / "runs", gpus=[], only=only, isolate_cells=True
    )
    assert counts["failed"] == len(started) == 2 and len(only) == 2


def test_executor_slurm_needs_sbatch_or_submitit(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    code = main(
        ["bench", "--dataset", "generated", "--backbone", "tiny", "--executor", "slurm",
         "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs")]
    )  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--executor slurm" in err[0]
    assert not (tmp_path / "results").exists() and not (tmp_path / "runs").exists()


@pytest.mark.slow  # about 20 s on 2 cores: the job's process imports torch and trains a cell
def test_cells_run_as_submitit_jobs(tmp_path):
    pytest.importorskip("submitit")
    from knowledge_lm.sweep.submit import make_executor

    sweep = small_sweep(seeds=(1,))
    results, runs = tmp_path / "results", tmp_path / "runs"
    only = {sweep_cells(sweep)[0].key}
    executor = make_executor("local", runs / "submitit", devices=1)
    counts = run_sweep(sweep, results_dir=results, runs_dir=runs, only=only, executor=executor)
    assert counts == {"done_before": 0, "finished": 1, "failed": 0, "elsewhere": 0}
    [done] = [cell for cell in sweep_cells(sweep) if cell.key in only]
    assert json.loads(done.result_path(results).read_text())["cell"]["seed"] == 1


def test_a_job_whose_cell_finished_or_is_claimed_exits_before_its_run_folder(tmp_path):
    result, log = tmp_path / "results" / "c.json", tmp_path / "runs" / "c" / "log.txt"
    result.parent.mkdir()
    result.write_text("{}")
    assert run_command([sys.executable, "-c", "raise SystemExit(1)"], str(log), {}, str(result)) == CLAIMED_EXIT
    assert not log.parent.exists()
    with claim_cell(log.parent):  # a cell another live process holds: left to it, its log untouched
        assert run_command([sys.executable, "-c", "raise SystemExit(1)"], str(log), {}, "") == CLAIMED_EXIT
        assert not log.exists()


@pytest.mark.parametrize(
    ("record", "job_ids"),
    [("123_[0,2-3%4]", ["123_0", "123_2", "123_3"]), ("123_4", ["123_4"]), ("123", ["123"])],
)
def test_a_sacct_record_names_the_jobs_it_stands_for(record, job_ids):
    assert array_tasks(record) == job_ids
