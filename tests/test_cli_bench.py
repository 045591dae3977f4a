"""``klm bench``'s plan, outcome and exit codes where other processes run some of its cells."""

import json
import threading
import time

from helpers import stored_result
from test_cli_errors import store_results

from knowledge_lm.cli import UNFINISHED_EXIT, main
from knowledge_lm.core.results import Cell, write_json_atomic
from knowledge_lm.run.claims import claim_cell


def setup(tmp_path):
    done = [Cell("baseline", "glue", "rte", 1.0, seed, "tiny") for seed in (1, 2)]
    store_results(tmp_path / "results", [(cell, 60.0) for cell in done])
    running = Cell("baseline", "glue", "rte", 1.0, 3, "tiny")
    args = ["bench", "--dataset", "glue", "--tasks", "rte", "--fractions", "1", "--seeds", "1,2,3", "--backbone"]
    args += ["tiny", "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs")]
    return running, args + ["--no-leaderboard"]


def test_cells_left_to_other_processes_exit_3(tmp_path, capsys):
    running, args = setup(tmp_path)
    claim = claim_cell(running.run_dir(tmp_path / "runs"))
    try:
        assert main(args) == UNFINISHED_EXIT == 3
    finally:
        claim.release()
    err = capsys.readouterr().err
    assert "3 cells, 2 already done, 0 to run, 1 running elsewhere" in err
    assert "1 cells are not finished: other processes run them" in err


def test_wait_waits_for_cells_of_other_processes(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("knowledge_lm.cli.bench.WAIT_POLL_SECONDS", 0.05)
    running, args = setup(tmp_path)
    claim = claim_cell(running.run_dir(tmp_path / "runs"))

    def other_process_finishes():
        time.sleep(0.5)
        write_json_atomic(running.result_path(tmp_path / "results"), stored_result(running))
        claim.release()

    finisher = threading.Thread(target=other_process_finishes)
    finisher.start()
    try:
        assert main(args + ["--wait"]) == 0
    finally:
        finisher.join()
    err = capsys.readouterr().err
    assert "waiting for 1 cells that other processes run (--wait)" in err
    assert "3 cells, 3 already done, 0 to run" in err
    assert json.loads(running.result_path(tmp_path / "results").read_text())["cell"]["seed"] == 3


def test_plan_line_estimates_the_cells_to_run(tmp_path):
    from knowledge_lm.sweep.plan import plan_line

    cells = [Cell("baseline", "glue", "rte", 1.0, seed, "tiny") for seed in (1, 2, 3, 4)]
    store_results(tmp_path, [(cells[0], 60.0), (cells[1], 100.0)])
    line = plan_line("glue", cells, cells[2:], 2, {}, tmp_path, jobs=2)
    assert line == "[bold]glue[/]: 4 cells, 2 already done, 2 to run; estimated 1m 20s"  # 2 × 80 s over 2 jobs
    other = [Cell("kam", "glue", "rte", 1.0, 1, "tiny")]
    assert plan_line("glue", other, other, 0, {}, tmp_path, jobs=1).endswith(
        "; time unknown (no stored cell of their method, task and fraction)"
    )


def test_outcome_names_each_failed_cell_and_its_log(tmp_path, capsys):
    from knowledge_lm.sweep.runner import report_outcome

    (tmp_path / "glue/rte/x").mkdir(parents=True)
    (tmp_path / "glue/rte/x/log.txt").write_text("boom\n")
    failures = {"glue/rte/x": "boom", "glue/rte/y": "never started"}
    counts = {"done_before": 0, "finished": 1, "failed": 2, "elsewhere": 0, "failures": failures}
    report_outcome(counts, tmp_path)
    err = capsys.readouterr().err.replace("\n", "")
    assert "finished 1, failed 2, elsewhere 0" in err
    assert f"failed: glue/rte/x: boom (log: {tmp_path}/glue/rte/x/log.txt)" in err
    assert "failed: glue/rte/y: never started" in err and "y/log.txt" not in err  # no pointer to a log not there
    assert "failures" not in counts
