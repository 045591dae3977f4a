"""KnowBERT's knowledge pretraining, as ``klm pretrain --method knowbert`` runs it: from a prepared dataset's train
split to a saved checkpoint directory with its manifest."""

from pathlib import Path

import pytorch_lightning as pl
import torch

from knowledge_lm.core.backbones import load_backbone
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import DATASETS
from knowledge_lm.core.results import free_output_dir, write_dir_atomic
from knowledge_lm.methods.knowbert import KnowBertPretraining
from knowledge_lm.methods.trainer import build_trainer
from knowledge_lm.run.config import dataset_defaults
from knowledge_lm.run.trainer import wire_knowledge


def knowbert_checkpoint(
    dataset: str,
    out,
    *,
    backbone: str = "minilm",
    steps: int = 1000,
    batch_size: int = 32,
    max_length: int | None = None,
    data_dir=None,
    cache_dir=None,
    seed: int = 0,
    lr: float | None = None,
    progress: bool = True,
    dataset_options: dict | None = None,
    **options,
) -> Path:
    """What ``klm pretrain --method knowbert --corpus DATASET`` does: knowledge pretraining on the train split of
    ``dataset`` (its default task, features from ``klm prepare --dataset DATASET --kg-embeddings`` at the
    dataset config's max_length), saved at ``out`` (written beside it, renamed at the end)."""

    for option, value in (("steps", steps), ("batch size", batch_size)):
        if value <= 0:
            raise KlmError(f"KnowBERT pretraining needs {option} > 0, got {value}")
    out = free_output_dir(out)
    defaults = dataset_defaults(dataset)
    dataset_class = DATASETS.get(dataset)
    max_length = max_length or (defaults.get("train") or {}).get("max_length", 128)
    dataset_options = {
        k: v
        for k, v in {**(defaults.get("dataset_options") or {}), **(dataset_options or {})}.items()
        if k != "knowledge"
    }
    pl.seed_everything(seed, workers=True, verbose=False)
    encoder, tokenizer, info = load_backbone(backbone, seed=seed)
    data = dataset_class(
        tokenizer=tokenizer,
        data_dir=data_dir,
        batch_size=batch_size,
        max_length=max_length,
        cache_dir=cache_dir,
        knowledge=dict((defaults.get("dataset_options") or {}).get("knowledge") or {}),
        **dataset_options,
    )
    module = KnowBertPretraining(encoder, tokenizer, steps, **({"lr": lr} if lr else {}), **options)
    data.setup()
    wire_knowledge(module, data)
    gpu = torch.cuda.is_available()
    trainer = build_trainer(steps, progress=progress)
    trainer.fit(module, datamodule=data)
    return write_dir_atomic(
        out,
        lambda folder: module.save_checkpoint(
            folder,
            {
                "corpus": {
                    "dataset": dataset,
                    "task": data.task,
                    "split": "train",
                    "examples": len(data.splits["train"]),
                    "subset_hash": data.subset_hash,
                },
                "backbone": info.to_dict(),
                "batch_size": batch_size,
                "max_length": max_length,
                "seed": seed,
                "device": torch.cuda.get_device_name(0) if gpu else "cpu",
            },
        ),
    )
