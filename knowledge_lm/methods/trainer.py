"""The Lightning ``Trainer`` every training runs under, the one way (cells, ``klm speed`` and both pretraining
drivers), so that precision, clipping and cuDNN's mode are the same wherever a method trains; its logger, and the
resumable state a long pretraining run saves."""

import os
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.environments import LightningEnvironment, SLURMEnvironment
from pytorch_lightning.plugins import TorchCheckpointIO

# cuDNN times its algorithms once per shape and keeps the fastest. Only KAM's 3×3 convolution over the attention
# maps runs on cuDNN: few channels (heads + maps) over b × n × n maps, a shape its heuristic choice may serve poorly.
CUDNN_BENCHMARK = True
GRADIENT_CLIP = 1.0


def resolve_precision(precision: str = "auto") -> str:
    """``auto``: bf16 mixed precision on a GPU, 32-bit on the CPU; anything else as given."""
    if precision != "auto":
        return precision
    return "bf16-mixed" if torch.cuda.is_available() else "32-true"


class WeightsOnlyCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint files, read back as tensors and plain data alone (``torch.load(weights_only=True)``):
    a resumed checkpoint runs no pickled code. A cell's checkpoint holds nothing else (no pickled hyperparameters)."""

    def load_checkpoint(self, path, map_location=None, weights_only=None) -> dict:
        return torch.load(path, map_location=map_location or "cpu", weights_only=True)

    def save_checkpoint(self, checkpoint, path, storage_options=None) -> None:
        """Written beside ``path`` and renamed onto it: a full disk or a kill leaves the previous checkpoint whole."""
        from knowledge_lm.core.results import write_file_atomic

        save = super().save_checkpoint
        write_file_atomic(Path(path), lambda staging: save(checkpoint, staging, storage_options))


def build_trainer(
    max_steps: int,
    *,
    precision: str = "auto",
    devices: int = 1,
    num_nodes: int = 1,
    eval_every_steps: int | None = None,
    callbacks=(),
    progress: bool = False,
    root_dir=None,
    logger=None,
    log_every_n_steps: int = 50,
    accumulate_grad_batches: int = 1,
    deterministic: bool = False,
) -> pl.Trainer:
    """A trainer of ``max_steps`` optimiser steps, gradients clipped at 1.0, no sanity check; with
    ``eval_every_steps`` it validates every that many steps (counted across epochs), else never. More than one
    device or node trains with DDP; checkpoints only through ``callbacks``. A ``logger`` (``training_logger``'s)
    gets the losses and the learning rate every ``log_every_n_steps`` steps, and the dev metrics of every
    evaluation; without one nothing is logged. ``deterministic``: deterministic kernels where PyTorch has them
    (``torch.use_deterministic_algorithms(True, warn_only=True)``, cuBLAS workspace config, no cuDNN benchmark),
    a warning for an op that has none."""
    if logger is not None:
        callbacks = [*callbacks, pl.callbacks.LearningRateMonitor(logging_interval="step")]
    validation = (
        {"val_check_interval": eval_every_steps, "check_val_every_n_epoch": None}
        if eval_every_steps
        else {"limit_val_batches": 0}
    )
    return pl.Trainer(
        max_steps=max_steps,
        accelerator="gpu" if torch.cuda.is_available() else "cpu",
        devices=devices,
        num_nodes=num_nodes,
        strategy="ddp" if devices * num_nodes > 1 else "auto",
        precision=resolve_precision(precision),
        gradient_clip_val=GRADIENT_CLIP,
        num_sanity_val_steps=0,
        logger=logger if logger is not None else False,
        log_every_n_steps=log_every_n_steps,
        callbacks=list(callbacks),
        plugins=[WeightsOnlyCheckpointIO(), *one_process_environment(devices * num_nodes)],
        enable_checkpointing=any(isinstance(callback, pl.callbacks.ModelCheckpoint) for callback in callbacks),
        enable_model_summary=False,
        enable_progress_bar=progress,
        default_root_dir=root_dir,
        benchmark=False if deterministic else CUDNN_BENCHMARK,
        deterministic="warn" if deterministic else None,
        accumulate_grad_batches=accumulate_grad_batches,
        **validation,
    )


def one_process_environment(world_size: int) -> list:
    """Lightning's cluster environment for a run of ``world_size`` processes, where it is better not detected: one
    process outside SLURM (whose environment requeues a job) needs none, and detecting one imports ``mpi4py`` where
    it is installed, which initialises MPI (0.57 s of a cell on the GPU host)."""
    return [LightningEnvironment()] if world_size == 1 and not SLURMEnvironment.detect() else []


def training_logger(name: str, log_dir: Path, run_name: str):
    """The Lightning logger the training setting ``logger`` names, writing under ``log_dir`` (a new ``version_N``
    per attempt, so a resumed cell keeps the curve of its first attempt), or None for ``none``."""
    from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger, WandbLogger

    if name == "csv":
        return CSVLogger(save_dir=log_dir, name="")
    if name == "tensorboard":
        return TensorBoardLogger(save_dir=log_dir, name="", default_hp_metric=False)
    if name == "wandb":
        Path(log_dir).mkdir(parents=True, exist_ok=True)
        return WandbLogger(name=run_name, save_dir=log_dir, project=os.environ.get("WANDB_PROJECT", "knowledge-lm"))
    return None


class ResumableState(pl.Callback):
    """Saves the whole training state (weights, optimiser, scheduler, loops, and what the module adds in
    ``on_save_checkpoint``) to ``path`` after an optimiser step, every ``every_s`` seconds or ``every_steps`` steps,
    written beside it and renamed, so a killed run leaves the previous state whole. It stops the run, saving first,
    after ``stop_after_steps`` steps of this session or before a step would end past ``time_budget_s`` seconds of it
    (judged by the last step's duration; saving and set-up are not counted). ``trainer.fit(..., ckpt_path=path)``
    resumes."""

    def __init__(self, path, every_s=300.0, every_steps=None, stop_after_steps=None, time_budget_s=None):
        self.path, self.every_s, self.every_steps = Path(path), every_s, every_steps
        self.stop_after_steps, self.time_budget_s = stop_after_steps, time_budget_s

    def on_train_start(self, trainer, pl_module):
        self.started = self.saved_at = self.stepped_at = time.monotonic()
        self.first_step = self.seen_step = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step == self.seen_step or step >= trainer.max_steps:
            return  # within an accumulation, or the run's end (whose weights the caller saves)
        now = time.monotonic()
        step_seconds, self.seen_step, self.stepped_at = now - self.stepped_at, step, now
        stop = (self.stop_after_steps is not None and step - self.first_step >= self.stop_after_steps) or (
            self.time_budget_s is not None and now - self.started + step_seconds > self.time_budget_s
        )
        due = (self.every_s is not None and now - self.saved_at >= self.every_s) or (
            self.every_steps is not None and step % self.every_steps == 0
        )
        if stop or due:
            self.save(trainer)
        if stop:
            trainer.should_stop = True

    def save(self, trainer):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        staging = self.path.with_name(self.path.name + ".saving")
        trainer.save_checkpoint(staging)
        os.replace(staging, self.path)
        self.saved_at = time.monotonic()
