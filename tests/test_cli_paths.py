"""Where commands keep their folders: from the project root (``KLM_HOME`` or the git work tree), never the working
folder; smoke runs (the tiny backbone) in a scratch store, away from the committed results and pages."""

from pathlib import Path

import pytest

from knowledge_lm.cli import build_parser, resolve_folders, sweep_from_args
from knowledge_lm.core.errors import KlmError

REPO = Path(__file__).resolve().parents[1]
GLUE_RTE = ["--dataset", "glue", "--tasks", "rte", "--fractions", "0.01", "--seeds", "1"]


def parsed(*argv):
    args = build_parser().parse_args(list(argv))
    if args.command in ("bench", "status"):
        sweep_from_args(args)
    else:
        resolve_folders(args, [args.backbone] if isinstance(getattr(args, "backbone", None), str) else [])
    return args


def test_tiny_backbone_writes_to_a_scratch_store(tmp_path, monkeypatch):
    monkeypatch.setenv("KLM_HOME", str(tmp_path))
    args = parsed("bench", *GLUE_RTE, "--backbone", "tiny")
    assert args.results_dir == tmp_path / "results-scratch"
    assert args.leaderboards_dir == tmp_path / "results-scratch" / "leaderboards"
    assert args.runs_dir == tmp_path / "runs"
    named = parsed("bench", *GLUE_RTE, "--backbone", "tiny", "--results-dir", str(tmp_path / "mine"))
    assert named.results_dir == tmp_path / "mine" and named.leaderboards_dir == tmp_path / "mine" / "leaderboards"
    committed = parsed("bench", *GLUE_RTE, "--results-dir", str(tmp_path / "results"))
    assert committed.leaderboards_dir == tmp_path / "leaderboards"  # the project's store: the committed pages


def test_default_backbone_writes_to_the_committed_store(tmp_path, monkeypatch):
    monkeypatch.setenv("KLM_HOME", str(tmp_path))
    args = parsed("bench", *GLUE_RTE)
    assert args.results_dir == tmp_path / "results" and args.leaderboards_dir == tmp_path / "leaderboards"
    assert parsed("leaderboard").out == tmp_path / "leaderboards"
    assert parsed("export").out == tmp_path / "leaderboards" / "data"
    assert parsed("speed", "--backbone", "tiny").results_dir == tmp_path / "results-scratch"


def test_folders_resolve_from_the_git_root_in_a_subfolder(monkeypatch):
    monkeypatch.delenv("KLM_HOME", raising=False)
    monkeypatch.chdir(REPO / "knowledge_lm")
    args = parsed("status", *GLUE_RTE)
    assert args.results_dir == REPO / "results" and args.runs_dir == REPO / "runs"


def test_benchmarks_are_found_in_the_checkout_the_option_or_an_install(tmp_path, monkeypatch):
    import sysconfig

    from knowledge_lm.core import paths

    monkeypatch.setenv(paths.BENCHMARKS_ENV, "")  # restored, unset, after the test
    assert paths.benchmarks_dir() == REPO / "benchmarks"

    # A non-editable install: no benchmarks/ beside the package, the wheel's data files under the prefix.
    installed = tmp_path / "prefix"
    (installed / paths.INSTALLED_BENCHMARKS).mkdir(parents=True)
    (installed / paths.INSTALLED_BENCHMARKS / "tables.yaml").write_text("{}\n")
    monkeypatch.setattr(paths, "__file__", str(tmp_path / "site-packages" / "knowledge_lm" / "core" / "paths.py"))
    monkeypatch.setattr(sysconfig, "get_path", lambda name, scheme=None: str(installed))
    assert paths.benchmarks_dir() == installed / paths.INSTALLED_BENCHMARKS

    monkeypatch.setattr(sysconfig, "get_path", lambda name, scheme=None: str(tmp_path / "elsewhere"))
    with pytest.raises(KlmError, match="--benchmarks-dir"):
        paths.benchmarks_dir()

    mine = tmp_path / "mine"
    (mine / "glue.yaml").parent.mkdir()
    (mine / "glue.yaml").write_text((REPO / "benchmarks" / "glue.yaml").read_text())
    monkeypatch.setenv(paths.BENCHMARKS_ENV, str(mine))
    assert paths.benchmarks_dir() == mine
    monkeypatch.setenv(paths.BENCHMARKS_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(KlmError, match="nowhere"):
        paths.benchmarks_dir()


def test_the_benchmarks_dir_option_sets_the_environment_for_workers(tmp_path, monkeypatch, capsys):
    from knowledge_lm.cli import main
    from knowledge_lm.core import paths

    monkeypatch.setenv(paths.BENCHMARKS_ENV, "")  # restored, unset, after the test
    monkeypatch.setenv("KLM_HOME", str(tmp_path))
    assert main(["bench", "--benchmarks-dir", str(tmp_path / "nowhere"), "--dry-run", "--dataset", "glue"]) == 2
    assert "nowhere" in capsys.readouterr().err
    monkeypatch.setenv(paths.BENCHMARKS_ENV, "")
    assert main(["--benchmarks-dir", str(REPO / "benchmarks"), "bench", "--dry-run", *GLUE_RTE]) == 0
    assert paths.benchmarks_dir() == REPO / "benchmarks"
