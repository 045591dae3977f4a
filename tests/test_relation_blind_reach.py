"""A world's relation-blind reach (its stored relation-blind regression on one_hop and two_hop): a method is above
chance on a hop family only above it, and no relational verdict is drawn from a world where it exceeds 55."""

from test_gold import SIZES
from test_leaderboard import kept_result
from test_leaderboard_families import accuracy_on, right_on

from knowledge_lm.core.results import result_files, write_json_atomic
from knowledge_lm.report.comparisons import (
    LINKS_ONLY,
    NO_VERDICT,
    hop_chance,
    no_verdict_text,
    page_tests,
    relational_verdicts,
    significant,
)
from knowledge_lm.report.leaderboard import page_frame
from knowledge_lm.report.sanity import SANITY_NUMBERS, relation_blind_cue, world_key, world_name

GRAPH, TEXT = {"text", "type", "one_hop", "two_hop"}, {"text"}


def store_regression(results, regression: dict) -> None:
    """The sanity numbers of the fixtures' world under ``results``, as ``write_sanity_numbers`` keys them (its current
    code), with this relation-blind regression."""
    numbers = {"key": world_key(SIZES), "relation_blind_regression": regression, "ceilings": {}}
    write_json_atomic(results / SANITY_NUMBERS, {world_name(SIZES): numbers})


def page(results):
    """The page's frame and corrected tests of the cells under ``results``, sanity numbers read from there too."""
    frame, golds, groupings = page_frame(result_files(results, ["generated"]), None, results)
    return frame, page_tests(frame, {"facts": "accuracy"}, golds, groupings, results)


def test_a_hop_familys_chance_is_the_worlds_relation_blind_reach_where_higher():
    reach = {"one_hop": 57.2, "two_hop": 48.5}
    assert hop_chance(50.0, "one_hop", reach) == 57.2
    assert hop_chance(50.0, "two_hop", reach) == 50.0  # below the label's share: that stays
    assert hop_chance(50.0, "type", {"type": 70.0}) == 50.0  # type and text: the label's share alone
    assert hop_chance(50.0, "one_hop", None) == 50.0  # none stored
    assert relation_blind_cue(reach) == {"one_hop": 57.2}
    assert relation_blind_cue({"one_hop": 55.0, "two_hop": 50.0}) == {} and relation_blind_cue(None) == {}
    assert no_verdict_text({"one_hop": 57.19, "two_hop": 62.14}) == f"{NO_VERDICT} (one_hop 57.2, two_hop 62.1 > 55)"


def test_above_chance_on_a_hop_family_is_tested_against_the_stored_reach(tmp_path):
    """Right on every example: above 50 on every family; with a stored reach of 100 on one_hop, not there, while
    two_hop (reach 50) and type keep their mark."""
    results = tmp_path / "results"
    for seed in range(1, 6):
        kept_result(results, "knower", seed, accuracy_on(GRAPH), right_on(GRAPH))

    def marked():
        _, tests = page(results)
        return {key[-1]: significant(found) and found["delta"] > 0 for key, found in tests.chance.items()}, tests

    found, _ = marked()
    assert found == {"text": True, "type": True, "one_hop": True, "two_hop": True}
    store_regression(results, {"one_hop": 100.0, "two_hop": 50.0})
    found, tests = marked()
    assert found == {"text": True, "type": True, "one_hop": False, "two_hop": True}
    assert {key[-1]: test["chance"] for key, test in tests.chance.items()} == {
        "text": 50.0,
        "type": 50.0,
        "one_hop": 100.0,
        "two_hop": 50.0,
    }


def test_no_relational_verdict_is_drawn_from_a_world_with_a_relation_blind_cue(tmp_path):
    """knowbert beats its shuffled control (links only) and kam+kg ran no control (—): above the limit on a hop
    family, knowbert's verdict is withheld and kam+kg stays out; at or under it, the verdict stands."""
    results = tmp_path / "results"
    for seed in range(1, 6):
        kept_result(results, "knowbert", seed, accuracy_on(GRAPH), right_on(GRAPH))
        kept_result(results, "knowbert", seed, accuracy_on(TEXT), right_on(TEXT), variant="shuffled")
        kept_result(results, "kam+kg", seed, accuracy_on(GRAPH), right_on(GRAPH))

    def verdicts():
        frame, tests = page(results)
        return {method: said for (_, _, method, _), said in relational_verdicts(frame, tests, results).items()}

    assert verdicts() == {"knowbert": LINKS_ONLY}  # none stored: drawn
    store_regression(results, {"one_hop": 55.0, "two_hop": 50.0})
    assert verdicts() == {"knowbert": LINKS_ONLY}
    store_regression(results, {"one_hop": 50.0, "two_hop": 62.14})
    assert verdicts() == {"knowbert": f"{NO_VERDICT} (two_hop 62.1 > 55)"}


def test_kg_texts_reach_is_its_input_order_oracle_where_that_is_higher(tmp_path):
    from knowledge_lm.report.comparisons import stored_method_reach

    numbers = {
        "key": world_key(SIZES),
        "relation_blind_regression": {"one_hop": 50.0, "two_hop": 50.0},
        "oracles": {"kg_text_order": {"one_hop": 48.0, "two_hop": 60.7}},
        "ceilings": {},
    }
    write_json_atomic(tmp_path / SANITY_NUMBERS, {world_name(SIZES): numbers})
    assert stored_method_reach("kg-text", SIZES, tmp_path) == {"one_hop": 50.0, "two_hop": 60.7}
    assert stored_method_reach("knowbert", SIZES, tmp_path) == {"one_hop": 50.0, "two_hop": 50.0}
    assert stored_method_reach("kg-text", {**SIZES, "seed": 99}, tmp_path) is None  # none stored for that world
