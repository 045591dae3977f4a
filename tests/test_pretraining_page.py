"""The pretraining page: every run once, the current one marked, repeated runs compared by checksum."""

from knowledge_lm.report.pretraining import render_pretraining


def record(checksum: str, at: str, commit: str, mlm: float, **extra) -> dict:
    return {
        "checkpoint": "erica-minilm",
        "checkpoint_checksum": checksum * 8,
        "recorded_at": at,
        "method": "erica",
        "seed": 0,
        "corpus_hash": "c0ffee" * 4,
        "steps": 800,
        "batch_size": 8,
        "micro_batch_size": 8,
        "max_length": 512,
        "lr": 3e-5,
        "deterministic": True,
        "git": {"commit": commit},
        "final_losses": {"mlm": mlm},
        "mean_losses": {"mlm": mlm},
        "rd_positives": {"intra/intra": {"mean_per_batch": 466.7, "zero_batches_share": 0.0}, "micro_batches": 800},
        **extra,
    }


def test_repeated_runs_are_compared_and_copies_dropped():
    same = [record("a", "2026-11-27T10:00", "c1", 7.5), record("a", "2026-11-27T11:00", "c1", 7.5)]
    apart = [record("b", "2026-11-27T12:00", "c2", 7.5), record("d", "2026-11-27T13:00", "c2", 7.501)]
    canonical = dict(same[1])  # <checkpoint>.json repeats a timestamped run
    page = render_pretraining([*same, *apart, canonical], {(canonical["checkpoint_checksum"], "2026-11-27T11:00")})

    rows = [line for line in page.splitlines() if line.startswith("| erica-minilm")]
    assert len(rows) == 4
    assert sum("●" in row for row in rows) == 1
    assert "intra/intra 467 (0 % none)" in rows[0]
    assert "commit c1: 2 runs, one checkpoint (aaaaaaaa)." in page
    assert "commit c2: 2 runs, 2 checkpoints (bbbbbbbb, dddddddd; deterministic kernels asked)" in page
    assert "apart by up to 1.3e-04 relative" in page


def test_no_repeats():
    page = render_pretraining([record("a", "2026-11-27T10:00", "c1", 7.5)], set())
    assert "No run was repeated." in page
