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


def test_section_is_deterministic_and_cached(tmp_path):
    first = sanity_section([SMALL], cache_dir=tmp_path / "a")
    assert list((tmp_path / "a" / "sanity").glob("*.json"))
    assert sanity_section([SMALL], cache_dir=tmp_path / "a") == first
    assert sanity_section([SMALL], cache_dir=tmp_path / "b") == first
    assert first[0] == "## Task sanity (no language model)"
    assert "negatives=hard" in "\n".join(first)
    rows = [line for line in first if line.startswith("| rule")]
    assert rows == ["| rule (the template's path in the graph) | 100.0 | 100.0 | 100.0 | 100.0 |"]
