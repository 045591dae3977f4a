"""Pre-registered worlds: "confirmed" only from cells run at or after the declaration's first commit, with the
declared settings, and no change to the declaration after a cell ran; the committed declarations load."""

import subprocess

import pytest
import yaml
from test_report_stats import result

from knowledge_lm.core.errors import KlmError
from knowledge_lm.report import preregistration
from knowledge_lm.report.comparisons import CONFIRM, VARIANT_TABLES, variant_table
from knowledge_lm.report.frame import results_frame
from knowledge_lm.report.preregistration import (
    CONFIRMED,
    DECLARED,
    EXPLORATORY,
    UNVERIFIED,
    load_declaration,
    load_declarations,
    world_status,
)

WORLD = "prereg-test"
OPTIONS = {"seed": 7, "negatives": "matched", "test_size": 4500}
TRAIN = {"lr": 5.0e-5, "epochs": 10, "method_options": {"new_module_lr": 1.0e-3}}


def declaration_text(**changed) -> str:
    return yaml.safe_dump(
        {
            "name": "a test world",
            "world": WORLD,
            "dataset": "glue",
            "task": "rte",
            "generator": "v3",
            "backbone": "minilm",
            "fraction": 1.0,
            "methods": ["baseline", "knowbert"],
            "controls": ["shuffled"],
            "seeds": [1, 2, 3, 4, 5],
            "dataset_options": OPTIONS,
            "train": TRAIN,
            "sweeps": ["benchmarks/sweep.yaml"],
            "verdict_rules": "as the page says",
            **changed,
        }
    )


def run(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def commit(repo, message: str) -> str:
    run(repo, "add", "-A")
    run(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)
    return run(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A git repository with a sweep; ``benchmarks/`` its benchmarks folder."""
    run(tmp_path, "init", "-q")
    (tmp_path / "benchmarks" / "preregistered").mkdir(parents=True)
    (tmp_path / "benchmarks" / "sweep.yaml").write_text("name: sweep\n")
    monkeypatch.setenv("KLM_BENCHMARKS_DIR", str(tmp_path / "benchmarks"))
    return tmp_path


def cells(commits: dict, **config):
    """The world's cells (knowbert and its shuffled control on seeds 1–5) at ``commits`` (seed → commit, else
    "first")."""
    settings = {"dataset_options": {**OPTIONS, **config.pop("options", {})}, "train": {**TRAIN, "batch_size": 32}}
    return results_frame(
        [
            result(
                "knowbert",
                seed,
                60.0,
                variant=variant,
                git={"commit": commits.get(seed, commits["other"])},
                config=settings,
            )
            for seed in config.get("seeds", range(1, 6))
            for variant in (WORLD, f"{WORLD}-shuffled")
        ]
    )


def test_a_world_is_confirmed_only_from_cells_after_its_declaration_as_declared(repo):
    before = commit(repo, "the sweep")
    path = repo / "benchmarks" / "preregistered" / "world.yaml"
    path.write_text(declaration_text())
    declared = commit(repo, "the declaration")
    (repo / "later.txt").write_text("code changed")
    later = commit(repo, "later code")
    declaration = load_declaration(path)
    assert world_status(cells({"other": later}).iloc[:0], declaration).word == DECLARED
    assert world_status(cells({"other": later}), declaration).word == CONFIRMED
    assert world_status(cells({"other": declared}), declaration).word == CONFIRMED  # at the declaring commit
    early = world_status(cells({1: before, "other": later}), declaration)
    assert early.word == EXPLORATORY and "before the declaration" in early.why
    assert "seed not declared" in world_status(cells({"other": later}, seeds=[1, 6]), declaration).why
    options = world_status(cells({"other": later}, options={"test_size": 500}), declaration)
    assert options.word == EXPLORATORY and "dataset options differ" in options.why
    assert world_status(cells({"other": "f" * 40}), declaration).word == UNVERIFIED  # a commit git does not know

    path.write_text(declaration_text(seeds=[1, 2, 3, 4, 5, 6]))  # a seed added once cells exist
    assert "uncommitted changes" in world_status(cells({"other": later}), declaration).why
    commit(repo, "a sixth seed")
    changed = world_status(cells({"other": later}), declaration)
    assert changed.word == EXPLORATORY and "changed" in changed.why


def test_a_method_that_reads_no_knowledge_runs_without_the_declared_knowledge_options(repo):
    """The runner drops knowledge options for the baseline, which reads none: its cells still run as declared."""
    path = repo / "benchmarks" / "preregistered" / "world.yaml"
    path.write_text(declaration_text(dataset_options={**OPTIONS, "knowledge": {"kg_embedding": "rotate"}}))
    later = commit(repo, "the declaration")
    settings = {"dataset_options": OPTIONS, "train": {**TRAIN, "batch_size": 32}}
    git = {"commit": later}
    baseline = [result("baseline", seed, 60.0, variant=WORLD, git=git, config=settings) for seed in (1, 2)]
    assert world_status(results_frame(baseline), load_declaration(path)).word == CONFIRMED
    knowbert = [result("knowbert", 1, 60.0, variant=WORLD, git={"commit": later}, config=settings)]
    differs = world_status(results_frame(knowbert), load_declaration(path))
    assert differs.word == EXPLORATORY and "dataset options differ" in differs.why


def test_without_git_no_world_is_confirmed(repo, monkeypatch):
    path = repo / "benchmarks" / "preregistered" / "world.yaml"
    path.write_text(declaration_text())
    first = commit(repo, "the declaration")
    monkeypatch.setattr(preregistration, "git", lambda *args: None)
    status = world_status(cells({"other": first}), load_declaration(path))
    assert status.word == UNVERIFIED and "git is unavailable" in status.why


def test_a_declaration_needs_five_seeds_and_its_sweeps(repo):
    path = repo / "benchmarks" / "preregistered" / "world.yaml"
    path.write_text(declaration_text(seeds=[1, 2, 3, 4]))
    with pytest.raises(KlmError, match="at least 5 distinct seeds"):
        load_declaration(path)
    path.write_text(declaration_text(sweeps=["benchmarks/absent.yaml"]))
    with pytest.raises(KlmError, match="no such file benchmarks/absent.yaml"):
        load_declaration(path)


def test_the_committed_declarations_load_and_stand_in_their_own_table():
    found = {declaration.world: declaration for declaration in load_declarations()}
    assert set(found) == {"prereg-v3-transe", "prereg-v3-rotate"}
    for world, declaration in found.items():
        assert declaration.dataset_options["negatives"] == "matched" and len(declaration.seeds) >= 5
        assert variant_table(world) == variant_table(f"{world}-shuffled") == "preregistered"
    assert "exploratory" in VARIANT_TABLES[CONFIRM].heading
