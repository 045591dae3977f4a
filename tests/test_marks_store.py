"""On the committed results store: no control row of the generated page is marked above chance (✓) on a hop family
in a world of generator v3 (``negatives: matched``). In the worlds of generator v2 a control that keeps the graph's
shape can still pass both tests (over seeds and over examples) on one_hop or two_hop: the relation-blind cue of that
generator (a subject's out-degree differs between true and false claims), which is real on any test set of it, not
test noise; the test names those rows, so a new one shows."""

import json
from pathlib import Path

import pytest

from knowledge_lm.core.results import result_files
from knowledge_lm.report.comparisons import HOP_GROUPS, is_control, page_tests, significant
from knowledge_lm.report.derived import keeping_derived
from knowledge_lm.report.leaderboard import page_frame, results_by_dataset
from knowledge_lm.report.protocol import current_protocol

RESULTS = Path(__file__).resolve().parents[1] / "results"

# The control rows of generator v2 marked on a hop family by both tests: (method, variant, family).
V2_CUE = {
    ("kam+kg", "confirm-shuffled", "one_hop"),
    ("kg-text", "t20k-relations-permuted", "two_hop"),
    ("knowbert", "t20k-relations-permuted", "two_hop"),
    ("knowbert+si+sr", "relations-permuted", "one_hop"),
}


@pytest.mark.slow
def test_no_control_row_is_above_chance_on_a_hop_family_but_generator_v2s_cue():
    with keeping_derived(RESULTS, store=False):
        inputs = results_by_dataset(result_files(RESULTS), None)["generated"]
        frame, golds, groupings = page_frame(inputs, None, RESULTS)
        frame, _ = current_protocol(frame)
        tests = page_tests(frame, {"facts": "accuracy"}, golds, groupings)
    cell_methods = dict(zip(frame["method"], frame["cell_method"]))
    negatives = {
        (row.method, row.variant): json.loads(row.config).get("dataset_options", {}).get("negatives", "hard")
        for row in frame.itertuples()
    }
    marked = {
        (method, variant, family)
        for (_, _, method, variant, _, family), found in tests.chance.items()
        if family in HOP_GROUPS
        and is_control(cell_methods[method], variant)
        and significant(found)
        and found["delta"] > 0
    }
    assert not {row for row in marked if negatives[row[:2]] == "matched"}
    assert marked <= V2_CUE
