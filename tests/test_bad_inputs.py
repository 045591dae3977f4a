"""Every bad input of a sweep, its data or the command line: one line on stderr naming the file, key or value,
exit code 2, and nothing written (no result, no run directory, no leaderboard)."""

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import tiny_bench

REPO = Path(__file__).resolve().parents[1]
RTE_HEADER = "index\tsentence1\tsentence2\tlabel\n"
RTE_ROW = "0\tA man sleeps.\tSomeone sleeps.\tentailment\n"


def bench(capsys, tmp_path, *args) -> tuple[int, list[str]]:
    """``tiny_bench``, after checking that it wrote nothing."""
    code, err = tiny_bench(capsys, tmp_path, *args)
    assert not any((tmp_path / name).exists() for name in ("results", "runs", "leaderboards"))
    return code, err


def sweep_file(tmp_path, text: str) -> str:
    path = tmp_path / "sweep.yaml"
    path.write_text("dataset: glue\nmethods: [baseline]\ntasks: [rte]\nfractions: [1]\nseeds: [1]\n" + text)
    return str(path)


@pytest.mark.parametrize(
    "yaml_text, message",
    [
        ("fractions: 0.01\n", "fractions must be a list, e.g. fractions: [0.01, 0.1, 1]; got 0.01"),
        ("train: [1, 2]\n", "train must be a mapping (key: value lines), got [1, 2]"),
        ("methods: baseline\n", "methods must be a list, e.g. methods: [baseline, kam]; got 'baseline'"),
        ("tasks: rte\n", "tasks must be a list"),
        ("seeds: 1\n", "seeds must be a list"),
        ("dataset_options: yes\n", "dataset_options must be a mapping"),
        ("task_train: {rte: 3}\n", "task_train: rte must be a mapping"),
        ("train: {batch_size: 0}\n", "batch_size=0 must be at least 1"),
        ("methods: []\n", "methods must name at least one method"),
    ],
)
def test_bad_sweep_yaml(capsys, tmp_path, yaml_text, message):
    # A later key of the same name overrides the defaults written first by sweep_file.
    config = sweep_file(tmp_path, yaml_text)
    code, err = bench(capsys, tmp_path, "--config", config)
    assert code == 2
    assert len(err) == 1 and err[0].startswith(f"error: {config}") and message in err[0]


def glue_rte(tmp_path, train: bytes, compress: bool = False) -> Path:
    folder = tmp_path / "data" / "glue_rte"
    folder.mkdir(parents=True)
    (folder / ("train.tsv.gz" if compress else "train.tsv")).write_bytes(train)
    (folder / "dev.tsv").write_text(RTE_HEADER + RTE_ROW)
    return folder


@pytest.mark.parametrize(
    "train, compress, message",
    [
        ((RTE_HEADER + "0\tA caf\xe9.\tb\tentailment\n").encode("latin-1"), False, "train.tsv: not UTF-8 text"),
        (gzip.compress((RTE_HEADER + RTE_ROW * 200).encode())[:-40], True, "train.tsv.gz: truncated or corrupt gzip"),
    ],
)
def test_unreadable_train_file(capsys, tmp_path, train, compress, message):
    folder = glue_rte(tmp_path, train, compress)
    code, err = bench(
        capsys, tmp_path, "--dataset", "glue", "--tasks", "rte", "--fractions", "1", "--seeds", "1",
        "--data-dir", str(folder.parent),
    )  # fmt: skip
    assert code == 2
    assert len(err) == 1 and err[0].startswith(f"error: {folder}/") and message in err[0]


@pytest.mark.parametrize(
    "args, environment, message",
    [
        (["--jobs", "0"], {}, "--jobs '0': expected a positive number"),
        (["--jobs", "-2"], {}, "--jobs '-2': expected a positive number"),
        (["--jobs", "two"], {}, "--jobs 'two': expected a positive number"),
        ([], {"KLM_JOBS": "abc"}, "KLM_JOBS 'abc': expected a positive number"),
        (["--backbone", "/does/not/exist"], {}, "backbone '/does/not/exist': no such model directory"),
        (["--backbone", "."], {}, "holds no config.json"),
    ],
)
def test_bad_command_line(capsys, tmp_path, monkeypatch, args, environment, message):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    folder = glue_rte(tmp_path, (RTE_HEADER + RTE_ROW).encode())
    code, err = bench(
        capsys, tmp_path, "--dataset", "glue", "--tasks", "rte", "--fractions", "1", "--seeds", "1",
        "--data-dir", str(folder.parent), *args,
    )  # fmt: skip
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_bad_klm_jobs_leaves_other_commands_alone(tmp_path):
    """``KLM_JOBS`` is read by ``klm bench`` alone: a bad value breaks no other command."""
    done = subprocess.run(
        [sys.executable, "-m", "knowledge_lm.cli", "list"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "KLM_JOBS": "abc"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stderr == "" and "methods: baseline" in done.stdout


# Issue 29's bad inputs that once gave a traceback, were accepted silently or failed only once a cell had started:
# each is one line and exit code 2 before any work.
@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "method_options=[1,2]"], "method_options=[1, 2] is not a dict"),
        (["--fractions", ""], "fractions '': expected numbers in (0, 1]"),
        (["--devices-per-cell", "0"], "--devices-per-cell 0: expected at least 1 GPU"),
        (["--devices-per-cell", "2"], "a cell wants 2 GPUs"),
        (["--seeds", "-1"], "seeds '-1': expected integers ≥ 0"),
        (["--set", "max_steps=-1"], "max_steps=-1 must be ≥ 0"),
        (["--set", "dropout=2"], "dropout=2.0 must be in [0, 1)"),
        (["--set", "lr=-1"], "lr=-1.0 must be a finite number > 0"),
        (["--set", "precision=fp8"], "precision='fp8' is not one of"),
    ],
)
def test_bad_option_fails_before_the_plan(capsys, tmp_path, monkeypatch, args, message):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a machine without GPUs
    code, err = bench(capsys, tmp_path, "--dataset", "glue", "--tasks", "rte", "--dry-run", *args)
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_unknown_dataset_option_fails_before_any_cell(capsys, tmp_path):
    folder = glue_rte(tmp_path, (RTE_HEADER + RTE_ROW).encode())
    config = sweep_file(tmp_path, "dataset_options: {trian_size: 50}\n")
    code, err = bench(capsys, tmp_path, "--config", config, "--data-dir", str(folder.parent))
    assert code == 2
    assert len(err) == 1 and "unknown dataset option(s) trian_size of dataset 'glue'; known: " in err[0]


def test_garbage_backbone_weights_fail_before_any_cell(capsys, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\x00garbage" * 100)
    code, err = bench(capsys, tmp_path, "--dataset", "glue", "--tasks", "rte", "--backbone", str(model), "--dry-run")
    assert code == 2
    assert len(err) == 1 and "model.safetensors is not readable safetensors weights" in err[0]


def test_results_folder_that_is_a_file(capsys, tmp_path):
    (tmp_path / "store").write_text("")
    code, err = bench(capsys, tmp_path, "--dataset", "glue", "--tasks", "rte", "--results-dir", str(tmp_path / "store"))
    assert code == 2
    assert len(err) == 1 and "is a file, not a folder" in err[0]


def klm(capsys, *args) -> tuple[int, list[str]]:
    from knowledge_lm.cli import main

    code = main([str(arg) for arg in args])
    return code, capsys.readouterr().err.strip().splitlines()


def stored_minilm_cell(results: Path) -> Path:
    (results / "glue" / "rte" / "baseline" / "minilm").mkdir(parents=True)
    return results


@pytest.mark.parametrize(
    "case, message",
    [
        ("out-file", "is a file, not a folder"),
        ("read-only", "is not writable"),
        ("no-results", "--results-dir {tmp}/nonexistent: no such folder"),
        ("no-backbone", "--backbones: no results of nosuch in {tmp}/results; stored: minilm"),
    ],
)
def test_bad_leaderboard_input(capsys, tmp_path, monkeypatch, case, message):
    results, out = stored_minilm_cell(tmp_path / "results"), tmp_path / "pages"
    args = ["leaderboard", "--results-dir", results, "--out", out]
    if case == "out-file":
        out.write_text("")
    elif case == "read-only":  # os.access, as a user other than root sees a read-only folder
        out.mkdir()
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != out and real_access(path, mode))
    elif case == "no-results":
        args[2] = tmp_path / "nonexistent"
    else:
        args += ["--backbones", "nosuch"]
    code, err = klm(capsys, *args)
    assert code == 2
    assert len(err) == 1 and message.format(tmp=tmp_path) in err[0]
    assert case in ("out-file", "read-only") or not out.exists()


def test_status_of_a_results_file(capsys, tmp_path):
    (tmp_path / "store").write_text("")
    code, err = klm(capsys, "status", "--dataset", "glue", "--tasks", "rte", "--results-dir", tmp_path / "store")
    assert code == 2 and err == [f"error: --results-dir {tmp_path / 'store'}: not a folder"]


def test_speed_of_an_unknown_method_measures_nothing(capsys, tmp_path):
    code, err = klm(capsys, "speed", "--methods", "nosuch", "--results-dir", tmp_path / "results")
    assert code == 2 and len(err) == 1 and "unknown method 'nosuch'" in err[0]
    assert not (tmp_path / "results").exists()
