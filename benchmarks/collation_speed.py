"""Collation time on CPU, old against new, in one run: a GLUE task's train epoch read row by row and padded by
``DataCollatorWithPadding`` (the old path), against the data module's loader (Arrow slices padded with torch).
Both see the same examples in the same batches; the batches are checked equal.

    python benchmarks/collation_speed.py --task rte --batch-size 32 --max-length 128 --repeats 3
Prints each path's best epoch time and the ratio old / new (issue 31, item 2).
"""

import argparse
import time

import torch
from torch.utils.data import DataLoader
from transformers import DataCollatorWithPadding

from knowledge_lm.core.backbones import tiny_tokenizer
from knowledge_lm.data.glue import GlueDataModule


def old_collate(tokenizer):
    def collate(features):
        batch = DataCollatorWithPadding(tokenizer)(features)
        batch["labels"] = batch["labels"].long()
        return batch

    return collate


def epoch_seconds(loader) -> tuple[float, list]:
    start = time.perf_counter()
    batches = list(loader)
    return time.perf_counter() - start, batches


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="rte", help="a GLUE task (data from ../shared/data or KLM_DATA_DIR)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3, help="epochs per path; the best counts")
    args = parser.parse_args()

    tokenizer = tiny_tokenizer()
    data = GlueDataModule(
        task=args.task,
        tokenizer=tokenizer,
        data_dir=args.data_dir,
        batch_size=args.batch_size,
        max_length=args.max_length,
    )
    data.setup()
    rows = data.encoded["train"]
    old = DataLoader(rows, batch_size=args.batch_size, shuffle=False, collate_fn=old_collate(tokenizer))
    new = data._loader(rows, False, args.batch_size)
    times = {"old": [], "new": []}
    for _ in range(args.repeats):
        for name, loader in (("old", old), ("new", new)):
            seconds, batches = epoch_seconds(loader)
            times[name].append(seconds)
            if name == "old":
                reference = batches
        for expected, got in zip(reference, batches):
            assert all(torch.equal(expected[key], got[key]) for key in expected), "batches differ"
    old_s, new_s = min(times["old"]), min(times["new"])
    print(f"{args.task} train: {len(rows)} examples, {len(reference)} batches of {args.batch_size}")
    print(f"old (rows + DataCollatorWithPadding): {old_s * 1000:.1f} ms/epoch")
    print(f"new (Arrow slices + torch padding):  {new_s * 1000:.1f} ms/epoch")
    print(f"ratio old/new: {old_s / new_s:.2f}x")


if __name__ == "__main__":
    main()
