"""What a page says of its cells: the metric definitions it uses, its degenerate cells, its protocol and commits."""

import pytest
from helpers import dataset_page, write_synthetic_result
from test_leaderboard_families import table_row

from knowledge_lm.core.registry import cannot_run
from knowledge_lm.report.comparisons import corrected, significance_mark, verdict
from knowledge_lm.report.leaderboard import write_leaderboards
from knowledge_lm.report.pages import metric_definitions


def test_both_loose_macro_definitions_are_named():
    [_, line] = metric_definitions(["micro_f1", "loose_macro_f1", "ling_weld_loose_macro_f1"])
    assert "loose_macro_f1 = loose macro-F1 as ERNIE's code" in line and "ling_weld_loose_macro_f1 = " in line
    assert metric_definitions(["micro_f1"]) == []


def evaluations(selected_step: int, steps=(10, 20, 30)) -> dict:
    """The ``evaluations`` and ``selection`` keys of a result selected at ``selected_step``."""
    return {
        "evaluations": [{"step": step, "epoch": step // 10, "metrics": {}} for step in steps],
        "selection": {"split": "dev", "metric": "accuracy", "step": selected_step, "epoch": selected_step // 10},
    }


def test_degenerate_cells_are_flagged_counted_and_never_compared(tmp_path):
    results = tmp_path / "results"
    for seed, base in zip((1, 2, 3), (60.0, 62.0, 61.0)):
        write_synthetic_result(results, "baseline", "rte", 1.0, seed, base, **evaluations(30))
        write_synthetic_result(results, "stuck", "rte", 1.0, seed, 52.7, **evaluations(10))
        write_synthetic_result(results, "partly", "rte", 1.0, seed, base + 5.0, **evaluations(10 if seed == 3 else 20))
    path = dataset_page(results, tmp_path / "leaderboards")
    lines = path.read_text().splitlines()
    assert "⊘k = k of the group's seeds are degenerate cells (4 on this page: 4 selected at the first evaluation;" in (
        "\n".join(lines)
    )
    assert "<details><summary>Dropped: 4 degenerate cells (partly 1, stuck 3)</summary>" in lines
    assert "- partly 100% s3 (rte): selected at the first evaluation" in lines
    assert "| stuck | degenerate: selected at the first evaluation: 52.7 ± 0.0 (n=3) |" in lines
    assert "| partly | **66.0 ± 1.4 (n=2) ⊘1** ↑ |" in lines  # the mean of the seeds compared, 65 and 67
    assert "| stuck | 100% | — | — | 0 | 3 | — | — | — | — | every pair degenerate |" in lines
    partly = next(line for line in lines if line.startswith("| partly | 100% |"))
    assert partly.startswith("| partly | 100% | +5.0 ± 0.0 | [+5.0, +5.0] | 2 | 1 |")
    detail = next(line for line in lines if line.startswith("| stuck | 100% | dev |"))
    assert "s1: first evaluation, s2: first evaluation, s3: first evaluation" in detail


def test_one_class_predictions_are_degenerate(tmp_path):
    from knowledge_lm.core.results import predictions_path, write_predictions
    from knowledge_lm.report.frame import FIRST_EVALUATION, ONE_CLASS, degenerate_reason, kept_run

    path = tmp_path / "cell.json"
    write_predictions(predictions_path(path), {"split": "test", "predicted": [1, 1, 1], "gold": [0, 1, 1]})
    assert degenerate_reason(path, {**evaluations(10)}) == f"{ONE_CLASS}, {FIRST_EVALUATION}"
    other = tmp_path / "other.json"
    write_predictions(predictions_path(other), {"split": "test", "predicted": [1, 0, 1], "gold": [0, 1, 1]})
    kept_run.cache_clear()
    assert degenerate_reason(other, {**evaluations(20)}) == ""
    assert degenerate_reason(tmp_path / "none.json", {}) == ""  # no predictions, no evaluations: nothing to tell


def test_corrected_marks_and_verdicts():
    from scipy.stats import false_discovery_control

    comparisons = [
        {"n": 3, "delta": 2.5, "p": 0.013, "interval": [1.3, 3.7]},
        {"n": 3, "delta": 0.1, "p": 0.7, "interval": [-0.5, 0.6]},
        {"n": 3, "delta": -1.0, "p": 0.8, "interval": [-4.0, 3.0]},
        {"n": 3, "delta": 0.5, "p": 0.9, "interval": [-2.0, 3.0]},
        {"n": 1, "delta": 0.5, "p": None, "interval": None},
    ]
    corrected(comparisons)
    expected = false_discovery_control([0.013, 0.7, 0.8, 0.9])
    assert [found["q"] for found in comparisons[:4]] == pytest.approx(list(expected))
    assert comparisons[0]["q"] == pytest.approx(0.052) and comparisons[4]["q"] is None
    assert [verdict(found) for found in comparisons] == [
        "not significant after correction",
        "no difference",
        "too few seeds to tell",
        "too few seeds to tell",
        "too few seeds",
    ]
    assert significance_mark(comparisons[0]) == ""
    corrected(comparisons[:1])
    assert verdict(comparisons[0]) == "better" and significance_mark(comparisons[0]) == " ↑"


def test_bootstrap_draws_enough_replicates():
    from knowledge_lm.report.bootstrap import REPLICATES

    assert REPLICATES >= 2000


def test_only_the_newest_split_and_scorer_versions_are_compared(tmp_path):
    results = tmp_path / "results"
    new = {"protocol": {"split_version": "2", "scorer_version": "1"}}
    for seed, base in zip((1, 2), (60.0, 62.0)):
        write_synthetic_result(results, "baseline", "rte", 1.0, seed, base, report_split="test", **new)
        write_synthetic_result(results, "older", "rte", 1.0, seed, 90.0)  # no protocol: split version 1, left out
        write_synthetic_result(
            results, "baseline", "cola", 1.0, seed, 20.0 + seed
        )  # cola has only version-1 cells: kept
    path = dataset_page(results, tmp_path / "leaderboards")
    text = path.read_text()
    assert "Left out: 2 cells of an older split or scorer version of their task." in text
    assert "| older |" not in text
    assert "cola: split version 1, scorer version 1; rte: split version 2, scorer version 1" in text


def test_headers_say_what_is_selected_on_what_and_name_their_commits(tmp_path):
    results = tmp_path / "results"
    for seed in (1, 2):
        write_synthetic_result(
            results,
            "baseline",
            "rte",
            1.0,
            seed,
            60.0,
            report_split="test",
            protocol={"split_version": "2", "scorer_version": "1"},
            **evaluations(20),
        )
        write_synthetic_result(
            results, "baseline", "cola", 1.0, seed, 30.0, git={"commit": "abcdef0123"}, **evaluations(20)
        )
        write_synthetic_result(results, "kam", "cola", 1.0, seed, 31.0, git={"commit": "fedcba9876"}, **evaluations(20))
    path = dataset_page(results, tmp_path / "leaderboards")
    text = path.read_text()
    assert (
        "cola: model selected at the best of 3 evaluations on dev = GLUE's labelled dev set and reported on that "
        "same split: the reported score is a maximum over evaluations, optimistic." in text
    )
    assert (
        "rte: model selected at the best of 3 evaluations on dev = a part of GLUE train held out, seeded; reported "
        "on test = GLUE's labelled dev set." in text
    )
    assert "Cells of 2 commits (mixed): abcdef0123 (baseline); fedcba9876 (kam)." in text
    assert "Cells of commit 0123456789." in text  # rte's tables: one commit


def test_the_glance_page_gives_each_methods_corrected_delta_per_dataset(tmp_path):
    results = tmp_path / "results"
    for seed, base in zip((1, 2, 3), (60.0, 62.0, 61.0)):
        for task, shift in (("rte", 0.0), ("cola", -30.0)):
            write_synthetic_result(results, "baseline", task, 1.0, seed, base + shift)
            write_synthetic_result(results, "steady", task, 1.0, seed, base + shift + 4.0 + 0.1 * seed)
        write_synthetic_result(results, "half", "rte", 1.0, seed, base + (1.0 if seed == 2 else -1.0))
    written = write_leaderboards(results, tmp_path / "leaderboards")
    glance = tmp_path / "leaderboards" / "README.md"
    assert glance in written
    lines = glance.read_text().splitlines()
    header = (
        "| method | cosmosqa | fewrel | generated (synthetic) | [glue](glue.md) | openentity | redocred | semeval2010 |"
    )
    assert header in lines
    # GLUE's cell: the mean of its tasks' means at 100 % (rte 61.0, cola 31.0), then the page's Δ and verdict.
    assert table_row(lines, "baseline")[4] == "46.0 (n=3)"
    assert table_row(lines, "steady")[4] == "50.2 (n=3)<br>Δ +4.2 [+4.0, +4.4] (n=3) ↑ better"
    half = table_row(lines, "half")[4]
    assert half.startswith("60.7 (n=3), 1 of 2 tasks<br>Δ -0.3 [") and half.endswith(
        "too few seeds to tell, 1 of 2 tasks"
    )
    assert any("after the Benjamini–Hochberg correction of the dataset's own page" in line for line in lines)
    page = (tmp_path / "leaderboards" / "glue.md").read_text().splitlines()
    page = page[next(i for i, line in enumerate(page) if line.startswith("Against the baseline at 100 %")) :]
    assert table_row(page, "steady")[1:4] == ["cola, rte", "+4.2 ↑", "[+4.0, +4.4]"]  # the README's, from the page


# The backbone as a minilm cell records it (the glance page counts its parameters).
MINILM = {"checksum": "abc", "path": None, "parameters": 22565376}


def test_the_readme_leaves_no_cell_unexplained(tmp_path):
    results = tmp_path / "results"
    for seed in (1, 2, 3):
        write_synthetic_result(
            results, "baseline", "main", 1.0, seed, 50.0 + seed, dataset="cosmosqa", metric="accuracy", backbone=MINILM
        )
        write_synthetic_result(results, "baseline", "rte", 1.0, seed, 60.0 + seed, backbone=MINILM)
        write_synthetic_result(results, "kam", "rte", 1.0, seed, 61.0 + seed, backbone=MINILM)
    write_leaderboards(results, tmp_path / "leaderboards")
    text = (tmp_path / "leaderboards" / "README.md").read_text()
    assert "—" not in text  # every empty cell says why
    lines = text.splitlines()
    assert "Backbone: MiniLM-L6 (`minilm`, 22.6M parameters), against BERT-base's 110M in the papers" in text
    assert "cannot be compared with these cells' scores" in text
    methods = [line.split(" | ")[0][2:] for line in lines if line.startswith("| ")][1:]
    assert methods == ["baseline", "kam", "kam+si", "knowbert", "knowbert+si", "knowbert+si+sr", "bert+sr", "erica"]
    reason = cannot_run("knowbert", "cosmosqa")
    assert f"[^1]: {reason}" in lines and text.count(reason) == 1  # said once, in a footnote
    assert table_row(lines, "knowbert")[1:3] == ["cannot run[^1]", "not run yet"]
    assert table_row(lines, "kam")[1] == "cannot run[^1]"
    assert table_row(lines, "kam")[4].startswith("63.0 (n=3)<br>Δ +1.0 [+1.0, +1.0] (n=3)")
    assert table_row(lines, "erica")[1] == "not run yet"  # it can run on multiple choice: no reason, not yet run
    assert table_row(lines, "baseline")[1] == "52.0 (n=3)"


def test_a_readme_cell_counts_its_degenerate_cells(tmp_path):
    results = tmp_path / "results"
    for seed, base in zip((1, 2, 3), (60.0, 62.0, 61.0)):
        write_synthetic_result(results, "baseline", "rte", 1.0, seed, base, **evaluations(30))
        write_synthetic_result(results, "partly", "rte", 1.0, seed, base + 5.0, **evaluations(10 if seed == 3 else 20))
    write_leaderboards(results, tmp_path / "leaderboards")
    lines = (tmp_path / "leaderboards" / "README.md").read_text().splitlines()
    assert table_row(lines, "partly")[4].startswith("66.0 (n=2) ⊘1<br>")  # seed 3 selected at its first evaluation


def test_a_tasks_recipe_stands_in_for_its_plain_cells_where_tasks_are_averaged(tmp_path):
    results = tmp_path / "results"
    for seed in (1, 2, 3):
        for method, shift in (("baseline", 0.0), ("kam", 2.0)):
            write_synthetic_result(results, method, "rte", 1.0, seed, 60.0 + seed + shift)
            write_synthetic_result(results, method, "mrpc", 1.0, seed, 80.0 + seed + shift, variant="balanced")
        write_synthetic_result(results, "baseline", "mrpc", 1.0, seed, 10.0 + seed)  # the shared recipe's
    write_leaderboards(results, tmp_path / "leaderboards")
    lines = (tmp_path / "leaderboards" / "README.md").read_text().splitlines()
    # GLUE's mean: rte 62.0 and MRPC's balanced 82.0 (not the plain 12.0); kam ran both tasks under the same recipes.
    assert table_row(lines, "baseline")[4] == "72.0 (n=3)"
    assert table_row(lines, "kam")[4].startswith("74.0 (n=3)<br>Δ +2.0 [+2.0, +2.0] (n=3)")
    assert any(
        "On glue: mrpc under its balanced recipe (benchmarks/matrix_mrpc.yaml), the recipe every method ran there."
        in line
        for line in lines
    )
    page = (tmp_path / "leaderboards" / "glue.md").read_text().splitlines()
    [overall] = [line for line in page if line.startswith("Against the baseline at 100 %")]
    assert overall.endswith("; mrpc under its balanced recipe (benchmarks/matrix_mrpc.yaml):")
    assert table_row(page[page.index(overall) :], "kam")[1:3] == ["mrpc, rte", "+2.0 ↑"]


def test_a_method_pretrained_twice_has_one_row_in_the_first_table(tmp_path):
    results = tmp_path / "results"
    reach = {"erica-minilm-new": (("glue", "rte"), ("cosmosqa", "main")), "erica-minilm-old": (("glue", "rte"),)}
    for seed in (1, 2, 3):
        write_synthetic_result(results, "baseline", "rte", 1.0, seed, 60.0 + seed)
        write_synthetic_result(results, "baseline", "main", 1.0, seed, 50.0, dataset="cosmosqa", metric="accuracy")
        for backbone, cells in reach.items():
            for dataset, task in cells:
                write_synthetic_result(
                    results,
                    "erica",
                    task,
                    1.0,
                    seed,
                    61.0 + seed,
                    dataset=dataset,
                    metric="accuracy",
                    cell_backbone=backbone,
                    backbone={"checksum": backbone, "path": f"/ckpt/{backbone}", "pretrained_from": "minilm"},
                )
    write_leaderboards(results, tmp_path / "leaderboards")
    first, second = (tmp_path / "leaderboards" / "README.md").read_text().split("## Other methods")
    assert "| erica ⟨erica-minilm-new⟩ |" in first and "erica ⟨erica-minilm-old⟩" not in first
    assert "| erica ⟨erica-minilm-old⟩ |" in second  # its other checkpoint, below


def test_a_comparison_of_cells_on_two_card_models_says_so(tmp_path):
    results = tmp_path / "results"
    h100, h200 = {"name": "NVIDIA H100 80GB HBM3"}, {"name": "NVIDIA H200"}
    for seed in (1, 2, 3):
        write_synthetic_result(
            results,
            "baseline",
            "rte",
            1.0,
            seed,
            60.0 + seed,
            dataset="glue",
            metric="accuracy",
            backbone=MINILM,
            device=h100,
        )
        write_synthetic_result(
            results,
            "mixed",
            "rte",
            1.0,
            seed,
            62.0 + seed,
            dataset="glue",
            metric="accuracy",
            backbone=MINILM,
            device=h200,
        )
        write_synthetic_result(
            results,
            "alike",
            "rte",
            1.0,
            seed,
            61.0 + seed,
            dataset="glue",
            metric="accuracy",
            backbone=MINILM,
            device=h100,
        )
    write_leaderboards(results, tmp_path / "leaderboards")
    readme = (tmp_path / "leaderboards" / "README.md").read_text().splitlines()
    [note] = [
        line
        for line in readme
        if line.endswith(": cards: H100 + H200 mixed: the comparison's cells ran on more than one GPU model")
    ]
    assert table_row(readme, "mixed")[4].endswith(note.split(":")[0])  # the cards said once, in a footnote
    assert "cards" not in table_row(readme, "alike")[4]
    page = (tmp_path / "leaderboards" / "glue.md").read_text().splitlines()
    compared = page[page.index("### rte: against the baseline (accuracy, paired by seed)") :]
    assert table_row(compared, "mixed")[-1] == "better (cards: H100 + H200 mixed) |"
    assert "cards" not in table_row(compared, "alike")[-1]
    provenance = page[page.index("## Provenance") :]
    assert provenance[2].startswith("Cards: H100 + H200 mixed. Each comparison whose cells ran on more than one")
    header = provenance[4].split(" | ")
    assert header[3:5] == ["card", "device"]
    assert sorted(line.split(" | ")[3:5] for line in provenance[6:8]) == [
        ["H100", "NVIDIA H100 80GB HBM3"],
        ["H200", "NVIDIA H200"],
    ]
