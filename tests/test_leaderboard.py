"""Leaderboards come from the results store alone, deterministically, with missing cells shown as —."""

import json
import statistics

import pytest
import yaml
from helpers import dataset_page, write_synthetic_result

from knowledge_lm.core.paths import benchmarks_dir
from knowledge_lm.core.registry import DATASETS
from knowledge_lm.core.results import Cell, write_json_atomic
from knowledge_lm.report.gold import MissingGold
from knowledge_lm.report.leaderboard import write_leaderboards

KNOWN_METRICS = {
    "accuracy",
    "f1",
    "matthews",
    "pearson",
    "spearman",
    "micro_f1",
    "micro_precision",
    "micro_recall",
    "macro_f1",
    "strict_accuracy",
    "loose_macro_f1",
    "loose_micro_f1",
    "ign_f1",
    "precision_at_1",
    "exact_match",
    "semeval_macro_f1",
}


def test_table_mean_std_n_best_and_missing(tmp_path):
    results, out = tmp_path / "results", tmp_path / "leaderboards"
    for seed, value in zip((1, 2, 3), (60.0, 62.0, 67.0)):
        write_synthetic_result(results, "baseline", "rte", 1.0, seed, value)
    for seed, value in zip((1, 2), (70.0, 71.0)):
        write_synthetic_result(results, "other", "rte", 1.0, seed, value)
    write_synthetic_result(results, "baseline", "cola", 0.1, 1, 20.0)
    path = dataset_page(results, out)
    text = path.read_text()
    mean, std = statistics.mean([60, 62, 67]), statistics.stdev([60, 62, 67])
    assert f"{mean:.1f} ± {std:.1f} (n=3)" in text
    assert "**70.5 ± 0.7 (n=2)**" in text
    row = next(line for line in text.splitlines() if line.startswith("| other |"))
    assert row.count("—") == 3  # 10% cola, 10% rte and 100% cola have no result for "other"
    assert "† BERT-Base" in text  # the paper's reference row, marked
    write_leaderboards(results, out)
    assert path.read_text() == text


def test_references_are_well_formed():
    references = yaml.safe_load((benchmarks_dir() / "references.yaml").read_text())
    for ref in references:
        assert {"paper", "source", "row", "backbone", "dataset", "fraction", "metrics"} <= set(ref)
        for task, values in ref["metrics"].items():
            assert set(values) <= KNOWN_METRICS, (ref["row"], task)
            assert all(isinstance(v, (int, float)) for v in values.values())
        assert ref.get("shown_with", "openentity") in DATASETS.names()  # a page where the row can show


def test_rows_of_a_dataset_not_here_show_with_the_one_named():
    """ERICA's Table 3 is on FIGER (not in the shared data): its rows show on the OpenEntity page, named as FIGER's."""
    from knowledge_lm.report.references import load_references

    rows = [ref["row"] for ref in load_references("openentity") if ref["paper"] == "003"]
    assert "ERICA_BERT on figer" in rows and all(row.endswith(" on figer") for row in rows)


def test_lama_probe_table_names_the_checkpoint(tmp_path):
    probe = {
        "backbone": {"name": "erica-ckpt", "path": "/ckpt/erica", "checksum": "ab" * 32},
        "corpus_means": {"TREx": 30.0, "Google_RE": None},
        "mean_precision_at_1": 25.5,
        "kept": 90,
        "facts": 100,
        "relations": {},
    }
    write_json_atomic(tmp_path / "results" / "probes" / "lama-erica-ckpt.json", probe)
    paths = write_leaderboards(tmp_path / "results", tmp_path / "out")
    text = (tmp_path / "out" / "lama.md").read_text()
    assert paths == [tmp_path / "out" / "lama.md"]
    assert "| erica-ckpt (/ckpt/erica) | abababababababab | — | 30.0 | 25.5 | 90 of 100 |" in text


def test_variants_are_their_own_cells_and_rows(tmp_path):
    from knowledge_lm.run.config import validate_sweep
    from knowledge_lm.sweep.plan import sweep_cells

    sweep = validate_sweep(
        {
            "dataset": "generated",
            "methods": ["knowbert"],
            "fractions": [1.0],
            "seeds": [1],
            "dataset_options": {"dev_size": 30, "knowledge": {"k_hop": 3}},
            "variants": {"noise0": {}, "noise20": {"knowledge": {"link_noise": 0.2}}},
        },
        "test",
    )
    cells = sweep_cells(sweep)
    assert [cell.key for cell in cells] == [
        "generated/facts/knowbert/minilm/noise0/f1-s1",
        "generated/facts/knowbert/minilm/noise20/f1-s1",
    ]
    assert sweep.variant_options("noise20") == {"dev_size": 30, "knowledge": {"k_hop": 3, "link_noise": 0.2}}
    alphas = validate_sweep(
        {
            "dataset": "generated",
            "methods": ["kam"],
            "train": {"method_options": {"skip": False}},
            "variants": {"alpha0": {"method_options": {"alpha": 0.0}}},
        },
        "test",
    )
    assert alphas.train_config("facts", variant="alpha0").method_options == {"skip": False, "alpha": 0.0}
    assert alphas.variant_options("alpha0") == {}
    results = tmp_path / "results"
    for cell, value in zip(cells, (70.0, 60.0)):
        write_json_atomic(
            cell.result_path(results),
            {
                "cell": {
                    "method": "knowbert",
                    "dataset": "generated",
                    "task": "facts",
                    "fraction": 1.0,
                    "seed": 1,
                    "backbone": "minilm",
                    "variant": cell.variant,
                },
                "report_split": "test",
                "metrics": {"test": {"accuracy": value}},
                "device": {"name": "Test GPU"},
                "backbone": {"checksum": "abc", "path": None},
                "git": {"commit": "0123456789"},
                "wall_time_s": 1.0,
                "data": {"subset_hash": "h", "train_size": 100},
                "budget": {"max_steps": 10, "per_device_batch_size": 32},
                "config": {},
                "versions": {},
            },
        )
    path = dataset_page(results, tmp_path / "leaderboards")
    text = path.read_text()
    assert (
        "| method | fraction | noise0 | noise20 |" in text and "| knowbert | 100% | 70.0 (n=1) | 60.0 (n=1) |" in text
    )


def test_malformed_variants_are_one_error():
    import pytest

    from knowledge_lm.core.errors import KlmError
    from knowledge_lm.run.config import validate_sweep

    with pytest.raises(KlmError, match="variants"):
        validate_sweep({"dataset": "generated", "methods": ["baseline"], "variants": {"a/b": {}}}, "test")


def test_variant_references_stand_beside_the_variants(tmp_path):
    """KAM-BERT's Table 4 (α sweep) rows sit in the variants table of the α sweep, not in the main table."""
    results = tmp_path / "results"
    for alpha, value in (("alpha0", 40.0), ("alpha0.2", 45.0)):
        cell = Cell("kam", "glue", "cola", 1.0, 1, "minilm", alpha)
        write_json_atomic(
            cell.result_path(results),
            {
                "cell": {
                    "method": "kam",
                    "dataset": "glue",
                    "task": "cola",
                    "fraction": 1.0,
                    "seed": 1,
                    "backbone": "minilm",
                    "variant": alpha,
                },
                "report_split": "dev",
                "metrics": {"dev": {"matthews": value}},
                "device": {"name": "Test GPU"},
                "backbone": {"checksum": "abc", "path": None},
                "git": {"commit": "0123456789"},
                "wall_time_s": 1.0,
                "data": {"subset_hash": "h", "train_size": 100},
                "budget": {"max_steps": 10, "per_device_batch_size": 32},
                "config": {},
                "versions": {},
            },
        )
    path = dataset_page(results, tmp_path / "leaderboards")
    lines = path.read_text().splitlines()
    assert "| † kam [paper 001 Table 4, bert-base, split not stated] | 100% | 51.2 | 53.7 |" in lines
    assert not any(line.startswith("| † 0.") for line in lines)  # not in the main table as a row of its own
    assert "| kam | 100% | 40.0 (n=1) | 45.0 (n=1) |" in lines


def test_paired_comparison_marks_only_consistent_differences(tmp_path):
    results = tmp_path / "results"
    for seed, base, steady, noisy in ((1, 60.0, 65.0, 70.0), (2, 62.0, 67.1, 55.0), (3, 61.0, 66.2, 64.0)):
        write_synthetic_result(results, "baseline", "rte", 1.0, seed, base)
        write_synthetic_result(results, "steady", "rte", 1.0, seed, steady)
        write_synthetic_result(results, "noisy", "rte", 1.0, seed, noisy)
    path = dataset_page(results, tmp_path / "leaderboards")
    lines = path.read_text().splitlines()
    assert next(line for line in lines if line.startswith("| steady |")).endswith("(n=3)** ↑ |")
    assert next(line for line in lines if line.startswith("| noisy |")).endswith("(n=3) |")
    assert "| steady | 100% | +5.1 ± 0.1 | [+4.9, +5.3] | 3 | 0 | 0.000 | 0.000 | — | — | better |" in lines
    assert any(line.startswith("| noisy | 100% |") and line.endswith("| too few seeds to tell |") for line in lines)


def test_figures_are_linked_and_regenerate_byte_for_byte(tmp_path):
    results, out = tmp_path / "results", tmp_path / "leaderboards"
    for fraction in (0.1, 1.0):
        for seed, value in zip((1, 2), (60.0, 62.0)):
            write_synthetic_result(results, "baseline", "rte", fraction, seed, value * fraction + 30)
    path = dataset_page(results, out)
    figure = out / "figures" / "glue-rte-minilm-fractions.png"
    assert f"](figures/{figure.name})" in path.read_text() and figure.read_bytes()[:4] == b"\x89PNG"
    first = figure.read_bytes()
    write_leaderboards(results, out)
    assert figure.read_bytes() == first


def test_runs_from_a_pretraining_checkpoint_stand_beside_their_base_backbones_baseline(tmp_path):
    results = tmp_path / "results"
    for seed in (1, 2):
        write_synthetic_result(results, "baseline", "rte", 1.0, seed, 60.0)
        cell = Cell("erica", "glue", "rte", 1.0, seed, "erica-minilm")
        write_json_atomic(
            cell.result_path(results),
            {
                "cell": {
                    "method": "erica",
                    "dataset": "glue",
                    "task": "rte",
                    "fraction": 1.0,
                    "seed": seed,
                    "backbone": "erica-minilm",
                },
                "report_split": "dev",
                "metrics": {"dev": {"accuracy": 63.0 + seed}},
                "device": {"name": "Test GPU"},
                "backbone": {"checksum": "def", "path": "/ckpt/erica-minilm", "pretrained_from": "minilm"},
                "git": {"commit": "0123456789"},
                "wall_time_s": 1.0,
                "data": {"subset_hash": "h", "train_size": 100},
                "budget": {"max_steps": 10, "per_device_batch_size": 32},
                "config": {},
                "versions": {},
            },
        )
    path = dataset_page(results, tmp_path / "leaderboards")
    text = path.read_text()
    assert text.count("## Backbone:") == 1 and "| erica ⟨erica-minilm⟩ | **64.5 ± 0.7 (n=2)** |" in text
    assert "| erica ⟨erica-minilm⟩ | 100% | +4.5 ± 0.7 | [-1.9, +10.9] | 2 |" in text


def kept_result(results, method, seed, value, predicted, variant="", fraction=1.0, **kept):
    """A generated/facts cell on the tiny backbone (``test_gold.generated_result``) with its predictions file, the
    gold's sha256 as a cell writes it; ``predicted(gold)``: its predictions of the recomputed gold."""
    from test_gold import generated_result

    from knowledge_lm.core.results import predictions_path, write_predictions
    from knowledge_lm.report.gold import report_gold

    result = {
        **generated_result(),
        "metrics": {"test": {"accuracy": value}},
        "device": {"name": "Test CPU"},
        "git": {"commit": "0123456789abcdef"},
        "wall_time_s": 1.0,
        "data": {"subset_hash": "h", "train_size": 40},
        "budget": {"max_steps": 10, "per_device_batch_size": 8},
        "versions": {},
    }
    result["cell"].update(method=method, seed=seed, variant=variant, fraction=fraction)
    result["backbone"].update(checksum=None, path=None)
    path = Cell(method, "generated", "facts", fraction, seed, "tiny", variant).result_path(results)
    write_json_atomic(path, result)
    gold = report_gold(result)
    write_predictions(predictions_path(path), {"split": "test", "predicted": predicted(gold), "gold": gold, **kept})
    return path


def test_bootstrap_over_examples_where_predictions_were_kept(tmp_path):
    """Kept predictions add the paired bootstrap's 95 % interval of Δ and its p, against the gold recomputed from
    the data; identical predictions give [0, 0] and p 1, a method right where the baseline is wrong a positive
    interval and p 0; regenerated without its derived numbers and cache, the page is the same bytes."""
    from knowledge_lm.core.results import predictions_path
    from knowledge_lm.report.bootstrap import paired_bootstrap
    from knowledge_lm.report.gold import report_gold

    results = tmp_path / "results"

    def half_wrong(gold):
        return [1 - g if i < len(gold) // 2 else g for i, g in enumerate(gold)]

    runs = {"baseline": (half_wrong, 50.0), "same": (half_wrong, 50.0), "better": (list, 100.0)}
    files = {}
    for method, (predicted, value) in runs.items():
        files[method] = [
            predictions_path(kept_result(results, method, seed, value + seed, predicted)) for seed in (1, 2, 3)
        ]
    gold = report_gold(
        json.loads(Cell("baseline", "generated", "facts", 1.0, 1, "tiny").result_path(results).read_text())
    )
    same = paired_bootstrap(
        "generated", "facts", "accuracy", gold, ours=files["same"], baseline=files["baseline"], replicates=50
    )
    assert same["delta_interval"] == [0.0, 0.0] and same["p_not_better"] == 1.0
    better = paired_bootstrap(
        "generated", "facts", "accuracy", gold, ours=files["better"], baseline=files["baseline"], replicates=50
    )
    assert better["delta_interval"][0] > 0 and better["p_not_better"] == 0.0
    assert (
        paired_bootstrap(
            "generated",
            "facts",
            "accuracy",
            [1 - g for g in gold],
            ours=files["better"],
            baseline=files["baseline"],
            replicates=40,
        )
        is None
    )  # another gold than the files were kept of
    page = dataset_page(results, tmp_path / "leaderboards")
    text = page.read_text()
    assert any(
        line.startswith("| better | 100% | +50.0 ± 0.0 | [+50.0, +50.0] | 3 |") and "| 0.0000 |" in line
        for line in text.splitlines()
    )
    import shutil

    from knowledge_lm.core.results import DERIVED_DIR
    from knowledge_lm.data.base import default_cache_dir

    shutil.rmtree(results / DERIVED_DIR)
    shutil.rmtree(default_cache_dir() / "gold", ignore_errors=True)  # none where no gold was made here
    write_leaderboards(results, tmp_path / "leaderboards")
    assert page.read_text() == text


def test_predictions_of_another_gold_or_without_data_are_not_kept(tmp_path, monkeypatch, capsys):
    """A file whose gold_sha256 is not the recomputed gold's (e.g. a DDP cell's, in rank order) counts as not kept,
    with a warning naming the cell; without the dataset in the data directory no page is written (MissingGold)."""
    from knowledge_lm.core.results import predictions_path, read_predictions, write_predictions
    from knowledge_lm.report.gold import split_gold

    results = tmp_path / "results"
    for method in ("baseline", "better"):
        for seed in (1, 2):
            kept_result(results, method, seed, 50.0 + seed if method == "baseline" else 90.0 + 2 * seed, list)
    shuffled = predictions_path(Cell("better", "generated", "facts", 1.0, 2, "tiny").result_path(results))
    kept = read_predictions(shuffled)
    write_predictions(shuffled, {**kept, "gold_sha256": "0" * 64})
    capsys.readouterr()
    page = dataset_page(results, tmp_path / "leaderboards")
    [warning] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert "better/tiny/f1-s2.json" in warning and "not used" in warning
    row = next(line for line in page.read_text().splitlines() if line.startswith("| better | 100% |"))
    assert row.endswith("| — | — | better |")
    write_predictions(shuffled, kept)
    page = dataset_page(results, tmp_path / "leaderboards")
    row = next(line for line in page.read_text().splitlines() if line.startswith("| better | 100% |"))
    assert "| — |" not in row
    frozen = tmp_path / "data" / "generated"  # a frozen version without its dev and test splits: no gold here
    frozen.mkdir(parents=True)
    (frozen / "train.jsonl").write_text("")
    split_gold.cache_clear()
    before = page.read_text()
    with pytest.raises(MissingGold, match="no gold for generated/facts.*--data-dir"):  # never a thinner page
        write_leaderboards(results, tmp_path / "leaderboards", data_dir=tmp_path / "data")
    assert page.read_text() == before


def test_spectra_kept_with_predictions_draw_the_sr_figure(tmp_path):
    results = tmp_path / "results"
    for method, scale in (("baseline", 1.0), ("bert+sr", 0.5)):
        for seed in (1, 2):
            kept_result(
                results, method, seed, 60.0 + seed, list, singular_values=[scale * value for value in (9.0, 3.0, 1.0)]
            )
    page = dataset_page(results, tmp_path / "leaderboards")
    assert "(figures/generated-facts-tiny-spectrum.png)" in page.read_text()
    assert (tmp_path / "leaderboards" / "figures" / "generated-facts-tiny-spectrum.png").is_file()


def test_entity_frequency_buckets_score_every_method_on_the_same_examples(tmp_path):
    """the SI+SR paper's Fig. 1a/5a: frequencies kept by one method's cells bucket the split for every method."""
    results = tmp_path / "results"
    frequency = [None, None, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    runs = {
        "baseline": (lambda gold: [1 - g for g in gold[:6]] + gold[6:], {}),  # right only on the frequent half
        "knowbert": (lambda gold: gold[:6] + [1 - g for g in gold[6:]], {"entity_frequency": frequency}),
    }
    for method, (predicted, kept) in runs.items():
        for seed in (1, 2):
            kept_result(results, method, seed, 50.0, predicted, **kept)
    page = dataset_page(results, tmp_path / "leaderboards")
    lines = page.read_text().splitlines()
    header = next(line for line in lines if line.startswith("| method | no entity (2) |"))
    assert header.count("|") == 7  # no entity + four quartiles of 10 linked examples
    assert next(line for line in lines if line.startswith("| baseline | 0.0 |")).endswith("| 100.0 | 100.0 |")
    assert next(line for line in lines if line.startswith("| knowbert | 100.0 |")).endswith("| 0.0 | 0.0 |")
    assert (tmp_path / "leaderboards" / "figures" / "generated-facts-tiny-frequency.png").is_file()


def test_checkpoint_rows_bring_their_methods_paper_rows(tmp_path):
    """'erica ⟨erica-minilm⟩' (a method fine-tuned from a pretraining checkpoint) stands beside ERICA_BERT."""
    results = tmp_path / "results"
    cell = Cell("erica", "semeval2010", "mean_pool", 0.1, 1, "erica-minilm")
    write_json_atomic(
        cell.result_path(results),
        {
            "cell": {
                "method": "erica",
                "dataset": "semeval2010",
                "task": "mean_pool",
                "fraction": 0.1,
                "seed": 1,
                "backbone": "erica-minilm",
            },
            "report_split": "test",
            "metrics": {"test": {"semeval_macro_f1": 56.0}},
            "device": {"name": "Test GPU"},
            "backbone": {"checksum": "abc", "path": None, "pretrained_from": "minilm"},
            "git": {"commit": "0123456789"},
            "wall_time_s": 1.0,
            "data": {"subset_hash": "h", "train_size": 100},
            "budget": {"max_steps": 10, "per_device_batch_size": 32},
            "config": {},
            "versions": {},
        },
    )
    path = dataset_page(results, tmp_path / "leaderboards")
    lines = path.read_text().splitlines()
    assert "| erica ⟨erica-minilm⟩ | 56.0 (n=1) |" in lines
    assert "| † ERICA_BERT [paper 003 Table 2, bert-base, test] | 80.1 |" in lines


def test_other_backbones_stay_off_the_default_pages_and_unchanged_pages_are_not_rebuilt(tmp_path, capsys):
    """A smoke run (``tiny``) renders only when its backbone is asked for; a page whose inputs did not change since
    the last regeneration is skipped, and one whose results changed is rebuilt."""
    results, out, state = tmp_path / "results", tmp_path / "leaderboards", tmp_path / "state.json"
    for seed in (1, 2):
        write_synthetic_result(results, "baseline", "rte", 1.0, seed, 60.0 + seed)
    smoke = Cell("baseline", "glue", "rte", 0.01, 1, "tiny").result_path(results)
    smoke.parent.mkdir(parents=True)
    minilm = Cell("baseline", "glue", "rte", 1.0, 1, "minilm").result_path(results)
    smoke_result = json.loads(minilm.read_text().replace('"backbone": "minilm"', '"backbone": "tiny"'))
    smoke_result["cell"]["fraction"] = 0.01
    smoke.write_text(json.dumps(smoke_result))

    page = dataset_page(results, out, backbones=("minilm",), state_file=state)
    assert "## Backbone: minilm" in page.read_text() and "tiny" not in page.read_text()
    assert "backbone(s) tiny left out" in capsys.readouterr().err
    assert write_leaderboards(results, out, backbones=("minilm",), state_file=state) == []

    write_synthetic_result(results, "baseline", "rte", 1.0, 3, 70.0)
    page = dataset_page(results, out, backbones=("minilm",), state_file=state)
    assert "(n=3)" in page.read_text()
    page.write_text("edited by hand")
    assert write_leaderboards(results, out, backbones=("minilm",), state_file=state) == [page]

    page = dataset_page(results, tmp_path / "smoke", backbones=("tiny",), state_file=state)
    assert "## Backbone: tiny" in page.read_text() and "## Backbone: minilm" not in page.read_text()


def test_a_rebuilt_page_leaves_none_of_its_old_figures_behind(tmp_path):
    results, out = tmp_path / "results", tmp_path / "leaderboards"
    for seed in (1, 2):
        write_synthetic_result(results, "baseline", "rte", 1.0, seed, 60.0 + seed)
    (out / "figures").mkdir(parents=True)
    stale, other = out / "figures" / "glue-cola-minilm-variants.png", out / "figures" / "generated-facts-x.png"
    stale.write_bytes(b"old")
    other.write_bytes(b"another page's")
    dataset_page(results, out)
    assert not stale.exists() and other.exists()
