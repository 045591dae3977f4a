"""A cell trains in one process at a time, whoever starts it: claims, their takeover when stale, runners that meet
another's claim, an orphaned cell that ends with its runner, and `klm status` naming who runs a cell."""

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from knowledge_lm.cli import main
from knowledge_lm.core.errors import error_line
from knowledge_lm.core.results import Cell
from knowledge_lm.run import claims
from knowledge_lm.run.claims import CLAIM_FILE, CellClaimed, claim_cell, read_claim
from knowledge_lm.run.config import validate_sweep
from knowledge_lm.sweep.plan import cell_status, sweep_cells
from knowledge_lm.sweep.runner import run_sweep

ROOT = Path(__file__).resolve().parents[1]


def dead_pid() -> int:
    """The pid of a process of this host that has ended."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def plant_claim(run_dir: Path, host: str, pid: int, age_s: float = 0.0):
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / CLAIM_FILE
    path.write_text(json.dumps({"host": host, "pid": pid, "started": "2026-01-01T00:00:00+00:00", "token": "planted"}))
    os.utime(path, (time.time() - age_s, time.time() - age_s))


def test_a_claim_is_held_once_and_released(tmp_path):
    with claim_cell(tmp_path / "cell") as claim:
        held = read_claim(tmp_path / "cell")
        assert (held["host"], held["pid"]) == (socket.gethostname(), os.getpid())
        with pytest.raises(CellClaimed, match=f"running elsewhere \\({socket.gethostname()}:{os.getpid()}"):
            claim_cell(tmp_path / "cell")
        assert claim.held()
    assert read_claim(tmp_path / "cell") is None
    claim_cell(tmp_path / "cell").release()  # free again


def test_stale_claims_are_taken_over_live_ones_are_not(tmp_path):
    plant_claim(tmp_path / "dead", socket.gethostname(), dead_pid())  # this host, process gone
    plant_claim(tmp_path / "silent", "other-node", 1, age_s=claims.STALE_AFTER_S + 5)  # no heartbeat for too long
    plant_claim(tmp_path / "alive", "other-node", 1, age_s=claims.HEARTBEAT_S)  # another node, beating
    for name in ("dead", "silent"):
        with claim_cell(tmp_path / name):
            assert read_claim(tmp_path / name)["pid"] == os.getpid()
    with pytest.raises(CellClaimed, match="other-node:1, heartbeat 10 s ago"):
        claim_cell(tmp_path / "alive")
    assert read_claim(tmp_path / "alive")["token"] == "planted"


def test_a_stale_claim_found_by_two_takers_goes_to_one(tmp_path):
    """Both found the same stale claim; the second's takeover must not remove the claim the first made since."""
    plant_claim(tmp_path / "cell", socket.gethostname(), dead_pid())
    stale = read_claim(tmp_path / "cell")
    with claim_cell(tmp_path / "cell") as first:
        claims.take_over(tmp_path / "cell", stale)
        assert first.held()


def test_a_heartbeat_racing_the_release_raises_nothing(tmp_path, monkeypatch):
    """The claim file gone between the heartbeat's check and its touch (a release on interrupt): no traceback."""
    import threading

    failures = []
    monkeypatch.setattr(threading, "excepthook", failures.append)
    monkeypatch.setattr(claims, "HEARTBEAT_S", 0.01)
    monkeypatch.setattr(claims.Claim, "held", lambda self: True)  # the check passed; the file goes after it
    claim = claim_cell(tmp_path / "cell")
    (tmp_path / "cell" / CLAIM_FILE).unlink()
    time.sleep(0.1)  # several beats on the missing file
    claim.release()
    claim._thread.join(timeout=5)
    assert not claim._thread.is_alive() and failures == []


def test_duplicate_seeds_and_fractions_collapse_in_order():
    sweep = validate_sweep(
        {"dataset": "generated", "methods": ["baseline"], "fractions": "1,0.1,1.0", "seeds": [5, 5, 2, 5]}, "test"
    )
    assert (sweep.fractions, sweep.seeds) == ([1.0, 0.1], [5, 2])
    assert len(sweep_cells(sweep)) == 4


def test_status_names_who_runs_a_cell(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")  # the table's columns unfolded
    cell = Cell("baseline", "generated", "facts", 1.0, 1, "tiny")
    plant_claim(cell.run_dir(tmp_path / "runs"), "node7", 4242, age_s=3)
    assert cell_status(cell, tmp_path / "results", tmp_path / "runs")[0] == "running"
    arguments = ["--dataset", "generated", "--tasks", "facts", "--fractions", "1", "--seeds", "1,2"]
    main(
        [
            "status",
            *arguments,
            "--backbone",
            "tiny",
            "--results-dir",
            str(tmp_path / "results"),
            "--runs-dir",
            str(tmp_path / "runs"),
        ]
    )
    output = capsys.readouterr().out
    assert "running" in output and "node7:4242, heartbeat 3 s ago" in output and "missing: 1" in output


def tiny_sweep_config(tmp_path: Path, seeds: list[int], steps: int, checkpoint_every: int = 0) -> Path:
    config = tmp_path / "tiny.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "claims",
                "dataset": "generated",
                "tasks": ["facts"],
                "methods": ["baseline"],
                "fractions": [1.0],
                "seeds": seeds,
                "backbone": "tiny",
                "dataset_options": {"train_size": 24, "dev_size": 8, "test_size": 8},
                "train": {
                    "batch_size": 8,
                    "epochs": 1,
                    "min_steps": steps,
                    "max_length": 32,
                    "evaluations": 2,
                    "checkpoint_every_steps": checkpoint_every,
                },
            }
        )
    )
    return config


def bench(config: Path, tmp_path: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "knowledge_lm.cli", "bench", "--config", str(config), "--no-leaderboard"]
    return subprocess.Popen(
        [*command, "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs")],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.slow
def test_two_concurrent_sweeps_train_each_cell_once(tmp_path):
    config = tiny_sweep_config(tmp_path, seeds=[1, 2, 3], steps=4)
    runners = [bench(config, tmp_path) for _ in range(2)]
    outputs = [runner.communicate(timeout=600)[0] for runner in runners]
    assert [runner.returncode for runner in runners] == [0, 0], outputs
    finished = [int(output.split("finished ")[-1].split(",")[0]) for output in outputs]
    assert sum(finished) == 3, outputs  # a cell both had trained would count twice
    assert sorted(p.name for p in (tmp_path / "results").rglob("*.json")) == ["f1-s1.json", "f1-s2.json", "f1-s3.json"]


@pytest.mark.slow
def test_a_killed_runners_cell_ends_with_it_and_a_rerun_resumes_it_once(tmp_path):
    config = tiny_sweep_config(tmp_path, seeds=[1], steps=400, checkpoint_every=5)
    [cell] = sweep_cells(validate_sweep(yaml.safe_load(config.read_text()), str(config)))
    run_dir, results = cell.run_dir(tmp_path / "runs"), tmp_path / "results"
    runner = bench(config, tmp_path)
    deadline = time.time() + 300
    while not (run_dir / "last.ckpt").is_file() and runner.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert (run_dir / "last.ckpt").is_file(), runner.communicate()[0]
    orphan = read_claim(run_dir)["pid"]
    runner.send_signal(signal.SIGKILL)
    runner.communicate()
    deadline = time.time() + 30
    while claims.process_alive(orphan) and time.time() < deadline:
        time.sleep(0.1)
    assert not claims.process_alive(orphan), "the cell went on training after its runner was killed"
    assert cell_status(cell, results, tmp_path / "runs")[0] == "partial"  # its claim is stale: its process is gone

    counts = run_sweep(
        validate_sweep(yaml.safe_load(config.read_text()), str(config)), results_dir=results, runs_dir=tmp_path / "runs"
    )
    assert counts == {"done_before": 0, "finished": 1, "failed": 0, "elsewhere": 0}
    result = json.loads(cell.result_path(results).read_text())
    assert result["resumed_from_checkpoint"] is True
    steps = [evaluation["step"] for evaluation in result["evaluations"]]
    assert steps == sorted(set(steps)) and steps[-1] == result["budget"]["max_steps"]


def test_a_claim_on_a_full_disk_is_not_made_and_says_why(tmp_path, monkeypatch):
    def full(descriptor):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(claims.os, "fsync", full)
    with pytest.raises(OSError) as raised:
        claim_cell(tmp_path / "cell")
    assert error_line(raised.value) == f"no space left on device: {tmp_path / 'cell' / CLAIM_FILE}"
    assert list((tmp_path / "cell").iterdir()) == []  # neither a claim nor its staging file


@pytest.mark.parametrize("content", [b"", b"\xff\xfe", b"[]", b'{"host": "node7"'])
def test_an_empty_or_unreadable_claim_is_stale_at_once(tmp_path, content):
    cell = Cell("baseline", "generated", "facts", 1.0, 1, "tiny")
    run_dir = cell.run_dir(tmp_path / "runs")
    run_dir.mkdir(parents=True)
    (run_dir / CLAIM_FILE).write_bytes(content)
    assert cell_status(cell, tmp_path / "results", tmp_path / "runs")[0] == "missing"
    with claim_cell(run_dir):
        assert read_claim(run_dir)["pid"] == os.getpid()


def test_without_hard_links_a_claim_is_made_exclusively_all_the_same(tmp_path, monkeypatch):
    def no_hard_links(source, target):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(claims.os, "link", no_hard_links)
    with claim_cell(tmp_path / "cell"):
        assert read_claim(tmp_path / "cell")["pid"] == os.getpid()
        with pytest.raises(CellClaimed):
            claim_cell(tmp_path / "cell")
    assert list((tmp_path / "cell").iterdir()) == []
