"""``klm leaderboard``: regenerate the leaderboard pages from the results store."""

from pathlib import Path

from knowledge_lm.cli.arguments import (
    add_data_dir_argument,
    add_results_dir_argument,
    check_folder,
    check_writable_folder,
    print_written_leaderboards,
)
from knowledge_lm.core.backbones import backbone_label
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.paths import project_path
from knowledge_lm.core.registry import DATASETS, METHODS
from knowledge_lm.run.config import (
    check_data_dir,
)


def check_leaderboard_inputs(results_dir: Path, out: Path, backbones: str | None) -> None:
    """``klm leaderboard``'s folders and backbones, before any page is built: a results store that is a folder, an
    output folder that is one or can be made, writable, and backbones of which the store holds results."""
    check_folder(results_dir, "--results-dir")
    check_writable_folder(out)
    if backbones and backbones != "all":
        stored = {
            path.name
            for dataset in DATASETS.names()
            for path in Path(results_dir).glob(f"{dataset}/*/*/*")  # <dataset>/<task>/<method>/<backbone>
            if path.is_dir()
        }
        unknown = [name for name in backbones.split(",") if backbone_label(name) not in stored]
        if unknown:
            raise KlmError(
                f"--backbones: no results of {', '.join(unknown)} in {results_dir}; stored: {', '.join(sorted(stored))}"
            )


def command_leaderboard(args):
    datasets = tuple(args.datasets.split(",")) if args.datasets else None
    methods = tuple(args.methods.split(",")) if args.methods else None
    for dataset in datasets or ():
        DATASETS.check(dataset)
    for method in methods or ():
        METHODS.check(method)
    if (datasets or methods) and args.out_named is False:
        raise KlmError(
            "--datasets/--methods write partial pages: name their own --out, not the committed leaderboards/"
        )
    check_leaderboard_inputs(args.results_dir, args.out, args.backbones)
    print_written_leaderboards(
        args.results_dir,
        args.out,
        data_dir=check_data_dir(args.data_dir),
        backbones=args.backbones,
        force=args.force,
        datasets=datasets,
        methods=methods,
        # the store changes with the committed pages alone
        store_derived=Path(args.out).resolve() == project_path("leaderboards").resolve(),
    )
    return 0


def add_parser(commands):
    leaderboard = commands.add_parser("leaderboard", help="regenerate leaderboards/*.md from the results store")
    add_results_dir_argument(leaderboard)
    leaderboard.add_argument("--out", type=Path, help="default: leaderboards/ of the project root")
    add_data_dir_argument(
        leaderboard,
        help="data directory (or DATA_DIR) whose gold the kept predictions are checked against and scored with",
    )
    leaderboard.add_argument(
        "--backbones",
        help="the backbones whose results the dataset pages show, comma-separated, or all (default: "
        "mpnet-base,minilm; a smoke run's tiny results render only when named, best with another --out)",
    )
    leaderboard.add_argument("--force", action="store_true", help="rebuild every page, changed inputs or not")
    leaderboard.add_argument("--datasets", help="only these datasets' pages, comma-separated (with --out)")
    leaderboard.add_argument(
        "--methods", help="only these methods on the pages (the baseline stays: Δ is against it), with --out"
    )
    leaderboard.set_defaults(handler=command_leaderboard)
