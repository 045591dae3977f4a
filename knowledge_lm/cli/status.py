"""``klm status``: the state of each cell of a sweep, with its newest training log."""

from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from knowledge_lm.cli.arguments import (
    add_sweep_arguments,
    add_table_argument,
    check_folder,
    sweeps_from_args,
)
from knowledge_lm.run.runner import (
    cell_status,
    sweep_cells,
)


def newest_log(log_dir: Path) -> Path | None:
    """Where a cell's newest training log is: its last attempt's ``version_N`` folder (csv, tensorboard), else its
    log folder (wandb's runs), or None where it has none."""
    versions = [path for path in log_dir.glob("version_*") if path.name[len("version_") :].isdigit()]
    newest = max(versions, key=lambda path: int(path.name[len("version_") :]), default=None)
    return newest or (log_dir if log_dir.is_dir() else None)


def command_status(args):
    sweeps = sweeps_from_args(args)
    for folder, what in ((args.results_dir, "--results-dir"), (args.runs_dir, "--runs-dir")):
        if Path(folder).exists():  # a store not yet made is every cell missing; a file is a typo
            check_folder(folder, what)
    console = Console()
    total = Counter()
    for sweep in sweeps:
        table = Table(title=f"{sweep.name}")
        for column in ("cell", "state", "detail", "training log"):
            table.add_column(column, overflow="fold")  # a path cut short is no use
        tally = Counter()
        for cell in sweep_cells(sweep):
            state, detail = cell_status(cell, args.results_dir, args.runs_dir)
            tally[state] += 1
            table.add_row(cell.key, state, detail, str(newest_log(cell.log_dir(args.results_dir)) or ""))
        console.print(table)
        console.print(", ".join(f"{state}: {n}" for state, n in sorted(tally.items())))
        total += tally
    if len(sweeps) > 1:
        console.print(
            f"table {args.table}, {len(sweeps)} sweeps: " + ", ".join(f"{s}: {n}" for s, n in sorted(total.items()))
        )
    return 0


def add_parser(commands):
    status = commands.add_parser(
        "status",
        help="list done / running (by whom) / partial / failed / corrupt / misfiled / missing cells of a sweep",
    )
    add_sweep_arguments(status)
    add_table_argument(status)
    status.set_defaults(handler=command_status)
