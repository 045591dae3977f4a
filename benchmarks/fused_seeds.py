"""Fused seeds: S seeds of one baseline cell trained as one model in one process, against the same seeds trained one
after another, and against them packed: S processes at once on the one device, as the runner packs cells (issue 31,
item 3). Measurement only; the runner does not use it.

Separate: each seed's ``Baseline`` (TaskModel over a BERT encoder, a sentence-pair classification head) trains on
its own batches as a cell's step does: the task loss, gradients clipped to norm 1.0, AdamW with warm-up and linear
decay (``configure_optimizers``), bf16 autocast on a GPU. Fused: the S models' parameters stacked
(``torch.func.stack_module_state``), one forward and backward of ``functional_call`` under ``vmap`` over a stacked
batch (S × b × n), each seed's gradients clipped to norm 1.0 on their own, and one AdamW over the stacked
parameters. Every seed keeps its own head initialisation, its own data order and, in training mode, its own
dropout masks (``vmap(randomness="different")``). The fused encoder gets its padding mask as the 4-d mask
transformers would build for its attention (boolean for SDPA, additive for eager), and its SDPA runs the math
kernel (``sdpa_kernel([SDPBackend.MATH])``): under vmap the memory-efficient kernel's backward fails on a GPU. The
separate path keeps the cells' kernels, so the timing compares fusing with what cells run.

Equality: dropout draws from one generator, and under vmap the S seeds' masks come from one draw, so no fused run
reproduces separate runs' masks; the two agree in distribution only. The check therefore runs with dropout off
(eval mode; BERT has no batch statistics, so that is train mode without dropout) in float32, and compares every
seed's loss at every step and its parameters at the end. Each seed's batch is padded to its own longest text in the
separate path and to the longest of the S batches in the fused one, so the check covers that difference too. The
timing runs in training mode (dropout on) at the cells' precision.

    python benchmarks/fused_seeds.py                    # MiniLM, 4 seeds, batch 32, length ≤ 48
    python benchmarks/fused_seeds.py --tiny             # the tiny backbone, a few steps: a quick run
    python benchmarks/fused_seeds.py --backbone .device/minilm --steps 100 --warmup 20   # on a GPU (pack.sh)
    python benchmarks/fused_seeds.py --tiny --attn eager   # eager attention in both paths (default: sdpa)
    python benchmarks/fused_seeds.py --backbone .device/minilm --packed --mps   # also packed, under an MPS daemon
Prints the equality check, then each path's seed-steps/s and the ratio fused / separate (> 1: fusing is faster);
with ``--packed`` also the packed path's (its S processes' seed-steps over the wall from their common start, after
each one's warm-up, to the last one's end) and fused / packed.
"""

import argparse
import copy
import queue
import sys
import tempfile
import time
from contextlib import nullcontext

import torch
import torch.multiprocessing as multiprocessing
from torch.func import functional_call, stack_module_state, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import get_linear_schedule_with_warmup

from knowledge_lm.core.backbones import load_backbone
from knowledge_lm.core.errors import KlmError
from knowledge_lm.data.base import TaskSpec
from knowledge_lm.methods.baseline import Baseline
from knowledge_lm.methods.optim import NO_DECAY
from knowledge_lm.methods.trainer import GRADIENT_CLIP
from knowledge_lm.tasks.padding import pad

SPEC = TaskSpec("pairs", "classification", ("entailment", "not_entailment"), ("accuracy",), "accuracy")
TINY = dict(backbone="tiny", batch_size=8, max_length=16, examples=64, warmup=1, steps=5, check_steps=3)
# float32, dropout off: the two paths differ by the order of float sums only (batched kernels, padding width).
LOSS_RTOL, LOSS_ATOL = 1e-4, 1e-5
# Parameters are compared by what training moved them: ‖θ_fused − θ_separate‖ / ‖θ_separate − θ_initial‖ per seed.
# Not element by element: AdamW moves an element by up to lr a step however small its gradient, so an element whose
# gradient is rounding noise differs by about lr between the paths (MiniLM, 5 steps: 1e-5) while the update agrees.
UPDATE_RTOL = 1e-3
# The encoder attention implementations whose 4-d padding mask ``attention_mask_4d`` builds.
ATTENTION_MASKS = ("sdpa", "eager")


def synthetic_pairs(count: int, max_length: int, tokenizer, seed: int = 0) -> list[dict]:
    """``count`` GLUE-like sentence pairs: ``[CLS] a [SEP] b [SEP]`` of random word pieces, each of its own length
    up to ``max_length``, with token types and a binary label."""
    generator = torch.Generator().manual_seed(seed)
    first_id = max(tokenizer.all_special_ids) + 1
    pairs = []
    for _ in range(count):
        length = int(torch.randint(8, max_length + 1, (), generator=generator))
        first = int(torch.randint(2, length - 4, (), generator=generator))
        words = torch.randint(first_id, len(tokenizer), (length - 3,), generator=generator).tolist()
        cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
        input_ids = [cls, *words[:first], sep, *words[first:], sep]
        token_type_ids = [0] * (first + 2) + [1] * (length - first - 2)
        label = int(torch.randint(0, 2, (), generator=generator))
        pairs.append({"input_ids": input_ids, "token_type_ids": token_type_ids, "labels": label})
    return pairs


def seed_batches(examples: list[dict], seed: int, batch_size: int):
    """One seed's training batches (lists of examples), epoch after epoch, in an order drawn from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(len(examples), generator=generator).tolist()
        for start in range(0, len(order) - batch_size + 1, batch_size):
            yield [examples[index] for index in order[start : start + batch_size]]


def collate(examples: list[dict], width: int | None = None, pad_id: int = 0) -> dict[str, torch.Tensor]:
    """The encoder inputs padded on the right to ``width`` (None: the longest example), with the labels."""
    ids = [example["input_ids"] for example in examples]
    return {
        "input_ids": pad(ids, pad_id, width),
        "token_type_ids": pad([example["token_type_ids"] for example in examples], 0, width),
        "attention_mask": pad([[1] * len(sequence) for sequence in ids], 0, width),
        "labels": torch.tensor([example["labels"] for example in examples], dtype=torch.long),
    }


def stacked_batch(per_seed: list[list[dict]], pad_id: int = 0) -> dict[str, torch.Tensor]:
    """The seeds' batches as one S × b × n batch, each padded to the longest text of all of them."""
    width = max(len(example["input_ids"]) for examples in per_seed for example in examples)
    batches = [collate(examples, width, pad_id) for examples in per_seed]
    return {name: torch.stack([batch[name] for batch in batches]) for name in batches[0]}


def to_device(batch: dict, device) -> dict:
    return {name: tensor.to(device, non_blocking=True) for name, tensor in batch.items()}


def seed_models(encoder, seeds: list[int], total_steps: int, device) -> list[Baseline]:
    """One baseline model per seed: the same encoder weights, a task head initialised from the seed (as a cell's
    ``seed_everything`` before building its model does)."""
    models = []
    for seed in seeds:
        torch.manual_seed(seed)
        models.append(Baseline(copy.deepcopy(encoder), SPEC, total_steps=total_steps).to(device))
    return models


def autocast(device: torch.device, precision: str):
    """The cells' mixed precision: bf16 autocast on a GPU where ``precision`` is ``auto``; else float32."""
    enabled = precision == "auto" and device.type == "cuda"
    return torch.autocast(device.type, dtype=torch.bfloat16) if enabled else nullcontext()


def synchronize(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class SeparateSeed:
    """One seed trained as a cell trains it: its own model, optimiser, schedule and dropout generator."""

    def __init__(self, model: Baseline, seed: int):
        self.model, self.seed = model, seed
        config = model.configure_optimizers()
        self.optimizer, self.scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]

    def step(self, batch: dict, precision: str) -> torch.Tensor:
        with autocast(batch["labels"].device, precision):
            loss = self.model.losses(batch)["task"]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), GRADIENT_CLIP)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()


def attention_mask_4d(mask: torch.Tensor, implementation: str, dtype: torch.dtype) -> torch.Tensor:
    """A b × n padding mask as the b × 1 × n × n mask that transformers builds from it for the encoder's attention
    ``implementation``: boolean (True: attend) for ``sdpa``; for ``eager``, which adds the mask to its scores, 0 where
    a token is attended and ``dtype``'s lowest value where it is padding (a boolean mask added there would mask
    nothing). Built here because transformers drops an all-ones mask after reading its values (``mask.all()``), which
    vmap cannot do; a 4-d mask reaches attention as it is."""
    keep = mask.bool()[:, None, None, :].expand(mask.shape[0], 1, mask.shape[1], mask.shape[1])
    if implementation == "sdpa":
        return keep
    return torch.zeros(keep.shape, dtype=dtype, device=keep.device).masked_fill(~keep, torch.finfo(dtype).min)


class FusedSeeds:
    """S seeds' models as one: their parameters and buffers stacked along a first axis of size S, one vmapped
    forward and backward over an S × b × n batch, per-seed gradient clipping and one AdamW over the stacked
    parameters (AdamW works element by element, so that is S AdamWs). Hyperparameters and schedule are the
    separate models' (``adamw_with_warmup``'s groups: biases and norms not decayed)."""

    def __init__(self, models: list[Baseline]):
        self.seeds = len(models)
        self.params, self.buffers = stack_module_state(models)
        # The stateless copy functional_call runs: its tensors live on the meta device, the stacked ones are used.
        self.base = copy.deepcopy(models[0]).to("meta")
        first = models[0]
        self.attention, self.mask_dtype = first.encoder.config._attn_implementation, first.encoder.dtype
        if self.attention not in ATTENTION_MASKS:
            raise KlmError(f"fused seeds support {' and '.join(ATTENTION_MASKS)} attention, not {self.attention!r}")
        named = list(self.params.items())
        groups = [
            {"params": [p for n, p in named if not n.endswith(NO_DECAY)], "weight_decay": first.weight_decay},
            {"params": [p for n, p in named if n.endswith(NO_DECAY)], "weight_decay": 0.0},
        ]
        self.optimizer = torch.optim.AdamW([group for group in groups if group["params"]], lr=first.lr)
        warmup = int(first.warmup_ratio * first.total_steps)
        self.scheduler = get_linear_schedule_with_warmup(self.optimizer, warmup, first.total_steps)

    def train(self, mode: bool = True) -> "FusedSeeds":
        self.base.train(mode)
        return self

    def seed_loss(self, params, buffers, batch) -> torch.Tensor:
        batch = {**batch, "attention_mask": attention_mask_4d(batch["attention_mask"], self.attention, self.mask_dtype)}
        logits, _ = functional_call(self.base, (params, buffers), (batch,))
        return self.base.kind.loss(logits, batch)

    def step(self, batch: dict, precision: str) -> torch.Tensor:
        """One training step of every seed on its slice of ``batch``; the S losses."""
        randomness = "different" if self.base.training else "error"
        # SDPA's math kernel: vmap folds the seeds into the batch of the fused kernels, whose memory-efficient
        # backward on a GPU then fails (LSE is not correctly aligned) and whose CPU flash kernel loops per example.
        kernel = sdpa_kernel([SDPBackend.MATH]) if self.attention == "sdpa" else nullcontext()
        with autocast(batch["labels"].device, precision), kernel:
            losses = vmap(self.seed_loss, randomness=randomness)(self.params, self.buffers, batch)
        # Each seed's loss reaches only its own slice of the parameters: the sum's gradient is each seed's own.
        losses.sum().backward()
        self.clip_per_seed(GRADIENT_CLIP)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return losses.detach()

    def clip_per_seed(self, max_norm: float):
        """``clip_grad_norm_`` applied to each seed's gradients alone: one total norm per seed."""
        grads = [p.grad for p in self.params.values() if p.grad is not None]
        norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads])  # parameters × S
        total = torch.linalg.vector_norm(norms, dim=0)
        scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        torch._foreach_mul_(grads, [scale.view(-1, *[1] * (g.dim() - 1)) for g in grads])

    def seed_parameters(self, index: int) -> dict[str, torch.Tensor]:
        return {name: tensor[index] for name, tensor in self.params.items()}


def check_equal(encoder, seeds, examples, batch_size, steps, device, pad_id=0) -> dict:
    """Both paths with dropout off in float32 for ``steps`` steps: every seed's losses per step, each path's, and
    the largest parameter difference at the end."""
    separate_losses, separate_params, initial_params = [], [], []
    for seed, model in zip(seeds, seed_models(encoder, seeds, steps, device)):
        initial_params.append({name: p.detach().cpu().clone() for name, p in model.named_parameters()})
        trainer, batches = SeparateSeed(model.eval(), seed), seed_batches(examples, seed, batch_size)
        torch.manual_seed(seed)
        losses = [trainer.step(to_device(collate(next(batches), pad_id=pad_id), device), "32") for _ in range(steps)]
        separate_losses.append(torch.stack(losses).cpu())
        separate_params.append({name: p.detach().cpu() for name, p in model.named_parameters()})
    fused = FusedSeeds(seed_models(encoder, seeds, steps, device)).train(False)
    streams = [seed_batches(examples, seed, batch_size) for seed in seeds]
    fused_losses = torch.stack(
        [fused.step(to_device(stacked_batch([next(s) for s in streams], pad_id), device), "32") for _ in range(steps)]
    ).T.cpu()
    differences, updates = [], []
    for index, (params, initial) in enumerate(zip(separate_params, initial_params)):
        fused_params = {name: tensor.detach().cpu() for name, tensor in fused.seed_parameters(index).items()}
        differences.append(torch.cat([(fused_params[name] - value).flatten() for name, value in params.items()]))
        updates.append(torch.cat([(value - initial[name]).flatten() for name, value in params.items()]))
    update_difference = max(float(d.norm() / u.norm()) for d, u in zip(differences, updates))
    separate = torch.stack(separate_losses)
    return {
        "separate_losses": separate,
        "fused_losses": fused_losses,
        "loss_difference": float((fused_losses - separate).abs().max()),
        "parameter_difference": max(float(d.abs().max()) for d in differences),
        "update_difference": update_difference,
        "equal": torch.allclose(fused_losses, separate, rtol=LOSS_RTOL, atol=LOSS_ATOL)
        and update_difference <= UPDATE_RTOL,
    }


def train_seed(model, seed, examples, batch_size, warmup, steps, device, precision, pad_id, at_warmup) -> None:
    """One seed's ``warmup + steps`` steps as a cell's step runs them (``SeparateSeed``), dropout on; ``at_warmup()``
    runs once, with the device synchronised and the first timed batch ready, just before the first timed step."""
    trainer, batches = SeparateSeed(model.train(), seed), seed_batches(examples, seed, batch_size)
    torch.manual_seed(seed)
    for index in range(warmup + steps):
        batch = to_device(collate(next(batches), pad_id=pad_id), device)
        if index == warmup:
            synchronize(device)
            at_warmup()
        trainer.step(batch, precision)
    synchronize(device)


def time_separate(encoder, seeds, examples, batch_size, warmup, steps, device, precision, pad_id=0) -> dict:
    """The seeds one after another, dropout on: seconds of the timed steps (after each seed's warm-up), summed."""
    seconds, peak = 0.0, 0
    for seed, model in zip(seeds, seed_models(encoder, seeds, warmup + steps, device)):
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        started = []
        train_seed(
            model,
            seed,
            examples,
            batch_size,
            warmup,
            steps,
            device,
            precision,
            pad_id,
            at_warmup=lambda: started.append(time.perf_counter()),
        )
        seconds += time.perf_counter() - started[0]
        peak = max(peak, torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0)
        del model
    return {"seconds": seconds, "seed_steps": len(seeds) * steps, "peak_mib": peak / 2**20 or None}


def time_fused(encoder, seeds, examples, batch_size, warmup, steps, device, precision, pad_id=0) -> dict:
    """The seeds fused, dropout on (each seed its own masks): seconds of the steps after the warm-up."""
    fused = FusedSeeds(seed_models(encoder, seeds, warmup + steps, device)).train(True)
    streams = [seed_batches(examples, seed, batch_size) for seed in seeds]
    torch.manual_seed(seeds[0])
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for index in range(warmup + steps):
        batch = to_device(stacked_batch([next(stream) for stream in streams], pad_id), device)
        if index == warmup:
            synchronize(device)
            started = time.perf_counter()
        fused.step(batch, precision)
    synchronize(device)
    seconds = time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    return {"seconds": seconds, "seed_steps": len(seeds) * steps, "peak_mib": peak / 2**20 or None}


def packed_seed(seed, args, go, messages):
    """One packed process: its seed trained as ``time_separate`` trains it; after its warm-up it reports ready and
    waits for ``go``, which the parent sets once every packed process is ready (``time.monotonic`` is one clock for
    every process of a host)."""
    device = chosen_device(args)
    encoder, tokenizer, _ = load_backbone(args.backbone, args.attn)
    examples = synthetic_pairs(args.examples, args.max_length, tokenizer)
    [model] = seed_models(encoder, [seed], args.warmup + args.steps, device)

    def ready_then_wait():
        messages.put(("ready", seed, time.monotonic()))
        go.wait()

    train_seed(
        model,
        seed,
        examples,
        args.batch_size,
        args.warmup,
        args.steps,
        device,
        args.precision,
        tokenizer.pad_token_id,
        at_warmup=ready_then_wait,
    )
    messages.put(("done", seed, time.monotonic()))


def collect(messages, workers, kind: str) -> list[float]:
    """The times of one message of ``kind`` from every worker; fails as soon as a worker has exited without sending
    its message, so a crashed seed process ends the benchmark instead of hanging it."""
    times = {}
    while len(times) < len(workers):
        try:
            message, seed, at = messages.get(timeout=1.0)
        except queue.Empty:
            if any(worker.exitcode not in (None, 0) for worker in workers):
                raise KlmError("a packed seed's process failed") from None
            continue
        if message == kind:
            times[seed] = at
    return list(times.values())


def time_packed(seeds: list[int], args) -> dict:
    """The seeds as processes at once on one device (spawned, each loading the backbone itself), dropout on:
    seconds from their common start after the warm-ups to the last one's end."""
    context = multiprocessing.get_context("spawn")
    go, messages = context.Event(), context.Queue()
    workers = [context.Process(target=packed_seed, args=(seed, args, go, messages)) for seed in seeds]
    for worker in workers:
        worker.start()
    try:
        collect(messages, workers, "ready")
        started = time.monotonic()
        go.set()
        ends = collect(messages, workers, "done")
    finally:
        go.set()
        for worker in workers:
            worker.join(timeout=60)
            if worker.is_alive():
                worker.terminate()
    return {"seconds": max(ends) - started, "seed_steps": len(seeds) * args.steps, "peak_mib": None}


def chosen_device(args) -> torch.device:
    """``--device``, else cuda where present, else cpu."""
    return torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="the tiny backbone, small batches, a few steps")
    parser.add_argument("--backbone", default=None, help="a backbone (default minilm; tiny with --tiny)")
    parser.add_argument("--seeds", type=int, default=4, help="seeds 1..S")
    parser.add_argument("--batch-size", type=int, default=None, help="per seed (default 32)")
    parser.add_argument("--max-length", type=int, default=None, help="longest text in tokens (default 48)")
    parser.add_argument("--examples", type=int, default=None, help="synthetic training pairs (default 2048)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 10)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per seed (default 50)")
    parser.add_argument("--check-steps", type=int, default=None, help="steps of the equality check (default 5)")
    parser.add_argument("--precision", choices=("auto", "32"), default="auto", help="auto: bf16 autocast on a GPU")
    parser.add_argument("--attn", choices=("sdpa", "eager"), default="sdpa", help="the encoder's attention")
    parser.add_argument("--device", default=None, help="default: cuda where present, else cpu")
    parser.add_argument("--packed", action="store_true", help="also time the seeds as processes at once")
    parser.add_argument("--mps", action="store_true", help="the packed processes under an MPS daemon (a GPU)")
    args = parser.parse_args(argv)
    defaults = dict(backbone="minilm", batch_size=32, max_length=48, examples=2048, warmup=10, steps=50, check_steps=5)
    for name, value in (TINY if args.tiny else defaults).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.seeds < 2 or min(args.batch_size, args.steps, args.check_steps) < 1 or args.max_length < 8:
        raise KlmError("--seeds ≥ 2, --batch-size, --steps and --check-steps ≥ 1 and --max-length ≥ 8 are expected")
    if args.mps and not args.packed:
        raise KlmError("--mps applies to the packed path: add --packed")
    if args.examples < args.batch_size:
        raise KlmError(f"--examples {args.examples} is fewer than one batch of {args.batch_size}")
    return args


def main(argv=None):
    try:
        args = parse_args(argv)
    except KlmError as error:
        sys.exit(f"error: {error}")
    device = chosen_device(args)
    encoder, tokenizer, info = load_backbone(args.backbone, args.attn)
    examples = synthetic_pairs(args.examples, args.max_length, tokenizer)
    seeds = list(range(1, args.seeds + 1))
    pad_id = tokenizer.pad_token_id
    print(
        f"{info.name} ({info.parameters / 1e6:.1f} M parameters, {args.attn} attention) on {device}: {args.seeds} "
        f"seeds, batch {args.batch_size} per seed, length ≤ {args.max_length}, torch {torch.__version__}"
    )
    check = check_equal(encoder, seeds, examples, args.batch_size, args.check_steps, device, pad_id)
    verdict = "EQUAL" if check["equal"] else "DIFFERENT"
    print(
        f"equality, dropout off, float32, {args.check_steps} steps: {verdict} (largest loss difference "
        f"{check['loss_difference']:.2e}, tolerance rtol {LOSS_RTOL:g} atol {LOSS_ATOL:g}; parameters: update "
        f"difference {check['update_difference']:.2e} of the update, tolerance {UPDATE_RTOL:g}; largest element "
        f"difference {check['parameter_difference']:.2e})"
    )
    for seed, separate, fused in zip(seeds, check["separate_losses"], check["fused_losses"]):
        print(f"  seed {seed} losses: separate {separate.tolist()}\n{'':16}fused    {fused.tolist()}")
    timing = {
        path: function(
            encoder, seeds, examples, args.batch_size, args.warmup, args.steps, device, args.precision, pad_id
        )
        for path, function in (("separate", time_separate), ("fused", time_fused))
    }
    if args.packed:
        from knowledge_lm.sweep.mps import mps_for_sweep

        with tempfile.TemporaryDirectory() as folder, mps_for_sweep(len(seeds), folder, args.mps, gpus=1) as mps:
            timing["packed under MPS" if mps else "packed"] = time_packed(seeds, args)
    precision = "bf16 autocast" if args.precision == "auto" and device.type == "cuda" else "float32"
    print(f"timing, dropout on, {precision}, {args.warmup} warm-up + {args.steps} timed steps per seed:")
    rates = {}
    for path, result in timing.items():
        rates[path] = result["seed_steps"] / result["seconds"]
        peak = f", peak {result['peak_mib']:.0f} MiB" if result["peak_mib"] else ""
        print(f"  {path:8} {rates[path]:8.2f} seed-steps/s ({1000 / rates[path]:.1f} ms a seed-step{peak})")
    print(f"  fused / separate: {rates['fused'] / rates['separate']:.2f}× (> 1: fusing is faster)")
    for path in [path for path in rates if path.startswith("packed")]:
        print(f"  fused / {path}: {rates['fused'] / rates[path]:.2f}× (> 1: fusing is faster)")
    return {"check": check, "timing": timing, "rates": rates}


if __name__ == "__main__":
    main()
