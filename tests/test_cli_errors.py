"""Bad input: one clear error line, a non-zero exit code, and no result file."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import stored_result, tiny_bench

RTE_HEADER = "index\tsentence1\tsentence2\tlabel\n"
RTE_ROW = "0\tA man sleeps.\tSomeone sleeps.\tentailment\n"


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def run(capsys, tmp_path, *args):
    """``tiny_bench``, after checking that it wrote no result."""
    code, err = tiny_bench(capsys, tmp_path, *args)
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("*.json"))
    return code, err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dataset", "glue", "--method", "nope"], "unknown method 'nope'"),
        (["--dataset", "nope"], "unknown dataset 'nope'"),
        (["--dataset", "glue", "--tasks", "nope"], "unknown task 'nope'"),
        (["--dataset", "glue", "--fractions", "0"], "outside (0, 1]"),
        (["--dataset", "glue", "--fractions", "1.5"], "outside (0, 1]"),
        (["--dataset", "glue", "--fractions", "ten"], "expected numbers"),
        (["--dataset", "glue", "--seeds", "a"], "expected integers"),
        (["--dataset", "glue", "--data-dir", "/does/not/exist"], "does not exist"),
        (["--dataset", "glue", "--set", "lr"], "expected key=value"),
        (["--dataset", "glue", "--set", "learning_rate=1"], "unknown training setting"),
        (["--dataset", "glue", "--set", "compile=maybe"], "compile='maybe' is not a boolean"),
        (
            ["--dataset", "glue", "--set", "compile_mode=fast"],
            "compile_mode='fast' is not one of default, reduce-overhead",
        ),
        (["--config", "/does/not/exist.yaml"], "does not exist"),
    ],
)
def test_bad_arguments(capsys, tmp_path, args, message):
    code, err = run(capsys, tmp_path, *args)
    assert code == 2
    assert len(err) == 1 and message in err[0] and err[0].startswith("error: ")


def test_malformed_sweep_yaml(capsys, tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("dataset: glue\nmethods: [baseline\n")
    code, err = run(capsys, tmp_path, "--config", str(config))
    assert code == 2 and "malformed YAML" in err[0]


@pytest.mark.parametrize(
    "train, dev, message",
    [
        ("index\tsentence1\tsentence2\n0\ta\tb\n", RTE_HEADER + RTE_ROW, "missing column 'label'"),
        (RTE_HEADER + "0\ta\tb\tmaybe\n", RTE_HEADER + RTE_ROW, "bad label 'maybe'"),
        (RTE_HEADER + "0\ta\n", RTE_HEADER + RTE_ROW, "columns"),
        (RTE_HEADER + RTE_ROW, RTE_HEADER, "empty"),
    ],
)
def test_malformed_data(capsys, tmp_path, train, dev, message):
    data = tmp_path / "data"
    write(data / "glue_rte" / "train.tsv", train)
    write(data / "glue_rte" / "dev.tsv", dev)
    code, err = run(
        capsys,
        tmp_path,
        "--dataset",
        "glue",
        "--tasks",
        "rte",
        "--fractions",
        "1",
        "--seeds",
        "1",
        "--data-dir",
        str(data),
    )
    assert code == 2
    assert len(err) == 1 and message in err[0] and "glue" in err[0]


def test_malformed_json(capsys, tmp_path):
    data = tmp_path / "data" / "glue_qqp"
    data.mkdir(parents=True)
    with gzip.open(data / "train_subset_powerfulpromptft_train.json.gz", "wt") as handle:
        handle.write('{"0": {"text_a": "a", "text_b": "b", "label": "1"},')
    with gzip.open(data / "train_subset_powerfulpromptft_dev.json.gz", "wt") as handle:
        handle.write('{"0": {"text_a": "a", "text_b": "b", "label": "1"}}')
    code, err = run(
        capsys,
        tmp_path,
        "--dataset",
        "glue",
        "--tasks",
        "qqp",
        "--fractions",
        "1",
        "--seeds",
        "1",
        "--data-dir",
        str(tmp_path / "data"),
    )
    assert code == 2 and "malformed JSON" in err[0] and "train_subset_powerfulpromptft_train" in err[0]


def test_missing_glue_data_offline(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    (tmp_path / "empty").mkdir()
    code, err = run(capsys, tmp_path, "--dataset", "glue", "--tasks", "rte", "--data-dir", str(tmp_path / "empty"))
    assert code == 2 and "no GLUE rte data" in err[0]


HEAVY_MODULES = ("torch", "transformers", "pytorch_lightning")
REPO = Path(__file__).resolve().parents[1]


def run_in_fresh_process(args: list[str], cwd: Path) -> tuple[int, list[str], list[str], str]:
    """``klm ARGS`` in a new interpreter: its exit code, which heavy modules it imported, and its stderr's lines
    and stdout."""
    script = (
        "import json, sys; from knowledge_lm.cli import main; code = main(json.loads(sys.argv[1])); "
        f"print(json.dumps([code, [m for m in {HEAVY_MODULES!r} if m in sys.modules]]))"
    )
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(args)],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    *printed, verdict = done.stdout.splitlines()
    code, imported = json.loads(verdict)
    return code, imported, done.stderr.strip().splitlines(), "\n".join(printed)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dataset", "glue", "--method", "nope"], "unknown method 'nope'; known: baseline, bert,"),
        (["--dataset", "nope"], "unknown dataset 'nope'; known: cosmosqa, fewrel,"),
        (["--dataset", "glue", "--tasks", "nope"], "unknown task 'nope' of dataset 'glue'; known: cola, sst2,"),
        (["--dataset", "fewrel", "--tasks", "nope"], "unknown task 'nope' of dataset 'fewrel'; known: main, mean_pool"),
        (["--dataset", "glue", "--fractions", "1.5"], "outside (0, 1]"),
        (["--dataset", "glue", "--seeds", "a"], "expected integers"),
        (["--config", "does-not-exist.yaml"], "does not exist"),
        (["--config", "bad.yaml"], "malformed YAML"),
    ],
)
def test_argument_errors_import_no_torch(tmp_path, args, message):
    (tmp_path / "bad.yaml").write_text("dataset: glue\nmethods: [baseline\n")
    code, imported, err, _ = run_in_fresh_process(["bench", "--no-leaderboard", *args], tmp_path)
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    assert imported == []


def test_list_imports_no_torch(tmp_path):
    code, imported, err, out = run_in_fresh_process(["list"], tmp_path)
    assert code == 0 and err == [] and imported == []
    assert "methods: baseline, bert," in out and "kam" in out
    assert "dataset fewrel: tasks main, mean_pool (default main)" in out
    assert (
        "dataset glue: tasks cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli (default rte, mrpc, cola, stsb, sst2)"
        in out
    )


def test_status_imports_no_torch(tmp_path):
    from knowledge_lm.core.results import Cell

    done = Cell("baseline", "glue", "rte", 1.0, 1, "tiny")
    scratch = tmp_path / "results-scratch"  # tiny-backbone cells' store
    done.result_path(scratch).parent.mkdir(parents=True)
    done.result_path(scratch).write_text(json.dumps(stored_result(done)))
    code, imported, err, out = run_in_fresh_process(
        ["status", "--dataset", "glue", "--tasks", "rte", "--fractions", "1", "--seeds", "1,2", "--backbone", "tiny"],
        tmp_path,
    )
    assert code == 0 and err == [] and imported == []
    assert out.splitlines()[-2] == "done: 1, missing: 1" and out.splitlines()[-1].startswith("time: ")


def store_results(results_dir: Path, cells_and_wall_times) -> None:
    for cell, wall_time in cells_and_wall_times:
        write(cell.result_path(results_dir), json.dumps(stored_result(cell, wall_time_s=wall_time)))


def test_bench_dry_run_lists_the_plan_without_torch_or_training(tmp_path):
    """The cells to run with their wall time estimated from stored cells of the same method, task and fraction (the
    median), those already done, and the totals; nothing runs, nothing is written, no torch is imported."""

    from knowledge_lm.core.results import Cell

    def cell(fraction, seed, method="baseline"):
        return Cell(method, "glue", "rte", fraction, seed, "tiny")

    stored = [(cell(1.0, 1), 100.0), (cell(1.0, 3), 140.0), (cell(0.1, 1, "kam"), 30.0)]
    store_results(tmp_path / "results-scratch", stored)  # tiny-backbone cells' store
    code, imported, err, out = run_in_fresh_process(
        ["bench", "--dataset", "glue", "--tasks", "rte", "--fractions", "0.1,1", "--seeds", "1,2,3"]
        + ["--backbone", "tiny", "--jobs", "2", "--dry-run"],
        tmp_path,
    )
    assert code == 0 and err == [] and imported == []
    lines = out.splitlines()
    assert lines[0] == "glue:"
    assert "  done  glue/rte/baseline/tiny/f1-s1  done" in lines
    assert "  run   glue/rte/baseline/tiny/f1-s2  missing  ~2m 00s" in lines  # median of 100 s and 140 s
    assert "  run   glue/rte/baseline/tiny/f0.1-s1  missing  unknown" in lines  # kam's 10 % is another method's
    assert lines[-3] == "6 cells: 2 already done, 4 to run"
    assert lines[-2] == (
        "estimated 2m 00s of cell time for 1 of the 4 to run (~1m 00s at --jobs 2, if they pack evenly); "
        "unknown for 3 (no stored cell of their method, task and fraction)"
    )
    assert lines[-1] == "dry run: nothing was run"
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["f0.1-s1.json", "f1-s1.json", "f1-s3.json"]


def test_a_variants_estimate_comes_from_the_variants_nearest_it():
    """A variant's own stored cells first; else those of the variant its name extends and its siblings (the same
    data size: t20k-zeroed for t20k-relations-permuted); else every variant's; another backbone's only as a last
    resort, and said so."""
    from knowledge_lm.core.results import Cell
    from knowledge_lm.sweep.plan import estimated_seconds

    times = {("generated", "facts", "knowbert", 1.0): {"minilm": {"": [40.0], "t20k": [200.0], "t20k-zeroed": [220.0]}}}

    def estimate(variant, backbone="minilm"):
        return estimated_seconds(Cell("knowbert", "generated", "facts", 1.0, 1, backbone, variant), times)

    assert estimate("") == (40.0, True)
    assert estimate("t20k-relations-permuted") == (210.0, True)  # t20k and t20k-zeroed, not the 2k cells
    assert estimate("relations-permuted") == (200.0, True)  # no stored world of that name: every variant
    assert estimate("t20k", "tiny") == (200.0, False)


def test_bench_dry_run_imports_torch_only_to_check_options(tmp_path):
    """A config without method or dataset options plans without torch; a table's configs set options, whose check
    imports the methods and data modules (torch with them): the dry run checks them as the run does."""
    write(
        tmp_path / "sweep.yaml", "dataset: glue\nmethods: [baseline, kam]\ntasks: [rte]\nfractions: [1]\nseeds: [1]\n"
    )
    code, imported, err, out = run_in_fresh_process(["bench", "--config", "sweep.yaml", "--dry-run"], tmp_path)
    assert code == 0 and err == [] and imported == []
    assert "  run   glue/rte/kam/minilm/f1-s1  missing  unknown" in out.splitlines()
    assert "2 cells: 0 already done, 2 to run" in out.splitlines()

    code, imported, err, out = run_in_fresh_process(["bench", "--table", "baselines", "--dry-run"], tmp_path)
    assert code == 0 and err == [] and "torch" in imported
    assert [line for line in out.splitlines() if line.endswith(":")][:2] == ["generated:", "glue:"]
    assert out.splitlines()[-1] == "dry run: nothing was run" and not (tmp_path / "runs").exists()


def test_bench_dry_run_counts_reruns_and_cells_running_elsewhere(tmp_path, capsys):
    from knowledge_lm.cli import main
    from knowledge_lm.core.results import Cell, predictions_path, write_predictions
    from knowledge_lm.run.claims import claim_cell

    kept, unkept, running = (Cell("baseline", "glue", "rte", 1.0, seed, "tiny") for seed in (1, 2, 3))
    store_results(tmp_path / "results", [(kept, 50.0), (unkept, 70.0)])
    write_predictions(predictions_path(kept.result_path(tmp_path / "results")), {"split": "dev", "predicted": [1]})
    claim = claim_cell(running.run_dir(tmp_path / "runs"))
    try:
        args = ["bench", "--dataset", "glue", "--tasks", "rte", "--fractions", "1", "--seeds", "1,2,3"]
        args += ["--backbone", "tiny", "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs")]
        assert main(args + ["--dry-run", "--rerun-without-predictions"]) == 0
    finally:
        claim.release()
    lines = capsys.readouterr().out.splitlines()
    assert "  done  glue/rte/baseline/tiny/f1-s1  done" in lines
    assert "  run   glue/rte/baseline/tiny/f1-s2  done  ~1m 00s" in lines  # no predictions: it runs again
    assert any(line.startswith("  skip  glue/rte/baseline/tiny/f1-s3  running") for line in lines)
    assert "3 cells: 1 already done, 1 to run, 1 running elsewhere" in lines
