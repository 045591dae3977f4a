"""Knowledge coverage: measured per split, shown on the dataset pages and the README, and gating the verdicts."""

import json

from helpers import write_synthetic_result

from knowledge_lm.core.results import COVERAGE_DIR, result_files, write_json_atomic
from knowledge_lm.knowledge.coverage import link_agreement, sample_indices, split_coverage
from knowledge_lm.knowledge.kg import KnowledgeGraph
from knowledge_lm.knowledge.linking import Mention
from knowledge_lm.report.coverage import MIN_JOINED, dataset_untestable, untestable_reason
from knowledge_lm.report.leaderboard import write_leaderboards


def mention(start, end, qid):
    return Mention(start, end, "x", [(qid, 1.0)])


def test_split_coverage_counts_links_triples_and_the_asked_pairs():
    kg = KnowledgeGraph([("Q1", "P1", "Q2"), ("Q2", "P1", "Q3"), ("Q4", "P2", "Q5")])
    records = [
        {"text_a": "a b", "entities": [{"start": 0, "end": 1, "role": "e1"}, {"start": 2, "end": 3, "role": "e2"}]},
        {"text_a": "c d", "entities": [{"start": 0, "end": 1, "role": "e1"}, {"start": 2, "end": 3, "role": "e2"}]},
        {"text_a": "e f", "entities": [{"start": 0, "end": 1, "role": "e1"}, {"start": 2, "end": 3, "role": "e2"}]},
    ]
    linked = [[[mention(0, 1, "Q1"), mention(2, 3, "Q2")]], [[mention(0, 1, "Q3"), mention(2, 3, "Q4")]], [[]]]
    measured = split_coverage(records, linked, kg)
    assert measured["linked"] == 2 / 3 and measured["with_triple"] == 2 / 3
    assert measured["triples_median"] == 2 and measured["triples_mean"] == 4 / 3  # {Q1,Q2}: 2; {Q3,Q4}: 1 + 1; none: 0
    assert measured["asked"] == "head and tail" and measured["asked_pairs"] == 3 and measured["joined"] == 1 / 3
    three = [[[mention(0, 1, "Q1"), mention(2, 3, "Q3"), mention(4, 5, "Q2")]]]
    plain = split_coverage([{"text_a": "a b c"}], three, kg)
    assert plain["asked"] == "linked pairs" and plain["asked_pairs"] == 3 and plain["joined"] == 2 / 3
    gold = [{"entities": [{"qid": "Q1", "start": 0, "end": 5}, {"qid": "Q9", "start": 6, "end": 9}]}]
    alias = [[[mention(0, 5, "Q1"), mention(0, 2, "Q1"), mention(6, 9, "Q8"), mention(10, 12, "Q8")]]]
    # Strong match: only the mention at Q1's own span is right; one of four mentions, one of two gold links.
    assert link_agreement(gold, alias) == {"link_precision": 0.25, "link_recall": 0.5, "mentions": 4, "gold_links": 2}
    assert sample_indices(5, 10) == [0, 1, 2, 3, 4] and sample_indices(100, 3) == sample_indices(100, 3)


def coverage_file(joined: float) -> dict:
    split = {
        "examples": 100,
        "measured": 100,
        "linked": 1.0,
        "in_kg": 1.0,
        "with_triple": 0.9,
        "triples_median": 3,
        "triples_mean": 4.5,
        "asked": "linked pairs",
        "asked_pairs": 80,
        "joined": joined,
    }
    return {"dataset": "glue", "kg": "toy", "answers": "removed", "tasks": {"rte": {"splits": {"dev": split}}}}


def test_a_knowledge_verdict_below_the_gate_reads_untestable_on_the_page_and_the_readme(tmp_path):
    results = tmp_path / "results"
    for seed in range(1, 6):
        write_synthetic_result(results, "baseline", "rte", 1.0, seed, 60.0 + seed / 10)
        write_synthetic_result(results, "kam", "rte", 1.0, seed, 60.0 + seed / 10)
    write_json_atomic(results / COVERAGE_DIR / "glue.json", coverage_file(joined=0.011))
    assert len(result_files(results)) == 10  # the coverage file is no cell
    reason = untestable_reason(results, "glue")
    assert reason.startswith("untestable with this KG (coverage on dev: 90% of examples with a triple")
    assert "1.1% of linked pairs joined" in reason

    out = tmp_path / "leaderboards"
    write_leaderboards(results, out)
    page, readme = (out / "glue.md").read_text(), (out / "README.md").read_text()
    assert "## Knowledge coverage" in page and "| rte | dev | 100 | 100.0% | 90.0% | 3 / 4.5 |" in page
    assert "| linked pairs: 80 | 1.1% | — | — | below: untestable with this KG |" in page
    assert f"{MIN_JOINED:.0%} of the entity pairs" in page and "below: untestable with this KG" in page
    assert reason in page and "no difference" not in page.split("## Backbone")[1].split("kam")[1].split("\n")[0]
    assert "| KG coverage (reported split" in readme and "triple 90%, joined 1.1% (below the gate)" in readme
    assert reason in readme

    write_json_atomic(results / COVERAGE_DIR / "glue.json", coverage_file(joined=0.3))
    assert untestable_reason(results, "glue") is None
    write_leaderboards(results, out)
    assert "untestable" not in (out / "README.md").read_text().split("| KG coverage")[1].split("\n", 1)[1]
    assert "no difference" in (out / "README.md").read_text()


def test_a_dataset_is_untestable_only_when_every_task_is():
    low, high = coverage_file(0.0)["tasks"]["rte"], coverage_file(0.5)["tasks"]["rte"]
    assert dataset_untestable({"tasks": {"rte": low, "mrpc": high}}) is None
    assert dataset_untestable({"tasks": {"rte": low, "mrpc": low}}) == dataset_untestable({"tasks": {"rte": low}})
    lower = coverage_file(0.01)["tasks"]["rte"]
    assert dataset_untestable({"tasks": {"rte": low, "mrpc": lower}}) == (
        "untestable with this KG (coverage on all 2 tasks below the gate; the most joined, mrpc on dev: 90% of "
        "examples with a triple, median 3 per example, 1.0% of linked pairs joined)"
    )
    assert dataset_untestable(None) is None and untestable_reason("/nonexistent", "glue") is None


def test_committed_coverage_files_read():
    from pathlib import Path

    for path in sorted((Path(__file__).parents[1] / "results" / COVERAGE_DIR).glob("*.json")):
        coverage = json.loads(path.read_text())
        assert coverage["dataset"] == path.stem and coverage["tasks"]
