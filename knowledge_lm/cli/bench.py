"""``klm bench``: run a sweep's (or a paper table's) cells, then regenerate the leaderboards."""

import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from knowledge_lm.cli.arguments import (
    add_data_dir_argument,
    add_leaderboard_arguments,
    add_sweep_arguments,
    add_table_argument,
    check_cache_folder,
    check_writable_folder,
    parse_overrides,
    print_written_leaderboards,
    sweeps_from_args,
)
from knowledge_lm.core.backbones import PACKAGED_CHECKSUMS
from knowledge_lm.core.errors import KlmError
from knowledge_lm.run.config import (
    check_data_dir,
)
from knowledge_lm.sweep.inputs import check_backbone_ready
from knowledge_lm.sweep.mps import mps_for_sweep
from knowledge_lm.sweep.plan import (
    cell_status,
    duration_text,
    estimate_folders,
    estimated_seconds,
    parse_shard,
    plan_sweep,
    planned_cells,
    renamed_line,
    shard_keys,
    stored_wall_times,
    sweep_cells,
    unstored_keys,
)
from knowledge_lm.sweep.runner import run_sweep, run_sweeps_together, visible_gpus, worker_pool
from knowledge_lm.sweep.serve import requester_pid
from knowledge_lm.sweep.startup import cell_spans_since, outside_cells_line, phase_ended, process_started

# klm bench's exit code where cells remain unfinished because other processes run them.
UNFINISHED_EXIT = 3


WAIT_POLL_SECONDS = 30


def parse_jobs(value: str | None) -> int:
    """``--jobs``, else ``$KLM_JOBS``, else 1: how many cells run at once, a positive integer."""
    source, text = ("--jobs", value) if value is not None else ("KLM_JOBS", os.environ.get("KLM_JOBS") or "1")
    try:
        jobs = int(text)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise KlmError(f"{source} {text!r}: expected a positive number of cells to run at once, e.g. 2")
    return jobs


def print_plan(sweeps, plans: list, results_dir: Path, *, jobs: int):
    """``klm bench --dry-run``: each sweep's cells (``plans``: its ``plan_sweep``) under the keys a run takes them (a
    stored namesake trained with other settings makes a cell of its own, and the plan says how they differ), what a
    run would do with them (run, or leave: done, running elsewhere) and the expected wall time of each to run
    (``estimated_seconds``: the median of stored cells of its dataset, task, method and fraction, of the variants
    nearest its own, on its backbone where there are some; else unknown); then the totals, in sentences."""
    wall_times = stored_wall_times(results_dir, estimate_folders(p.cell for plan in plans for p, _, run in plan if run))
    total = {"cells": 0, "done": 0, "elsewhere": 0, "run": 0, "unknown": 0, "seconds": 0.0}
    for sweep, planned in zip(sweeps, plans):
        print(f"{sweep.name}:")
        for chosen, state, will_run in planned:
            cell = chosen.cell
            total["cells"] += 1
            if not will_run:
                total["done" if state == "done" else "elsewhere"] += 1
                print(f"  {'done' if state == 'done' else 'skip'}  {cell.key}  {state}")
                continue
            total["run"] += 1
            found = estimated_seconds(cell, wall_times)
            if found is None:
                total["unknown"] += 1
                estimate = "unknown"
            else:
                total["seconds"] += found[0]
                estimate = f"~{duration_text(found[0])}" + ("" if found[1] else " (of another backbone)")
            print(f"  run   {cell.key}  {state}  {estimate}")
        renamed = renamed_line([chosen for chosen, _, _ in planned])
        if renamed:
            print(f"  {renamed}")
    print(
        f"{total['cells']} cells: {total['done']} already done, {total['run']} to run"
        + (f", {total['elsewhere']} running elsewhere" if total["elsewhere"] else "")
    )
    if total["run"]:
        print(estimate_sentence(total, jobs))
    print("dry run: nothing was run")


def estimate_sentence(total: dict, jobs: int) -> str:
    """The plan's time estimate in one sentence: of the cells to run whose time the store can estimate, and the
    number it cannot."""
    known = total["run"] - total["unknown"]
    reason = "no stored cell of their method, task and fraction"
    if not known:
        return f"time unknown for all {total['run']} cells to run ({reason})"
    estimate = f"estimated {duration_text(total['seconds'])} of cell time for {known} of the {total['run']} to run"
    if jobs > 1:
        estimate += f" (~{duration_text(total['seconds'] / jobs)} at --jobs {jobs}, if they pack evenly)"
    if total["unknown"]:
        estimate += f"; unknown for {total['unknown']} ({reason})"
    return estimate


def check_devices(sweeps, overrides: dict, executor: str):
    """A cell's ``devices`` (GPUs) available here: more than one wants as many visible GPUs (a scheduler's
    executor places its cells itself)."""
    if executor != "local":
        return
    wanted = max(sweep.devices_per_cell(overrides) for sweep in sweeps)
    if wanted > 1:
        gpus = visible_gpus()
        if len(gpus) < wanted:
            raise KlmError(
                f"a cell wants {wanted} GPUs (devices / --devices-per-cell) but {len(gpus)} are visible here"
            )


def backbones_to_run(plans: list) -> set[str]:
    """The backbones of the cells a run would train (``plans``: each sweep's ``plan_sweep``)."""
    return {planned.cell.backbone for plan in plans for planned, _, will_run in plan if will_run}


def backbones_of_the_run(sweeps, args, only, overrides: dict) -> set[str]:
    """``backbones_to_run`` of the sweeps' plans, planned first for the cells with no stored result, whose plan reads
    no identity (``unstored_keys``), then for the stored ones of any backbone not found so: a run whose every backbone
    has a cell to run loads no method or dataset module (torch) here, before its workers start."""
    found, rerun = set(), args.rerun_without_predictions
    for sweep in sweeps:
        unstored = unstored_keys(sweep, args.results_dir, only)
        found |= backbones_to_run([plan_sweep(sweep, args.results_dir, args.runs_dir, rerun, unstored, overrides)])
        cells = [cell for cell in sweep_cells(sweep) if only is None or cell.key in only]
        stored = {cell.key for cell in cells if cell.key not in unstored and cell.backbone not in found}
        if stored:
            found |= backbones_to_run([plan_sweep(sweep, args.results_dir, args.runs_dir, rerun, stored, overrides)])
    return found


def check_backbones_to_run(backbones: set[str], dry_run: bool) -> None:
    """The backbones of the cells a run would train (``backbones_to_run``), each ready (``check_backbone_ready``): a
    missing or empty model folder, unreadable weights or a hub name offline fail before any sweep starts, from the
    dry run too; the backbones of cells done already are not needed."""
    for backbone in sorted(backbones):
        try:
            check_backbone_ready(backbone)
        except KlmError as error:
            if not (dry_run and backbone in PACKAGED_CHECKSUMS):
                raise
            # a packaged backbone not installed yet plans (as on a fresh clone offline); the run needs it
            print(f"note: {error}", file=sys.stderr)


def command_bench(args):
    phase_ended("start-up")
    sweeps = sweeps_from_args(args)
    jobs = parse_jobs(args.jobs)
    shard = parse_shard(args.shard) if args.shard else None
    data_dir = check_data_dir(args.data_dir)
    overrides = parse_overrides(args.set)
    if args.devices_per_cell is not None:
        if args.devices_per_cell < 1:
            raise KlmError(f"--devices-per-cell {args.devices_per_cell}: expected at least 1 GPU per cell")
        overrides["devices"] = args.devices_per_cell
    check_devices(sweeps, overrides, args.executor)
    if args.executor_option and args.executor == "local":
        raise KlmError(
            f"--executor-option {args.executor_option[0]}: the local executor takes no options (they are submitit's, "
            "for --executor slurm)"
        )
    for folder in (args.results_dir, args.runs_dir, args.leaderboards_dir):
        check_writable_folder(folder)
    check_cache_folder(None)
    only = shard_keys([cell for sweep in sweeps for cell in sweep_cells(sweep)], shard) if shard else None
    if args.dry_run:
        rerun = args.rerun_without_predictions
        plans = [plan_sweep(sweep, args.results_dir, args.runs_dir, rerun, only, overrides) for sweep in sweeps]
        check_backbones_to_run(backbones_to_run(plans), dry_run=True)
        print_plan(sweeps, plans, args.results_dir, jobs=jobs)
        return 0
    check_backbones_to_run(backbones_of_the_run(sweeps, args, only, overrides), dry_run=False)
    phase_ended("checks")
    executor = None
    if args.executor != "local":
        from knowledge_lm.sweep.submit import make_executor

        devices = max(sweep.devices_per_cell(overrides) for sweep in sweeps)
        executor = make_executor(
            args.executor, args.runs_dir / "submitit", devices, parse_overrides(args.executor_option)
        )
    failed = 0
    while True:
        failed += run_sweeps(
            args, sweeps, overrides=overrides, data_dir=data_dir, jobs=jobs, only=only, executor=executor
        )
        unfinished = cells_running_elsewhere(sweeps, args.results_dir, args.runs_dir, only, overrides)
        if not unfinished or not args.wait or failed:
            break
        print(f"waiting for {len(unfinished)} cells that other processes run (--wait)", file=sys.stderr)
        while cells_running_elsewhere(sweeps, args.results_dir, args.runs_dir, only, overrides):
            time.sleep(WAIT_POLL_SECONDS)
        # their runners finished, failed or died: the next round runs what they left
    if shard:  # shards end at different times, and one page from several writers would be torn
        print(f"shard {args.shard} done; run `klm leaderboard` once every shard has finished")
    elif not args.no_leaderboard:
        # A scratch store's own pages show every backbone: its cells are of none of the committed pages'.
        backbones = "all" if getattr(args, "scratch_store", False) else ""
        print_written_leaderboards(args.results_dir, args.leaderboards_dir, data_dir=data_dir, backbones=backbones)
    # Handed to a `klm serve`: counted from the start of the klm that handed it over, its interpreter and imports too.
    started = process_started(requester_pid())
    print(outside_cells_line(started, cell_spans_since(started)))
    if failed:
        return 1
    if unfinished:
        print(
            f"{len(unfinished)} cells are not finished: other processes run them (klm status shows which; "
            "--wait waits for them)",
            file=sys.stderr,
        )
        return UNFINISHED_EXIT
    return 0


def cells_running_elsewhere(sweeps, results_dir, runs_dir, only=None, overrides=None) -> list[str]:
    """The keys of the sweeps' cells (of ``only``'s keys, where given; under the keys a run takes them) claimed by
    another live process."""
    return [
        chosen.cell.key
        for sweep in sweeps
        for chosen in planned_cells(sweep, overrides or {}, results_dir, only)
        if cell_status(chosen.cell, results_dir, runs_dir)[0] == "running"
    ]


def run_sweeps(args, sweeps, *, overrides, data_dir, jobs, only, executor) -> int:
    """Run ``sweeps``: a table's configs whose cells each take one GPU as one queue on shared workers
    (``run_sweeps_together``), any other one after another (``run_sweep``); returns how many cells failed."""
    failed = 0
    common = {
        "data_dir": data_dir,
        "results_dir": args.results_dir,
        "runs_dir": args.runs_dir,
        "jobs": jobs,
        "rerun_without_predictions": args.rerun_without_predictions,
        "only": only,
    }
    with ExitStack() as stack:
        stack.enter_context(mps_for_sweep(jobs, args.runs_dir, enabled=not args.no_mps and executor is None))
        together = []
        if len(sweeps) > 1 and executor is None and not args.isolate_cells:
            together = [s for s in sweeps if s.devices_per_cell(overrides) == 1]
        if together:
            pool = stack.enter_context(worker_pool(jobs, args.runs_dir))
            failed += run_sweeps_together(together, overrides, pool=pool, **common)["failed"]
        for sweep in [sweep for sweep in sweeps if sweep not in together]:
            failed += run_sweep(sweep, overrides, executor=executor, isolate_cells=args.isolate_cells, **common)[
                "failed"
            ]
    return failed


def add_parser(commands):
    bench = commands.add_parser("bench", help="run a sweep of cells (skipping finished ones), then the leaderboards")
    add_sweep_arguments(bench)
    add_table_argument(bench)
    add_data_dir_argument(bench)
    bench.add_argument(
        "--jobs",
        help="cells run at once, spread evenly over the visible GPUs (several per GPU when jobs > GPUs); "
        "default: $KLM_JOBS, else 1",
    )
    bench.add_argument("--devices-per-cell", type=int, help="GPUs per cell (DDP within the cell; default 1)")
    bench.add_argument(
        "--isolate-cells",
        action="store_true",
        help="run every cell in a fresh process of its own (default: one worker process per job imports once "
        "and runs its cells back to back; DDP cells always get their own)",
    )
    bench.add_argument(
        "--rerun-without-predictions",
        action="store_true",
        help="run again the finished cells that kept no predictions (older results move to results/superseded/)",
    )
    bench.add_argument(
        "--shard",
        metavar="K/N",
        help="run only shard K of N (1-based): of the sorted cell keys, every N-th from the K-th; one per node or "
        "array task, e.g. --shard $SLURM_ARRAY_TASK_ID/8 (no leaderboard: run klm leaderboard after the last)",
    )
    bench.add_argument(
        "--executor",
        choices=("local", "slurm"),
        default="local",
        help="local: cells as processes here (default); slurm: each cell a job of one SLURM job array, through "
        "submitit (pip install 'knowledge-lm[slurm]')",
    )
    bench.add_argument(
        "--executor-option",
        action="append",
        metavar="KEY=VALUE",
        help="a submitit parameter of every job, e.g. slurm_partition=gpu, timeout_min=240, cpus_per_task=8 "
        "(--executor slurm only: the local executor refuses it)",
    )
    add_leaderboard_arguments(bench)
    bench.add_argument(
        "--wait",
        action="store_true",
        help="wait for the cells other processes run, and run any they leave unfinished (without it, such cells "
        "make the exit code 3)",
    )
    bench.add_argument(
        "--no-mps", action="store_true", help="no NVIDIA MPS daemon when several cells share a GPU (jobs > GPUs)"
    )
    bench.add_argument(
        "--dry-run",
        action="store_true",
        help="list the cells this command would run and those already done, with a time estimate from stored "
        "cells of the same method, task and fraction; run nothing",
    )
    bench.set_defaults(handler=command_bench)
