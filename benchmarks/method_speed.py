"""Training step time and peak memory of each method as a ratio of the baseline's, same batches, one device.

Every method trains through Lightning on the same batches of the generated task (same seed, so the same
examples, lengths and padding), bf16 on a GPU; steps after the warm-up are timed with the device
synchronised. Knowledge methods read the prepared features, so run `klm prepare --dataset generated
--kg-embeddings` first (with the same KLM_CACHE_DIR and backbone).

    python benchmarks/method_speed.py --backbone minilm --methods baseline,knowbert,knowbert+si+sr,bert+sr,kam
    python benchmarks/method_speed.py --backbone bert-base-shaped ...   # the papers' backbone size
Targets: knowbert ≤ 1.25×, bert+sr ≤ 1.05× (issue 5), kam ≤ 1.3× (issue 6) the baseline's step time.
"""

import argparse
import statistics
import time

import pytorch_lightning as pl
import torch
from rich.console import Console
from rich.table import Table

from knowledge_lm.backbones import load_backbone
from knowledge_lm.config import dataset_defaults
from knowledge_lm.registry import DATASETS, METHODS


class StepTimer(pl.Callback):
    def __init__(self, warmup: int, profile: bool = False):
        self.warmup, self.times, self.started = warmup, [], None
        self.profiler = torch.profiler.profile() if profile else None

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.started = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        if batch_idx >= self.warmup:
            self.times.append(time.perf_counter() - self.started)
        if self.profiler is not None and batch_idx == self.warmup - 1:
            self.profiler.__enter__()
        if self.profiler is not None and batch_idx == self.warmup + 4:
            self.profiler.__exit__(None, None, None)
            print(self.profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def bert_base_shaped(attn_implementation, tokenizer_from: str):
    """A randomly initialised encoder of BERT-base's shape (12 layers, hidden 768), the papers' backbone: step
    times do not depend on the weights, and at MiniLM's size a step is launch-bound, which inflates any
    extra module's share."""
    from transformers import BertConfig, BertModel

    from knowledge_lm.backbones import load_tokenizer

    config = BertConfig(attn_implementation=attn_implementation or "sdpa")
    return BertModel(config, add_pooling_layer=False), load_tokenizer(tokenizer_from)


def measure(method: str, args) -> dict:
    pl.seed_everything(0, verbose=False)
    method_class = METHODS.get(method)
    if args.backbone == "bert-base-shaped":
        encoder, tokenizer = bert_base_shaped(getattr(method_class, "attn_implementation", None), args.tokenizer)
    else:
        encoder, tokenizer, _ = load_backbone(args.backbone, getattr(method_class, "attn_implementation", None))
    options = dict(dataset_defaults("generated").get("dataset_options") or {})
    if getattr(method_class, "needs_knowledge", False):
        options["knowledge"] = {}
    data = DATASETS.get("generated")(tokenizer=tokenizer, batch_size=args.batch_size, max_length=args.max_length, **options)
    data.setup()
    model = method_class(encoder, data.task_spec, eval_splits=data.eval_split_names, total_steps=args.warmup + args.steps)
    timer = StepTimer(args.warmup, profile=method in args.profile.split(","))
    gpu = torch.cuda.is_available()
    trainer = pl.Trainer(max_steps=args.warmup + args.steps, limit_val_batches=0, num_sanity_val_steps=0, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         accelerator="gpu" if gpu else "cpu", devices=1, precision="bf16-mixed" if gpu else "32-true",
                         callbacks=[timer])
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    trainer.fit(model, datamodule=data)
    return {"step_ms": 1000 * statistics.median(timer.times),
            "peak_mib": torch.cuda.max_memory_allocated() / 2**20 if gpu else float("nan")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", default="minilm", help="a backbone, or bert-base-shaped (random weights, BERT-base's shape)")
    parser.add_argument("--tokenizer", default="minilm", help="the backbone whose tokenizer bert-base-shaped uses")
    parser.add_argument("--methods", default="baseline,knowbert,knowbert+si+sr,bert+sr")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=48, help="as benchmarks/generated.yaml, so the prepared features match")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2, help="runs of the whole method list; each method's best median counts")
    parser.add_argument("--profile", default="", help="methods whose 5 steps after the warm-up torch.profiler tabulates")
    args = parser.parse_args()
    methods = args.methods.split(",")
    if methods[0] != "baseline":
        methods.insert(0, "baseline")
    rows = {}
    for _ in range(args.repeats):  # interleaved, so that a slow phase of the machine does not hit one method only
        for method in methods:
            row = measure(method, args)
            if method not in rows or row["step_ms"] < rows[method]["step_ms"]:
                rows[method] = row
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
    table = Table(title=f"training step on {device}, {args.backbone}, batch {args.batch_size}, generated task "
                        f"(best of {args.repeats} medians of {args.steps} steps after {args.warmup})")
    for column in ("method", "step ms", "× baseline", "peak MiB", "× baseline "):
        table.add_column(column, justify="right")
    base = rows["baseline"]
    for method, row in rows.items():
        table.add_row(method, f"{row['step_ms']:.2f}", f"{row['step_ms'] / base['step_ms']:.3f}",
                      f"{row['peak_mib']:.0f}", f"{row['peak_mib'] / base['peak_mib']:.3f}")
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
