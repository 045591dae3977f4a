"""``klm cell``: run one cell of a sweep in this process (what a launcher starts on every node)."""

import sys

from knowledge_lm.cli.arguments import (
    add_data_dir_argument,
    add_sweep_arguments,
    parse_overrides,
    sweep_from_args,
)
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.results import set_aside
from knowledge_lm.run.config import (
    check_data_dir,
)
from knowledge_lm.run.identity import identify
from knowledge_lm.sweep.plan import cell_status, sweep_cells


def command_cell(args):
    """One cell of a sweep, in this process: what a launcher (torchrun, srun) starts on every node for a cell that
    spans nodes (``--set num_nodes=N --set devices=G``); Lightning reads the launcher's environment, and global
    rank 0 writes the result."""
    from knowledge_lm.run.cell import run_cell  # torch: loaded only when a cell runs here

    sweep = sweep_from_args(args)
    overrides = parse_overrides(args.set)
    cells = [cell for cell in sweep_cells(sweep) if cell.variant == (args.variant or "")]
    if len(cells) != 1:
        raise KlmError(
            f"klm cell runs one cell; the selection has {len(cells)}: name one method, task, fraction, "
            "seed (and --variant) of the sweep"
        )
    # Every node of the cell renames it alike: they read the same store before any of them writes to it.
    cell = identify(cells[0], sweep, overrides, args.results_dir).cell
    state, detail = cell_status(cell, args.results_dir, args.runs_dir)
    if state == "done":
        print(f"{cell.key}: already done ({cell.stored_result_path(args.results_dir)})")
        return 0
    if state in ("corrupt", "misfiled"):
        moved = set_aside(cell.stored_result_path(args.results_dir))
        print(f"{detail}; set aside as {moved[0].name}, the cell runs again", file=sys.stderr)
    # sweep_from_args checked the method options with the overrides
    run_cell(
        cell,
        sweep.train_config(cell.task, overrides, cell.variant),
        data_dir=check_data_dir(args.data_dir),
        results_dir=args.results_dir,
        runs_dir=args.runs_dir,
        dataset_options=sweep.variant_options(cell.variant),
    )
    return 0


def add_parser(commands):
    cell = commands.add_parser(
        "cell", help="run one cell in this process (start it on every node for a multi-node cell)"
    )
    add_sweep_arguments(cell)
    cell.add_argument("--variant", help="the sweep variant of the cell, where the sweep has variants")
    add_data_dir_argument(cell)
    cell.set_defaults(handler=command_cell)
