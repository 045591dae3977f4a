"""The pages at both sizes: a store holding MPNet-base's and MiniLM's cells shows the base size first on the dataset
page, the README (its rows, its answer) and the claims page, MiniLM's beside it; a store of MiniLM alone reads as
before (no backbone named)."""

from helpers import speed_record, write_synthetic_result

from knowledge_lm.core.backbones import leading_order
from knowledge_lm.core.results import result_files
from knowledge_lm.report import claims as claims_module
from knowledge_lm.report.claims import REPRODUCES, Claim, Comparison, judged_claims, render_claims
from knowledge_lm.report.leaderboard import DEFAULT_BACKBONES, write_leaderboards
from knowledge_lm.report.papers import papers_frame

BASELINE = [60.0, 62.0, 61.0, 63.0, 59.0]


def store(results, backbones: dict[str, float]) -> None:
    """GLUE RTE at 100 %, five seeds: the baseline and kam on each backbone, kam ``gain`` points above it."""
    for backbone, gain in backbones.items():
        for seed, value in enumerate(BASELINE):
            for method, score in (("baseline", value), ("kam", value + gain + 0.1 * (seed % 2))):
                write_synthetic_result(
                    results, method, "rte", 1.0, seed, score, report_split="test", cell_backbone=backbone
                )


def test_the_base_size_leads_and_is_a_default_backbone():
    assert leading_order(["minilm", "tiny", "mpnet-base"]) == ["mpnet-base", "minilm", "tiny"]
    assert DEFAULT_BACKBONES[0] == "mpnet-base" and "minilm" in DEFAULT_BACKBONES


def test_dataset_page_and_readme_lead_with_the_base_size(tmp_path):
    results, out = tmp_path / "results", tmp_path / "pages"
    store(results, {"minilm": 2.0, "mpnet-base": 5.0})
    write_leaderboards(results, out, backbones=DEFAULT_BACKBONES)

    page = (out / "glue.md").read_text()
    assert page.index("## Backbone: mpnet-base") < page.index("## Backbone: minilm")

    readme = (out / "README.md").read_text()
    rows = [line.split(" |")[0] for line in readme.splitlines() if line.startswith("| kam (") or "| baseline (" in line]
    assert rows[:4] == ["| baseline (mpnet-base)", "| baseline (minilm)", "| kam (mpnet-base)", "| kam (minilm)"]
    assert readme.index("MPNet-base (`mpnet-base`") < readme.index("MiniLM-L6 (`minilm`")
    answer = readme[readme.index("## The answer") : readme.index("## The table")]
    # the base size's Δ (+5) leads the answer, MiniLM's (+2) beside it, though MiniLM's is not the larger
    assert "kam on glue (MPNet-base), Δ +5.0" in answer and "on MiniLM-L6 Δ +2.0" in answer
    assert answer.index("MPNet-base") < answer.index("MiniLM-L6")

    # the paper pages name MiniLM-L6 as ours: they show its cells alone, never a mean over both backbones' seeds
    papers = "".join(path.read_text() for path in (out / "papers").glob("*.md"))
    assert "63.0 ±" in papers and "66.0 ±" not in papers


def test_minilm_alone_names_no_backbone(tmp_path):
    results, out = tmp_path / "results", tmp_path / "pages"
    store(results, {"minilm": 2.0})
    write_leaderboards(results, out, backbones=DEFAULT_BACKBONES)
    readme = (out / "README.md").read_text()
    assert "| kam |" in readme and "(minilm)" not in readme and "MPNet" not in readme
    assert "kam on glue, Δ +2.0" in readme


def test_claims_lead_with_the_base_size_and_give_minilms_beside(tmp_path, monkeypatch):
    results = tmp_path / "results"
    store(results, {"minilm": 2.0, "mpnet-base": 5.0})
    monkeypatch.setattr(claims_module.coverage, "untestable_reason", lambda results_dir, dataset: None)
    ours = Comparison(a="kam", b="baseline", dataset="glue", tasks=("rte",), fraction=1.0)
    claim = Claim(id="gain", paper="001", table="Table 1", claim="gain", ours=ours, printed="x", sign=1)
    [judged] = judged_claims(papers_frame(result_files(results)), results, [claim])
    assert judged.backbone == "mpnet-base" and judged.verdict == REPRODUCES
    assert judged.found["delta"] > 4.9
    [(beside, test)] = judged.beside
    assert beside == "minilm" and 1.9 < test["delta"] < 2.2
    page = render_claims([judged])
    row = next(line for line in page.splitlines() if line.startswith("| gain |"))
    assert row.index("MPNet-base: **+5.0**") < row.index("MiniLM-L6: +2.0")
    assert "the base size leads" in page


def test_a_claim_on_minilm_alone_reads_as_before(tmp_path, monkeypatch):
    results = tmp_path / "results"
    store(results, {"minilm": 2.0})
    monkeypatch.setattr(claims_module.coverage, "untestable_reason", lambda results_dir, dataset: None)
    ours = Comparison(a="kam", b="baseline", dataset="glue", tasks=("rte",), fraction=1.0)
    claim = Claim(id="gain", paper="001", table="Table 1", claim="gain", ours=ours, printed="x", sign=1)
    [judged] = judged_claims(papers_frame(result_files(results)), results, [claim])
    assert judged.backbone == "minilm" and judged.beside == []
    page = render_claims([judged])
    assert "| gain | Table 1: x | **+2.0**" in page and "Ours run on MiniLM-L6 (6 layers" in page


def test_the_speed_page_gives_the_base_size_step_time_first():
    from knowledge_lm.report.speed import render_speed

    minilm = speed_record(backbone=".device/minilm")
    row = minilm["methods"]["baseline"]
    base = speed_record(backbone="/root/carried/mpnet-base", methods={"baseline": {**row, "step_ms": 21.5}})
    text = render_speed([minilm, base])
    assert text.index("## GPU X, mpnet-base") < text.index("## GPU X, minilm")
    assert "| baseline | 21.50 |" in text


def test_the_speed_page_gives_the_base_size_cell_time_beside_minilms():
    from knowledge_lm.report.speed import backbone_cell_times

    def result(backbone: str, seed: int, wall: float, method: str = "baseline") -> dict:
        cell = {"backbone": backbone, "dataset": "glue", "fraction": 1.0, "method": method, "seed": seed}
        return {
            "cell": {**cell, "task": "rte", "variant": ""},
            "device": {"name": "GPU X"},
            "budget": {"max_steps": 100},
            "wall_time_s": wall,
        }

    cells = [result("mpnet-base", 1, 60.0), result("mpnet-base", 2, 80.0), result("minilm", 1, 30.0)]
    cells.append(result("minilm", 1, 5.0, method="kam"))  # no base-size counterpart: left out
    lines = backbone_cell_times(cells)
    assert "| GPU X | glue/rte | 1 | mpnet-base | 2 | 70 | 700 | 1 | 30 | 300 | 2.33 |" in lines
    assert backbone_cell_times(cells[2:]) == []
