"""One cell — (method, dataset, task, fraction, seed) — trained and evaluated in this process.

Run as ``python -m knowledge_lm.run.cell '<json spec>'`` by the sweep runner. The cell is claimed first
(``knowledge_lm.run.claims``): where another live process holds it, this one exits with ``CLAIMED_EXIT``. The result
file is written atomically once the cell has finished; until then a checkpoint under the run directory lets a
crashed cell resume where it stopped (only the claim's holder reads it, and only as tensors and plain data).
"""

import ctypes
import json
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytorch_lightning as pl
import torch

from knowledge_lm.core.backbones import load_backbone
from knowledge_lm.core.caches import notice
from knowledge_lm.core.errors import KlmError, error_line
from knowledge_lm.core.registry import METHODS
from knowledge_lm.core.results import (
    FAILURE_FILE,
    LAST_CHECKPOINT,
    Cell,
    CellResult,
    predictions_path,
    write_failure,
    write_gold,
    write_json_atomic,
    write_predictions,
)
from knowledge_lm.core.subsets import subset_hash
from knowledge_lm.methods.trainer import build_trainer, resolve_precision, training_logger
from knowledge_lm.run.claims import CLAIM_FILE, CLAIMED_EXIT, INTERRUPTED_EXIT, CellClaimed, claim_cell
from knowledge_lm.run.config import TrainConfig
from knowledge_lm.run.identity import cell_identity
from knowledge_lm.run.provenance import device_record, git_commit, records_sha256, versions
from knowledge_lm.run.spec import CellSpec, mps_in_use
from knowledge_lm.run.trainer import CellCheckpoint, build_model_and_data, method_dataset_options
from knowledge_lm.tasks.metrics import SCORER_VERSION

PR_SET_PDEATHSIG = 1  # prctl(2)
# Where a cell whose result could not be written to the store (a full disk) keeps it, under its run directory.
UNSAVED_DIR = "unsaved"


class CellInterrupted(KeyboardInterrupt):
    """Ctrl-C reached the cell while it trained: its ``last.ckpt`` is saved (``CellCheckpoint``), it resumes."""


class ResultNotWritten(KlmError):
    """A finished cell's result that the store could not take (a full disk); kept at ``fallback``."""


def readable_checkpoint(path: Path) -> bool:
    """A checkpoint that does not load as tensors and plain data alone (``weights_only``: half-written by a killed
    process, or holding pickled objects, which could run code) is dropped, and the cell starts over."""

    if not path.is_file():
        return False
    try:
        torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        return True
    except Exception as error:
        notice(f"{path}: checkpoint not resumed from, dropped ({type(error).__name__}); the cell starts over")
        path.unlink()
        return False


def owns_cell(train: TrainConfig) -> bool:
    """True in the process that claims a cell: its only one, or of a distributed cell's processes global rank 0
    (as its launcher numbers them: torchrun, srun, or Lightning's DDP starting the other ranks)."""
    if train.world_size == 1:
        return True
    return all(os.environ.get(name, "0") == "0" for name in ("RANK", "SLURM_PROCID", "LOCAL_RANK", "NODE_RANK"))


def die_with_parent(parent_pid: int | None):
    """End this process when its parent ends: a sweep runner killed with -9 leaves no cell training on, unowned (its
    claim goes stale, and a re-run takes the cell over). Linux: the kernel's parent-death signal; elsewhere a thread
    polling the parent. ``parent_pid``: the parent expected, checked after the signal is set (it may be gone)."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if parent_pid is not None and os.getppid() != parent_pid:
            os._exit(1)
        return
    parent = os.getppid() if parent_pid is None else parent_pid

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="klm-parent-watch", daemon=True).start()


def record_failure(run_dir: Path, error: BaseException):
    """Write the cell's ``failed.json``: its error in one line, the traceback's end. Where that cannot be written
    (a full disk) it is said on stderr; the runner records it from the worker's reply or the log."""
    try:
        write_failure(run_dir, error_line(error), traceback.format_exc())
    except OSError as unwritten:
        print(f"warning: {run_dir / FAILURE_FILE} not written ({unwritten})", file=sys.stderr)


def write_result(cell: Cell, result: CellResult, kept: dict, results_dir, run_dir: Path) -> None:
    """The result and its predictions written to the store; where that fails (``OSError``: a full disk, a read-only
    folder) both are written to a fallback folder (``UNSAVED_DIR`` of the run directory, else of the system's
    temporary folder), named on the console (``notice``), and ``ResultNotWritten`` raised: the next run of the cell
    moves them into the store (``recover_unsaved``) instead of training again."""
    try:
        write_predictions(predictions_path(cell.result_path(results_dir)), kept)
        write_json_atomic(cell.result_path(results_dir), result)
        return
    except OSError as error:
        predictions_path(cell.result_path(results_dir)).unlink(missing_ok=True)
        problem = f"{type(error).__name__}: {error}"
    for folder in unsaved_dirs(cell, run_dir):
        try:
            write_predictions(predictions_path(folder / "result.json"), kept)
            write_json_atomic(folder / "result.json", result)
        except OSError:
            continue
        notice(f"{cell.result_path(results_dir)} not written ({problem}); the result is kept at {folder}")
        raise ResultNotWritten(
            f"result not written to the store ({problem}); kept at {folder / 'result.json'}, moved into the "
            f"store when the cell runs again"
        )
    raise ResultNotWritten(f"result not written to the store ({problem}), nor to a fallback folder")


def store_gold(results_dir, gold: list, groups: list[str] | None):
    """The reported split's gold and example groups in the store (``write_gold``); where they cannot be written (a
    full disk) it is said on the console: the leaderboard then recomputes them from the data directory."""
    try:
        write_gold(results_dir, gold, groups)
    except OSError as error:
        notice(f"gold not stored in {results_dir} ({type(error).__name__}: {error}); its pages need the data for it")


def unsaved_dirs(cell: Cell, run_dir: Path) -> list[Path]:
    """Where ``write_result`` keeps a result the store could not take, in the order it tries them."""
    import tempfile

    return [Path(run_dir) / UNSAVED_DIR, Path(tempfile.gettempdir()) / "klm-unsaved" / cell.key]


def recover_unsaved(cell: Cell, run_dir: Path, results_dir) -> CellResult | None:
    """A result ``write_result`` kept in a fallback folder, moved into the store (its folder removed); None where
    there is none, or it still cannot be written."""
    for folder in unsaved_dirs(cell, run_dir):
        kept = folder / "result.json"
        if not kept.is_file():
            continue
        try:
            result = json.loads(kept.read_text())
            if predictions_path(kept).is_file():
                shutil.copyfile(predictions_path(kept), predictions_path(cell.result_path(results_dir)))
            write_json_atomic(cell.result_path(results_dir), result)
        except (OSError, ValueError):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        notice(f"{cell.key}: the result kept at {folder} is now in the store")
        return result
    return None


def clear_run_dir(run_dir: Path):
    """Remove a finished cell's checkpoints and logs (the runner's log of it too), all but its claim (released
    after)."""
    for entry in run_dir.iterdir():
        if entry.name == CLAIM_FILE:
            continue
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def group_metrics(model, data, split: str) -> dict:
    """The best evaluation's metrics on ``split`` per example group (``example_groups``: the generated task's
    statement families), ``{group: {"examples": n, metric: value}}``; empty where the dataset has none."""
    groups, outputs = data.example_groups(split), model.best_outputs.get(split)
    if not groups or not outputs or len(groups) != len(outputs["predicted"]):
        return {}
    scored = {}
    for group in sorted(set(groups)):
        members = [index for index, name in enumerate(groups) if name == group]
        scores = model.kind.score([outputs["predicted"][i] for i in members], [outputs["gold"][i] for i in members])
        scored[group] = {"examples": len(members), **scores}
    return scored


def run_cell(
    cell: Cell,
    train: TrainConfig,
    *,
    data_dir=None,
    results_dir="results",
    runs_dir="runs",
    dataset_options: dict | None = None,
    progress: bool = True,
) -> CellResult | dict:
    """Claim ``cell``, train and evaluate it; its result (an empty dict on every DDP rank but 0), written to the
    store. ``CellClaimed`` where another live process holds the cell, or its result is there once claimed; any
    other error is recorded in the run directory's ``failed.json`` before the claim is released."""
    run_dir = cell.run_dir(runs_dir)
    claim = claim_cell(run_dir) if owns_cell(train) else None
    try:
        if cell.stored_result_path(results_dir).is_file():
            raise CellClaimed(f"finished elsewhere ({cell.stored_result_path(results_dir)})")
        if claim is not None:
            (run_dir / FAILURE_FILE).unlink(missing_ok=True)
        recovered = recover_unsaved(cell, run_dir, results_dir) if claim is not None else None
        if recovered is not None:
            clear_run_dir(run_dir)
            result = recovered
        else:
            result = train_cell(
                cell,
                train,
                run_dir=run_dir,
                data_dir=data_dir,
                results_dir=results_dir,
                dataset_options=dataset_options,
                progress=progress,
            )
    except (CellClaimed, KeyboardInterrupt):  # interrupted: not a failure, the cell resumes from its checkpoint
        raise
    except BaseException as error:
        if claim is not None:
            record_failure(run_dir, error)
        raise
    finally:
        if claim is not None:
            claim.release()
    if claim is not None:
        try:
            run_dir.rmdir()  # emptied, released: a process that claimed the cell meanwhile keeps it
        except OSError:
            pass
    return result


def cell_trainer(
    cell: Cell, train: TrainConfig, budget: dict, precision, *, run_dir: Path, results_dir, progress: bool
):
    """The cell's ``pl.Trainer``: its step budget and evaluations, checkpoints in ``run_dir`` (every
    ``checkpoint_every_steps`` steps, else every ``checkpoint_minutes``) and its training logger."""
    if train.checkpoint_every_steps > 0:
        checkpointing = CellCheckpoint(
            dirpath=run_dir, save_last=True, save_top_k=0, every_n_train_steps=train.checkpoint_every_steps
        )
    else:
        checkpointing = CellCheckpoint(
            dirpath=run_dir,
            save_last=True,
            save_top_k=0,
            train_time_interval=timedelta(minutes=train.checkpoint_minutes),
        )
    return build_trainer(
        budget["max_steps"],
        precision=precision,
        devices=train.devices,
        num_nodes=train.num_nodes,
        eval_every_steps=budget["eval_every_steps"],
        callbacks=[checkpointing],
        progress=progress,
        root_dir=run_dir,
        logger=training_logger(train.logger, cell.log_dir(results_dir), cell.key),
        log_every_n_steps=min(50, budget["eval_every_steps"]),  # a loss or more between two evaluations
    )


def write_result_and_predictions(cell: Cell, result, train: TrainConfig, model, data, *, results_dir, run_dir) -> None:
    """The result, with the best evaluation's kept predictions beside it and their gold in the store."""
    # The best evaluation's decoded predictions beside the result (for bootstrap intervals and per-example
    # analyses); written first, so a result never lacks them. Their gold is kept as its sha256 only, the gold
    # itself once per sha256 in the store's gold folder, where the leaderboard reads it. Under DDP they are in rank
    # order, not split order, so their hash matches no recomputed gold and they count as not kept; nor is their
    # gold stored (the leaderboard would take it for the split's).
    kept = {"split": data.report_split, **model.best_outputs.get(data.report_split, {})}
    frequencies = data.entity_frequencies(data.report_split) if train.world_size == 1 else None  # split order only
    if frequencies is not None:
        kept["entity_frequency"] = frequencies
    write_result(cell, result, kept, results_dir, run_dir)
    if train.world_size == 1 and "gold" in kept:
        store_gold(results_dir, kept["gold"], data.example_groups(data.report_split))


def train_cell(
    cell: Cell,
    train: TrainConfig,
    *,
    run_dir: Path,
    data_dir,
    results_dir,
    dataset_options: dict | None,
    progress: bool,
) -> CellResult | dict:
    """``run_cell``'s work, in the claimed run directory: the result is written to the store, and the run directory
    emptied but for the claim."""
    started = time.time()
    method_class = METHODS.get(cell.method)

    pl.seed_everything(cell.seed, workers=True, verbose=False)
    encoder, tokenizer, backbone = load_backbone(
        cell.backbone, getattr(method_class, "attn_implementation", None), seed=cell.seed
    )
    model, data, budget, train = build_model_and_data(  # train resolved: the result records eager or CUDA graphs
        cell.method,
        encoder,
        tokenizer,
        cell.dataset,
        train,
        task=cell.task,
        fraction=cell.fraction,
        data_dir=data_dir,
        dataset_options=dataset_options,
    )
    dataset_options = method_dataset_options(cell.method, dataset_options, cell.dataset)

    precision = resolve_precision(train.precision)
    trainer = cell_trainer(cell, train, budget, precision, run_dir=run_dir, results_dir=results_dir, progress=progress)
    last = run_dir / LAST_CHECKPOINT
    resumed_from = str(last) if readable_checkpoint(last) else None
    try:
        trainer.fit(model, datamodule=data, ckpt_path=resumed_from)
    except SystemExit:  # Lightning's end of a fit it stopped on Ctrl-C, once its callbacks saved the checkpoint
        if trainer.interrupted:
            raise CellInterrupted() from None
        raise
    if trainer.global_rank != 0:
        return {}
    best = model.best_evaluation()
    if best is None:
        raise KlmError(f"{cell.key}: training ended without a dev evaluation")
    result = cell_result(
        cell,
        train,
        backbone=backbone,
        model=model,
        data=data,
        budget=budget,
        dataset_options=dataset_options,
        precision=precision,
        best=best,
        resumed=resumed_from is not None,
        started=started,
    )
    write_result_and_predictions(cell, result, train, model, data, results_dir=results_dir, run_dir=run_dir)
    clear_run_dir(run_dir)
    return result


def cell_result(
    cell: Cell,
    train: TrainConfig,
    *,
    backbone,
    model,
    data,
    budget: dict,
    dataset_options: dict,
    precision: str,
    best: dict,
    resumed: bool,
    started: float,
) -> CellResult:
    """The result of ``cell``, trained with ``train`` (as resolved) from ``backbone`` (its ``BackboneInfo``) into
    ``model`` on the set-up data module ``data``: its provenance, data, budget, the ``best`` dev evaluation's metrics
    and every evaluation; ``resumed`` where it resumed from a checkpoint, its wall time counted from ``started``."""
    return {
        "schema": 1,
        "cell": {
            "method": cell.method,
            "dataset": cell.dataset,
            "task": cell.task,
            "fraction": cell.fraction,
            "seed": cell.seed,
            "backbone": backbone.name,
            "variant": cell.variant,
        },
        "config": {
            "train": vars(train),
            "dataset_options": dataset_options or {},
            # every setting its numbers depend on, defaults filled in: what a later run compares (run.identity)
            "identity": cell_identity(cell, train, dataset_options or {}),
        },
        "git": git_commit(),
        "versions": versions(),
        "device": {**device_record(precision, train.world_size), "mps": mps_in_use(), "graphs": model.capture_record()},
        "backbone": backbone.to_dict(),
        "data": {
            "subset_seed": train.subset_seed,
            "subset_hash": data.subset_hash,
            "train_size": data.train_size,
            "eval_sizes": {split: len(data.splits[split]) for split in data.eval_split_names},
            "split_hashes": {
                split: subset_hash([record["id"] for record in records], range(len(records)))
                for split, records in data.splits.items()
            },
            # Of every record as read (train before its fraction cut): a changed data file or generator shows.
            "data_hashes": {split: records_sha256(records) for split, records in data.splits.items()},
            "data_dir": str(data.data_dir) if data.data_dir else None,
        },
        "budget": budget,
        "protocol": {"split_version": data.split_version, "scorer_version": SCORER_VERSION},
        "report_split": data.report_split,
        "selection": {
            "split": "dev",
            "metric": data.task_spec.main_metric,
            "step": best["step"],
            "epoch": best["epoch"],
        },
        "metrics": best["metrics"],
        "metrics_by_group": group_metrics(model, data, data.report_split) if train.world_size == 1 else {},
        # Per family on dev as well, where model selection and method settings are judged (split order only).
        "dev_metrics_by_group": group_metrics(model, data, "dev") if train.world_size == 1 else {},
        "method_stats": model.method_stats(),
        "evaluations": model.evaluations,
        "resumed_from_checkpoint": resumed,
        "wall_time_s": round(time.time() - started, 2),
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def run_spec(spec: CellSpec, error: dict | None = None) -> int:
    """Run the cell of ``spec`` (``knowledge_lm.sweep.runner.cell_spec``'s) in this process; its exit status: 0 done,
    ``CLAIMED_EXIT`` where another process holds or has finished it, ``INTERRUPTED_EXIT`` stopped by Ctrl-C (it
    resumes), 1 failed (the error printed in one line and recorded in ``failed.json``; also in ``error``, where
    given: ``{"error": one line, "traceback": its end}``, what a worker replies)."""
    cell = spec.cell
    try:
        run_cell(
            cell,
            spec.train,
            data_dir=spec.data_dir,
            results_dir=spec.results_dir,
            runs_dir=spec.runs_dir,
            dataset_options=spec.dataset_options,
            progress=spec.progress,
        )
    except CellClaimed as claimed:
        print(f"{cell.key}: {claimed}", file=sys.stderr)
        return CLAIMED_EXIT
    except KeyboardInterrupt:
        print(f"{cell.key}: interrupted, it resumes from its checkpoint", file=sys.stderr)
        return INTERRUPTED_EXIT
    except BaseException as failure:
        message = error_line(failure)
        if error is not None:  # before the print, which fails where the log's disk is full
            error.update({"error": message, "traceback": traceback.format_exc()[-4000:]})
        print(f"error: {cell.key}: {message}", file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    spec = CellSpec.from_json((argv or sys.argv[1:])[0])
    if spec.parent_pid is not None:
        die_with_parent(spec.parent_pid if owns_cell(spec.train) else None)  # DDP's other ranks: their parent is rank 0
    sys.exit(run_spec(spec))


if __name__ == "__main__":
    main()
