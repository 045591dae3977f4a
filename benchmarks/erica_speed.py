"""ERICA pretraining throughput, and its step time as a ratio of MLM-only pretraining on the same batches.

Both runs go through ``knowledge_lm.methods.erica.pretraining.pretrain_erica`` with the same seed, so the same documents
in the same order, the same masking and the same sampled pairs; MLM-only encodes one view per document,
ERICA two (the document, and the document behind the ED prefix) plus the RD/ED similarity matrices.
Steps after the warm-up are timed with the device synchronised; data loading is outside the timed span.
Runs on whatever device is there (a GPU when one is visible, else the CPU) and says which; both in the
precision every cell trains in (``build_trainer``'s: bf16-mixed on a GPU, 32-bit on the CPU).

    python benchmarks/erica_speed.py --backbone minilm --corpus redocred --batch-size 8 --steps 20
Target: ERICA ≤ 2× the MLM-only step time on a GPU. The record goes to ``results/speed/`` (``klm leaderboard``
renders it on ``leaderboards/speed.md``).
"""

import argparse
import statistics
from pathlib import Path

import torch

from knowledge_lm.core.backbones import load_backbone
from knowledge_lm.core.results import write_json_atomic
from knowledge_lm.data.base import default_cache_dir
from knowledge_lm.methods.erica.corpus import cached_corpus
from knowledge_lm.methods.erica.pretraining import pretrain_erica
from knowledge_lm.methods.trainer import resolve_precision
from knowledge_lm.report.speed import ERICA_TARGET, speed_record_path
from knowledge_lm.run.provenance import device_name, measured_now
from knowledge_lm.tools.speed import StepTimer


def measure(objectives: str, corpus: list[dict], args) -> float:
    """Median step time in seconds of ``objectives`` pretraining."""
    model, tokenizer, _ = load_backbone(args.backbone, seed=args.seed)
    timer = StepTimer(args.warmup)
    pretrain_erica(
        corpus,
        model,
        tokenizer,
        args.warmup + args.steps,
        batch_size=args.batch_size,
        max_length=args.max_length,
        seed=args.seed,
        objectives=objectives,
        callbacks=[timer],
    )
    return statistics.median(timer.times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", default="minilm")
    parser.add_argument("--corpus", default="generated", help="klm pretrain --corpus sources, e.g. redocred")
    parser.add_argument("--data-dir")
    parser.add_argument("--min-relations", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=512)
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--results-dir", default="results", type=Path, help="the record goes under its speed/")
    parser.add_argument("--no-record", action="store_true", help="print only")
    args = parser.parse_args()

    corpus, path = cached_corpus(args.corpus, default_cache_dir(), args.data_dir, min_relations=args.min_relations)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else f"CPU ({torch.get_num_threads()} threads)"
    mlm = measure("erica-mlm-only", corpus, args)
    erica = measure("erica", corpus, args)
    print(
        f"device: {device}, {resolve_precision()}; backbone {args.backbone}; "
        f"corpus {args.corpus} ({len(corpus)} documents, {path})"
    )
    print(
        f"batch {args.batch_size} documents, max length {args.max_length}, "
        f"median of {args.steps} steps after {args.warmup}"
    )
    print(f"MLM-only: {mlm * 1000:.1f} ms/step, {args.batch_size / mlm:.1f} documents/s")
    print(f"ERICA:    {erica * 1000:.1f} ms/step, {args.batch_size / erica:.1f} documents/s")
    print(f"ERICA / MLM-only step time: {erica / mlm:.2f}× (target ≤ {ERICA_TARGET:g}× on a GPU)")
    if args.no_record:
        return
    record = {
        "schema": 1,
        "kind": "erica",
        "device": device_name(),
        "backbone": args.backbone,
        "precision": resolve_precision(),
        "corpus": args.corpus,
        "documents": len(corpus),
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "steps": args.steps,
        "warmup": args.warmup,
        "mlm_ms": round(mlm * 1000, 3),
        "erica_ms": round(erica * 1000, 3),
        **measured_now(),
    }
    path = speed_record_path(args.results_dir, record)
    write_json_atomic(path, record)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
