"""The pretraining drivers of ``klm pretrain``: a pretraining stage from its corpus to a saved checkpoint
directory with its manifest (KnowBERT's knowledge pretraining, ERICA and its ablations)."""

import shutil
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch

from knowledge_lm.core.backbones import load_backbone
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import DATASETS
from knowledge_lm.core.results import free_output_dir, write_dir_atomic
from knowledge_lm.data.base import default_cache_dir
from knowledge_lm.methods.erica import BATCH_SIZE, objective_set, pretrain
from knowledge_lm.methods.knowbert import KnowBertPretraining
from knowledge_lm.run.config import dataset_defaults
from knowledge_lm.run.erica_corpus import cached_corpus, corpus_statistics, parse_sources
from knowledge_lm.run.trainer import build_trainer


def knowbert_checkpoint(
    dataset: str,
    out,
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


def erica_state_dir(out) -> Path:
    """Where ``klm pretrain`` keeps the resumable state of the run that writes ``out`` by default: beside it."""
    out = Path(out).expanduser()
    return out.parent / f"{out.name}.resume"


def erica_checkpoint(
    corpus,
    out,
    method: str = "erica",
    objectives: str | None = None,
    backbone: str = "minilm",
    steps: int = 1000,
    batch_size: int = BATCH_SIZE,
    data_dir=None,
    kg_dir=None,
    exclude_test=None,
    min_entities: int = 4,
    min_relations: int = 4,
    max_length: int = 512,
    seed: int = 0,
    cache_dir=None,
    progress: bool = True,
    micro_batch_size: int | None = None,
    state_dir=None,
    resumable: bool = True,
    **options,
) -> Path | None:
    """What ``klm pretrain`` does: build (or reuse) the corpus, pretrain ``backbone`` for ``steps`` steps with
    the objective set of ``method`` (or ``objectives``, which must agree), save the checkpoint at ``out``.

    The checkpoint is written into a sibling temporary folder renamed to ``out`` at the end, so a failed
    run leaves nothing at ``out``. Its ``manifest.json`` records the corpus (sources, cache file, hash,
    statistics), the objective set (``method``), steps, final and mean losses, RD's positives per micro-batch,
    wall time and whether kernels were deterministic.

    With ``resumable`` the run keeps its state in ``state_dir`` (default :func:`erica_state_dir`) and the same
    call resumes from it (``options`` such as ``stop_after_steps``, ``time_budget_s``, ``save_every_s`` go to
    :func:`~knowledge_lm.methods.erica.pretrain`); None when this session stopped before the last step (the
    state stays for the next), else ``out``, after which the state is removed."""

    name = objective_set(method)
    if objectives is not None and objective_set(objectives) != name:
        raise KlmError(f"--objectives {objectives} ({objective_set(objectives)}) contradicts --method {method}")
    for option, value in (("steps", steps), ("batch size", batch_size), ("max length", max_length)):
        if value <= 0:
            raise KlmError(f"ERICA pretraining needs {option} > 0, got {value}")
    if micro_batch_size is not None and (micro_batch_size <= 0 or batch_size % micro_batch_size):
        raise KlmError(f"ERICA micro-batch size {micro_batch_size} must be > 0 and divide the batch size {batch_size}")
    out = free_output_dir(out)
    state_dir = Path(state_dir).expanduser() if state_dir is not None else erica_state_dir(out)
    sources = parse_sources(corpus)
    records, corpus_path = cached_corpus(
        sources, cache_dir or default_cache_dir(), data_dir, kg_dir, exclude_test, min_entities, min_relations
    )
    statistics = corpus_statistics(records)
    print(
        f"ERICA corpus {', '.join(sources)}: {statistics['documents']} documents, {statistics['relations']} relations "
        f"({statistics['intra']} intra-sentence) of {statistics['relation_types']} types; {corpus_path}",
        file=sys.stderr,
    )
    model, tokenizer, info = load_backbone(backbone, seed=seed)
    module = pretrain(
        records,
        model,
        tokenizer,
        steps,
        batch_size=batch_size,
        max_length=max_length,
        seed=seed,
        objectives=name,
        progress=progress,
        micro_batch_size=micro_batch_size,
        state_dir=state_dir if resumable else None,
        # The backbone by name and weights, not path: a resumed call may run from another copy of the tree.
        run_key={"backbone": {"name": info.name, "checksum": info.checksum}, "method": name},
        **options,
    )
    if module.global_step < steps:
        return None
    written = write_dir_atomic(
        out,
        lambda folder: module.save_checkpoint(
            folder,
            {
                "corpus": sources,
                "corpus_file": str(corpus_path),
                "corpus_statistics": statistics,
                "exclude_test": exclude_test,
                "backbone": info.to_dict(),
                "max_length": max_length,
                "seed": seed,
            },
        ),
    )
    if resumable:
        shutil.rmtree(state_dir, ignore_errors=True)
    return written
