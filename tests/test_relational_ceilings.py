"""The relational verdict and the feature ceilings: where a method's knowledge inputs could not carry the relations
(their stored ceiling below 90 on a hop family), "no" says so; a finding of the controls stands; a world without
stored ceilings says that, never a bare "no"."""

import json

from test_gold import SIZES
from test_leaderboard import kept_result
from test_leaderboard_families import accuracy_on, right_on

from knowledge_lm.core.results import write_json_atomic
from knowledge_lm.report.comparisons import (
    CANNOT_CARRY,
    LINKS_ONLY,
    NO_CEILINGS,
    no_verdict,
    page_tests,
    relational_verdicts,
)
from knowledge_lm.report.leaderboard import page_frame
from knowledge_lm.report.sanity import SANITY_NUMBERS, world_key, world_name

CHANCE = {"one_hop": 50.0, "two_hop": 50.0}


def store_ceilings(results, knobs: dict, ceilings: dict) -> None:
    """The sanity numbers of the world ``knobs`` under ``results``, as ``write_sanity_numbers`` keys them (its
    current code), with these feature ceilings."""
    write_json_atomic(results / SANITY_NUMBERS, {world_name(knobs): {"key": world_key(knobs), "ceilings": ceilings}})


def test_no_verdict_names_the_hop_families_the_inputs_cannot_carry():
    assert no_verdict(None) == NO_CEILINGS
    assert no_verdict({}) == "no"  # a method whose inputs have no ceiling (kg-text reads the facts' words)
    assert no_verdict(CHANCE) == CANNOT_CARRY
    assert no_verdict({"one_hop": 99.8, "two_hop": 92.5}) == "no"
    assert no_verdict({"one_hop": 99.8, "two_hop": 89.9}) == f"no; {CANNOT_CARRY} on two_hop"


def test_the_verdict_reads_the_ceiling_of_the_methods_inputs_in_its_world_and_embedding(tmp_path):
    """knowbert (TransE at chance) cannot carry relations; knowbert+si with RotatE (its knowledge option) can, so its
    "no" stays; kam+kg's "links only" stands though its map is at chance; without stored ceilings, "no" says so."""
    results = tmp_path / "results"
    graph, text = {"text", "type", "one_hop", "two_hop"}, {"text"}
    for seed in range(1, 6):
        for method in ("knowbert", "knowbert+si"):
            for variant in ("", "shuffled"):  # knowledge used against the shuffle: none
                path = kept_result(results, method, seed, accuracy_on(text), right_on(text), variant=variant)
                if method == "knowbert+si":
                    found = json.loads(path.read_text())
                    found["config"]["dataset_options"]["knowledge"] = {"kg_embedding": "rotate"}
                    write_json_atomic(path, found)
        kept_result(results, "kam+kg", seed, accuracy_on(graph), right_on(graph))
        kept_result(results, "kam+kg", seed, accuracy_on(text), right_on(text), variant="shuffled")
    inputs = [(path, json.loads(path.read_text())) for path in sorted(results.rglob("*.json"))]
    frame, golds, groupings = page_frame(inputs, None, results)
    tests = page_tests(frame, {"facts": "accuracy"}, golds, groupings)
    store_ceilings(
        results,
        SIZES,
        {"transe": CHANCE, "rotate": {"one_hop": 99.8, "two_hop": 96.5}, "kam_kg_map": CHANCE, "si_selection": CHANCE},
    )

    def verdicts(store):
        found = relational_verdicts(frame, tests, store)
        return {method: said for (_, _, method, _), said in found.items()}

    assert verdicts(results) == {"knowbert": CANNOT_CARRY, "knowbert+si": "no", "kam+kg": LINKS_ONLY}
    assert verdicts(tmp_path / "elsewhere") == {
        "knowbert": NO_CEILINGS,
        "knowbert+si": NO_CEILINGS,
        "kam+kg": LINKS_ONLY,
    }
    store_ceilings(results, {**SIZES, "seed": 1}, {"transe": CHANCE})  # another world's: none for this one
    assert verdicts(results)["knowbert"] == NO_CEILINGS
