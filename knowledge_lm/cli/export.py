"""``klm export``: the leaderboards' tables as CSV and JSON."""

from pathlib import Path

from knowledge_lm.cli.arguments import (
    add_data_dir_argument,
    add_results_dir_argument,
    check_writable_folder,
)
from knowledge_lm.run.config import (
    check_data_dir,
)


def command_export(args):
    from knowledge_lm.report.export import export_tables  # pandas: loaded only by the commands that need it
    from knowledge_lm.report.leaderboard import DEFAULT_BACKBONES

    check_writable_folder(args.out)
    backbones = args.backbones
    chosen = DEFAULT_BACKBONES if not backbones else None if backbones == "all" else tuple(backbones.split(","))
    written = export_tables(args.results_dir, args.out, check_data_dir(args.data_dir), chosen)
    for path in written:
        print(f"wrote {path}")
    if not written:
        print(f"{args.results_dir}: no results to export")
    return 0


def add_parser(commands):
    export = commands.add_parser(
        "export",
        help="write the leaderboards' tables as CSV and JSON: one row per method, variant, dataset, task and fraction",
    )
    add_results_dir_argument(export)
    export.add_argument("--out", type=Path, help="default: leaderboards/data of the project root")
    add_data_dir_argument(
        export,
        help="data directory (or DATA_DIR) whose gold the kept predictions are checked against, as klm leaderboard's",
    )
    export.add_argument(
        "--backbones",
        help="the backbones whose results are exported, comma-separated, or all (default: mpnet-base,minilm)",
    )
    export.set_defaults(handler=command_export)
