"""The design card's smoke command leaves the committed store and pages as they were (issue 29, item 2): a
``--backbone tiny`` run writes to ``results-scratch/``, and the committed pages are still what the store gives."""

import hashlib
import shutil
from pathlib import Path

import pytest

from knowledge_lm.cli import main
from knowledge_lm.report.leaderboard import write_leaderboards

REPO = Path(__file__).resolve().parents[1]
# `make bench METHOD=kam DATASET=glue TASKS=rte FRACTIONS=0.01 SEEDS=1 BACKBONE=tiny SET="max_steps=2"`
SMOKE = ["bench", "--dataset", "glue", "--method", "kam", "--tasks", "rte", "--fractions", "0.01", "--seeds", "1"]
SMOKE += ["--backbone", "tiny", "--jobs", "1", "--set", "max_steps=2"]


def snapshot(*folders: Path) -> dict[str, str]:
    """Every file under ``folders``, by path, with the sha256 of its bytes."""
    return {
        str(path): hashlib.sha256(path.read_bytes()).hexdigest()
        for folder in folders
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.mark.slow  # kam's knowledge features for GLUE RTE are built first: minutes on 2 cores
def test_the_smoke_command_leaves_the_committed_store_and_pages_alone(shared_data, tmp_path, monkeypatch):
    # A project (KLM_HOME) whose committed store is a slice of this one's, with its pages.
    monkeypatch.setenv("KLM_HOME", str(tmp_path))
    committed = "glue/rte/baseline/minilm"
    shutil.copytree(REPO / "results" / committed, tmp_path / "results" / committed)
    write_leaderboards(tmp_path / "results", tmp_path / "leaderboards", backbones=("minilm",))
    before = snapshot(tmp_path / "results", tmp_path / "leaderboards")
    assert any(path.endswith("glue.md") for path in before)

    assert main(SMOKE) == 0

    assert snapshot(tmp_path / "results", tmp_path / "leaderboards") == before
    [smoke] = (tmp_path / "results-scratch" / "glue" / "rte" / "kam" / "tiny").rglob("f0.01-s1.json")
    assert smoke.parent.name == "tiny"  # nothing stored under its key before: it takes it
    assert (tmp_path / "results-scratch" / "leaderboards" / "glue.md").is_file()
    # The committed-pages test on this project: its store still gives its committed pages, byte for byte.
    pages = sorted(path.relative_to(tmp_path / "leaderboards") for path in (tmp_path / "leaderboards").rglob("*.md"))
    again = tmp_path / "again"
    write_leaderboards(tmp_path / "results", again, backbones=("minilm",))
    assert sorted(path.relative_to(again) for path in again.rglob("*.md")) == pages
    for page in pages:
        assert (again / page).read_text() == (tmp_path / "leaderboards" / page).read_text(), page
