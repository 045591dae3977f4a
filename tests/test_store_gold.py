"""The store keeps the gold of kept predictions (results/gold/): pages are the same bytes with no data directory."""

import pytest
from test_leaderboard import dataset_page, kept_result

from knowledge_lm.core.results import GOLD_DIR, gold_path, gold_sha256, read_gold, read_predictions, write_gold
from knowledge_lm.report.gold import MissingGold, main, write_store_gold
from knowledge_lm.report.leaderboard import write_leaderboards


def clear_gold_caches():
    from knowledge_lm.report.gold import data_module, split_gold, split_groups

    for cache in (split_gold, split_groups, data_module):
        cache.cache_clear()


def never_built(*args, **kwargs):
    raise AssertionError("a page with its gold in the store built a data module")


def results_with_predictions(tmp_path):
    """Generated/facts cells (statement families: the family table) of two methods, their gold not in the store."""
    results = tmp_path / "results"
    for method in ("baseline", "better"):
        for seed in (1, 2):
            kept_result(results, method, seed, 50.0 + seed if method == "baseline" else 90.0 + 2 * seed, list)
    return results


def test_pages_need_no_data_directory_once_the_store_keeps_the_gold(tmp_path, monkeypatch):
    results = results_with_predictions(tmp_path)
    with_data = dataset_page(results, tmp_path / "with-data").read_text()
    assert "family" in with_data.lower()  # the statement families came through (the gold's groups)

    assert write_store_gold(results, dry_run=True) == {
        "files": 4,
        "golds": 1,
        "stored": 0,
        "written": 0,
        "mismatched": 0,
        "examples": 12,
    }
    assert not (results / GOLD_DIR).exists()
    counts = write_store_gold(results)
    assert counts["written"] == 1 and counts["examples"] == 12
    assert write_store_gold(results)["stored"] == 1  # once per gold
    [stored] = (results / GOLD_DIR).iterdir()
    digest = read_predictions(next(results.rglob("*.predictions.json.gz")))["gold_sha256"]
    assert stored == gold_path(results, digest) and read_gold(results, digest)["groups"]

    monkeypatch.setenv("DATA_DIR", str(tmp_path / "nowhere"))
    clear_gold_caches()
    assert dataset_page(results, tmp_path / "without-data").read_text() == with_data

    # An empty data directory named explicitly: the page is read from the store alone, no data module (nor its
    # tokenizer) built, never one found elsewhere (../shared/data).
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "empty"))
    clear_gold_caches()
    with monkeypatch.context() as patched:
        patched.setattr("knowledge_lm.report.gold.data_module", never_built)
        assert dataset_page(results, tmp_path / "empty-data").read_text() == with_data
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "nowhere"))

    stored.unlink()  # neither the store's gold nor the data: no page, never a thinner one
    with pytest.raises(MissingGold, match="no gold for generated/facts"):
        write_leaderboards(results, tmp_path / "without-gold")


def test_a_corrupt_stored_gold_is_not_used_and_rewritten(tmp_path, capsys):
    results = tmp_path / "results"
    path = write_gold(results, [1, 0, 1], ["text", "type", "text"])
    assert write_gold(results, [1, 0, 1]) is None  # already there: kept as written
    digest = gold_sha256([1, 0, 1])
    assert read_gold(results, digest)["groups"] == ["text", "type", "text"]
    path.write_bytes(b"not gzip")
    assert read_gold(results, digest) is None
    assert "corrupt gold file" in capsys.readouterr().err
    assert write_gold(results, [1, 0, 1]) == path and read_gold(results, digest)["gold"] == [1, 0, 1]
    write_gold(results, [0, 0])
    gold_path(results, gold_sha256([0, 0])).rename(gold_path(results, digest))  # another gold under this name
    assert read_gold(results, digest) is None


def test_the_backfill_command_reports_what_it_wrote(tmp_path, capsys):
    results = results_with_predictions(tmp_path)
    assert main([str(results), "--dry-run"]) == 0
    planned = capsys.readouterr().out
    assert "4 predictions files, 1 distinct golds: 0 already stored, 1 to write (12 examples)" in planned
    assert main([str(results)]) == 0
    assert "1 written (12 examples), 0 of another gold" in capsys.readouterr().out
    assert main([str(tmp_path / "nosuch")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    clear_gold_caches()
    assert main([str(results), "--data-dir", str(tmp_path / "nowhere")]) == 0  # all stored: no data needed
    assert "1 already stored" in capsys.readouterr().out
