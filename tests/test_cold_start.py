"""Cold start: the plan stage of ``klm bench`` of a sweep without method or dataset options (whose check imports
their modules) imports no torch, Lightning or transformers, and a bench reports its time outside its cells."""

import subprocess
import sys
from pathlib import Path

import pytest

from knowledge_lm.sweep.startup import outside_cells_line, process_started

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "lightning", "pytorch_lightning", "transformers", "datasets", "spacy")
PLAN = """
import sys
from knowledge_lm.cli import main
code = main(["bench", "--config", sys.argv[1], "--dry-run", "--results-dir", sys.argv[2], "--runs-dir", sys.argv[3]])
print("loaded:", ",".join(sorted(m for m in {heavy!r} if m in sys.modules)), "code:", code)
"""


@pytest.mark.parametrize("config", ["glue.yaml", "semeval2010.yaml"])
def test_the_plan_stage_imports_no_torch_lightning_or_transformers(config, tmp_path):
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            PLAN.format(heavy=HEAVY),
            str(ROOT / "benchmarks" / config),
            tmp_path / "r",
            tmp_path / "w",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "cells:" in run.stdout and run.stdout.strip().splitlines()[-1] == "loaded:  code: 0"


def test_time_outside_cells_is_before_the_first_and_after_the_last():
    line = outside_cells_line(100.0, [(103.0, 150.0), (151.0, 190.0)], ended=192.5)
    assert line.startswith("klm bench: 92.5 s wall; outside its cells 5.5 s (3.0 s before") and "2.5 s after" in line
    assert outside_cells_line(100.0, [], ended=101.0) == "klm bench: 1.0 s, no cell ran"


def test_the_process_start_is_before_now():
    import time

    assert 0 <= time.time() - process_started() < 24 * 3600
