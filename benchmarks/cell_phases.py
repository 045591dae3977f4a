"""Where a cell's time goes: the peer benchmark's single cell (RTE 100 %, seed 1) through ``klm`` and through
Hugging Face's ``Trainer``, each in this process, its phases clocked with no profiler attached.

    python benchmarks/cell_phases.py --backbone .device/minilm --data-dir .device/data [--side klm|hf|both]

Phases, from loading the backbone (where both sides' cell time starts): set-up (backbone, data, trainer) until
the first step starts; the first step (CUDA kernels and libraries load); the other steps, evaluations left out;
the evaluations (dev and test, every ``eval_every_steps``); the end (klm: the result's contents). Each side's
first run in a process pays its lazy imports; ``--repeats`` runs it again in the same process.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pytorch_lightning as pl
from transformers import TrainerCallback

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_hf_cell  # noqa: E402
from peer_speed import GLUE_CONFIG, SINGLE_CELL, export_cell, trainer_backbone  # noqa: E402

from knowledge_lm.core.results import Cell  # noqa: E402
from knowledge_lm.run import cell as cell_module  # noqa: E402
from knowledge_lm.run.config import load_sweep  # noqa: E402

PHASES = ("set-up", "first step", "other steps", "evaluations", "end")


class Clock:
    """Times of a cell's landmarks and its evaluations' summed span."""

    def __init__(self):
        self.marks, self.evaluating = {}, 0.0

    def mark(self, name):
        self.marks.setdefault(name, time.perf_counter())

    def phases(self, started: float, ended: float, steps: int) -> dict:
        m = self.marks
        other = m["train_end"] - m["second_step"] - self.evaluating
        return {
            "set-up": m["first_step"] - started,
            "first step": m["second_step"] - m["first_step"],
            "other steps": other,
            "evaluations": self.evaluating,
            "end": ended - m["train_end"],
            "ms a step": 1000 * other / (steps - 1),
        }


class KlmClock(pl.Callback, Clock):
    def on_train_batch_start(self, trainer, module, batch, index):
        self.mark("first_step" if trainer.global_step == 0 else "second_step")

    def on_validation_start(self, trainer, module):
        self._evaluation = time.perf_counter()

    def on_validation_end(self, trainer, module):
        self.evaluating += time.perf_counter() - self._evaluation

    def on_train_end(self, trainer, module):
        self.mark("train_end")


class HfClock(TrainerCallback, Clock):
    def on_step_begin(self, args, state, control, **kwargs):
        self.mark("first_step" if state.global_step == 0 else "second_step")

    def on_step_end(self, args, state, control, **kwargs):
        self._step_end = time.perf_counter()

    def on_evaluate(self, args, state, control, **kwargs):  # once per eval dataset: dev, then test
        now = time.perf_counter()
        self.evaluating += now - self._step_end
        self._step_end = now

    def on_train_end(self, args, state, control, **kwargs):
        self.mark("train_end")


def run_klm(sweep, backbone: str, data_dir, folder: Path) -> dict:
    task, fraction, seed = SINGLE_CELL
    train = sweep.train_config(task, {})
    clock, build_trainer = KlmClock(), cell_module.build_trainer

    def clocked(*args, callbacks=(), **kwargs):
        return build_trainer(*args, callbacks=[clock, *callbacks], **kwargs)

    cell_module.build_trainer = clocked
    try:
        started = time.perf_counter()
        result = cell_module.run_cell(
            Cell("baseline", "glue", task, fraction, seed, backbone),
            train,
            data_dir=data_dir,
            results_dir=folder / "results",
            runs_dir=folder / "runs",
            progress=False,
        )
        ended = time.perf_counter()
    finally:
        cell_module.build_trainer = build_trainer
    return {**clock.phases(started, ended, result["budget"]["max_steps"]), "cell": ended - started}


def run_hf(sweep, backbone: str, data_dir, folder: Path) -> dict:
    task, fraction, seed = SINGLE_CELL
    spec = {**export_cell(sweep, task, fraction, {}, data_dir, folder), "task": task, "fraction": fraction}
    spec.update(seed=seed, backbone=trainer_backbone(backbone, folder))
    (folder / "spec.json").write_text(json.dumps(spec))
    clock = HfClock()
    started = time.perf_counter()
    peer_hf_cell.main([str(folder / "spec.json"), str(folder / "out.json")], callbacks=[clock])
    ended = time.perf_counter()
    return {**clock.phases(started, ended, spec["budget"]["max_steps"]), "cell": ended - started}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", default="minilm")
    parser.add_argument("--data-dir")
    parser.add_argument("--side", choices=("klm", "hf", "both"), default="both")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each side in this process")
    args = parser.parse_args(argv)
    sides = ("klm", "hf") if args.side == "both" else (args.side,)
    sweep, rows = load_sweep(GLUE_CONFIG), []
    for repeat in range(1, args.repeats + 1):
        for side in sides:
            with tempfile.TemporaryDirectory() as folder:
                run = run_klm if side == "klm" else run_hf
                rows.append((f"{side} run {repeat}", run(sweep, args.backbone, args.data_dir, Path(folder))))
                print(f"{rows[-1][0]}: {rows[-1][1]['cell']:.2f} s", file=sys.stderr, flush=True)
    print("| run | cell | " + " | ".join(PHASES) + " | ms a step |")
    print("|---" * (len(PHASES) + 3) + "|")
    for name, phases in rows:
        cells = " | ".join(f"{phases[phase]:.2f} s" for phase in PHASES)
        print(f"| {name} | {phases['cell']:.2f} s | {cells} | {phases['ms a step']:.1f} |")


if __name__ == "__main__":
    main()
