"""The statistics of the pages: knowledge used tested over seeds (and over examples), one Benjamini–Hochberg family
per page holding every mark, the declared degenerate rule, and the README giving the page's own verdicts."""

import pytest
from helpers import write_synthetic_result
from scipy.stats import ttest_1samp
from test_leaderboard_families import table_row

from knowledge_lm.report.comparisons import (
    MIN_SEEDS,
    NO_EXAMPLES_TEST,
    corrected,
    knowledge_test,
    knowledge_verdict,
    over_seeds_and_examples,
    page_tests,
    verdict,
)
from knowledge_lm.report.frame import DEGENERATE_RULE, FAMILY_AT_CHANCE, FIRST_EVALUATION, results_frame
from knowledge_lm.report.leaderboard import write_leaderboards


def result(method, seed, value, variant="", fraction=1.0, text=None, **extra) -> dict:
    """A glue/rte cell's result as ``results_frame`` reads it; ``text``: its accuracy on a "text" family."""
    return {
        "cell": {
            "method": method,
            "dataset": "glue",
            "task": "rte",
            "fraction": fraction,
            "seed": seed,
            "backbone": "minilm",
            "variant": variant,
        },
        "report_split": "dev",
        "metrics": {"dev": {"accuracy": value}},
        "device": {"name": "Test GPU"},
        "backbone": {"checksum": "abc", "path": None},
        "git": {"commit": "0123456789"},
        "wall_time_s": 1.0,
        "data": {"subset_hash": "h", "train_size": 100},
        "budget": {"max_steps": 10, "per_device_batch_size": 32},
        **({"metrics_by_group": {"text": {"examples": 10, "accuracy": text}}} if text is not None else {}),
        **extra,
    }


OURS = [70.0, 72.0, 71.0, 75.0, 74.0]
CONTROL = [60.0, 61.0, 62.0, 62.0, 63.0]


def test_knowledge_used_is_a_paired_t_test_over_seeds_and_needs_five():
    frame = results_frame(
        [result("kb", seed, value) for seed, value in enumerate(OURS, 1)]
        + [result("kb", seed, value, variant="shuffled") for seed, value in enumerate(CONTROL, 1)]
    )
    ours, control = frame[frame.variant == ""], frame[frame.variant == "shuffled"]
    found = knowledge_test(ours, control, "glue", task="rte", metric="accuracy", golds={}, groupings={})
    deltas = [a - b for a, b in zip(OURS, CONTROL)]
    expected = ttest_1samp(deltas, 0.0)
    assert found["n"] == 5 and found["delta"] == pytest.approx(sum(deltas) / 5)
    assert found["p_seeds"] == pytest.approx(expected.pvalue)
    interval = expected.confidence_interval(0.95)
    assert found["interval"] == pytest.approx([interval.low, interval.high])
    # No kept predictions: nothing to test over the examples, so no p to correct and no mark.
    assert found["p_examples"] is None and found["p"] is None and found["examples_interval"] is None
    corrected([found])
    assert knowledge_verdict(found) == NO_EXAMPLES_TEST
    over_both = over_seeds_and_examples(found, 0.001)  # as with kept predictions that agree
    corrected([over_both])
    assert over_both["q"] == pytest.approx(max(over_both["p_seeds"], 0.001)) and knowledge_verdict(over_both) == "✓"

    fewer = knowledge_test(
        ours, control[control.seed < MIN_SEEDS], "glue", task="rte", metric="accuracy", golds={}, groupings={}
    )
    fewer = over_seeds_and_examples(fewer, 0.001)
    corrected([fewer])
    assert fewer["n"] == 4 and fewer["q"] < 0.05 and knowledge_verdict(fewer) == "too few seeds"

    flat = over_seeds_and_examples(
        knowledge_test(ours, ours, "glue", task="rte", metric="accuracy", golds={}, groupings={}), 1.0
    )
    corrected([flat])
    assert flat["p"] == 1.0 and knowledge_verdict(flat) == "not significant"


def test_one_family_per_page_counts_every_mark():
    results = []
    for fraction in (0.1, 1.0):
        for seed in range(1, 6):
            results.append(result("baseline", seed, 60.0 + seed, fraction=fraction))
            results.append(result("kb", seed, 63.0 + seed + 0.5 * (seed % 2), fraction=fraction))
            results.append(result("kb", seed, 61.0 + seed, variant="shuffled", fraction=fraction))
            results.append(result("kb", seed, 62.0 + seed * 0.9, variant="relations-permuted", fraction=fraction))
    tests = page_tests(results_frame(results), {"rte": "accuracy"}, {}, {})
    assert len(tests.baseline) == 2 and len(tests.used) == 4 and not tests.chance and not tests.overall
    # Knowledge used needs kept predictions to be tested over the examples too: without them, no p in the family.
    assert tests.size() == 2 and all(found["p"] is None for found in tests.used.values())
    for found in tests.used.values():
        found.update(over_seeds_and_examples(found, 0.001))
    corrected([found for by_key in tests for found in by_key.values()])
    assert tests.size() == 6
    pooled = [found["q"] for found in tests.baseline.values()]
    corrected(list(tests.baseline.values()))  # alone, the two comparisons would be another family
    assert pooled != [found["q"] for found in tests.baseline.values()]


def test_the_degenerate_rule_flags_a_text_family_at_chance_that_the_baseline_solves():
    assert (DEGENERATE_RULE.family, DEGENERATE_RULE.at_most, DEGENERATE_RULE.solved_above) == ("text", 60.0, 60.0)
    steps = {"evaluations": [{"step": 10}, {"step": 20}], "selection": {"split": "dev", "step": 10}}
    frame = results_frame(
        [
            result("baseline", 1, 70.0, text=90.0),
            result("baseline", 2, 70.0, text=80.0),
            result("baseline", 3, 55.0, text=55.0),  # the baseline alike: its mean (75) solves the family
            result("kam", 1, 65.0, text=50.0),
            result("kam", 2, 65.0, text=60.0),
            result("kam", 3, 65.0, text=61.0),
            result("kam", 4, 65.0, text=49.0, **steps),
            result("kam", 1, 50.0, text=50.0, fraction=0.1),  # no baseline at 10 %: nothing solved there
        ],
        degenerate=[""] * 6 + [FIRST_EVALUATION, ""],
    )
    reasons = dict(zip(zip(frame.method, frame.seed, frame.fraction), frame.degenerate))
    assert reasons == {
        ("baseline", 1, 1.0): "",
        ("baseline", 2, 1.0): "",
        ("baseline", 3, 1.0): FAMILY_AT_CHANCE,
        ("kam", 1, 1.0): FAMILY_AT_CHANCE,
        ("kam", 2, 1.0): FAMILY_AT_CHANCE,
        ("kam", 3, 1.0): "",
        ("kam", 4, 1.0): f"{FIRST_EVALUATION}, {FAMILY_AT_CHANCE}",
        ("kam", 1, 0.1): "",
    }
    unsolved = results_frame([result("baseline", 1, 55.0, text=58.0), result("kam", 1, 50.0, text=50.0)])
    assert set(unsolved.degenerate) == {""}


def test_the_readme_gives_the_verdict_of_the_page(tmp_path):
    results = tmp_path / "results"
    for seed in range(1, 6):
        for fraction in (0.1, 1.0):
            write_synthetic_result(results, "baseline", "rte", fraction, seed, 60.0 + seed)
            write_synthetic_result(results, "clear", "rte", fraction, seed, 64.0 + seed + 0.3 * (seed % 2))
            write_synthetic_result(
                results, "marginal", "rte", fraction, seed, 60.0 + seed + (1.5 if seed != 3 else -1.0)
            )
            write_synthetic_result(results, "none", "rte", fraction, seed, 60.0 + seed + (0.5 if seed % 2 else -0.5))
    write_leaderboards(results, tmp_path / "leaderboards")
    page = (tmp_path / "leaderboards" / "glue.md").read_text().splitlines()
    readme = (tmp_path / "leaderboards" / "README.md").read_text().splitlines()
    compared = page[page.index("### rte: against the baseline (accuracy, paired by seed)") :]
    for method in ("clear", "marginal", "none"):
        row = next(line for line in compared if line.startswith(f"| {method} | 100% |")).split(" | ")
        q, page_verdict = float(row[7]), row[10].rstrip(" |")
        cell = table_row(readme, method)[4]  # glue's column
        mark = " ↑" if page_verdict == "better" else " ↓" if page_verdict == "worse" else ""
        assert cell.rstrip(" |").endswith(f"(n=5){mark} {page_verdict}"), (method, cell, page_verdict)
        assert (q < 0.05) == bool(mark)
        main = next(line for line in page if line.startswith(f"| {method} |"))
        assert main.rstrip(" |").endswith(mark)
    assert verdict({"n": 5, "p": 0.01, "q": 0.2, "delta": 1.0, "interval": [0.1, 2.0]}) == (
        "not significant after correction"
    )
