"""The generated page's worlds: controls paired by the variant's prefix (the 2k world, t20k, the confirmation world),
the confirmation world and the settings chosen on dev in tables of their own, and the relational verdict the page
and the README give."""

import pytest
from test_report_stats import result

from knowledge_lm.report.comparisons import (
    KNOWLEDGE_CONTROLS,
    control_cells,
    control_variant,
    is_control,
    split_variant,
)
from knowledge_lm.report.frame import results_frame

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
