"""The claims registry (benchmarks/claims.yaml) and the verdicts computed from a store
(``knowledge_lm.report.claims``)."""

import pytest
from helpers import write_synthetic_result

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import DATASETS, METHODS
from knowledge_lm.core.results import result_files
from knowledge_lm.report import claims as claims_module
from knowledge_lm.report.claims import (
    INCONCLUSIVE,
    NO_EFFECT,
    NOT_RUN,
    OPPOSITE,
    PAPER_NAMES,
    REPRODUCES,
    UNTESTABLE,
    Claim,
    Comparison,
    judged_claims,
    load_claims,
    render_claims,
)
from knowledge_lm.report.papers import papers_frame


def test_the_registry_names_methods_datasets_and_references_that_exist():
    claims = load_claims()  # checks each claim's paper's effect against references.yaml
    assert len(claims) >= 20
    assert {claim.paper for claim in claims} == set(PAPER_NAMES)
    for claim in claims:
        if claim.ours is not None:
            assert {claim.ours.a, claim.ours.b} <= set(METHODS.names()), claim.id
            assert claim.ours.dataset in DATASETS.names(), claim.id
            assert set(claim.ours.tasks) <= set(DATASETS.entry(claim.ours.dataset).tasks), claim.id
        else:
            assert claim.not_run, claim.id


@pytest.mark.parametrize(
    "entry, said",
    [
        ("ours: {a: nosuch, b: baseline, dataset: glue, tasks: [rte], fraction: 1.0}", "no method 'nosuch'"),
        ("ours: {a: kam, b: baseline, dataset: glue, tasks: [nosuch], fraction: 1.0}", "are not tasks of glue"),
        ("paper_rows: [KAM-BERT-Base, No such row]", "references.yaml has no row 'No such row'"),
    ],
)
def test_a_bad_claim_is_one_line_naming_it(tmp_path, entry, said):
    base = {
        "ours": "ours: {a: kam, b: baseline, dataset: glue, tasks: [rte], fraction: 1.0}",
        "rows": "paper_rows: [KAM-BERT-Base, BERT-Base]",
    }
    key = "ours" if entry.startswith("ours") else "rows"
    base[key] = entry
    path = tmp_path / "claims.yaml"
    path.write_text(f"- id: bad\n  paper: '001'\n  table: Table 1\n  claim: x\n  {base['rows']}\n  {base['ours']}\n")
    with pytest.raises(KlmError) as error:
        load_claims(path)
    assert "claim bad:" in str(error.value) and said in str(error.value)
    assert "\n" not in str(error.value)


def store(results, method, values, task="rte"):
    for seed, value in enumerate(values):
        write_synthetic_result(results, method, task, 1.0, seed, value, report_split="test")


def claim(name, a, sign=1, dataset="glue", **fields):
    ours = Comparison(a=a, b="baseline", dataset=dataset, tasks=("rte",), fraction=1.0)
    return Claim(id=name, paper="001", table="Table 1", claim=name, ours=ours, printed="x", sign=sign, **fields)


def test_each_verdict_rule_on_a_synthetic_store(tmp_path, monkeypatch):
    results = tmp_path / "results"
    baseline = [60.0, 62.0, 61.0, 63.0, 59.0]
    store(results, "baseline", baseline)
    store(results, "bert+sr", [v + 5 + 0.1 * (i % 2) for i, v in enumerate(baseline)])  # a clear gain
    store(results, "kam", [v + 0.1 * (i % 2) for i, v in enumerate(baseline)])  # none: a tight interval at 0
    store(results, "kam+si", [v + d for v, d in zip(baseline, (4, -2, 5, -3, 1))])  # wide, across 0
    store(results, "knowbert", [v + 5 for v in baseline])
    gated = {"glue": None}
    monkeypatch.setattr(claims_module.coverage, "untestable_reason", lambda results_dir, dataset: gated[dataset])
    claims = [
        claim("gain", "bert+sr"),
        claim("loss claimed", "bert+sr", sign=-1),
        claim("none", "kam"),
        claim("wide", "kam+si"),
        claim("absent", "knowbert+si"),
        claim("licensed", "knowbert", not_run="needs the user's data"),
    ]
    frame = papers_frame(result_files(results))
    verdicts = {entry.claim.id: entry for entry in judged_claims(frame, results, claims)}
    assert verdicts["gain"].verdict == REPRODUCES
    assert verdicts["loss claimed"].verdict == OPPOSITE
    assert verdicts["none"].verdict == NO_EFFECT
    assert verdicts["wide"].verdict == INCONCLUSIVE and "seed pairs would settle it" in verdicts["wide"].reason
    assert verdicts["absent"].verdict == NOT_RUN and "klm bench --dataset glue" in verdicts["absent"].reason
    assert verdicts["licensed"].verdict == NOT_RUN and verdicts["licensed"].reason == "needs the user's data"

    gated["glue"] = "2 % of examples linked, below the gate"
    verdicts = {entry.claim.id: entry for entry in judged_claims(frame, results, claims)}
    assert verdicts["none"].verdict == UNTESTABLE and verdicts["none"].reason.startswith("2 %")  # kam reads the KG
    assert verdicts["gain"].verdict == REPRODUCES  # bert+sr reads no knowledge: no gate
    page = render_claims(list(verdicts.values()))
    assert "| none |" in page and UNTESTABLE in page and "Counts:" in page
