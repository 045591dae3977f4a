"""The Makefile: ``make help`` lists every variable and target, ``DRY=1`` makes a dry run, and a variable it does not
know is an error, not ignored. Commands are only printed (``make -n``), never run."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")


def make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-C", str(ROOT), "--no-print-directory", *args], capture_output=True, text=True)


def test_help_lists_every_variable_and_target_on_a_line_of_its_own():
    text = (ROOT / "Makefile").read_text()
    variables = re.findall(r"^([A-Z_]+) \?=", text, re.MULTILINE)
    targets = re.search(r"^\.PHONY: (.*)$", text, re.MULTILINE).group(1).split()
    listed = make("help")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    for name in variables:
        assert len([line for line in lines if line.startswith(f"  {name}=")]) == 1, name
    for name in targets:
        assert len([line for line in lines if re.match(rf"  {re.escape(name)}\s", line)]) == 1, name
    assert "  JOBS=1 " in listed.stdout and "  DATASET=generated " in listed.stdout  # with their defaults


def klm_line(*args: str) -> str:
    printed = make("-n", *args)
    assert printed.returncode == 0, printed.stderr
    return " ".join(printed.stdout.replace("\\\n", " ").split("klm bench")[-1].split())


def test_dry_makes_a_dry_run():
    assert klm_line("bench", "DRY=1").endswith("--dry-run")
    assert "--dry-run" not in klm_line("bench", "DATASET=glue")
    assert klm_line("bench-paper", "TABLE=kam-table6", "DRY=1").endswith("--dry-run")


def test_an_unknown_variable_is_an_error_a_setting_of_klms_environment_is_not():
    printed = make("-n", "bench", "DRYRUN=1")
    assert printed.returncode == 2 and "unknown variable(s) DRYRUN: make help lists them" in printed.stderr
    assert make("-n", "bench", "KLM_SERVE=1", "CUDA_VISIBLE_DEVICES=0").returncode == 0
