"""``klm speed``: training step time, samples/s, peak memory and achieved TFLOP/s of methods against the
baseline at fixed shapes, and the baseline against a bare PyTorch loop of the same backbone.

Every method trains through Lightning on the same batches of the generated task (same seed, so the same
examples, lengths and padding), bf16 on a GPU; steps after the warm-up are timed with the device
synchronised, and each method's best median over ``repeats`` interleaved runs counts (a slow phase of the
machine then does not hit one method only). FLOPs per step are counted once per method with
``torch.utils.flop_counter`` (forward and backward of one batch). The bare loop is the same model, batches,
optimiser, schedule, precision and gradient clipping without Lightning, always eager: the reference that
``--compile`` (the methods' layers compiled) is meant to beat. A run's numbers are stored under
``results/speed/`` (``report/speed.py`` names and renders them). Knowledge methods read
the prepared features: run ``klm prepare --dataset generated --kg-embeddings`` first.
"""

import statistics
import time

import pytorch_lightning as pl
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import BertConfig, BertModel

from knowledge_lm.core.backbones import load_backbone, load_tokenizer
from knowledge_lm.core.registry import METHODS
from knowledge_lm.data.base import StaticPadding
from knowledge_lm.methods.trainer import build_trainer
from knowledge_lm.run.config import TrainConfig, dataset_defaults
from knowledge_lm.run.provenance import device_name, measured_now
from knowledge_lm.run.trainer import build_model_and_data


class StepTimer(pl.Callback):
    def __init__(self, warmup: int):
        self.warmup, self.times, self.started, self.steps = warmup, [], None, 0

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        synchronize()
        self.started = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        # Counted across epochs: at a large batch an epoch of the generated task is shorter than the warm-up.
        synchronize()
        if self.steps >= self.warmup:
            self.times.append(time.perf_counter() - self.started)
        self.steps += 1


def synchronize():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def bert_base_shaped(attn_implementation, tokenizer_from: str):
    """A randomly initialised encoder of BERT-base's shape (12 layers, hidden 768), the papers' backbone: step
    times do not depend on the weights, and at MiniLM's size a step is launch-bound, which inflates any
    extra module's share."""

    config = BertConfig(attn_implementation=attn_implementation or "sdpa")
    return BertModel(config, add_pooling_layer=False), load_tokenizer(tokenizer_from)


def build(
    method: str,
    backbone: str,
    batch_size: int,
    max_length: int,
    *,
    total_steps: int,
    tokenizer: str = "minilm",
    compile: str | None = None,
    padded: bool = False,
):
    """The method's model and a set-up generated-task data module, as a cell builds them; ``padded``: every batch
    padded to ``max_length``."""

    pl.seed_everything(0, verbose=False)
    implementation = getattr(METHODS.get(method), "attn_implementation", None)
    if backbone == "bert-base-shaped":
        encoder, tokenizer_object = bert_base_shaped(implementation, tokenizer)
    else:
        encoder, tokenizer_object, _ = load_backbone(backbone, implementation)
    train = TrainConfig(
        batch_size=batch_size, max_length=max_length, compile=bool(compile), compile_mode=compile or "default"
    )
    options = dict(dataset_defaults("generated").get("dataset_options") or {})
    model, data, _, _ = build_model_and_data(
        method, encoder, tokenizer_object, "generated", train, dataset_options=options, total_steps=total_steps
    )
    if padded:  # after setup: the tokenization cache and the prepared features keep their own keys
        data.tokenizer = StaticPadding(data.tokenizer, length=max_length)
    return model, data


def step_flops(model, data) -> float:
    """FLOPs of one training step's forward and backward on the first batch (the optimiser's are negligible), on a
    model that has been through ``fit`` (so its setup hooks, entity tables and loader hooks, have run)."""

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = model.to(device)
    batch = pl.utilities.move_data_to_device(next(iter(data.train_dataloader())), device)
    model.train()
    # Counted eagerly: the same operations, and the counter sees every one of them.
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    with torch.compiler.set_stance("force_eager"), FlopCounterMode(display=False) as counter, autocast:
        sum(model.losses(batch).values()).backward()
    model.zero_grad(set_to_none=True)
    return float(counter.get_total_flops())


def measure_method(
    method: str,
    backbone: str,
    batch_size: int,
    max_length: int,
    *,
    warmup: int,
    steps: int,
    tokenizer: str = "minilm",
    compile: str | None = None,
    padded: bool = False,
) -> dict:
    model, data = build(
        method,
        backbone,
        batch_size,
        max_length,
        total_steps=warmup + steps,
        tokenizer=tokenizer,
        compile=compile,
        padded=padded,
    )
    timer = StepTimer(warmup)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    build_trainer(warmup + steps, callbacks=[timer]).fit(model, datamodule=data)
    step = statistics.median(timer.times)
    peak = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None
    flops = step_flops(model, data)
    return {
        "step_ms": 1000 * step,
        "samples_per_s": batch_size / step,
        "peak_mib": peak,
        "flops_per_step": flops,
        "tflops": flops / step / 1e12,
    }


def measure_bare_loop(
    backbone: str,
    batch_size: int,
    max_length: int,
    *,
    warmup: int,
    steps: int,
    tokenizer: str = "minilm",
    padded: bool = False,
) -> dict:
    """The baseline's model, batches, optimiser, schedule, precision and clipping in a plain, eager PyTorch loop."""
    model, data = build(
        "baseline", backbone, batch_size, max_length, total_steps=warmup + steps, tokenizer=tokenizer, padded=padded
    )
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = model.to(device).train()
    optimizer_config = model.configure_optimizers()
    optimizer, scheduler = optimizer_config["optimizer"], optimizer_config["lr_scheduler"]["scheduler"]
    batches = iter(data.train_dataloader())
    times = []
    for index in range(warmup + steps):
        try:
            batch = next(batches)
        except StopIteration:
            batches = iter(data.train_dataloader())
            batch = next(batches)
        batch = pl.utilities.move_data_to_device(batch, device)
        synchronize()
        started = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits, _ = model(batch)
            loss = model.kind.loss(logits, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize()
        if index >= warmup:
            times.append(time.perf_counter() - started)
    step = statistics.median(times)
    return {"step_ms": 1000 * step, "samples_per_s": batch_size / step}


def run_speed(
    methods: list[str],
    *,
    backbone: str = "minilm",
    batch_size: int = 32,
    max_length: int = 48,
    warmup: int = 20,
    steps: int = 100,
    repeats: int = 2,
    tokenizer: str = "minilm",
    bare_loop: bool = True,
    compile: str | None = None,
    padded: bool = False,
) -> dict:
    """Measure ``methods`` (the baseline first, always) and the bare loop; the record ``klm speed`` stores.
    ``compile``: None (eager) or a torch.compile mode for the methods' layers (the bare loop stays eager);
    ``padded``: every batch padded to ``max_length`` (else to its longest text)."""
    methods = ["baseline"] + [method for method in methods if method != "baseline"]
    rows: dict[str, dict] = {}
    bare = None
    for _ in range(repeats):
        for method in methods:
            row = measure_method(
                method,
                backbone,
                batch_size,
                max_length,
                warmup=warmup,
                steps=steps,
                tokenizer=tokenizer,
                compile=compile,
                padded=padded,
            )
            if method not in rows or row["step_ms"] < rows[method]["step_ms"]:
                rows[method] = row
        if bare_loop:
            row = measure_bare_loop(
                backbone, batch_size, max_length, warmup=warmup, steps=steps, tokenizer=tokenizer, padded=padded
            )
            if bare is None or row["step_ms"] < bare["step_ms"]:
                bare = row
    return {
        "schema": 1,
        "device": device_name(),
        "backbone": backbone,
        "batch_size": batch_size,
        "max_length": max_length,
        **({"padded": True} if padded else {}),
        "warmup": warmup,
        "steps": steps,
        "repeats": repeats,
        "precision": "bf16-mixed" if torch.cuda.is_available() else "32-true",
        "compiled": bool(compile),
        **({"compile_mode": compile} if compile else {}),
        "methods": rows,
        "bare_loop": bare,
        **measured_now(),
    }
