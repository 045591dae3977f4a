"""Small helpers shared by the tests (pytest puts this folder on the import path)."""

import gzip
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"  # ../shared/data beside the checkout
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data is not here")


def write(path: Path, text: str, compress: bool = False) -> Path:
    """Write ``text`` to ``path`` (``path.gz`` when ``compress``), making its folders; returns the file written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if compress:
        path = path.with_name(path.name + ".gz")
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def stored_result(cell, **fields) -> dict:
    """A result of ``CellResult``'s shape for ``cell`` (a ``knowledge_lm.core.results.Cell``), as a store holds one; its
    values are placeholders, ``fields`` override them."""
    return {
        "cell": {**cell.__dict__, "backbone": cell.backbone_label},
        "config": {},
        "git": {"commit": "0" * 10, "dirty": False},
        "versions": {},
        "device": {"name": "cpu"},
        "backbone": {"name": cell.backbone_label, "path": None, "checksum": None},
        "data": {},
        "budget": {},
        "report_split": "test",
        "metrics": {"test": {"accuracy": 50.0}},
        "wall_time_s": 1.0,
        **fields,
    }


def tiny_bench(capsys, tmp_path: Path, *args: str) -> tuple[int, list[str]]:
    """``klm bench ARGS`` on the tiny backbone with its results, runs and leaderboards under ``tmp_path``: its exit
    code and the lines it wrote on stderr."""
    from knowledge_lm.cli import main

    code = main(
        [
            "bench",
            "--results-dir",
            str(tmp_path / "results"),
            "--runs-dir",
            str(tmp_path / "runs"),
            "--leaderboards-dir",
            str(tmp_path / "leaderboards"),
            "--backbone",
            "tiny",
            *args,
        ]
    )
    return code, capsys.readouterr().err.strip().splitlines()


GLUE_METRICS = {"rte": "accuracy", "cola": "matthews", "mrpc": "f1"}


def write_synthetic_result(
    results,
    method,
    task,
    fraction,
    seed,
    value,
    report_split="dev",
    dataset="glue",
    metric=None,
    variant="",
    cell_backbone="minilm",
    **extra,
) -> None:
    """Write a cell's result (of backbone ``cell_backbone``, default minilm) to the store ``results``: ``value`` of
    ``metric`` (default: the glue task's own, ``GLUE_METRICS``) on ``report_split``, of sweep ``variant`` where one
    is given, with placeholder provenance; the ``extra`` keys (e.g. ``git``, ``protocol``, ``evaluations``,
    ``backbone``) added or replacing."""
    from knowledge_lm.core.results import Cell, write_json_atomic

    cell = Cell(method, dataset, task, fraction, seed, cell_backbone, variant)
    write_json_atomic(
        cell.result_path(results),
        {
            "cell": {
                "method": method,
                "dataset": dataset,
                "task": task,
                "fraction": fraction,
                "seed": seed,
                "backbone": cell_backbone,
                **({"variant": variant} if variant else {}),
            },
            "report_split": report_split,
            "metrics": {report_split: {metric or GLUE_METRICS[task]: value}},
            "device": {"name": "Test GPU"},
            "backbone": {"checksum": "abc", "path": None},
            "git": {"commit": "0123456789abcdef"},
            "wall_time_s": 60.0,
            "data": {"subset_hash": "h", "train_size": 100},
            "budget": {"max_steps": 10, "per_device_batch_size": 32},
            "config": {},
            "versions": {},
            **extra,
        },
    )


def dataset_page(results, out, **options) -> Path:
    """The one dataset page ``write_leaderboards`` writes from ``results`` (beside README.md, claims.md and the
    pretraining page)."""
    from knowledge_lm.report.leaderboard import write_leaderboards

    written = write_leaderboards(results, out, **options)
    others = ("README.md", "claims.md", "pretraining.md")
    [page] = [path for path in written if path.name not in others and path.parent == Path(out)]
    return page


def speed_record(**fields) -> dict:
    """A ``klm speed`` record of one GPU at MiniLM's batch shape, its baseline step 10 ms and no bare loop; ``fields``
    replace or add keys."""
    return {
        "device": "GPU X",
        "backbone": "minilm",
        "batch_size": 32,
        "max_length": 48,
        "precision": "bf16-mixed",
        "repeats": 1,
        "steps": 10,
        "warmup": 2,
        "git": {"commit": "abc"},
        "measured_at": "2026-11-26T15:35:39+00:00",
        "methods": {"baseline": {"step_ms": 10.0, "samples_per_s": 3200.0, "peak_mib": None, "tflops": 1.0}},
        "bare_loop": None,
        **fields,
    }
