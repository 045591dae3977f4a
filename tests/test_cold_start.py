"""Cold start: the plan stage of ``klm bench`` of a sweep without method or dataset options (whose check imports
their modules) imports no torch, Lightning or transformers; a run's workers start before its plan, so that their
imports overlap the runner's; a bench reports its time outside its cells, the time before the first in its parts."""

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import stored_result

from knowledge_lm.sweep.startup import outside_cells_line, process_started, read_outside_cells_line, startup_parts

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
    """A klm handed to `klm serve` counts from its requester's start (``process_started(pid)``), before its own."""
    import os
    import time

    assert 0 <= time.time() - process_started() < 24 * 3600
    assert process_started(os.getppid()) <= process_started()


def test_the_time_before_the_first_cell_is_told_in_its_parts():
    phases = [("start-up", 101.0), ("checks", 101.5), ("imports", 106.0), ("plan", 106.5), ("data", 107.0)]
    line = outside_cells_line(100.0, [(108.0, 150.0)], ended=151.0, phases=[*phases, ("data", 120.0)])
    assert "(8.0 s before the first started: start-up 1.0 s, checks 0.5 s, imports 4.5 s, plan 0.5 s, data 0.5 s, " \
        "waiting for its worker 1.0 s; 1.0 s after the last ended)" in line  # fmt: skip
    told = {"start-up": 1.0, "checks": 0.5, "imports": 4.5, "plan": 0.5, "data": 0.5, "waiting for its worker": 1.0}
    assert read_outside_cells_line(f"done\n{line}\n") == (8.0, told)  # what the benchmarks read of it
    assert read_outside_cells_line("klm bench: 1.0 s, no cell ran") is None
    spells = startup_parts(100.0, 110.0, [("imports", 102.0), ("plan", 103.0), ("imports", 105.0)])
    assert spells == [("imports", 4.0), ("plan", 1.0), ("waiting for its worker", 5.0)]


def tiny_glue_sweep(seeds):
    from knowledge_lm.run.config import validate_sweep

    return validate_sweep(
        {"name": "tiny", "dataset": "glue", "tasks": ["rte"], "methods": ["baseline"], "fractions": [1.0],
         "seeds": list(seeds), "backbone": "tiny"},
        "test",
    )  # fmt: skip


def test_the_cells_sure_to_run_are_counted_without_their_identities(tmp_path):
    """Counted before the plan: neither a stored cell (its identity may make it a cell to run) nor one another
    process holds; a stored one named for a re-run is."""
    from knowledge_lm.core.results import write_json_atomic
    from knowledge_lm.run.claims import claim_cell
    from knowledge_lm.sweep.plan import cells_sure_to_run, sweep_cells

    results, runs = tmp_path / "results", tmp_path / "runs"
    stored, held, missing = sweep_cells(tiny_glue_sweep((1, 2, 3)))
    write_json_atomic(stored.result_path(results), stored_result(stored))
    claim = claim_cell(held.run_dir(runs))
    try:
        assert cells_sure_to_run(tiny_glue_sweep((1, 2, 3)), results, runs) == 1
        assert cells_sure_to_run(tiny_glue_sweep((1, 2, 3)), results, runs, rerun_without_predictions=True) == 2
        assert cells_sure_to_run(tiny_glue_sweep((1, 2, 3)), results, runs, only={stored.key}) == 0
    finally:
        claim.release()


def test_the_workers_start_before_the_plan_and_give_way_where_it_runs_more_cells(tmp_path, monkeypatch):
    """The workers of the cells sure to run start before the plan reads the stored cells' identities (importing
    torch), so that their imports overlap; where the plan runs more cells than they are, as many new ones take over
    (each slot's share of the cores as before)."""
    from contextlib import ExitStack

    from knowledge_lm.core.errors import KlmError
    from knowledge_lm.sweep import runner

    events = []
    monkeypatch.setattr(runner.Worker, "launch", lambda self: events.append("launch"))
    monkeypatch.setattr(runner.Worker, "alive", lambda self: False)
    monkeypatch.setattr(runner, "sort_out_sweep", lambda *args, **kwargs: events.append("plan") or stopped())

    def stopped():
        raise KlmError("stopped after the plan")

    with pytest.raises(KlmError):
        runner.run_sweep(tiny_glue_sweep((1, 2)), results_dir=tmp_path / "r", runs_dir=tmp_path / "w", jobs=4, gpus=[])
    assert events == ["launch", "launch", "plan"]
    options = {"pool": None, "jobs": 4, "groups": [], "in_workers": True, "runs_dir": tmp_path / "w"}
    with ExitStack() as stack:
        early = runner.open_sweep_slots(stack, 1, **options)
        assert runner.planned_slots(stack, early, 1, **options) is early
        assert len(runner.planned_slots(stack, early, 3, **options)) == 3 and events.count("launch") == 2 + 1 + 3
