"""The README's opening sentences (``knowledge_lm.report.glance``) on hand-made comparisons."""

from knowledge_lm.report.glance import GlanceResults, largest_effect


def comparison(delta: float, n: int, p: float | None = 0.3, q: float | None = 0.4) -> dict:
    interval = None if p is None else (delta - 1, delta + 1)
    return {"delta": delta, "n": n, "p": p, "q": q, "interval": interval, "std": 1.0}


def test_the_largest_effect_prefers_a_comparison_of_enough_seeds_to_a_larger_one_of_one_seed():
    cells = {
        ("mpnet-base", "kam", "openentity"): comparison(-9.2, 1, p=None, q=None),
        ("mpnet-base", "knowbert", "fewrel"): comparison(+1.5, 5),
        ("minilm", "knowbert", "fewrel"): comparison(+0.4, 5),
    }
    results = GlanceResults({}, {}, cells, {}, 0, 0)
    rows = [(backbone, label, label) for backbone, label, _ in cells]
    said = largest_effect(results, rows)
    assert "knowbert on fewrel (MPNet-base), Δ +1.5" in said and "-9.2" not in said
    assert said.startswith("No method differs from the baseline")


def test_a_significant_effect_leads_whatever_its_size():
    cells = {
        ("minilm", "kam", "glue"): comparison(+0.8, 5, p=0.001, q=0.01),
        ("minilm", "knowbert", "glue"): comparison(-3.0, 5),
    }
    said = largest_effect(
        GlanceResults({}, {}, cells, {}, 0, 0), [("minilm", "kam", "kam"), ("minilm", "knowbert", "knowbert")]
    )
    assert said.startswith("The largest real-data effect") and "kam on glue, Δ +0.8" in said


def test_the_controls_sentence_leads_with_the_base_size_and_gives_minilms_beside():
    from knowledge_lm.report.glance import controls_sentence

    relational = {
        "generated": {
            ("mpnet-base", "kam", "kam", ""): "no",
            ("minilm", "kg-text", "kg-text", ""): "relational facts",
            ("minilm", "kam", "kam", ""): "no",
            ("minilm", "kam", "kam", "confirm"): "links only",  # another world: not the sentence's
        }
    }
    said = controls_sentence(GlanceResults({}, {}, {}, relational, 0, 0))
    assert said.endswith("nothing?): no: kam; on MiniLM-L6, no: kam; relational facts: kg-text.")
    assert "(MPNet-base)" in said and "links only" not in said


def test_the_controls_sentence_gives_the_first_world_whose_verdicts_are_drawn():
    """A backbone whose 2k world has a relation-blind cue (every verdict withheld) gives its pre-registered world's,
    named, before the confirmation world's; one whose every world has the cue says so."""
    from knowledge_lm.report.comparisons import NO_VERDICT
    from knowledge_lm.report.glance import controls_sentence

    withheld = f"{NO_VERDICT} (two_hop 62.1 > 55)"
    relational = {
        "generated": {
            ("mpnet-base", "kam", "kam", ""): withheld,
            ("minilm", "kam", "kam", ""): withheld,
            ("minilm", "kam", "kam", "confirm"): "links only",
            ("minilm", "kam", "kam", "prereg-v3-transe"): "no",
            ("minilm", "kg-text", "kg-text", "prereg-v3-transe"): "relational facts",
        }
    }
    said = controls_sentence(GlanceResults({}, {}, {}, relational, 0, 0))
    assert said.startswith("On the synthetic generated task (MPNet-base), each method")
    assert said.endswith(
        f"nothing?): {withheld}: kam; on MiniLM-L6 (pre-registered prereg-v3-transe), no: kam; relational facts: "
        "kg-text."
    )


def test_the_controls_sentence_gives_every_pre_registered_world_whose_verdicts_are_drawn():
    """One world per KG embedding kind: each named, in order of name."""
    from knowledge_lm.report.glance import controls_sentence

    relational = {
        "generated": {
            ("minilm", "kam", "kam", "prereg-v3-transe"): "its features cannot carry relations",
            ("minilm", "knowbert", "knowbert", "prereg-v3-transe"): "entity types only",
            ("minilm", "knowbert", "knowbert", "prereg-v3-rotate"): "no",
        }
    }
    said = controls_sentence(GlanceResults({}, {}, {}, relational, 0, 0))
    assert said.endswith(
        "(pre-registered prereg-v3-rotate), each method against its counterfactual controls (does it use the "
        "relational facts, its links alone, or nothing?): no: knowbert; (pre-registered prereg-v3-transe) entity types "
        "only: knowbert; its features cannot carry relations: kam."
    )
