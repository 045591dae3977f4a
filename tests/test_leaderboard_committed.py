"""The committed leaderboards are what the committed results store gives, byte for byte.

In a file of its own: it builds every committed page from the whole store (the longest test of make test, about a
minute on one core; it is the check that the committed pages were regenerated), so pytest-xdist's ``--dist
loadfile`` runs it on one worker beside the rest of the leaderboard tests on another, started first
(``LONGEST_FILES`` in tests/conftest.py)."""

from pathlib import Path

from knowledge_lm.report.leaderboard import write_leaderboards


def test_committed_leaderboards_are_what_the_results_store_gives(tmp_path, monkeypatch):
    """`klm leaderboard` on the committed results/ reproduces every committed table byte for byte (the PNGs are
    compared by name only: their bytes depend on the matplotlib build) with no data directory, no gold in the store
    and an empty cache: as on a fresh clone, what pages derive from the gold comes from results/derived/, whose files
    hold exactly the numbers the pages use."""

    from knowledge_lm.core.results import DERIVED_DIR
    from knowledge_lm.report.gold import data_module, split_gold, split_groups, stored_gold

    repo = Path(__file__).resolve().parents[1]
    (tmp_path / "no-data").mkdir()
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "no-data"))
    monkeypatch.setenv("KLM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("knowledge_lm.report.gold.read_gold", lambda results_dir, digest: None)
    for cache in (split_gold, split_groups, data_module, stored_gold):
        cache.cache_clear()

    def named_only(figure, path: Path) -> Path:  # the PNGs are compared by name: drawing them is a fifth of the build
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        return path

    monkeypatch.setattr("knowledge_lm.report.figures._save", named_only)
    derived = {path: path.read_bytes() for path in (repo / "results" / DERIVED_DIR).glob("*.json")}
    out = tmp_path / "pages"
    written = write_leaderboards(repo / "results", out)
    committed = sorted(str(path.relative_to(repo / "leaderboards")) for path in (repo / "leaderboards").rglob("*.md"))
    assert sorted(str(path.relative_to(out)) for path in written) == committed
    for name in committed:
        assert (out / name).read_text() == (repo / "leaderboards" / name).read_text(), name
    figures = sorted(path.name for path in (repo / "leaderboards" / "figures").glob("*.png"))
    assert sorted(path.name for path in (out / "figures").glob("*.png")) == figures
    assert {path: path.read_bytes() for path in (repo / "results" / DERIVED_DIR).glob("*.json")} == derived
