"""Operator launches of one training step (forward, losses, backward) of each method as a ratio of the
baseline's, on the CPU: a proxy, without a GPU, for a step that is bound by host launch time, as a MiniLM step
at batch 32 × 48 is on an H100 (there the baseline's GPU time is ~4 ms of a 14 ms step).

Counted: the leaf aten operators of the step under ``torch.profiler`` that compute (each would be a kernel
launch on a GPU); views, reshapes, allocations and other metadata operators do not launch kernels and are left
out. Same model and batches as ``klm speed`` (knowledge_lm/tools/speed.py). A rough proxy: knowbert counts 1.53× the
baseline's operators here and its step took 1.52× the baseline's on a 4 × H100 host (leaderboards/speed.md),
but the agreement is partly luck. A GPU runs some parts differently: SR's eigenvector iteration replays as one
CUDA graph (bert+sr counts high here), and attention with a mask and dropout is one fused kernel there but
~20 operators in the CPU's math path (KAR's two attention blocks count high here; KAR's Python between its
modules, about 50 operators a forward, counts the same). Run ``klm prepare --dataset generated --tasks facts
--kg-embeddings`` first.

    python benchmarks/kernel_counts.py --methods knowbert,knowbert+si+sr,bert+sr,kam [--top 15]
Targets (step time, on a GPU): knowbert ≤ 1.25×, bert+sr ≤ 1.05×, kam ≤ 1.3× the baseline's.
"""

import argparse
from collections import Counter

import torch
from torch.profiler import ProfilerActivity, profile

from knowledge_lm.methods.trainer import build_trainer
from knowledge_lm.tools.speed import build

NO_KERNEL = {
    "aten::" + name
    for name in (
        "view",
        "_unsafe_view",
        "_reshape_alias",
        "reshape",
        "as_strided",
        "alias",
        "t",
        "transpose",
        "permute",
        "expand",
        "expand_as",
        "view_as",
        "slice",
        "select",
        "narrow",
        "unsqueeze",
        "squeeze",
        "unsqueeze_",
        "squeeze_",
        "flatten",
        "unflatten",
        "split",
        "chunk",
        "unbind",
        "detach",
        "lift_fresh",
        "resolve_conj",
        "resolve_neg",
        "empty",
        "empty_strided",
        "empty_like",
        "new_empty",
        "new_empty_strided",
        "resize_",
        "set_",
        "result_type",
        "size",
        "stride",
        "contiguous",
        "to",
        "_to_copy",
        "linear",
        "matmul",
        "dropout",
        "clone",
        "zeros",
        "ones",
        "new_zeros",
        "scalar_tensor",
        "_has_compatible_shallow_copy_type",
        "numpy_T",
    )
}


def launches(method: str, backbone: str, batch_size: int, max_length: int) -> Counter:
    """Kernel-launching operators of one training step of ``method``, by name."""
    model, data = build(method, backbone, batch_size, max_length, total_steps=10)
    build_trainer(1).fit(model, datamodule=data)  # runs the methods' setup hooks (entity tables, SR state)
    model.cpu().train()
    batch = model.on_after_batch_transfer(next(iter(data.train_dataloader())), 0)

    def step():
        sum(model.losses(batch).values()).backward()
        model.zero_grad(set_to_none=True)

    step()  # first-call work (lazy initialisation, caches) is not a step's
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        step()

    def computes(event) -> bool:
        return event.name.startswith("aten::") and event.name not in NO_KERNEL

    return Counter(
        event.name
        for event in profiler.events()
        if computes(event) and not any(computes(child) for child in event.cpu_children)
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", default="minilm")
    parser.add_argument("--methods", default="knowbert,knowbert+si+sr,bert+sr,kam")
    parser.add_argument("--batch-size", type=int, default=4, help="launch counts do not depend on it")
    parser.add_argument(
        "--max-length", type=int, default=48, help="as benchmarks/generated.yaml, so the prepared features match"
    )
    parser.add_argument("--top", type=int, default=0, help="also list the operators each method adds, most first")
    args = parser.parse_args()
    torch.set_num_threads(1)
    baseline = launches("baseline", args.backbone, args.batch_size, args.max_length)
    print(
        "| method | operator launches per step | × baseline |\n|---|---|---|\n"
        f"| baseline | {sum(baseline.values())} | 1.00 |"
    )
    added = {}
    for method in [name for name in args.methods.split(",") if name != "baseline"]:
        counts = launches(method, args.backbone, args.batch_size, args.max_length)
        print(f"| {method} | {sum(counts.values())} | {sum(counts.values()) / sum(baseline.values()):.2f} |")
        added[method] = counts - baseline
    for method, extra in added.items() if args.top else ():
        print(f"\n{method}: " + ", ".join(f"{name[6:]} +{count}" for name, count in extra.most_common(args.top)))


if __name__ == "__main__":
    main()
