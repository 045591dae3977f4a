"""``klm status``: the state of each cell of a sweep, with its newest training log, and the time its done cells
took."""

import json
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from knowledge_lm.cli.arguments import (
    add_sweep_arguments,
    add_table_argument,
    check_folder,
    parse_overrides,
    sweeps_from_args,
)
from knowledge_lm.sweep.plan import cell_status, planned_cells, renamed_line


def newest_log(log_dir: Path) -> Path | None:
    """Where a cell's newest training log is: its last attempt's ``version_N`` folder (csv, tensorboard), else its
    log folder (wandb's runs), or None where it has none."""
    versions = [path for path in log_dir.glob("version_*") if path.name[len("version_") :].isdigit()]
    newest = max(versions, key=lambda path: int(path.name[len("version_") :]), default=None)
    return newest or (log_dir if log_dir.is_dir() else None)


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals: the time at least one of them was running."""
    total, current = 0.0, None
    for start, end in sorted(intervals):
        if current is not None and start <= current[1]:
            current[1] = max(current[1], end)
            continue
        if current is not None:
            total += current[1] - current[0]
        current = [start, end]
    return total + (current[1] - current[0] if current is not None else 0.0)


def time_line(results: list[dict]) -> str:
    """One line on the time done cells took: their wall times summed, and the GPU-minutes during which at least
    one of them ran on a card (per card, named by its model and visible index; cells packed on a card overlap and
    count once; start-up outside the cells is not counted)."""
    cell_seconds, on_card = 0.0, defaultdict(list)
    for result in results:
        wall = float(result.get("wall_time_s") or 0.0)
        cell_seconds += wall
        device = result.get("device") or {}
        if device.get("accelerator") == "cuda" and result.get("finished_at"):
            end = datetime.fromisoformat(result["finished_at"]).timestamp()
            on_card[(device.get("name"), device.get("visible"))].append((end - wall, end))
    gpu_seconds = sum(busy_seconds(intervals) for intervals in on_card.values())
    return (
        f"time: {cell_seconds / 60:,.1f} cell-minutes; {gpu_seconds / 60:,.1f} GPU-minutes with a cell running "
        "(per card, packed cells counted once, start-ups left out)"
    )


def command_status(args):
    sweeps = sweeps_from_args(args)
    for folder, what in ((args.results_dir, "--results-dir"), (args.runs_dir, "--runs-dir")):
        if Path(folder).exists():  # a store not yet made is every cell missing; a file is a typo
            check_folder(folder, what)
    console = Console()
    total, done = Counter(), {}  # done: result path → result, a cell that two sweeps share counted once
    for sweep in sweeps:
        table = Table(title=f"{sweep.name}")
        for column in ("cell", "state", "detail", "training log"):
            table.add_column(column, overflow="fold")  # a path cut short is no use
        tally = Counter()
        planned = planned_cells(sweep, parse_overrides(args.set), args.results_dir)
        for cell in [chosen.cell for chosen in planned]:
            state, detail = cell_status(cell, args.results_dir, args.runs_dir)
            tally[state] += 1
            path = cell.stored_result_path(args.results_dir)
            if state == "done" and path not in done:
                done[path] = json.loads(path.read_text(encoding="utf-8"))
            table.add_row(cell.key, state, detail, str(newest_log(cell.log_dir(args.results_dir)) or ""))
        console.print(table)
        console.print(", ".join(f"{state}: {n}" for state, n in sorted(tally.items())))
        if renamed_line(planned):
            console.print(renamed_line(planned), soft_wrap=True)
        total += tally
    if len(sweeps) > 1:
        console.print(
            f"table {args.table}, {len(sweeps)} sweeps: " + ", ".join(f"{s}: {n}" for s, n in sorted(total.items()))
        )
    if done:
        console.print(time_line(list(done.values())), soft_wrap=True)
    return 0


def add_parser(commands):
    status = commands.add_parser(
        "status",
        help="list done / running (by whom) / queued (SLURM job id) / partial / failed / corrupt / misfiled / missing "
        "cells of a sweep, "
        "and the cell- and GPU-minutes of those done",
    )
    add_sweep_arguments(status)
    add_table_argument(status)
    status.set_defaults(handler=command_status)
