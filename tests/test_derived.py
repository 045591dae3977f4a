"""The results store keeps what pages derive from the gold (results/derived/): pages are the same bytes without the
data directory and without the gold, which is never kept in the repository."""

import json
import shutil

import pytest
from helpers import dataset_page, stored_result, write_synthetic_result

from knowledge_lm.core.results import (
    DERIVED_DIR,
    GOLD_DIR,
    Cell,
    predictions_path,
    read_predictions,
    write_json_atomic,
    write_predictions,
)
from knowledge_lm.report.derived import DerivedNumbers, keeping_derived, recall
from knowledge_lm.report.gold import MissingGold
from knowledge_lm.report.leaderboard import write_leaderboards


def clear_gold_caches():
    from knowledge_lm.report.gold import data_module, split_gold, split_groups

    for cache in (split_gold, split_groups, data_module):
        cache.cache_clear()


def never_built(*args, **kwargs):
    raise AssertionError("a page whose numbers are all in the store built a data module")


def rte_result(method: str, seed: int, value: float) -> dict:
    """A glue/rte cell on the tiny backbone: its gold (GLUE's RTE dev set) comes from the data directory."""
    return stored_result(
        Cell(method, "glue", "rte", 1.0, seed, "tiny"),
        config={"dataset_options": {}, "train": {"max_length": 32, "eval_batch_size": 16}},
        metrics={"test": {"accuracy": value}},
        data={"subset_hash": "h", "train_size": 40},
        budget={"max_steps": 10, "per_device_batch_size": 8},
    )


def rte_results(tmp_path, data_dir):
    """Two seeds of the baseline and of a method right on more examples, with kept predictions of RTE's gold."""
    from knowledge_lm.report.gold import report_gold

    results = tmp_path / "results"
    for method, right in (("baseline", 0.5), ("better", 0.8)):
        for seed in (1, 2):
            result = rte_result(method, seed, 100 * right)
            path = Cell(method, "glue", "rte", 1.0, seed, "tiny").result_path(results)
            write_json_atomic(path, result)
            gold = report_gold(result, data_dir)
            cut = int(right * len(gold)) - seed
            predicted = [g if i < cut else 1 - g for i, g in enumerate(gold)]
            write_predictions(predictions_path(path), {"split": "test", "predicted": predicted, "gold": gold})
    return results


def test_pages_need_neither_data_nor_gold_once_the_store_keeps_what_they_derive(tmp_path, monkeypatch, shared_data):
    monkeypatch.setenv("KLM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DATA_DIR", str(shared_data))
    clear_gold_caches()
    results = rte_results(tmp_path, shared_data)
    with_data = dataset_page(results, tmp_path / "with-data").read_text()
    assert "bootstrap" in with_data.lower()
    derived = json.loads((results / DERIVED_DIR / "glue.json").read_text())["numbers"]
    assert any(key.startswith("bootstrap:") for key in derived) and any(key.startswith("gold-size:") for key in derived)
    assert not (results / GOLD_DIR).exists()  # labels are not what the store keeps

    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("KLM_CACHE_DIR", str(tmp_path / "fresh-cache"))
    clear_gold_caches()
    with monkeypatch.context() as patched:  # every number in the store: no data module, no tokenizer, no hub
        patched.setattr("knowledge_lm.report.gold.data_module", never_built)
        assert dataset_page(results, tmp_path / "without-data").read_text() == with_data

    # A predictions file changed since: a number only the gold gives, not in the store: no page, never a thinner one.
    path = predictions_path(Cell("better", "glue", "rte", 1.0, 2, "tiny").result_path(results))
    kept = read_predictions(path)
    kept["predicted"] = [1 - label for label in kept["predicted"]]
    write_predictions(path, kept)
    with pytest.raises(MissingGold, match="no gold for glue/rte"):
        dataset_page(results, tmp_path / "changed")


def test_derived_numbers_are_recalled_saved_in_order_and_pruned_to_those_used(tmp_path):
    calls = []

    def compute(value):
        def run():
            calls.append(value)
            return {"interval": [value, value + 1]}

        return run

    with keeping_derived(tmp_path) as store:
        assert recall("glue", "b", compute(2.0)) == {"interval": [2.0, 3.0]}
        assert recall("glue", "a", compute(1.0)) == {"interval": [1.0, 2.0]}
        assert recall("glue", "a", compute(9.0)) == {"interval": [1.0, 2.0]}
        assert recall("glue", "none", lambda: None) is None
    assert calls == [2.0, 1.0] and store.added == {"glue"}
    text = (tmp_path / DERIVED_DIR / "glue.json").read_text()
    assert text == '{"format": 1, "numbers": {\n"a": {"interval": [1.0, 2.0]},\n"b": {"interval": [2.0, 3.0]}\n}}\n'
    assert json.loads(text)["numbers"]["a"] == {"interval": [1.0, 2.0]}

    with keeping_derived(tmp_path):  # nothing new, nothing pruned: the file is not rewritten
        assert recall("glue", "a", compute(9.0)) == {"interval": [1.0, 2.0]}
    assert (tmp_path / DERIVED_DIR / "glue.json").read_text() == text and calls == [2.0, 1.0]

    with keeping_derived(tmp_path) as store:  # a build that rendered another dataset's pages: glue's stay
        recall("glue", "b", compute(9.0))
        store.prune = {"fewrel"}
    assert DerivedNumbers(tmp_path).numbers["glue"].keys() == {"a", "b"}

    with keeping_derived(tmp_path) as store:  # a build that rendered glue's pages keeps only what they used
        recall("glue", "b", compute(9.0))
        store.prune = {"glue"}
    assert DerivedNumbers(tmp_path).numbers == {"glue": {"b": {"interval": [2.0, 3.0]}}}
    assert recall("glue", "c", compute(5.0)) == {"interval": [5.0, 6.0]}  # outside a build: computed, not kept
    assert "c" not in DerivedNumbers(tmp_path).numbers["glue"]


def test_an_incremental_build_leaves_the_store_a_full_build_gives(tmp_path, monkeypatch, shared_data):
    monkeypatch.setenv("KLM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DATA_DIR", str(shared_data))
    clear_gold_caches()
    results = rte_results(tmp_path, shared_data)
    # A second dataset, unchanged below: the incremental build skips its page.
    write_synthetic_result(results, "baseline", "main", 1.0, 1, 80.0, "test", "semeval2010", "semeval_macro_f1")
    state, out = tmp_path / "state.json", tmp_path / "leaderboards"
    write_leaderboards(results, out, state_file=state)
    before = json.loads((results / DERIVED_DIR / "glue.json").read_text())["numbers"]

    # One predictions file changes: the numbers derived from it get new keys, the old ones are stale.
    path = predictions_path(Cell("better", "glue", "rte", 1.0, 2, "tiny").result_path(results))
    kept = read_predictions(path)
    kept["predicted"] = [1 - kept["predicted"][0]] + kept["predicted"][1:]
    write_predictions(path, kept)
    written = write_leaderboards(results, out, state_file=state)
    assert out / "glue.md" in written and out / "semeval2010.md" not in written
    after = json.loads((results / DERIVED_DIR / "glue.json").read_text())["numbers"]
    assert after != before

    shutil.rmtree(results / DERIVED_DIR)
    write_leaderboards(results, tmp_path / "full")  # every page, from an empty store
    assert json.loads((results / DERIVED_DIR / "glue.json").read_text())["numbers"] == after


def test_a_filtered_or_out_build_leaves_the_store_as_it_was(tmp_path, monkeypatch):
    """Only the committed pages' build (``klm leaderboard``, no ``--out``, no filter) writes into the store."""
    from test_leaderboard import kept_result

    from knowledge_lm.cli import main

    monkeypatch.setenv("KLM_CACHE_DIR", str(tmp_path / "cache"))
    clear_gold_caches()
    results = tmp_path / "results"
    for method, right in (("baseline", list), ("kam", lambda gold: [1 - g for g in gold])):
        for seed in (1, 2):
            kept_result(results, method, seed, 50.0 + seed, right)

    def stored() -> dict:
        return {path: path.read_bytes() for path in results.rglob("*") if path.is_file()}

    before = stored()
    arguments = ["leaderboard", "--results-dir", str(results), "--backbones", "tiny"]
    for out, chosen in (("filtered", ["--datasets", "generated", "--methods", "kam"]), ("elsewhere", [])):
        assert main([*arguments, "--out", str(tmp_path / out), *chosen]) == 0
        assert "bootstrap" in (tmp_path / out / "generated.md").read_text().lower()
    assert stored() == before

    asked = []  # the committed pages' build, without --out, keeps what it derives in the store
    monkeypatch.setattr("knowledge_lm.cli.leaderboard.print_written_leaderboards", lambda *a, **k: asked.append(k))
    assert main(arguments) == 0 and asked[0]["store_derived"] is True
