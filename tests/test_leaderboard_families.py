"""The generated page opens with each method's accuracy per statement family (a bootstrap interval over the family's
examples, marked where it lies above chance) and the knowledge it uses: its score minus its counterfactual control's."""

import json

from helpers import dataset_page, write_synthetic_result
from test_gold import generated_result
from test_leaderboard import kept_result

from knowledge_lm.core.results import Cell, write_json_atomic
from knowledge_lm.report.gold import report_gold, report_groups


def test_groups_are_the_reported_splits_statement_families():
    gold, groups = report_gold(generated_result()), report_groups(generated_result())
    assert len(groups) == len(gold) and set(groups) == {"text", "type", "one_hop", "two_hop"}
    assert (
        report_groups(
            {
                **generated_result({}),
                "cell": {**generated_result()["cell"], "dataset": "glue", "task": "rte"},
                "report_split": "dev",
            }
        )
        is None
    )  # a dataset without groups


def right_on(families):
    """Predictions right on the examples of ``families``, wrong on the others."""
    groups = report_groups(generated_result())
    return lambda gold: [g if group in families else 1 - g for g, group in zip(gold, groups)]


def accuracy_on(families) -> float:
    groups = report_groups(generated_result())
    return 100 * sum(group in families for group in groups) / len(groups)


def table_row(lines, method):
    return next(line for line in lines if line.startswith(f"| {method} |")).split(" | ")


def test_families_open_the_page_with_intervals_chance_marks_and_the_kg_verdict(tmp_path):
    results = tmp_path / "results"
    runs = {"baseline": {"text"}, "knower": {"text", "type", "one_hop", "two_hop"}, "typer": {"text", "type"}}
    for method, families in runs.items():
        for seed in (1, 2):
            kept_result(results, method, seed, accuracy_on(families), right_on(families))
    recorded = {
        **generated_result(),
        "metrics": {"test": {"accuracy": 60.0}},
        "device": {"name": "Test CPU"},
        "git": {"commit": "0123456789"},
        "wall_time_s": 1.0,
        "data": {"subset_hash": "h", "train_size": 40},
        "budget": {"max_steps": 10, "per_device_batch_size": 8},
        "versions": {},
        "metrics_by_group": {
            group: {"examples": report_groups(generated_result()).count(group), "accuracy": 75.0}
            for group in ("text", "type", "one_hop", "two_hop")
        },
    }
    recorded["cell"].update(method="recorded")
    recorded["backbone"].update(checksum=None, path=None)
    write_json_atomic(
        Cell("recorded", "generated", "facts", 1.0, 1, "tiny").result_path(results), recorded
    )  # no predictions
    kept_result(results, "knower", 1, 50.0, right_on({"text"}), fraction=0.1)
    page = dataset_page(results, tmp_path / "leaderboards")
    text = page.read_text()
    lines = text.splitlines()
    reading = next(index for index, line in enumerate(lines) if line.startswith("**Reading the tables.**"))
    assert lines.index("## Task sanity (no language model)") < reading  # the oracles open the page
    assert "the seeds are pooled by averaging each example's correctness" in lines[reading]
    # One family: knower and typer against the baseline, 3 methods x 4 families above chance (recorded: one seed).
    assert (
        "over one family per page that holds every test whose mark (↑ / ↓ / ✓) the page shows: 14 comparisons "
        in (lines[reading])
        and "(2 against the baseline, 12 a family above chance)" in lines[reading]
    )
    assert lines[reading + 2] == "## facts: accuracy per statement family (tiny, 100%)"
    assert text.index("per statement family") < text.index("## Backbone: tiny")
    header = next(line for line in lines if line.startswith("| method | seeds |"))
    assert header.startswith("| method | seeds | text (2) | type (4) | one_hop (4) | two_hop (2) | uses the KG |")
    assert table_row(lines, "knower")[2:7] == ["100.0 [100.0, 100.0] ✓"] * 4 + ["yes"]
    assert table_row(lines, "baseline")[2:7] == ["100.0 [100.0, 100.0] ✓"] + ["0.0 [0.0, 0.0]"] * 3 + ["no"]
    assert table_row(lines, "typer")[6] == "only type"
    assert table_row(lines, "recorded")[1:7] == ["1"] + ["75.0"] * 4 + ["—"]  # metrics_by_group alone: no interval
    assert "<details><summary>Other fractions: 10%</summary>" in lines
    later = lines[lines.index("**10%**") :]
    assert table_row(later, "knower")[1:3] == ["1", "100.0 [100.0, 100.0]"]  # one seed: no test above chance
    assert "knowledge used (accuracy, against" not in text  # no knowledge-used table of its own on a page with families


def pretrained_in_one_run(path):
    """The cell of ``path`` fine-tuned from a checkpoint whose pretraining record (beside the store's cells) names
    the one run every such checkpoint here comes from: ERICA's MLM-only control pairs by it."""
    found = json.loads(path.read_text())
    checksum = found["cell"]["method"].encode().hex().ljust(64, "0")
    write_json_atomic(path, {**found, "backbone": {**found["backbone"], "checksum": checksum}})
    run = {"corpus_hash": "c" * 64, "steps": 800, "batch_size": 8, "git": {"commit": "0fdc734"}}
    record = path.parents[4] / "pretraining" / f"{found['cell']['method']}-tiny.json"
    write_json_atomic(record, {**run, "checkpoint_checksum": checksum})


def test_knowledge_used_against_the_shuffled_control_and_ericas_mlm_only(tmp_path):
    results = tmp_path / "results"
    knowledge = {"type", "one_hop", "two_hop"}
    for seed in (1, 2, 3, 4, 5):
        kept_result(results, "knowbert", seed, 100.0, right_on(knowledge | {"text"}))
        kept_result(results, "knowbert", seed, accuracy_on({"text"}), right_on({"text"}), variant="shuffled")
        kept_result(results, "kam", seed, 100.0, right_on(knowledge | {"text"}))
        kept_result(results, "kam", seed, 100.0, right_on(knowledge | {"text"}), variant="t20k")
        kept_result(results, "kam", seed, accuracy_on({"text"}), right_on({"text"}), variant="t20k-zeroed")
        for path in (
            kept_result(results, "erica", seed, 100.0, right_on(knowledge | {"text"})),
            kept_result(results, "erica-mlm-only", seed, accuracy_on({"text"}), right_on({"text"})),
        ):
            pretrained_in_one_run(path)
    page = dataset_page(results, tmp_path / "leaderboards")
    lines = page.read_text().splitlines()
    knowbert = table_row(lines, "knowbert")
    assert knowbert[7] == "shuffled: +100.0 [+100.0, +100.0] (n=5, q=0.000) ✓; examples [+100.0, +100.0] p=0.000"
    whole = 100 - accuracy_on({"text"})
    assert knowbert[8].startswith(f"shuffled: {whole:+.1f} [") and "(n=5, q=0.000) ✓; examples [" in knowbert[8]
    assert table_row(lines, "knowbert [shuffled]")[7:] == ["(control)"] * 2 + ["(control) |"]
    assert knowbert[9].rstrip(" |") == "links only"  # no relations-permuted cells
    assert table_row(lines, "kam")[7:] == ["—", "—", "— |"]  # no control cells
    assert (
        table_row(lines, "kam [t20k]")[7]
        == "zeroed: +100.0 [+100.0, +100.0] (n=5, q=0.000) ✓; examples [+100.0, +100.0] p=0.000"
    )  # a variant's control: <variant>-zeroed
    assert table_row(lines, "kam [t20k-zeroed]")[7:] == ["(control)"] * 2 + ["(control) |"]
    # Knowledge used against zeroed, and no shuffle ran to tell its entities' types from the entities themselves.
    assert table_row(lines, "kam [t20k]")[9] == "linked knowledge (no shuffle run) |"
    assert any(line.startswith("Knowledge used = the method's accuracy minus") for line in lines)
    assert table_row(lines, "erica")[9] == "pretraining only |"  # its one control, MLM-only: no relational verdict

    glue = tmp_path / "glue-results"
    for seed in (1, 2):
        write_synthetic_result(glue, "baseline", "rte", 1.0, seed, 60.0)
        for method, value in (("erica", 66.0), ("erica-mlm-only", 63.0)):
            cell = Cell(method, "glue", "rte", 1.0, seed, f"{method}-minilm")
            write_json_atomic(
                cell.result_path(glue),
                {
                    "cell": {
                        "method": method,
                        "dataset": "glue",
                        "task": "rte",
                        "fraction": 1.0,
                        "seed": seed,
                        "backbone": f"{method}-minilm",
                    },
                    "report_split": "dev",
                    "metrics": {"dev": {"accuracy": value + seed}},
                    "device": {"name": "Test GPU"},
                    "backbone": {"checksum": "def", "path": f"/ckpt/{method}-minilm", "pretrained_from": "minilm"},
                    "git": {"commit": "0123456789"},
                    "wall_time_s": 1.0,
                    "data": {"subset_hash": "h", "train_size": 100},
                    "budget": {"max_steps": 10, "per_device_batch_size": 32},
                    "config": {},
                    "versions": {},
                },
            )
    run = {"corpus_hash": "c" * 64, "steps": 800, "batch_size": 8, "git": {"commit": "0123456"}}
    write_json_atomic(glue / "pretraining" / "erica-minilm.json", {**run, "checkpoint_checksum": "def"})
    page = dataset_page(glue, tmp_path / "glue-leaderboards")
    lines = page.read_text().splitlines()
    assert "### rte: knowledge used (accuracy, against each method's control)" in lines
    assert (
        "| erica ⟨erica-minilm⟩ | 100% | mlm-only: +3.0 [+3.0, +3.0] (n=2, q=—) too few seeds; "
        "no kept predictions |" in lines
    )  # a verdict needs 5 seed pairs, and kept predictions to test over the examples (no q without them)
    assert not any(line.startswith("| erica-mlm-only ⟨erica-mlm-only-minilm⟩ | 100% | mlm-only") for line in lines)
