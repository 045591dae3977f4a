"""Training step time, samples/s, peak memory and TFLOP/s of each method as a ratio of the baseline's (same
batches, one device), and the baseline against a bare PyTorch loop: `klm speed` without storing a record.
See knowledge_lm/tools/speed.py for what is measured and how. Run `klm prepare --dataset generated --kg-embeddings`
first (with the same KLM_CACHE_DIR and backbone).

    python benchmarks/method_speed.py --backbone minilm --methods baseline,knowbert,knowbert+si+sr,bert+sr,kam,kam+si
    python benchmarks/method_speed.py --backbone bert-base-shaped ...   # the papers' backbone size
Targets: knowbert ≤ 1.25×, bert+sr ≤ 1.05× (issue 5), kam ≤ 1.3× (issue 6), every knowledge method ≤ 1.3× (issue 31)
the baseline's step time; the baseline through Lightning ≥ 1.0× the bare loop's samples/s (issue 8). kam+si is in
the default list: its selective injection drops map entries in the step (``KamKnowledge.maps``), the part of a
kam+si step kam's lacks.
"""

import argparse

from knowledge_lm.report.speed import render_speed
from knowledge_lm.tools.speed import run_speed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backbone", default="minilm", help="a backbone, or bert-base-shaped (random weights, BERT-base's shape)"
    )
    parser.add_argument("--tokenizer", default="minilm", help="the backbone whose tokenizer bert-base-shaped uses")
    parser.add_argument("--methods", default="baseline,knowbert,knowbert+si+sr,bert+sr,kam,kam+si")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--max-length", type=int, default=48, help="as benchmarks/generated.yaml, so the prepared features match"
    )
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument(
        "--repeats", type=int, default=2, help="runs of the whole method list; each method's best median counts"
    )
    args = parser.parse_args()
    record = run_speed(
        args.methods.split(","),
        backbone=args.backbone,
        batch_size=args.batch_size,
        max_length=args.max_length,
        warmup=args.warmup,
        steps=args.steps,
        repeats=args.repeats,
        tokenizer=args.tokenizer,
    )
    print(render_speed([record]))


if __name__ == "__main__":
    main()
