"""Every bad input of a sweep, its data or the command line: one line on stderr naming the file, key or value,
exit code 2, and nothing written (no result, no run directory, no leaderboard)."""

import gzip
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
