"""The generated page's worlds: controls paired by the variant's prefix (the 2k world, t20k, the confirmation world),
the confirmation world and the settings chosen on dev in tables of their own, and the relational verdict the page
and the README give."""

import json

import pytest
from test_leaderboard import kept_result
from test_leaderboard_families import accuracy_on, right_on, table_row
from test_report_stats import result

from knowledge_lm.core.results import Cell, write_json_atomic
from knowledge_lm.report.comparisons import (
    CONFIRM,
    KNOWLEDGE_CONTROLS,
    TUNING,
    VARIANT_TABLES,
    control_cells,
    control_variant,
    is_control,
    page_tests,
    relational_verdicts,
    split_variant,
)
from knowledge_lm.report.frame import results_frame
from knowledge_lm.report.leaderboard import write_leaderboards

CONTROLS = ("shuffled", "test-shuffled", "zeroed", "relations-permuted")


@pytest.mark.parametrize("world", ["", "t20k", "confirm"])
def test_every_control_variant_pairs_with_its_own_world(world):
    for name in CONTROLS:
        variant = control_variant(world, KNOWLEDGE_CONTROLS[name])
        assert variant == (f"{world}-{name}" if world else name)
        assert split_variant(variant) == (world, name) and is_control("knowbert", variant)
    assert split_variant(world) == (world, None) and not is_control("knowbert", world)
    assert is_control("erica-mlm-only", world) and not is_control("erica", world)


def test_tuning_variants_are_no_controls():
    for variant in ("lr1e-4", "lr3e-3", "scale1"):
        assert split_variant(variant) == (variant, None) and not is_control("knowbert", variant)


def test_a_control_never_pairs_with_another_world():
    variants = ["", "test", "t20k", "confirm", "test-shuffled", "shuffled", "t20k-shuffled", "confirm-zeroed"]
    frame = results_frame(
        [result("kb", seed, 60.0 + seed, variant=variant) for variant in variants for seed in range(1, 6)]
    )
    found = {
        variant: [name for name, _ in control_cells(frame, "kb", 1.0, "accuracy", variant)]
        for variant in ("", "test", "t20k", "confirm")
    }
    # "test" + "shuffled" is the 2k world's test-shuffled control, not a control of the cells of "test".
    assert found == {"": ["shuffled", "test-shuffled"], "test": [], "t20k": ["shuffled"], "confirm": ["zeroed"]}


def world_results(results):
    """kg-text, knowbert and kam in the 2k world with their controls, knowbert in the confirmation world on 3 seeds,
    and one setting of knowbert tried on dev: right on the families each condition keeps."""
    graph = {"text", "type", "one_hop", "two_hop"}
    runs = {
        ("baseline", ""): {"text"},
        ("knowbert", ""): graph,
        ("knowbert", "shuffled"): {"text"},
        ("knowbert", "relations-permuted"): {"text", "type"},  # the edges without their labels: types only
        ("kg-text", ""): graph,
        ("kg-text", "test-shuffled"): {"text"},
        ("kg-text", "relations-permuted"): graph,  # as well without the labels: links only
        ("kam", ""): graph,
        ("kam", "shuffled"): {"text"},
        ("kam+kg", ""): graph,  # no control run
        ("knowbert+si", ""): graph,
        ("knowbert+si", "shuffled"): {"text"},
        # Permuted labels cost it the type family alone: no relational use, whatever the graph families pooled say.
        ("knowbert+si", "relations-permuted"): {"text", "one_hop", "two_hop"},
    }
    for (method, variant), families in runs.items():
        for seed in range(1, 6):
            kept_result(results, method, seed, accuracy_on(families), right_on(families), variant=variant)
    for seed in (1, 2, 3):
        for variant, families in (("confirm", graph), ("confirm-relations-permuted", {"text"})):
            kept_result(results, "knowbert", seed, accuracy_on(families), right_on(families), variant=variant)
        path = kept_result(results, "knowbert", seed, 90.0, right_on(graph), variant="lr1e-4")
        tried = json.loads(path.read_text())
        tried["dev_metrics_by_group"] = {group: {"accuracy": 70.0 + seed} for group in graph}
        write_json_atomic(path, tried)
        path = Cell("knowbert", "generated", "facts", 1.0, seed, "tiny").result_path(results)
        default = json.loads(path.read_text())
        default["dev_metrics_by_group"] = {group: {"accuracy": 80.0} for group in graph}
        write_json_atomic(path, default)


def test_the_page_splits_its_worlds_and_says_which_method_uses_relational_facts(tmp_path):
    results, out = tmp_path / "results", tmp_path / "leaderboards"
    world_results(results)
    write_leaderboards(results, out)
    lines = (out / "generated.md").read_text().splitlines()
    main = lines[lines.index("## facts: accuracy per statement family (tiny, 100%)") :]
    confirm = main[main.index(f"**{VARIANT_TABLES[CONFIRM].heading}**") :]
    main = main[: main.index(f"**{VARIANT_TABLES[CONFIRM].heading}**")]
    tuning = lines[lines.index(f"### {VARIANT_TABLES[TUNING].heading}") :]
    assert VARIANT_TABLES[CONFIRM].heading.startswith("Confirmation world (generator seed 20261127): exploratory")
    declared = lines[next(i for i, line in enumerate(lines) if line.startswith("**Pre-registration.**")) :]
    assert declared[2:4] == [
        "- `prereg-v3-rotate`: declared, not run yet: declared in v3_rotate.yaml; no cell has run",
        "- `prereg-v3-transe`: declared, not run yet: declared in v3_transe.yaml; no cell has run",
    ]
    assert not any(line.startswith("| knowbert [confirm") for line in main)
    assert not any(line.startswith("| knowbert [lr1e-4]") for line in main + confirm[:8])
    assert not any("lr1e-4" in line for line in lines if line.startswith("| method | fraction |"))  # no test score

    def relational(table, row):
        return table_row(table, row)[9].rstrip(" |")

    assert relational(main, "knowbert") == "relational facts"
    assert relational(main, "kg-text") == "links only"
    assert relational(main, "knowbert+si") == "links only"
    assert "relations-permuted on one_hop + two_hop: +0.0" in table_row(main, "knowbert+si")[7]
    assert relational(main, "kam") == "links only"  # relation-blind by construction
    assert relational(main, "kam+kg") == "—"  # no control run
    assert relational(main, "knowbert [shuffled]") == "(control)"
    assert relational(confirm, "knowbert [confirm]") == "too few seeds"
    assert table_row(main, "kam")[8].endswith("<br>relations-permuted: relation-blind by construction")
    assert table_row(main, "kam+kg")[7:9] == ["relations-permuted: relation-blind by construction"] * 2
    assert "relation-blind" not in table_row(main, "kg-text")[8]  # it reads relation labels

    assert tuning[4] == "| method | setting | seeds | dev text | dev type | dev one_hop | dev two_hop |"
    assert table_row(tuning, "knowbert")[1:4] == ["default", "1, 2, 3", "80.0 ± 0.0 (n=3)"]
    assert tuning[7].split(" | ")[1:4] == ["lr1e-4", "1, 2, 3", "72.0 ± 1.0 (n=3)"]

    readme = (out / "README.md").read_text().splitlines()
    section = readme[readme.index("## Does a method use relational facts?") :]
    declared = "pre-registered prereg-v3-rotate | pre-registered prereg-v3-transe"
    worlds = f"2k world | confirmation world (exploratory) | {declared}"
    assert f"| method | {worlds} |" in section
    assert "| knowbert | relational facts | too few seeds | not run | not run |" in section
    assert "| kg-text | links only | not run | not run | not run |" in section
    assert "| kam | links only | not run | not run | not run |" in section
    assert any(line.startswith("- `prereg-v3-transe` (preregistered): declared, not run yet") for line in section)
    assert not any(line.startswith("| kam+kg |") or line.startswith("| baseline |") for line in section)
    assert any("kam+kg is this suite's extension of KAM's Eq. 8" in line for line in section)
    assert any("kg-text" in line and "positive control" in line for line in section)
    assert any("not knowledge-pretrained" in line for line in section)
    assert any("gold entity links" in line for line in section)


def test_settings_tried_on_dev_are_tested_nothing_and_verdicts_need_the_families(tmp_path):
    results = tmp_path / "results"
    world_results(results)
    frame = results_frame([json.loads(path.read_text()) for path in sorted(results.rglob("*.json"))])
    tests = page_tests(frame, {"facts": "accuracy"}, {}, {})
    assert tests.used and not any(key[3] == "lr1e-4" for key in (*tests.used, *tests.chance))
    # Without kept predictions (nor metrics_by_group) no family is known: no test on them, so no verdict.
    assert relational_verdicts(frame, tests) == {}
