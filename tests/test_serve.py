"""klm serve: a command handed to the warm server, and the workers it forks, run as they would cold."""

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

from knowledge_lm.core.results import predictions_path, read_predictions
from knowledge_lm.run.cell import run_spec
from knowledge_lm.run.config import validate_sweep
from knowledge_lm.sweep.plan import sweep_cells
from knowledge_lm.sweep.runner import cell_spec
from knowledge_lm.sweep.serve import (
    ServedProcess,
    installed_distributions,
    own_folder,
    receive_line,
    server_key,
    socket_path,
    spawn,
)
from knowledge_lm.sweep.startup import read_outside_cells_line

ROOT = Path(__file__).resolve().parents[1]
SWEEP = {
    "name": "served",
    "dataset": "generated",
    "methods": ["baseline"],
    "fractions": [1.0],
    "seeds": [1],
    "backbone": "tiny",
    "dataset_options": {"train_size": 64, "dev_size": 16, "test_size": 16},
    "train": {"batch_size": 8, "epochs": 1, "min_steps": 1, "evaluations": 2, "max_length": 48},
}


def klm(*arguments: str, flags: tuple = ()) -> subprocess.CompletedProcess:
    """``klm arguments`` as the program (``python -m knowledge_lm.cli``), so that it may go to a server."""
    command = [sys.executable, *flags, "-m", "knowledge_lm.cli", *arguments]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_bench_leaves_nothing_running_unless_asked():
    """Without KLM_SERVE=1 a `klm bench` starts no server: `make bench` then `make test` finds none."""
    environment = {name: value for name, value in os.environ.items() if name != "KLM_SERVE"}
    done = subprocess.run(
        [sys.executable, "-m", "knowledge_lm.cli", "bench", "--dataset", "no-such-dataset"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=120,
    )
    assert done.returncode == 2 and "no-such-dataset" in done.stderr
    assert "started klm serve" not in done.stderr and not socket_path(server_key()).exists()


@pytest.fixture(scope="module")
def server():
    """A ``klm serve`` of this code and environment, started as ``klm bench`` starts one where none runs; its pid.
    Stopped (SIGTERM) after the module's tests."""
    env = {**os.environ, "KLM_SERVE": "1"}
    # The key as the command computes it, in its own process: this one's path and environment may differ by now.
    key = subprocess.run(
        [sys.executable, "-c", "from knowledge_lm.sweep.serve import server_key; print(server_key())"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=True,
    ).stdout.strip()
    path = socket_path(key)
    assert not path.exists(), f"another klm serve of this code listens at {path}"
    done = subprocess.run(
        [sys.executable, "-m", "knowledge_lm.cli", "bench", "--dataset", "no-such-dataset"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2 and "no-such-dataset" in done.stderr  # answered at once, cold
    assert "started klm serve in the background" in done.stderr
    log = path.with_suffix(".log")
    deadline = time.time() + 180
    while "listening" not in log.read_text():
        assert time.time() < deadline, log.read_text()
        time.sleep(0.1)
    pid = int(log.read_text().split("klm serve: pid ")[-1].split(",")[0])
    yield pid
    os.kill(pid, signal.SIGTERM)
    while path.exists():
        assert time.time() < deadline + 120, "the server did not end on SIGTERM"
        time.sleep(0.1)


def test_the_key_follows_import_time_environment_only(monkeypatch):
    key = server_key()
    set_by_imports = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1", "TORCHINDUCTOR_CACHE_DIR": "/tmp/inductor"}
    assert server_key({**os.environ, "OMP_NUM_THREADS": "3", "KLM_CACHE_DIR": "/elsewhere", **set_by_imports}) == key
    assert server_key({**os.environ, "HF_HUB_OFFLINE": "0" if os.environ.get("HF_HUB_OFFLINE") == "1" else "1"}) != key
    assert socket_path(key).parent.name == f"klm-serve-{os.getuid()}"
    no_server = {**os.environ, "PYTHONPATH": "/no/server/imported/with/this"}
    assert spawn("knowledge_lm.sweep.worker", ["1"], no_server) is None  # the runner then starts its own


def test_the_key_follows_the_installed_distributions(tmp_path, monkeypatch):
    """An upgrade (another version's metadata folder) or a reinstall (the same, rewritten) gives another key, so a
    warm server never runs the libraries that were installed when it started."""
    site = tmp_path / "site-packages"
    (site / "somelib-1.0.dist-info").mkdir(parents=True)
    monkeypatch.setattr("site.getsitepackages", lambda: [str(site)])
    monkeypatch.setattr("site.ENABLE_USER_SITE", False)
    before = server_key({})
    assert any("somelib-1.0.dist-info" in record for record in installed_distributions())
    (site / "somelib-1.0.dist-info").rename(site / "somelib-1.1.dist-info")
    upgraded = server_key({})
    os.utime(site / "somelib-1.1.dist-info", ns=(1, 1))
    assert len({before, upgraded, server_key({})}) == 3
    assert installed_distributions([str(tmp_path / "nowhere"), str(site)]) == installed_distributions([str(site)])
    monkeypatch.syspath_prepend(str(tmp_path / "grown"))  # sys.path grown at run time (torch.compile does): same key
    (tmp_path / "grown" / "other-2.0.dist-info").mkdir(parents=True)
    assert server_key({}) == server_key({})
    assert not any("other-2.0" in record for record in installed_distributions())


def test_an_exit_status_read_along_with_the_pid_is_not_waited_for_again(tmp_path):
    """A child that ends at once: the server's two lines (pid, exit) may arrive in one read."""
    mine, servers = socket.socketpair()
    servers.sendall(b'{"pid": 1}\n{"exit": 3}\n')
    line, pending = receive_line(mine)
    process = ServedProcess(mine, json.loads(line)["pid"], pending)
    assert process.poll() == 3 and process.wait(0) == 3
    servers.close()
    private, shared = tmp_path / "private", tmp_path / "shared"
    private.mkdir(mode=0o700)
    shared.mkdir(mode=0o755)
    assert own_folder(private / "x.sock") and not own_folder(shared / "x.sock")


def test_a_bench_handed_to_the_server_imports_no_torch_and_gives_a_cold_cells_result(server, tmp_path):
    config = tmp_path / "served.yaml"
    config.write_text(yaml.safe_dump(SWEEP))
    served, cold = tmp_path / "served", tmp_path / "cold"
    common = ("--config", str(config), "--no-leaderboard")
    done = klm("bench", *common, "--results-dir", str(served / "r"), "--runs-dir", str(served / "runs"),
               flags=("-X", "importtime"))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")}
    assert "knowledge_lm.sweep.runner" in imported and "torch" not in imported  # it ran in a child of the server
    _, parts = read_outside_cells_line(done.stdout)
    assert parts["start-up"] > 0.1  # counted from the start of the klm that handed it over: its own imports too
    worker_log = (served / "runs" / "workers" / "slot-0.log").read_text()
    assert f"forked by klm serve (pid {server})" in worker_log

    sweep = validate_sweep(SWEEP, "test")
    [cell] = sweep_cells(sweep)
    cell.run_dir(cold / "runs").mkdir(parents=True)
    spec = cell_spec(cell, sweep, overrides={}, data_dir=None, results_dir=cold / "r", runs_dir=cold / "runs",
                     progress=False)  # fmt: skip
    assert run_spec(spec) == 0  # in this process
    warm_path, cold_path = cell.result_path(served / "r"), cell.result_path(cold / "r")
    warm, alone = json.loads(warm_path.read_text()), json.loads(cold_path.read_text())
    assert warm["data"] == alone["data"] and warm["budget"] == alone["budget"]
    for split, metrics in alone["metrics"].items():
        assert warm["metrics"][split] == pytest.approx(metrics, abs=1e-6)
    assert (
        read_predictions(predictions_path(warm_path))["predicted"]
        == (read_predictions(predictions_path(cold_path))["predicted"])
    )

    failed = klm("bench", "--dataset", "no-such-dataset")  # an error comes back as it would cold
    assert failed.returncode == 2 and "no-such-dataset" in failed.stderr


def test_a_killed_served_worker_reports_its_signal_and_a_second_server_is_refused(server):
    worker = spawn("knowledge_lm.sweep.worker", [str(os.getpid())], dict(os.environ))
    assert worker is not None and worker.poll() is None
    worker.kill()
    assert worker.wait(60) == -signal.SIGKILL

    second = klm("serve")
    assert second.returncode == 2 and "already listens" in second.stderr
