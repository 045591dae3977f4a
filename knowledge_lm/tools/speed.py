"""``klm speed``: training step time, samples/s, peak memory and achieved TFLOP/s of methods against the
baseline at fixed shapes, and the baseline against a bare PyTorch loop of the same backbone.

Every method trains through Lightning on the same batches of the generated task (same seed, so the same
examples, lengths and padding), bf16 on a GPU; steps after the warm-up are timed with the device
synchronised, and each method's best median over ``repeats`` interleaved runs counts (a slow phase of the
machine then does not hit one method only). FLOPs per step are counted once per method with
``torch.utils.flop_counter`` (forward and backward of one batch). The bare loop is the same model, batches,
optimiser, schedule, precision and gradient clipping without Lightning, always eager: the reference that
``--compile`` (the methods' layers compiled) is meant to beat. A run's numbers are stored under
``results/speed/`` and ``klm leaderboard`` renders ``leaderboards/speed.md`` from them. Knowledge methods read
the prepared features: run ``klm prepare --dataset generated --kg-embeddings`` first.
"""

import math
import statistics
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import BertConfig, BertModel

from knowledge_lm.backbones import load_backbone, load_tokenizer
from knowledge_lm.data.base import StaticPadding
from knowledge_lm.registry import METHODS
from knowledge_lm.results import compact_time
from knowledge_lm.run.config import TrainConfig, dataset_defaults
from knowledge_lm.run.provenance import device_name, measured_now
from knowledge_lm.run.trainer import build_model_and_data, build_trainer

SPEED_DIR = "speed"
NOISE_FLOOR = 0.95  # a method that only adds work measured this much faster than the baseline flags a noisy run
# Issue 20's targets, × the baseline's step time at batch 32 (same execution mode for every method).
TARGETS = {"knowbert": 1.3, "knowbert+si+sr": 1.3, "bert+sr": 1.05, "kam": 1.3}
BARE_LOOP_TARGET = 2.0  # the baseline's samples/s ÷ the eager bare loop's
ERICA_TARGET = 2.0  # ERICA's pretraining step ÷ MLM-only's, same corpus and batch
# benchmarks/peer_speed.py: klm ÷ Hugging Face Trainer on one cell, and the small-GLUE grid's wall on one GPU.
PEER_TARGETS = {"process wall": 0.5, "cell time": 0.7}
GRID_CELLS, GRID_TARGET_S = 45, 90.0


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
    warmup: int,
    steps: int,
    tokenizer: str = "minilm",
    compile: str | None = None,
    padded: bool = False,
) -> dict:
    model, data = build(method, backbone, batch_size, max_length, warmup + steps, tokenizer, compile, padded)
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
    warmup: int,
    steps: int,
    tokenizer: str = "minilm",
    padded: bool = False,
) -> dict:
    """The baseline's model, batches, optimiser, schedule, precision and clipping in a plain, eager PyTorch loop."""
    model, data = build("baseline", backbone, batch_size, max_length, warmup + steps, tokenizer, padded=padded)
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
            row = measure_method(method, backbone, batch_size, max_length, warmup, steps, tokenizer, compile, padded)
            if method not in rows or row["step_ms"] < rows[method]["step_ms"]:
                rows[method] = row
        if bare_loop:
            row = measure_bare_loop(backbone, batch_size, max_length, warmup, steps, tokenizer, padded)
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


# Records of the benchmarks/ scripts (peer_speed.py, erica_speed.py), named and rendered apart from klm speed's.
BENCHMARK_KINDS = ("peer", "erica")


def speed_record_path(results_dir, record: dict) -> Path:
    """One file per measurement (its time in the name): a later run on another host of the same card sits
    beside the earlier one instead of replacing it. A peer record (``kind: peer``) is named as such."""
    slug = "".join(ch if ch.isalnum() else "-" for ch in f"{record['device']}-{Path(record['backbone']).name}").strip(
        "-"
    )
    when = compact_time(record["measured_at"])
    if record.get("kind") in BENCHMARK_KINDS:
        return Path(results_dir) / SPEED_DIR / f"{slug}-{record['kind']}-{when}.json"
    compiled = compiled_label(record, "-compiled", "-compiled-{mode}")
    length = f"n{record['max_length']}" + ("-padded" if record.get("padded") else "")
    return Path(results_dir) / SPEED_DIR / f"{slug}-b{record['batch_size']}-{length}{compiled}-{when}.json"


def compiled_label(record: dict, default_mode: str, other_mode: str) -> str:
    """What names a record's compilation: "" when eager, ``default_mode`` for torch.compile's default mode
    (records before modes existed say only ``compiled``), else ``other_mode`` with the mode filled in."""
    if not record.get("compiled"):
        return ""
    mode = record.get("compile_mode", "default")
    return default_mode if mode == "default" else other_mode.format(mode=mode)


def render_speed(records: list[dict]) -> str:
    """``leaderboards/speed.md`` from the stored speed records: one table per measurement, grouped by (device,
    backbone, shape, compilation), oldest first; then the peer records (``render_peer``)."""
    peers = [record for record in records if record.get("kind") == "peer"]
    ericas = [record for record in records if record.get("kind") == "erica"]
    records = [record for record in records if record.get("kind") not in BENCHMARK_KINDS]
    lines = [
        "# Training speed",
        "",
        "Generated by `klm leaderboard` from `results/speed/` (`klm speed` measures); do not edit by hand.",
        "Training step through Lightning on the generated task, same batches for every method; best of the runs' "
        "medians. × = ratio to the baseline's step time (issue targets: "
        + ", ".join(f"{m} ≤ {t}×" for m, t in TARGETS.items())
        + "). TFLOP/s counts the forward and backward FLOPs "
        "of one step (torch.utils.flop_counter) over the step time. The bare loop is the baseline without Lightning, "
        "eager (also beside compiled tables). One table per measurement: where a step is bound by the host's kernel "
        "launches (batch 32), the same card on another host gives other step times, so compare ratios within a "
        "table, not times across tables; there a method's ratio mostly counts its extra launches, while at batch "
        "1024 of the bert-base-shaped backbone the GPU does the work and the ratio measures the method's compute.",
        "",
    ]
    records = sorted(
        records,
        key=lambda r: (
            r["device"],
            r["backbone"],
            r["batch_size"],
            r["max_length"],
            bool(r.get("padded")),
            bool(r.get("compiled")),
            r.get("compile_mode", ""),
            r["measured_at"],
        ),
    )
    lines += speed_summary(records)
    for record in records:
        base = record["methods"]["baseline"]
        lines += [
            f"## {shape_title(record)}",
            "",
            f"{record['precision']}; {record['repeats']} runs of {record['steps']} steps after {record['warmup']}; "
            f"commit {record['git']['commit'][:10]}, measured {record['measured_at']}.",
            "",
            "| method | step ms | × baseline | target | samples/s | peak MiB | × baseline | TFLOP/s |",
            "|---|---|---|---|---|---|---|---|",
        ]
        faster = unreliable_ratios(record)
        ratios = step_ratios(record)
        for method, row in record["methods"].items():
            ratio = ratios[method]
            target = TARGETS.get(method)
            verdict = "" if target is None else f"≤ {target}× {'met' if ratio <= target else 'NOT met'}"
            peak = "—" if row["peak_mib"] is None else f"{row['peak_mib']:.0f}"
            peak_ratio = (
                "—" if row["peak_mib"] is None or not base["peak_mib"] else f"{row['peak_mib'] / base['peak_mib']:.3f}"
            )
            lines.append(
                f"| {method} | {row['step_ms']:.2f} | {ratio:.3f} | {verdict} | {row['samples_per_s']:.0f} | {peak} | "
                f"{peak_ratio} | {row['tflops']:.2f} |"
            )
        bare = record.get("bare_loop")
        if bare:
            lines.append(
                f"| bare PyTorch loop (baseline) | {bare['step_ms']:.2f} | {bare['step_ms'] / base['step_ms']:.3f} | | "
                f"{bare['samples_per_s']:.0f} | | | |"
            )
        if faster:
            lines += [
                "",
                "Unreliable: " + ", ".join(f"{m} ran at {r:.2f}×" for m, r in faster.items()) + " the baseline's "
                "step time though it only adds work to the baseline's step, so the baseline's runs were slowed by "
                "the machine and every ratio here is suspect.",
            ]
        if bare:
            lines += [
                "",
                f"Baseline through Lightning at {bare['step_ms'] / base['step_ms']:.2f}× the bare loop's samples/s "
                f"(target: ≥ {BARE_LOOP_TARGET:g}×).",
            ]
        lines.append("")
    if peers:
        lines += render_peer(peers)
    if ericas:
        lines += render_erica(ericas)
    return "\n".join(lines)


def shape_title(record: dict) -> str:
    compiled = compiled_label(
        record, ", layers compiled (torch.compile)", ", layers compiled (torch.compile, mode {mode})"
    )
    return (
        f"{record['device']}, {Path(record['backbone']).name}, batch {record['batch_size']}, "
        f"length {'=' if record.get('padded') else '≤'} {record['max_length']}{compiled}"
    )


def step_ratios(record: dict) -> dict[str, float]:
    """Each method's step time as a multiple of the baseline's in the same measurement."""
    base = record["methods"]["baseline"]["step_ms"]
    return {method: row["step_ms"] / base for method, row in record["methods"].items()}


def unreliable_ratios(record: dict) -> dict[str, float]:
    """The target methods (which only add work to the baseline's step) measured clearly faster than the baseline."""
    return {method: ratio for method, ratio in step_ratios(record).items() if method in TARGETS and ratio < NOISE_FLOOR}


def speed_summary(records: list[dict]) -> list[str]:
    """One row per shape: each target method's ratio over that shape's measurements (lowest–highest, how many met
    the target) and the baseline's samples/s through Lightning over the bare loop's; tables flagged unreliable
    are left out."""
    shapes: dict[str, list[dict]] = {}
    for record in records:
        if not unreliable_ratios(record):
            shapes.setdefault(shape_title(record), []).append(record)
    if not shapes:
        return []

    def spread(values: list[float], target: float | None = None) -> str:
        if not values:
            return "—"
        low, high = f"{min(values):.2f}", f"{max(values):.2f}"
        text = low if low == high else f"{low}–{high}"
        return text if target is None else f"{text} ({sum(v <= target for v in values)}/{len(values)} met)"

    lines = [
        "## Summary",
        "",
        "Per shape, over its measurements (the tables below): each method's step time ÷ the baseline's, "
        "lowest–highest, and in how many it met its target; last, the baseline's samples/s through Lightning ÷ the "
        f"bare loop's (target ≥ {BARE_LOOP_TARGET:g}×). Tables marked unreliable are left out.",
        "",
        "| shape | runs (commits) | "
        + " | ".join(f"{m} (≤ {t}×)" for m, t in TARGETS.items())
        + " | Lightning ÷ bare loop |",
        "|---|---|" + "---|" * len(TARGETS) + "---|",
    ]
    for title, group in shapes.items():
        cells = []
        for method, target in TARGETS.items():
            cells.append(spread([step_ratios(r)[method] for r in group if method in r["methods"]], target))
        bare = [r["bare_loop"]["step_ms"] / r["methods"]["baseline"]["step_ms"] for r in group if r.get("bare_loop")]
        commits = ", ".join(dict.fromkeys(r["git"]["commit"][:7] for r in group))
        lines.append(f"| {title} | {len(group)} ({commits}) | " + " | ".join(cells) + f" | {spread(bare)} |")
    return lines + [""]


def verdict(value: float, target: float, unit: str) -> str:
    """Whether ``value`` is within ``target``, or by how much it missed it."""
    if value <= target:
        return f"≤ {target:g}{unit} met"
    return f"≤ {target:g}{unit} NOT met: {value / target:.2f}× the target"


def peer_rows(side: dict, scored: list[bool]) -> dict[str, float]:
    """A peer measurement's figures of one side: its process wall, its cells' summed times and mean metrics over
    the cells ``scored`` marks (those whose metrics both sides define)."""
    cells = side["cells"]
    kept = [cell for cell, keep in zip(cells, scored) if keep]
    return {
        "process wall": side["process_wall_s"],
        "cell time": sum(cell["cell_s"] for cell in cells),
        "dev": sum(cell["dev"] for cell in kept) / max(len(kept), 1),
        "test": sum(cell["test"] for cell in kept) / max(len(kept), 1),
    }


def render_peer(records: list[dict]) -> list[str]:
    """The section of ``leaderboards/speed.md`` comparing ``klm`` with Hugging Face's Trainer
    (``benchmarks/peer_speed.py``): per record, the single cell and the grid, each side's process wall,
    summed cell time and mean dev and test main metric, with klm ÷ Trainer and the issue's targets."""
    lines = [
        "## Against Hugging Face Trainer",
        "",
        "Generated from `benchmarks/peer_speed.py` records: the same GLUE cells (same rows, the suite's protocol) "
        "through `klm bench` and through Hugging Face's `Trainer`, one process per cell, on one device. Process "
        "wall: from starting the processes to their end (the grid: the whole batch, both sides running `jobs` "
        "cells at once); cell time: from loading the backbone to the last evaluation (a result's `wall_time_s`), "
        "summed over cells; dev and test: the selected evaluation's main metric, mean over cells. Targets: "
        + ", ".join(f"{name} ≤ {target}× the Trainer's" for name, target in PEER_TARGETS.items())
        + f" on the single cell; the {GRID_CELLS}-cell grid within {GRID_TARGET_S:g} s.",
        "",
    ]
    for record in sorted(records, key=lambda r: (r["device"], r["backbone"], r["measured_at"])):
        conditions = f"; steps capped at {record['max_steps']} (a smoke run)" if record.get("max_steps") else ""
        settings = record.get("klm_settings") or {}
        if settings:
            conditions += "; klm with " + ", ".join(f"{name}={value}" for name, value in settings.items())
        if record.get("klm_served"):
            conditions += "; klm handed to a warm `klm serve`"
        lines += [
            f"### {record['device']}, {Path(record['backbone']).name}, {record['precision']}",
            "",
            f"{record['jobs']} job(s) at once{conditions}; commit {record['git']['commit'][:10]}, "
            f"measured {record['measured_at']}.",
            "",
            "| cells | figure | klm | Trainer | klm ÷ Trainer | target |",
            "|---|---|---|---|---|---|",
        ]
        for part in ("cell", "grid"):
            if part not in record:
                continue
            measured = record[part]
            cells = measured["cells"]
            if part == "cell":
                [cell] = cells
                name = f"{cell['task']} {cell['fraction']:.0%} seed {cell['seed']}"
            else:
                name = (
                    f"{len(cells)}: {', '.join(measured['tasks'])} × "
                    f"{', '.join(f'{f:.0%}' for f in measured['fractions'])} × seeds "
                    f"{', '.join(map(str, measured['seeds']))}"
                )
            present = [side for side in ("klm", "hf") if side in measured]  # klm alone: no Trainer side
            # A metric can be undefined (a Pearson over constant predictions): such cells leave both sides' means.
            scored = [all(math.isfinite(c[side][m]) for side in present for m in ("dev", "test")) for c in cells]
            sides = {
                side: peer_rows(
                    {"process_wall_s": measured[side]["process_wall_s"], "cells": [c[side] for c in cells]}, scored
                )
                for side in present
            }
            for figure in ("process wall", "cell time", "dev", "test"):
                klm, hf = sides["klm"][figure], sides.get("hf", {}).get(figure)
                unit = " s" if figure in ("process wall", "cell time") else ""
                target = ""
                if part == "cell" and figure in PEER_TARGETS and hf is not None:
                    target = verdict(klm / hf, PEER_TARGETS[figure], "×")
                elif part == "grid" and figure == "process wall" and len(cells) == GRID_CELLS:
                    target = verdict(klm, GRID_TARGET_S, " s")
                if hf is None:
                    hf_text = ratio = "—"
                else:
                    hf_text = f"{hf:.1f}{unit}"
                    ratio = f"{klm / hf:.2f}" if unit else f"{klm - hf:+.1f} (difference)"
                lines.append(f"| {name} | {figure} | {klm:.1f}{unit} | {hf_text} | {ratio} | {target} |")
            graphs = [c for c in cells if c["klm"].get("cuda_graphs")]
            if graphs:
                lines.append(
                    f"| {name} | klm cells with CUDA graphs (compile_mode reduce-overhead) | {len(graphs)} of "
                    f"{len(cells)} | | | |"
                )
            if part == "grid":  # the grid's wall cannot be below its longest cell's
                longest = max(cells, key=lambda c: c["klm"]["cell_s"])
                lines.append(
                    f"| {name} | longest klm cell (a floor for its process wall) | {longest['task']} "
                    f"{longest['fraction']:.0%} seed {longest['seed']}: {longest['klm']['cell_s']:.1f} s, "
                    f"{longest['steps']} steps ({1000 * longest['klm']['cell_s'] / longest['steps']:.1f} ms a step, "
                    "evaluations included) | | | |"
                )
            if part == "cell" and "hf" in sides:  # what a process spends outside its cell: imports, checks, exit
                outside = {side: sides[side]["process wall"] - sides[side]["cell time"] for side in sides}
                lines.append(
                    f"| {name} | process wall − cell time (imports, checks, exit) | {outside['klm']:.1f} s "
                    f"| {outside['hf']:.1f} s | {outside['klm'] / outside['hf']:.2f} | |"
                )
            if not all(scored):
                undefined = [
                    f"{c['task']} {c['fraction']:.0%} seed {c['seed']}" for c, keep in zip(cells, scored) if not keep
                ]
                lines.append(
                    f"| {name} | dev and test means leave out | {len(undefined)} cell(s) whose metric one side left "
                    f"undefined: {', '.join(undefined)} | | | |"
                )
            different = [c for c in cells if not c["same_rows"]]
            if different:
                lines.append(
                    f"| {name} | rows differ | {len(different)} cell(s): klm's subset hash is not the "
                    "exported one | | | |"
                )
        lines.append("")
    return lines


def render_erica(records: list[dict]) -> list[str]:
    """The section of ``leaderboards/speed.md`` on ERICA pretraining (``benchmarks/erica_speed.py``): per record,
    MLM-only's and ERICA's median step on the same documents, batch and seed, and their ratio against the target."""
    lines = [
        "## ERICA pretraining against MLM-only",
        "",
        "Generated from `benchmarks/erica_speed.py` records: median pretraining step (device synchronised, data "
        "loading outside) of MLM-only and of ERICA (two views per document, the RD/ED similarity matrices) on the same "
        f"documents, batch and seed, in the precision cells train in. Target: ERICA ≤ {ERICA_TARGET:g}× MLM-only.",
        "",
        "| device | backbone | precision | corpus | batch × length | MLM-only ms | ERICA ms | ERICA ÷ MLM-only "
        "| target | commit |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for record in sorted(records, key=lambda r: (r["device"], r["backbone"], r["measured_at"])):
        ratio = record["erica_ms"] / record["mlm_ms"]
        lines.append(
            f"| {record['device']} | {Path(record['backbone']).name} | {record['precision']} | "
            f"{Path(record['corpus']).name} "
            f"({record['documents']} documents) | {record['batch_size']} × ≤ {record['max_length']} | "
            f"{record['mlm_ms']:.1f} | {record['erica_ms']:.1f} | {ratio:.2f} | {verdict(ratio, ERICA_TARGET, '×')} | "
            f"{record['git']['commit'][:10]} |"
        )
    return lines + [""]
