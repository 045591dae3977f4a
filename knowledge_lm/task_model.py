"""The LightningModule every method is: ``encode`` → features, a task head, the task loss plus extra losses.

A method subclasses :class:`TaskModel`, overrides ``encode`` (and ``extra_losses`` where it adds
one), and registers itself. Training, evaluation on every labelled split, model selection on dev
and the optimiser are the same for all methods, so they live here once.
"""

from collections import defaultdict

import pytorch_lightning as pl
import torch

from knowledge_lm import metrics
from knowledge_lm.heads import TaskHead, predictions, task_loss
from knowledge_lm.data.base import SELECTION_SPLIT
from knowledge_lm.optim import adamw_with_warmup


class TaskModel(pl.LightningModule):
    def __init__(self, encoder, spec, eval_splits=(SELECTION_SPLIT,), lr: float = 5e-5, weight_decay: float = 0.01,
                 warmup_ratio: float = 0.1, dropout: float = 0.1, total_steps: int = 1000, **method_options):
        super().__init__()
        if method_options:
            raise TypeError(f"{type(self).__name__} takes no options {sorted(method_options)}")
        # from_pretrained returns the encoder in eval mode, and Lightning keeps submodules' modes: without
        # this, fine-tuning would run with dropout off.
        self.encoder = encoder.train()
        self.spec = spec
        self.eval_splits = list(eval_splits)
        self.lr, self.weight_decay, self.warmup_ratio, self.total_steps = lr, weight_decay, warmup_ratio, total_steps
        self.head = TaskHead(encoder.config.hidden_size, spec.num_labels, dropout)
        self.evaluations: list[dict] = []
        self._outputs = defaultdict(lambda: ([], []))

    # -- what methods override -------------------------------------------------------------
    def encode(self, batch) -> torch.Tensor:
        """The batch features the task head reads (b × d): the [CLS] state of the last layer."""
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
        return self.encoder(**inputs).last_hidden_state[:, 0]

    def extra_losses(self, batch, features: torch.Tensor) -> dict[str, torch.Tensor]:
        return {}

    # -- shared training and evaluation ------------------------------------------------------
    def forward(self, batch):
        features = self.encode(batch)
        return self.head(features), features

    def training_step(self, batch, batch_idx):
        logits, features = self(batch)
        losses = {"task": task_loss(self.spec.kind, logits, batch["labels"]), **self.extra_losses(batch, features)}
        loss = sum(losses.values())
        self.log_dict({f"train/{name}": value for name, value in losses.items()}, batch_size=len(logits))
        self.log("loss", loss, prog_bar=True, batch_size=len(logits), logger=False)
        return loss

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        logits, _ = self(batch)
        predicted, gold = self._outputs[dataloader_idx]
        predicted.append(predictions(self.spec.kind, logits))
        gold.append(batch["labels"])

    def on_validation_epoch_end(self):
        scores = {}
        for index, split in enumerate(self.eval_splits):
            predicted, gold = self._outputs[index]
            if predicted:
                scores[split] = metrics.compute(self.spec, self.all_gather_cat(predicted), self.all_gather_cat(gold))
        self._outputs.clear()
        if self.trainer.sanity_checking or SELECTION_SPLIT not in scores:
            return
        self.evaluations.append({"step": self.global_step, "epoch": self.current_epoch, "metrics": scores})
        self.log("selection", scores[SELECTION_SPLIT][self.spec.main_metric], prog_bar=True, sync_dist=False)

    def all_gather_cat(self, parts: list[torch.Tensor]) -> torch.Tensor:
        local = torch.cat(parts)
        if self.trainer.world_size == 1:
            return local
        # Equal shards are guaranteed by the distributed sampler's padding; drop nothing, a few
        # duplicated examples under DDP are the price Lightning's sampler sets.
        return self.all_gather(local).flatten(0, 1)

    def best_evaluation(self) -> dict | None:
        """The evaluation with the best dev main metric (the earliest on ties)."""
        if not self.evaluations:
            return None
        return max(self.evaluations, key=lambda e: (e["metrics"][SELECTION_SPLIT][self.spec.main_metric], -e["step"]))

    def on_save_checkpoint(self, checkpoint):
        checkpoint["evaluations"] = self.evaluations

    def on_load_checkpoint(self, checkpoint):
        self.evaluations = checkpoint.get("evaluations", [])

    def configure_optimizers(self):
        return adamw_with_warmup(self, self.lr, self.weight_decay, self.warmup_ratio, self.total_steps)
