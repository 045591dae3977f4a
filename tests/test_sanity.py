"""The generated task's sanity oracles: the rule oracle solves it, relation-blind oracles do not, unless the
negatives are easy (the positive control: they catch the leak there)."""

import pytest

from knowledge_lm.data.generated import generate
from knowledge_lm.report.sanity import RELATION_BLIND, oracle_scores, sanity_section

SMALL = dict(train_size=600, dev_size=200, test_size=200, num_entities=400)


@pytest.fixture(scope="module")
def hard():
    return oracle_scores(generate(dev_size=300))  # the page's world: benchmarks/knowledge_generated.yaml


def test_rule_oracle_solves_every_family(hard):
    assert hard["rule"] == pytest.approx({"type": 100.0, "one_hop": 100.0, "two_hop": 100.0, "text": 100.0})


def test_relation_blind_oracles_stay_near_chance_on_hard_negatives(hard):
    for oracle in RELATION_BLIND:
        assert set(hard[oracle]) == {"one_hop", "two_hop"}
        for family, accuracy in hard[oracle].items():
            assert accuracy <= 60.0, (oracle, family, accuracy)


def test_easy_negatives_leak_and_the_oracles_catch_it():
    easy = oracle_scores(generate(negatives="easy", dev_size=300))
    assert easy["adjacency"]["one_hop"] >= 90.0
    assert easy["distance"]["one_hop"] >= 90.0 and easy["distance"]["two_hop"] >= 90.0
    assert easy["rule"]["one_hop"] == easy["rule"]["two_hop"] == pytest.approx(100.0)


@pytest.mark.slow  # about 25 s on 2 busy cores: two worlds' oracles, regression and ceilings
def test_the_numbers_are_stored_once_deterministically_and_the_section_only_reads_them(tmp_path):
    """``write_sanity_numbers`` (embeddings trained briefly here) writes the same bytes again; the page's section
    reads them, trains nothing, and says how to compute a world it lacks."""
    from knowledge_lm.report.sanity import stored_ceilings, write_sanity_numbers

    brief = {"transe": {"dim": 16, "epochs": 20}, "rotate": {"dim": 16, "epochs": 20, "negatives": 8}}
    results = tmp_path / "results"
    path = write_sanity_numbers(results, [SMALL], cache_dir=tmp_path / "a", hparams=brief)
    first = path.read_bytes()
    assert write_sanity_numbers(results, [SMALL], cache_dir=tmp_path / "b", hparams=brief).read_bytes() == first
    lines = sanity_section([SMALL, {**SMALL, "seed": 1}], results_dir=results)
    assert lines[0] == "## Task sanity (no language model)"
    assert "| rule (the template's path in the graph) | 100.0 | 100.0 | 100.0 | 100.0 |" in lines
    [regression] = [line for line in lines if line.startswith("| relation-blind regression × template")]
    assert regression.startswith("| relation-blind regression × template (1112/1112 statements) | — |")
    assert sum(line.startswith("| ceiling: ") for line in lines) == 4
    assert "Not computed for this world's code: `python -m knowledge_lm.report.sanity`." in lines
    assert set(stored_ceilings(SMALL, results)) == {"transe", "rotate", "kam_kg_map", "si_selection"}
    assert stored_ceilings({**SMALL, "seed": 1}, results) is None
    assert sanity_section([SMALL], results_dir=tmp_path / "empty")[-2].startswith("Not computed")


def test_the_relation_blind_regression_finds_the_cue_of_hard_negatives_and_none_of_matched():
    from knowledge_lm.report.sanity import relation_blind_regression

    hard = relation_blind_regression(generate(**SMALL))
    matched = relation_blind_regression(generate(negatives="matched", **SMALL))
    assert matched == {"one_hop": 50.0, "two_hop": 50.0}  # a true claim and its false one look the same to it
    assert max(hard.values()) > 52.0, hard


def test_the_sanity_split_gives_each_family_a_standard_error_of_at_most_one_and_a_half_points():
    from knowledge_lm.report.sanity import V3_WORLD, family_test_size, sanity_split

    assert family_test_size() == V3_WORLD["test_size"] == 4170
    data = sanity_split({**SMALL, "test_size": 40})
    assert data.splits["train"] == generate(**SMALL).splits["train"]  # the world's own train and dev
    for family in ("one_hop", "two_hop"):
        statements = sum(record["kind"] == family for record in data.splits["test"])
        assert statements >= 1112 and 100 * (0.25 / statements) ** 0.5 <= 1.5


def test_rotate_carries_the_relations_transe_and_the_relation_blind_inputs_cannot(tmp_path):
    """The feature ceilings on a small world, embeddings trained briefly: RotatE's one_hop ceiling clearly above
    TransE's; KAM's KG map and SI's selection at chance on hard negatives."""
    from knowledge_lm.report.sanity import feature_ceilings, method_ceiling

    brief = {"transe": {"dim": 16, "epochs": 40}, "rotate": {"dim": 16, "epochs": 40, "negatives": 8}}
    ceilings = feature_ceilings(generate(**SMALL), tmp_path, hparams=brief)
    assert ceilings["rotate"]["one_hop"] >= 95.0 and ceilings["rotate"]["one_hop"] >= ceilings["transe"]["one_hop"] + 15
    for relation_blind in ("kam_kg_map", "si_selection"):
        assert ceilings[relation_blind] == {"one_hop": 50.0, "two_hop": 50.0}
    assert method_ceiling("knowbert+si", ceilings, "rotate") == ceilings["rotate"]
    assert method_ceiling("kam", ceilings) == ceilings["kam_kg_map"] and method_ceiling("kg-text", ceilings) == {}


def test_the_section_reads_the_stored_numbers_of_the_worlds_current_code(tmp_path):
    import json

    from knowledge_lm.report.sanity import ORACLES, SANITY_NUMBERS, world_key, world_name

    families = {"one_hop": 50.0, "two_hop": 50.0}
    numbers = {
        "key": world_key(SMALL),
        "oracles": {
            oracle: {"one_hop": 100.0, "two_hop": 100.0} if oracle == "rule" else families for oracle in ORACLES
        },
        "statements": {"one_hop": 1112, "two_hop": 1112},
        "relation_blind_regression": families,
        "ceilings": {
            "transe": families,
            "rotate": {"one_hop": 99.0, "two_hop": 96.5},
            "kam_kg_map": families,
            "si_selection": families,
        },  # fmt: skip
    }
    path = tmp_path / SANITY_NUMBERS
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({world_name(SMALL): {**numbers}, world_name({**SMALL, "seed": 1}): {**numbers}}))
    lines = sanity_section([SMALL, {**SMALL, "seed": 1}], results_dir=tmp_path)
    assert "| relation-blind regression × template (1112/1112 statements) | — | 50.0 | 50.0 | — |" in lines
    assert any(line.startswith("| ceiling: RotatE") and line.endswith("| — | 99.0 | 96.5 | — |") for line in lines)
    assert lines[-2] == "Not computed for this world's code: `python -m knowledge_lm.report.sanity`."  # another key


def test_worlds_with_a_relation_blind_cue_stand_apart_under_their_own_heading(tmp_path):
    """The worlds the verdicts are drawn from (regression ≤ 55 on both hop families, or none stored yet) first; a
    world above it after them, under its own heading, with the same rows."""
    import json

    from knowledge_lm.report.sanity import ORACLES, SANITY_NUMBERS, world_key, world_name

    def numbers(knobs, regression):
        families = {"one_hop": 50.0, "two_hop": 50.0}
        return {
            "key": world_key(knobs),
            "oracles": {oracle: families for oracle in ORACLES},
            "statements": {"one_hop": 1112, "two_hop": 1112},
            "relation_blind_regression": regression,
            "ceilings": {name: families for name in ("transe", "rotate", "kam_kg_map", "si_selection")},
        }

    clean, cued, absent = SMALL, {**SMALL, "seed": 1}, {**SMALL, "seed": 2}
    stored = {
        world_name(clean): numbers(clean, {"one_hop": 55.0, "two_hop": 50.0}),
        world_name(cued): numbers(cued, {"one_hop": 50.0, "two_hop": 62.1}),
    }
    path = tmp_path / SANITY_NUMBERS
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(stored))
    lines = sanity_section([cued, clean, absent], results_dir=tmp_path)
    headings = [line for line in lines if line.startswith("### ")]
    assert headings == [
        "### Worlds the relational verdicts are drawn from (relation-blind regression ≤ 55 on one_hop and two_hop)",
        "### Worlds with a relation-blind cue (negatives=hard): no relational verdict is drawn from them; their type "
        "and text columns stand",
    ]
    worlds = [line for line in lines if line.startswith("World: ") or line.startswith("### ")]
    assert worlds == [
        headings[0],
        f"World: {world_name(clean)}.",
        f"World: {world_name(absent)}.",
        headings[1],
        f"World: {world_name(cued)}.",
    ]
    assert sum(line.startswith("| relation-blind regression") for line in lines) == 2
    assert "| relation-blind regression × template (1112/1112 statements) | — | 50.0 | 62.1 | — |" in lines
    assert sanity_section([clean], results_dir=tmp_path)[-1:] == [""]  # no cued world: no second heading
    assert not any(line.startswith("### Worlds with") for line in sanity_section([clean], results_dir=tmp_path))


def test_the_table_holds_the_pages_worlds_and_each_pre_registered_world_once():
    """Every world of the page's verdicts (t20k among them) and each declaration's world, read from its dataset
    options (the rotate and transe declarations differ only in a knowledge option: one world)."""
    from knowledge_lm.report.preregistration import load_declarations
    from knowledge_lm.report.sanity import T20K_WORLD, sanity_worlds, world_knobs, world_name

    names = [world_name(knobs) for knobs in sanity_worlds()]
    assert len(set(names)) == len(names) and world_name(T20K_WORLD) in names
    declared = {world_name(world_knobs(declaration.dataset_options)) for declaration in load_declarations()}
    assert len(declared) == 1 and declared <= set(names)
    assert world_knobs({"seed": 3, "knowledge": {"kg_embedding": "rotate"}}) == {"seed": 3}


def test_the_oracles_cache_keys_every_split_since_the_input_order_oracle_fits_on_train(tmp_path):
    """Two worlds that differ in their train split alone (as t20k and the 2k world: one graph, one dev and test)
    are two cache entries, not one read for both."""
    from knowledge_lm.report.sanity import cached_oracle_scores

    for knobs in (SMALL, {**SMALL, "train_size": 700}):
        cached_oracle_scores(knobs, tmp_path)
    assert len(list((tmp_path / "sanity").glob("*.json"))) == 2
