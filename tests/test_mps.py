"""MPS when packing: when the runner starts a daemon, with which folders, and that it always quits it."""

import os
import stat

import pytest

from knowledge_lm.run.spec import MPS_VARIABLE, mps_in_use
from knowledge_lm.sweep import mps
from knowledge_lm.sweep.mps import LOG_VARIABLE, PIPE_VARIABLE, mps_decision, mps_for_sweep

INSTALLED = {"which": lambda name: f"/usr/bin/{name}"}
MISSING = {"which": lambda name: None}


@pytest.mark.parametrize(
    "jobs, gpus, enabled, environ, lookup, decision",
    [
        (8, 1, True, {}, INSTALLED, "start"),  # eight cells share one GPU
        (3, 2, True, {}, INSTALLED, "start"),
        (2, 2, True, {}, INSTALLED, "off"),  # one cell per GPU: nothing shared
        (1, 1, True, {}, INSTALLED, "off"),
        (4, 0, True, {}, INSTALLED, "off"),  # no GPU
        (8, 1, False, {}, INSTALLED, "off"),  # --no-mps
        (8, 1, True, {}, MISSING, "missing"),
        (8, 1, True, {PIPE_VARIABLE: "/tmp/theirs"}, INSTALLED, "user"),  # the user's daemon is left alone
        (4, 4, True, {PIPE_VARIABLE: "/tmp/theirs"}, INSTALLED, "user"),  # one cell a GPU, still served by it
        (4, 0, True, {PIPE_VARIABLE: "/tmp/theirs"}, INSTALLED, "off"),
    ],
)
def test_decision(jobs, gpus, enabled, environ, lookup, decision):
    assert mps_decision(jobs, gpus, enabled, environ, **lookup) == decision


@pytest.fixture
def fake_control(tmp_path, monkeypatch):
    """An nvidia-cuda-mps-control on PATH that logs its arguments, stdin and pipe folder."""
    calls = tmp_path / "calls.log"
    program = tmp_path / "bin" / mps.MPS_CONTROL
    program.parent.mkdir()
    program.write_text(f'#!/bin/sh\necho "args=$* pipe=${PIPE_VARIABLE} input=$(cat)" >> {calls}\n')
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{program.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv(PIPE_VARIABLE, raising=False)
    monkeypatch.delenv(MPS_VARIABLE, raising=False)
    return calls


def test_daemon_for_the_sweep_with_its_own_folders_quit_at_the_end(fake_control, tmp_path):
    with mps_for_sweep(8, tmp_path / "runs", gpus=1) as on:
        assert on and mps_in_use()
        pipe = os.environ[PIPE_VARIABLE]
        assert pipe == str((tmp_path / "runs" / "mps" / "pipe").resolve())
        assert os.path.isdir(pipe) and os.path.isdir(os.environ[LOG_VARIABLE])
        assert fake_control.read_text().splitlines() == [f"args=-d pipe={pipe} input="]
    assert not mps_in_use() and PIPE_VARIABLE not in os.environ
    assert fake_control.read_text().splitlines()[1] == f"args= pipe={pipe} input=quit"


@pytest.mark.parametrize("interruption", [KeyboardInterrupt, RuntimeError])
def test_daemon_quit_on_error_and_ctrl_c(fake_control, tmp_path, interruption):
    with pytest.raises(interruption), mps_for_sweep(4, tmp_path, gpus=2):
        raise interruption()
    assert [line.split(" input=")[1] for line in fake_control.read_text().splitlines()] == ["", "quit"]
    assert PIPE_VARIABLE not in os.environ


def test_no_daemon_when_off_or_the_users(fake_control, tmp_path, monkeypatch):
    with mps_for_sweep(8, tmp_path, enabled=False, gpus=1) as on:
        assert not on and not mps_in_use()
    with mps_for_sweep(2, tmp_path, gpus=2) as on:
        assert not on
    monkeypatch.setenv(PIPE_VARIABLE, "/tmp/theirs")
    with mps_for_sweep(8, tmp_path, gpus=1) as on:
        assert on and mps_in_use() and os.environ[PIPE_VARIABLE] == "/tmp/theirs"
    assert not fake_control.exists() and os.environ[PIPE_VARIABLE] == "/tmp/theirs"


def test_a_daemon_that_fails_to_start_leaves_cells_without_mps(tmp_path, monkeypatch):
    program = tmp_path / mps.MPS_CONTROL
    program.write_text("#!/bin/sh\necho 'no device' >&2\nexit 1\n")
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv(PIPE_VARIABLE, raising=False)
    with mps_for_sweep(8, tmp_path, gpus=1) as on:
        assert not on and not mps_in_use()
