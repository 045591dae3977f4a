"""The one way a Lightning ``Trainer`` is built: cells, ``klm speed`` and both pretraining drivers use it, so
precision, clipping and cuDNN's mode are the same wherever a method trains."""

import pytorch_lightning as pl
import torch

# cuDNN times its algorithms once per shape and keeps the fastest. Only KAM's 3×3 convolution over the attention
# maps runs on cuDNN: few channels (heads + maps) over b × n × n maps, a shape its heuristic choice may serve poorly.
CUDNN_BENCHMARK = True
GRADIENT_CLIP = 1.0


def resolve_precision(precision: str = "auto") -> str:
    """``auto``: bf16 mixed precision on a GPU, 32-bit on the CPU; anything else as given."""
    if precision != "auto":
        return precision
    return "bf16-mixed" if torch.cuda.is_available() else "32-true"


def build_trainer(max_steps: int, *, precision: str = "auto", devices: int = 1, num_nodes: int = 1,
                  eval_every_steps: int | None = None, callbacks=(), progress: bool = False,
                  root_dir=None) -> pl.Trainer:
    """A trainer of ``max_steps`` optimiser steps, gradients clipped at 1.0, no logger and no sanity check; with
    ``eval_every_steps`` it validates every that many steps (counted across epochs), else never. More than one
    device or node trains with DDP; checkpoints only through ``callbacks``."""
    validation = ({"val_check_interval": eval_every_steps, "check_val_every_n_epoch": None} if eval_every_steps
                  else {"limit_val_batches": 0})
    return pl.Trainer(
        max_steps=max_steps, accelerator="gpu" if torch.cuda.is_available() else "cpu", devices=devices,
        num_nodes=num_nodes, strategy="ddp" if devices * num_nodes > 1 else "auto", precision=resolve_precision(precision),
        gradient_clip_val=GRADIENT_CLIP, num_sanity_val_steps=0, logger=False, callbacks=list(callbacks),
        enable_checkpointing=any(isinstance(callback, pl.callbacks.ModelCheckpoint) for callback in callbacks),
        enable_model_summary=False, enable_progress_bar=progress, default_root_dir=root_dir, benchmark=CUDNN_BENCHMARK,
        **validation)
