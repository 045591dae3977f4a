"""Where commands keep their folders: from the project root (``KLM_HOME`` or the git work tree), never the working
folder; smoke runs (the tiny backbone) in a scratch store, away from the committed results and pages."""

from pathlib import Path

from knowledge_lm.cli import build_parser, resolve_folders, sweep_from_args

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
    assert named.results_dir == tmp_path / "mine" and named.leaderboards_dir == tmp_path / "leaderboards"


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
