"""Arguments, defaults and checks that several ``klm`` subcommands share: the sweep selection, the
results and leaderboard folders, ``--set`` overrides and the leaderboards' regeneration."""

import argparse
import os
from pathlib import Path

import yaml

from knowledge_lm.core.backbones import backbone_label
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.paths import SCRATCH_BACKBONES, SCRATCH_RESULTS, benchmarks_dir, project_path
from knowledge_lm.report.paper_tables import sweep_groups
from knowledge_lm.run.config import chosen_sweep
from knowledge_lm.sweep.inputs import check_sweep

RESULTS_HELP = (
    "the results store (default: results/ of the project root, $KLM_HOME or the git work tree; for tiny-backbone "
    "smoke runs results-scratch/ there)"
)


LEADERBOARDS_HELP = (
    "default: leaderboards/ of the project root (a scratch store's, or a --results-dir other than the project's: "
    "its own leaderboards/)"
)


BENCHMARKS_HELP = (
    "the sweep configs' folder (default: $KLM_BENCHMARKS_DIR, else benchmarks/ of the source checkout, else the "
    "installed package's copy)"
)


def uses_scratch_store(backbones) -> bool:
    """Whether cells of ``backbones`` are smoke runs (``SCRATCH_BACKBONES``), stored apart from the committed store."""
    labels = {backbone_label(backbone) for backbone in backbones}
    return bool(labels) and labels <= set(SCRATCH_BACKBONES)


def resolve_folders(args, backbones=()):
    """The folder options left unset, from the project root (``project_path``): results (a scratch store for
    smoke-run ``backbones``), runs, leaderboards (a store other than the project's: its own ``leaderboards/``), and
    ``--out`` of leaderboard and export; the folders named are checked (``check_folder_option``)."""
    named_store = getattr(args, "results_dir", None)
    if named_store is not None and getattr(args, "leaderboards_dir", "") is None:
        # Another store's pages go beside it: the committed pages come only from the committed store.
        if Path(named_store).expanduser().resolve() != project_path("results").resolve():
            args.leaderboards_dir = Path(named_store) / "leaderboards"
    if getattr(args, "results_dir", "") is None:
        scratch = uses_scratch_store(backbones)
        args.results_dir = project_path(SCRATCH_RESULTS if scratch else "results")
        args.scratch_store = scratch
        if scratch and getattr(args, "leaderboards_dir", "") is None:
            args.leaderboards_dir = args.results_dir / "leaderboards"
    if getattr(args, "runs_dir", "") is None:
        args.runs_dir = project_path("runs")
    if getattr(args, "leaderboards_dir", "") is None:
        args.leaderboards_dir = project_path("leaderboards")
    if args.command in ("leaderboard", "export"):
        args.out_named = args.out is not None
    if getattr(args, "out", "") is None and args.command in ("leaderboard", "export"):
        args.out = project_path("leaderboards") / ("data" if args.command == "export" else "")


def sweep_from_args(args, table: bool = False):
    """The sweep a command's arguments choose (``chosen_sweep``), its ``--set`` overrides and inputs checked and its
    folders resolved; None where a ``--table`` config lists none of the chosen methods."""
    choices = {name: getattr(args, name) for name in ("method", "tasks", "fractions", "seeds", "backbone")}
    sweep = chosen_sweep(args.config, args.dataset, table=table, **choices)
    if sweep is None:
        return None
    overrides = parse_overrides(args.set)
    for task in sweep.tasks:
        for variant in sweep.variants:
            sweep.train_config(task, overrides, variant)  # a bad --set value fails here, with one line
    check_sweep(sweep, overrides, getattr(args, "data_dir", None))
    resolve_folders(args, {sweep.backbone_for(method) for method in sweep.methods})
    return sweep


def parse_overrides(pairs: list[str]) -> dict:
    overrides = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise KlmError(f"--set {pair!r}: expected key=value")
        key, value = pair.split("=", 1)
        if not key.strip():
            raise KlmError(f"--set {pair!r}: expected key=value with a name before the '=', e.g. lr=3e-5")
        overrides[key.strip()] = yaml.safe_load(value)
    return overrides


BACKBONE_HELP = "minilm (default), mpnet-base, tiny, tiny-mpnet, tiny-roberta, a local directory or a hub name"


def add_results_dir_argument(parser, help=RESULTS_HELP):
    """``--results-dir``: the results store (left unset: ``resolve_folders`` fills it in)."""
    parser.add_argument("--results-dir", type=Path, help=help)


def add_data_dir_argument(parser, help="data directory (or DATA_DIR)"):
    """``--data-dir``, defaulting to ``$DATA_DIR``."""
    parser.add_argument("--data-dir", default=os.environ.get("DATA_DIR") or None, help=help)


def add_cache_dir_argument(parser, help="default: $KLM_CACHE_DIR or .cache/knowledge-lm"):
    """``--cache-dir``: where computed data is cached."""
    parser.add_argument("--cache-dir", type=Path, help=help)


def add_backbone_argument(parser, default=None, help=BACKBONE_HELP, required=False):
    """``--backbone``: a backbone name, a local directory or a hub name."""
    parser.add_argument("--backbone", default=default, required=required, help=help)


def add_leaderboard_arguments(parser):
    """``--leaderboards-dir`` and ``--no-leaderboard`` of a command that regenerates the pages after its work."""
    parser.add_argument("--leaderboards-dir", type=Path, help=LEADERBOARDS_HELP)
    parser.add_argument("--no-leaderboard", action="store_true")


def add_sweep_arguments(parser):
    # SUPPRESS: given before the command (klm --benchmarks-dir DIR bench), it is not reset here.
    parser.add_argument("--benchmarks-dir", type=Path, default=argparse.SUPPRESS, help=BENCHMARKS_HELP)
    parser.add_argument("--config", help="a sweep config, e.g. benchmarks/glue.yaml")
    parser.add_argument(
        "--method", help="method name(s), comma-separated (default: baseline); a method named twice runs once"
    )
    parser.add_argument("--dataset", help="dataset name; its benchmarks/<dataset>.yaml gives the defaults")
    parser.add_argument("--tasks", help="comma-separated tasks (default: the dataset's default tasks)")
    parser.add_argument("--fractions", help="train fractions in (0, 1], e.g. 0.01,0.1,1")
    parser.add_argument("--seeds", help="training seeds, e.g. 1,2,3")
    add_backbone_argument(parser)
    add_results_dir_argument(parser)
    parser.add_argument(
        "--runs-dir", type=Path, help="checkpoints and logs of unfinished cells (default: runs/ of the project root)"
    )
    parser.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a training setting, e.g. lr=3e-5; a cell whose stored result was trained with other settings "
        "runs as a cell of its own, beside it (variant cfg-<hash of the differences>)",
    )


def table_configs(name: str) -> list[Path]:
    """The sweep configs that fill a paper table (its ``sweeps``, ``benchmarks/tables/``) or a named group of them
    (``benchmarks/tables.yaml``)."""
    tables = sweep_groups()
    if name not in tables:
        raise KlmError(f"unknown table {name!r}; known: {', '.join(tables)}")
    return [benchmarks_dir() / f"{config}.yaml" for config in tables[name]]


def add_table_argument(parser):
    parser.add_argument(
        "--table",
        help="a paper table's sweeps (benchmarks/tables/) or a group of them (benchmarks/tables.yaml), e.g. "
        "kam-table6; all: the full grid",
    )


def sweeps_from_args(args) -> list:
    """The sweeps a command names: its ``--table``'s configs (each keeping only the chosen methods it lists), or
    its one ``--config`` / ``--dataset``. Every config is checked before any is used."""
    if args.table and (args.config or args.dataset):
        raise KlmError("--table names its own configs: drop --config/--dataset")
    configs = table_configs(args.table) if args.table else [args.config]
    sweeps = []
    for config in configs:
        args.config = str(config) if config else None
        sweep = sweep_from_args(args, table=bool(args.table))
        if sweep is not None:
            sweeps.append(sweep)
    if not sweeps:
        raise KlmError(f"--method {args.method}: no config of table {args.table!r} lists it")
    return sweeps


def print_written_leaderboards(
    results_dir: Path,
    out_dir: Path,
    *,
    data_dir=None,
    backbones="",
    force=False,
    datasets=None,
    methods=None,
    store_derived=True,
):
    """Regenerate the leaderboards of ``backbones`` (comma-separated, or all; default: the committed pages' own)
    where their inputs changed since the last regeneration (every page with ``force``), and print each file
    written. ``store_derived``: ``write_leaderboards``'."""
    from knowledge_lm.core.io import default_cache_dir
    from knowledge_lm.report.leaderboard import (  # pandas: loaded only by the commands that write them
        DEFAULT_BACKBONES,
        leaderboard_state_file,
        write_leaderboards,
    )

    chosen = DEFAULT_BACKBONES if not backbones else None if backbones == "all" else tuple(backbones.split(","))
    state_file = leaderboard_state_file(out_dir, default_cache_dir())
    if force:
        state_file.unlink(missing_ok=True)
    try:
        written = write_leaderboards(
            results_dir,
            out_dir,
            data_dir,
            backbones=chosen,
            state_file=state_file,
            datasets=datasets,
            methods=methods,
            store_derived=store_derived,
        )
    except PermissionError as error:
        raise KlmError(f"{out_dir}: cannot write {error.filename} ({error.strerror})") from None
    for path in written:
        print(f"wrote {path}")
    if not written:
        print(f"{out_dir}: every page up to date")


def check_folder(folder: Path, what: str = "folder") -> Path:
    """``folder`` where it exists and is a folder, else a one-line error."""
    folder = Path(folder)
    if not folder.exists():
        raise KlmError(f"{what} {folder}: no such folder")
    if not folder.is_dir():
        raise KlmError(f"{what} {folder}: not a folder")
    return folder


def check_writable_folder(folder: Path) -> None:
    """``folder`` a command writes into: a writable folder, or one that can be made (its nearest existing parent a
    writable folder); else a one-line error, before any work."""
    folder = Path(folder)
    existing = next(path for path in (folder, *folder.absolute().parents) if path.exists())
    if not existing.is_dir():
        raise KlmError(f"{folder}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise KlmError(f"{folder}: {existing} is not writable")


def check_cache_folder(chosen) -> Path:
    """The cache folder a command writes into (``chosen``: its ``--cache-dir``, else ``default_cache_dir``), checked
    as ``check_writable_folder`` does, the error naming where it came from."""
    from knowledge_lm.core.io import default_cache_dir

    folder = Path(chosen) if chosen else default_cache_dir()
    what = "--cache-dir" if chosen else "KLM_CACHE_DIR" if os.environ.get("KLM_CACHE_DIR") else "cache folder"
    try:
        check_writable_folder(folder)
    except KlmError as error:
        raise KlmError(f"{what} {error}") from None
    return folder
