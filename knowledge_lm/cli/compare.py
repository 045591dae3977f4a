"""``klm compare``: two methods or variants compared on the cells both ran."""

import json

from rich.console import Console
from rich.table import Table

from knowledge_lm.cli.arguments import (
    add_results_dir_argument,
    check_folder,
)
from knowledge_lm.core.errors import KlmError


def command_compare(args):
    from knowledge_lm.report.compare import compare  # pandas, scipy: loaded only when this command runs
    from knowledge_lm.report.frame import fraction_label, interval_text, p_text
    from knowledge_lm.report.leaderboard import DEFAULT_BACKBONES

    check_folder(args.results_dir, "--results-dir")
    backbones = args.backbones
    chosen = DEFAULT_BACKBONES if not backbones else None if backbones == "all" else tuple(backbones.split(","))
    datasets = args.dataset.split(",") if args.dataset else None
    rows = compare(args.results_dir, args.first, args.second, datasets, chosen)
    if args.json:
        print(json.dumps(rows, indent=1, default=float))
        return 0
    if not rows:
        raise KlmError(f"klm compare: no dataset, task and fraction where both {args.first} and {args.second} ran")
    table = Table(title=f"{args.first} − {args.second}: paired by seed, q by Benjamini–Hochberg over the rows")
    for column in ("dataset", "task", "fraction", "metric", "seeds", args.first, args.second, "Δ", "interval", "p"):
        table.add_column(column, justify="right" if column not in ("dataset", "task", "metric") else "left")
    table.add_column("q", justify="right")
    table.add_column(f"{args.first} vs {args.second}")
    for row in rows:
        table.add_row(
            row["dataset"] + (f" ({row['backbone']})" if chosen is None or len(chosen) > 1 else ""),
            row["task"],
            fraction_label(row["fraction"]),
            row["metric"],
            f"{row['n']}" + (f" (+{row['excluded']} degenerate)" if row["excluded"] else ""),
            f"{row['first']:.1f}",
            f"{row['second']:.1f}",
            "—" if row["delta"] is None else f"{row['delta']:+.1f}",
            "—" if row["interval"] is None else interval_text(row["interval"]),
            p_text(row["p"]),
            p_text(row["q"]),
            row["verdict"],
        )
    Console(width=200).print(table)
    return 0


def add_parser(commands):
    comparing = commands.add_parser(
        "compare",
        help="two methods or variants (METHOD or METHOD/VARIANT) compared on the cells both ran: Δ paired by seed, "
        "its interval and the BH-corrected verdict per dataset, task and fraction",
    )
    comparing.add_argument("first", help="a method, or METHOD/VARIANT, e.g. kam")
    comparing.add_argument("second", help="the method or variant it is compared with, e.g. kam-no-entity")
    comparing.add_argument("--dataset", help="only these datasets, comma-separated")
    add_results_dir_argument(comparing)
    comparing.add_argument("--backbones", help="comma-separated, or all (default: mpnet-base,minilm)")
    comparing.add_argument("--json", action="store_true", help="the rows as JSON")
    comparing.set_defaults(handler=command_compare)
