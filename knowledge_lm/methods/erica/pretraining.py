"""ERICA's pretraining, as ``klm pretrain`` runs it: from its corpus to a saved checkpoint directory with its
manifest (ERICA and its ablations), resumable."""

import json
import shutil
import sys
from contextlib import nullcontext
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.data import DataLoader

from knowledge_lm.core.backbones import load_backbone
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.results import free_output_dir, write_dir_atomic
from knowledge_lm.data.base import default_cache_dir
from knowledge_lm.methods.erica.corpus import cached_corpus, corpus_statistics, parse_sources
from knowledge_lm.methods.erica.model import (
    BATCH_SIZE,
    MAX_NEGATIVES,
    EricaBatches,
    EricaCollator,
    EricaPretraining,
    corpus_hash,
    objective_options,
    objective_set,
    relation_vocabulary,
)
from knowledge_lm.methods.trainer import ResumableState, build_trainer


def checked_micro_batch_size(corpus: list[dict], steps: int, batch_size: int, micro_batch_size: int | None) -> int:
    """The documents per forward pass (default: the whole batch), once the corpus, steps and sizes are checked."""
    if not corpus:
        raise KlmError("ERICA corpus is empty (no document passes the entity/relation filters)")
    if steps <= 0:
        raise KlmError(f"ERICA pretraining needs steps > 0, got {steps}")
    micro_batch_size = micro_batch_size or batch_size
    if micro_batch_size <= 0 or batch_size % micro_batch_size:
        raise KlmError(f"ERICA micro-batch size {micro_batch_size} must be > 0 and divide the batch size {batch_size}")
    return micro_batch_size


def resumable_state(state_dir: Path, run_key: dict, settings: dict, options: dict) -> tuple[Path | None, int]:
    """``(state, start_step)``: the state a run resumes from in ``state_dir`` and its step, else ``(None, 0)``.
    ``state_dir/run.json`` records what the run is (``run_key``, ``settings`` and the objective ``options``),
    written by the first session; a state of another run is an error."""
    key = {
        **run_key,
        **settings,
        "options": {name: list(value) if isinstance(value, tuple) else value for name, value in options.items()},
    }
    key = json.loads(json.dumps(key, default=str))
    if (state_dir / "run.json").is_file():
        saved = json.loads((state_dir / "run.json").read_text())
        differing = sorted(name for name in set(saved) | set(key) if saved.get(name) != key.get(name))
        if differing:
            raise KlmError(
                f"the pretraining state in {state_dir} is of another run (differs in {', '.join(differing)}); "
                "rerun that command, or remove the folder to start over"
            )
    else:
        state_dir.mkdir(parents=True, exist_ok=True)
        (state_dir / "run.json").write_text(json.dumps(key, indent=2) + "\n")
    if not (state_dir / "last.ckpt").is_file():
        return None, 0
    state = state_dir / "last.ckpt"
    return state, torch.load(state, map_location="cpu", weights_only=True)["global_step"]


def fit_restoring_determinism(trainer, module, loader, state, *, deterministic: bool) -> None:
    """``trainer.fit``, from ``state`` where given; torch's deterministic-algorithms setting, which the trainer
    sets, is restored after. ``deterministic``: attention through SDPA's math backend, whose backward is
    deterministic; the flash and memory-efficient backwards are not (two runs of one seed on an H200 gave two
    checksums, mean losses apart by ~1e-4 relative)."""
    was_deterministic = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    try:
        with sdpa_kernel([SDPBackend.MATH]) if deterministic else nullcontext():
            trainer.fit(module, loader, ckpt_path=state)
    finally:
        torch.use_deterministic_algorithms(was_deterministic[0], warn_only=was_deterministic[1])


def erica_loader(corpus, tokenizer, options: dict, settings: dict, *, span: tuple[int, int], workers: int | None):
    """The micro-batches of :class:`EricaBatches` from number ``span[0]`` to ``span[1]`` (of ``settings``' size,
    length and seed), collated (tokenised) by ``workers`` loader processes (default 2 on a GPU, none on the CPU)."""
    seed = settings["seed"]
    negatives = options.get("max_negatives", MAX_NEGATIVES)
    collator = EricaCollator(
        tokenizer, relation_vocabulary(corpus), max_length=settings["max_length"], max_negatives=negatives, seed=seed
    )
    batches = EricaBatches(corpus, collator, settings["micro_batch_size"], span[1], seed=seed, start=span[0])
    # Its own generator: the loader's base seed then draws nothing from the global stream dropout uses.
    workers = workers if workers is not None else (2 if torch.cuda.is_available() else 0)
    return DataLoader(batches, batch_size=None, num_workers=workers, generator=torch.Generator().manual_seed(seed))


def pretrain_erica(
    corpus: list[dict],
    backbone,
    tokenizer,
    steps: int,
    output_dir=None,
    *,
    batch_size: int = BATCH_SIZE,
    max_length: int = 512,
    seed: int = 0,
    objectives: str = "erica",
    progress: bool = False,
    callbacks=(),
    micro_batch_size: int | None = None,
    state_dir=None,
    save_every_s: float | None = 300.0,
    save_every_steps: int | None = None,
    stop_after_steps: int | None = None,
    time_budget_s: float | None = None,
    deterministic: bool = True,
    run_key: dict | None = None,
    data_workers: int | None = None,
    **options,
) -> EricaPretraining:
    """Run ``steps`` optimiser steps of ERICA on ``corpus`` (records of :func:`build_corpus`); save if asked.

    ``objectives``: a name of :data:`OBJECTIVES` (or its words); explicit ``use_*``/``rd_terms`` options win.
    A step is ``batch_size`` documents; with ``micro_batch_size`` (dividing it) gradients accumulate over
    micro-batches, and RD contrasts within each micro-batch, as the official code (16 documents per GPU, 8 GPUs,
    16 accumulations = 2,048). The batches are those of :class:`EricaBatches`.

    With ``state_dir`` the run is resumable: :class:`~knowledge_lm.methods.trainer.ResumableState` saves
    ``state_dir/last.ckpt`` every ``save_every_s`` seconds (or ``save_every_steps`` steps) and when the session
    stops early (``stop_after_steps`` steps or ``time_budget_s`` seconds of this session), and a call with a
    ``state_dir`` holding a state resumes from it; ``state_dir/run.json`` holds what the run is (``run_key`` plus
    the corpus hash and the settings), and a state of another run is refused. The returned module's
    ``global_step`` < ``steps`` says that the session stopped early (nothing is saved at ``output_dir`` then).
    ``deterministic``: deterministic kernels (see ``build_trainer``). ``data_workers``: loader processes that
    collate (tokenise) the next micro-batches while the GPU trains (default 2 on a GPU, none on the CPU); the
    batches do not depend on it."""

    micro_batch_size = checked_micro_batch_size(corpus, steps, batch_size, micro_batch_size)
    accumulate = batch_size // micro_batch_size
    options = {**objective_options(objectives), **options}
    digest = corpus_hash(corpus)
    settings = {
        "steps": steps,
        "batch_size": batch_size,
        "micro_batch_size": micro_batch_size,
        "max_length": max_length,
        "seed": seed,
        "deterministic": deterministic,
        "attention_kernel": "sdpa-math" if deterministic else "sdpa",
    }
    state, start_step = None, 0
    if state_dir is not None:
        state_dir = Path(state_dir)
        state, start_step = resumable_state(state_dir, {**(run_key or {}), "corpus_hash": digest}, settings, options)
        saving = (save_every_s, save_every_steps, stop_after_steps, time_budget_s)
        callbacks = [*callbacks, ResumableState(state_dir / "last.ckpt", *saving)]
    pl.seed_everything(seed, workers=True, verbose=False)
    span = (start_step * accumulate, steps * accumulate)
    loader = erica_loader(corpus, tokenizer, options, settings, span=span, workers=data_workers)
    module = EricaPretraining(backbone, tokenizer, steps, corpus_hash=digest, **options)
    module.train()  # from_pretrained gives a model in eval mode (dropout off); Lightning keeps module modes
    recorded = ("batch_size", "micro_batch_size", "deterministic", "attention_kernel")
    module.run_settings = {**{key: settings[key] for key in recorded}, "accumulate_grad_batches": accumulate}
    trainer = build_trainer(
        steps,
        callbacks=callbacks,
        progress=progress,
        accumulate_grad_batches=accumulate,
        deterministic=deterministic,
    )
    fit_restoring_determinism(trainer, module, loader, state, deterministic=deterministic)
    if output_dir is not None and module.global_step >= steps:
        module.save_checkpoint(output_dir)
    return module


def erica_state_dir(out) -> Path:
    """Where ``klm pretrain`` keeps the resumable state of the run that writes ``out`` by default: beside it."""
    out = Path(out).expanduser()
    return out.parent / f"{out.name}.resume"


def checked_objective_set(method, objectives, *, steps, batch_size, max_length, micro_batch_size) -> str:
    """The objective set of ``method``, once ``objectives`` (where given) agrees and the sizes are positive."""
    name = objective_set(method)
    if objectives is not None and objective_set(objectives) != name:
        raise KlmError(f"--objectives {objectives} ({objective_set(objectives)}) contradicts --method {method}")
    for option, value in (("steps", steps), ("batch size", batch_size), ("max length", max_length)):
        if value <= 0:
            raise KlmError(f"ERICA pretraining needs {option} > 0, got {value}")
    if micro_batch_size is not None and (micro_batch_size <= 0 or batch_size % micro_batch_size):
        raise KlmError(f"ERICA micro-batch size {micro_batch_size} must be > 0 and divide the batch size {batch_size}")
    return name


def announced_corpus(corpus, cache_dir, data_dir, **filters) -> tuple[list[str], list[dict], Path, dict]:
    """``(sources, records, cache file, statistics)`` of ``corpus`` (built, or read from the cache under
    ``cache_dir``; ``filters``: :func:`cached_corpus`'s), its statistics printed in one line on stderr."""
    sources = parse_sources(corpus)
    records, corpus_path = cached_corpus(sources, cache_dir or default_cache_dir(), data_dir, **filters)
    statistics = corpus_statistics(records)
    print(
        f"ERICA corpus {', '.join(sources)}: {statistics['documents']} documents, {statistics['relations']} relations "
        f"({statistics['intra']} intra-sentence) of {statistics['relation_types']} types; {corpus_path}",
        file=sys.stderr,
    )
    return sources, records, corpus_path, statistics


def erica_checkpoint(
    corpus,
    out,
    *,
    method: str = "erica",
    objectives: str | None = None,
    backbone: str = "minilm",
    steps: int = 1000,
    batch_size: int | None = None,
    data_dir=None,
    kg_dir=None,
    exclude_test=None,
    min_entities: int = 4,
    min_relations: int = 4,
    max_length: int | None = None,
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
    ``batch_size`` and ``max_length`` default to the paper's (:data:`BATCH_SIZE` documents of 512 tokens).

    The checkpoint is written into a sibling temporary folder renamed to ``out`` at the end, so a failed
    run leaves nothing at ``out``. Its ``manifest.json`` records the corpus (sources, cache file, hash,
    statistics), the objective set (``method``), steps, final and mean losses, RD's positives per micro-batch,
    wall time and whether kernels were deterministic.

    With ``resumable`` the run keeps its state in ``state_dir`` (default :func:`erica_state_dir`) and the same
    call resumes from it (``options`` such as ``stop_after_steps``, ``time_budget_s``, ``save_every_s`` go to
    :func:`pretrain_erica`); None when this session stopped before the last step (the
    state stays for the next), else ``out``, after which the state is removed."""

    batch_size, max_length = batch_size or BATCH_SIZE, max_length or 512
    name = checked_objective_set(
        method, objectives, steps=steps, batch_size=batch_size, max_length=max_length, micro_batch_size=micro_batch_size
    )
    out = free_output_dir(out)
    state_dir = Path(state_dir).expanduser() if state_dir is not None else erica_state_dir(out)
    filters = {"min_entities": min_entities, "min_relations": min_relations}
    sources, records, corpus_path, statistics = announced_corpus(
        corpus, cache_dir, data_dir, kg_dir=kg_dir, exclude_test=exclude_test, **filters
    )
    model, tokenizer, info = load_backbone(backbone, seed=seed)
    module = pretrain_erica(
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
    corpus_record = {
        "corpus": sources,
        "corpus_file": str(corpus_path),
        "corpus_statistics": statistics,
        "exclude_test": exclude_test,
        "backbone": info.to_dict(),
        "max_length": max_length,
        "seed": seed,
    }
    written = write_dir_atomic(out, lambda folder: module.save_checkpoint(folder, corpus_record))
    if resumable:
        shutil.rmtree(state_dir, ignore_errors=True)
    return written
