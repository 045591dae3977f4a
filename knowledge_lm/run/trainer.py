"""How a run is built, the one way: a method's model with its set-up data module (cells and ``klm speed``), and
the Lightning ``Trainer`` (cells, ``klm speed`` and both pretraining drivers), so that precision, clipping and
cuDNN's mode are the same wherever a method trains."""

import os
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.environments import LightningEnvironment, SLURMEnvironment
from pytorch_lightning.plugins import TorchCheckpointIO

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import DATASETS, METHODS
from knowledge_lm.data.base import StaticPadding
from knowledge_lm.run.config import TrainConfig

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


class CellCheckpoint(pl.callbacks.ModelCheckpoint):
    """A cell's ``last.ckpt`` (``ModelCheckpoint(save_last=True, save_top_k=0)``'s), saved on its schedule and also
    when the cell is interrupted (Ctrl-C: Lightning's ``KeyboardInterrupt``), so that it resumes from there; not when
    training ends, since the result is written next and the run directory emptied."""

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning's saves weights and optimiser state (~0.3 GB for MiniLM) that clear_run_dir deletes a second later.
        pass

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, KeyboardInterrupt) and 0 < trainer.global_step != self._last_global_step_saved:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))


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


def method_dataset_options(method: str, dataset_options: dict | None, dataset: str | None = None) -> dict:
    """The data module's options for ``method``: a knowledge method's data joins the prepared features (those of
    the default knowledge options unless ``dataset_options`` names others). On a dataset whose labels are KG facts
    the knowledge options name ``keep_answers`` (False by default), so a result records whether its KG held the
    answers (results from before the answers were removed record no such option)."""
    options = dict(dataset_options or {})
    if METHODS.entry(method).needs_knowledge:
        options["knowledge"] = dict(options.get("knowledge") or {})
        if dataset is not None and DATASETS.entry(dataset).labels_are_kg_facts:
            options["knowledge"].setdefault("keep_answers", False)
    return options


def balanced_class_weights(labels: list[int], num_labels: int) -> torch.Tensor:
    """One weight per label, ``len(labels) / (num_labels × count)`` (scikit-learn's "balanced"): the weighted
    cross-entropy of a constant predictor is the same whichever class it predicts. A label absent from ``labels``
    gets weight 0 (no example of it is ever weighted)."""
    counts = torch.bincount(torch.tensor(labels, dtype=torch.long), minlength=num_labels).double()
    weights = torch.where(counts > 0, len(labels) / (num_labels * counts.clamp(min=1)), torch.zeros_like(counts))
    return weights.float()


def wire_knowledge(model, data) -> None:
    """Join ``model``'s knowledge hooks to the set-up data module ``data``: the fields the method derives for
    each knowledge features row (``knowledge_fields``) written into the rows, and its collate function
    (``knowledge_collate``) handed to the loaders. The one place a data module is changed for a method."""
    for name, values in model.knowledge_fields(data).items():
        for row, value in zip(data.knowledge_features, values, strict=True):
            row[name] = value
    data.knowledge_batch = model.knowledge_collate(data)


def build_model_and_data(
    method: str,
    encoder,
    tokenizer,
    dataset: str,
    train: TrainConfig,
    *,
    task: str | None = None,
    fraction: float = 1.0,
    data_dir=None,
    dataset_options: dict | None = None,
    total_steps: int | None = None,
):
    """``(model, data, budget, train)``: ``dataset``'s data module for ``task`` at ``fraction``, set up (a
    knowledge method's joined to its prepared features and wired to the model: ``wire_knowledge``), the step
    budget ``train`` gives its train split, ``method``'s model over ``encoder``, trained for ``total_steps``
    (default: the budget's) and compiled where ``train`` says, and ``train`` as resolved for this cell
    (``compile="auto"`` made concrete)."""
    method_class = METHODS.get(method)
    options = method_dataset_options(method, dataset_options, dataset)
    data = DATASETS.get(dataset)(
        task=task,
        tokenizer=tokenizer,
        data_dir=data_dir,
        fraction=fraction,
        subset_seed=train.subset_seed,
        batch_size=train.per_device_batch_size,  # DDP's sampler gives each process its share
        eval_batch_size=train.eval_batch_size,
        max_length=train.max_length,
        **options,
    )
    if train.class_balance and data.task_spec.kind != "classification":
        raise KlmError(
            f"training setting class_balance applies to single-label classification; {dataset} task {data.task} "
            f"is {data.task_spec.kind}"
        )
    data.setup()
    budget = train.budget(data.train_size)
    train = train.resolved(method_class, torch.cuda.is_available(), total_steps or budget["max_steps"])
    if train.padding_multiple:  # after set-up: the encodings and prepared features keep their cache keys
        data.tokenizer = StaticPadding(data.tokenizer, multiple=train.padding_multiple)
    model = method_class(
        encoder,
        data.task_spec,
        eval_splits=data.eval_split_names,
        lr=train.lr,
        weight_decay=train.weight_decay,
        warmup_ratio=train.warmup_ratio,
        dropout=train.dropout,
        total_steps=total_steps or budget["max_steps"],
        **train.method_options,
    )
    if train.class_balance:
        model.kind.class_weights = balanced_class_weights(data.encoded["train"]["labels"], len(data.task_spec.labels))
    if train.compile:
        # As in a fresh process: a compiled model built before in this process would leave its compiled code
        # and CUDA graphs under guards on objects since freed, counting against dynamo's recompile limit.
        torch._dynamo.reset()
        model.compile_modules(train.compile_mode)
    wire_knowledge(model, data)
    data.evaluation_gate = model.evaluates_every_split
    return model, data, budget, train


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
