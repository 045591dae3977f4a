"""`klm speed` stores a record whose table `klm leaderboard` renders again, byte for byte."""

import json

import pytest
from helpers import speed_record

from knowledge_lm.cli import main
from knowledge_lm.core.results import load_results
from knowledge_lm.report.leaderboard import write_leaderboards
from knowledge_lm.report.speed import render_speed, speed_record_path


def test_speed_record_and_table(tmp_path, capsys):
    results, boards = tmp_path / "results", tmp_path / "leaderboards"
    assert (
        main(
            [
                "speed",
                "--backbone",
                "tiny",
                "--methods",
                "baseline,bert+sr",
                "--steps",
                "2",
                "--warmup",
                "1",
                "--repeats",
                "1",
                "--batch-size",
                "8",
                "--results-dir",
                str(results),
                "--leaderboards-dir",
                str(boards),
            ]
        )
        == 0
    )
    [record_path] = (results / "speed").glob("*.json")
    record = json.loads(record_path.read_text())
    assert set(record["methods"]) == {"baseline", "bert+sr"} and record["bare_loop"]["step_ms"] > 0
    assert all(row["flops_per_step"] > 0 for row in record["methods"].values())
    table = (boards / "speed.md").read_text()
    assert "| bert+sr |" in table and "≤ 1.05×" in table and "bare PyTorch loop" in table and "tiny, batch 8" in table
    write_leaderboards(results, boards)
    assert (boards / "speed.md").read_text() == table
    assert load_results(results) == []  # a speed record is not a cell


def test_speed_refuses_bad_shapes(capsys):
    assert main(["speed", "--backbone", "tiny", "--steps", "0"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: --steps must be > 0")


@pytest.mark.slow
def test_compiled_speed_record_is_its_own_table(tmp_path):
    """--compile (the training setting ``compile``): the record says so, gets its own file and heading."""
    results, boards = tmp_path / "results", tmp_path / "leaderboards"
    assert (
        main(
            [
                "speed",
                "--backbone",
                "tiny",
                "--methods",
                "bert+sr",
                "--steps",
                "2",
                "--warmup",
                "2",
                "--repeats",
                "1",
                "--batch-size",
                "8",
                "--compile",
                "--results-dir",
                str(results),
                "--leaderboards-dir",
                str(boards),
            ]
        )
        == 0
    )
    [record_path] = (results / "speed").glob("*.json")
    assert "-compiled-" in record_path.name and json.loads(record_path.read_text())["compiled"] is True
    assert "layers compiled (torch.compile)" in (boards / "speed.md").read_text()


def test_compile_mode_names_the_record_and_its_table():
    """Records before compile modes (``compiled`` only) keep their names; other modes get their own."""
    from knowledge_lm.report.speed import render_speed, speed_record_path

    base = speed_record()
    old, graphs = {**base, "compiled": True}, {**base, "compiled": True, "compile_mode": "reduce-overhead"}
    assert speed_record_path("r", old).name == "GPU-X-minilm-b32-n48-compiled-20261126T153539.json"
    assert speed_record_path("r", graphs).name == "GPU-X-minilm-b32-n48-compiled-reduce-overhead-20261126T153539.json"
    text = render_speed([graphs, old, {**base, "compiled": False}])
    headings = [line for line in text.splitlines() if line.startswith("## GPU X")]
    assert [
        heading.endswith(end)
        for heading, end in zip(headings, ("length ≤ 48", "(torch.compile)", "mode reduce-overhead)"))
    ] == [True] * 3


def test_step_timer_counts_steps_across_epochs():
    """batch_idx starts again each epoch; the warm-up is counted in steps (a large batch makes epochs short)."""
    from knowledge_lm.tools.speed import StepTimer

    timer = StepTimer(warmup=3)
    for batch_idx in [0, 1, 0, 1, 0, 1]:
        timer.on_train_batch_start(None, None, None, batch_idx)
        timer.on_train_batch_end(None, None, None, None, batch_idx)
    assert len(timer.times) == 3


def test_a_method_faster_than_the_baseline_flags_the_table():
    """Every target method only adds work to the baseline's step: one measured clearly faster means noise."""
    from knowledge_lm.report.speed import render_speed

    row = lambda ms: {"step_ms": ms, "samples_per_s": 1.0, "peak_mib": None, "tflops": 1.0}  # noqa: E731
    record = speed_record(methods={"baseline": row(50.0), "bert+sr": row(40.0)})
    assert "Unreliable: bert+sr ran at 0.80×" in render_speed([record])
    record["bare_loop"] = row(45.0)  # the bare loop's row stays in the table, above the note
    lines = render_speed([record]).splitlines()
    assert lines.index(next(line for line in lines if line.startswith("| bare PyTorch loop"))) < lines.index(
        next(line for line in lines if line.startswith("Unreliable"))
    )
    record["bare_loop"] = None
    record["methods"]["bert+sr"] = row(49.0)
    assert "Unreliable" not in render_speed([record])


def test_summary_gives_each_shape_the_spread_of_its_ratios():
    """One row per shape over its measurements: lowest–highest ratio and how many met the target; the bare loop's
    ratio as Lightning's samples/s over the loop's; a table flagged unreliable stays out."""
    from knowledge_lm.report.speed import speed_summary

    row = lambda ms: {"step_ms": ms, "samples_per_s": 1.0, "peak_mib": None, "tflops": 1.0}  # noqa: E731
    base = {"device": "GPU X", "backbone": "minilm", "batch_size": 32, "max_length": 48, "git": {"commit": "abcdef12"}}
    records = [
        {**base, "methods": {"baseline": row(10.0), "kam": row(12.0)}, "bare_loop": row(11.0)},
        {**base, "methods": {"baseline": row(10.0), "kam": row(14.0)}, "bare_loop": row(9.0)},
        {**base, "methods": {"baseline": row(10.0), "kam": row(9.0)}, "bare_loop": None},
    ]
    [line] = [line for line in speed_summary(records) if line.startswith("| GPU X")]
    assert "| 2 (abcdef1) |" in line and "1.20–1.40 (1/2 met)" in line and line.endswith("| 0.90–1.10 |")


def test_padded_batches_have_the_length_and_their_own_record_name(tmp_path):
    from knowledge_lm.report.speed import shape_title, speed_record_path
    from knowledge_lm.tools.speed import build

    _, data = build("baseline", "tiny", 4, 64, total_steps=2, padded=True)
    batch = next(iter(data.train_dataloader()))
    assert batch["input_ids"].shape == (4, 64) and batch["attention_mask"].shape == (4, 64)
    _, unpadded = build("baseline", "tiny", 4, 64, total_steps=2)
    assert next(iter(unpadded.train_dataloader()))["input_ids"].shape[1] < 64  # the generated texts are short
    record = {"device": "CPU", "backbone": "tiny", "batch_size": 4, "max_length": 64, "padded": True}
    record["measured_at"] = "2026-11-27T01:00:00+00:00"
    assert speed_record_path(tmp_path, record).name == "CPU-tiny-b4-n64-padded-20261127T010000.json"
    assert shape_title(record).endswith("length = 64")


def test_erica_record_renders_its_ratio_against_the_target(tmp_path):
    record = {
        "schema": 1,
        "kind": "erica",
        "device": "NVIDIA H200",
        "backbone": ".device/minilm",
        "precision": "bf16-mixed",
        "corpus": "generated",
        "documents": 400,
        "batch_size": 8,
        "max_length": 512,
        "steps": 20,
        "warmup": 3,
        "mlm_ms": 20.0,
        "erica_ms": 50.0,
        "git": {"commit": "0123456789abcdef", "dirty": False},
        "versions": {},
        "measured_at": "2026-11-27T04:00:00+00:00",
    }
    assert speed_record_path(tmp_path, record).name == "NVIDIA-H200-minilm-erica-20261127T040000.json"
    page = render_speed([record])
    assert "## ERICA pretraining against MLM-only" in page
    assert "| 20.0 | 50.0 | 2.50 | ≤ 2× NOT met: 1.25× the target | 0123456789 |" in page
