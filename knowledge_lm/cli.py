"""``klm``: run sweeps, show their state, regenerate leaderboards.

The modules imported here load no torch, transformers or Lightning, so that ``klm list``, ``klm status`` and
every argument error answer at once; a command that trains, probes or draws imports its module when it runs.
"""

import argparse
import json
import os
import sys
import time
import zipfile
from contextlib import ExitStack
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from knowledge_lm.core.backbones import backbone_label
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.paths import BENCHMARKS_ENV, SCRATCH_BACKBONES, SCRATCH_RESULTS, benchmarks_dir, project_path
from knowledge_lm.core.registry import DATASETS, METHODS, class_description, option_fields, static_flag
from knowledge_lm.core.results import Cell, set_aside, write_json_atomic
from knowledge_lm.run.claims import INTERRUPTED_EXIT
from knowledge_lm.run.config import (
    COMPILE_MODES,
    check_data_dir,
    check_method_options,
    dataset_defaults,
    parse_fractions,
    read_sweep_yaml,
    settings_tag,
    validate_sweep,
    with_overrides,
)
from knowledge_lm.run.mps import mps_for_sweep
from knowledge_lm.run.runner import (
    cell_status,
    duration_text,
    estimated_seconds,
    parse_shard,
    plan_sweep,
    prepare_knowledge,
    run_sweep,
    run_sweeps_together,
    shard_keys,
    stored_wall_times,
    sweep_cells,
    visible_gpus,
    worker_pool,
)
from knowledge_lm.run.serve import forked_by_server, forward, serve, start_in_background
from knowledge_lm.run.startup import cell_spans_since, outside_cells_line, process_started

RESULTS_HELP = (
    "the results store (default: results/ of the project root, $KLM_HOME or the git work tree; for tiny-backbone "
    "smoke runs results-scratch/ there)"
)
LEADERBOARDS_HELP = "default: leaderboards/ of the project root (a scratch store's: its own leaderboards/)"


def uses_scratch_store(backbones) -> bool:
    """Whether cells of ``backbones`` are smoke runs (``SCRATCH_BACKBONES``), stored apart from the committed store."""
    labels = {backbone_label(backbone) for backbone in backbones}
    return bool(labels) and labels <= set(SCRATCH_BACKBONES)


def resolve_folders(args, backbones=()):
    """The folder options left unset, from the project root (``project_path``): results (a scratch store for
    smoke-run ``backbones``), runs, leaderboards, and ``--out`` of leaderboard and export; the folders named are
    checked (``check_folder_option``)."""
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
    if args.config:
        raw, where = read_sweep_yaml(args.config), args.config
        if not isinstance(raw, dict):
            raise KlmError(f"{args.config}: a sweep config is a YAML mapping")
    elif args.dataset:
        raw, where = dict(dataset_defaults(args.dataset)), f"benchmarks/{args.dataset}.yaml"
        raw["dataset"] = args.dataset
        raw.setdefault("name", args.dataset)
    else:
        raise KlmError("name a --dataset (and --method), or a --config")
    if args.dataset and args.config and raw.get("dataset") != args.dataset:
        raise KlmError(f"--dataset {args.dataset} contradicts {args.config} (dataset {raw.get('dataset')})")
    if args.method:
        chosen = args.method.split(",")
        # A table's configs keep only the chosen methods they list; one config runs the chosen methods.
        raw["methods"] = [m for m in raw.get("methods", ["baseline"]) if m in chosen] if table else chosen
        if not raw["methods"]:
            return None
        raw["name"] = f"{raw.get('name', raw.get('dataset'))}:{args.method}"
        if isinstance(raw.get("method_backbones"), dict):  # the chosen methods' own backbones, as the config says
            raw["method_backbones"] = {m: b for m, b in raw["method_backbones"].items() if m in raw["methods"]} or None
    raw.setdefault("methods", ["baseline"])
    if args.tasks is not None:  # given empty, an error (validate_sweep), never the defaults
        raw["tasks"] = args.tasks.split(",") if args.tasks.strip() else [""]
    if args.fractions is not None:
        raw["fractions"] = args.fractions
        if isinstance(raw.get("fraction_seeds"), dict):
            wanted = set(parse_fractions(args.fractions))
            raw["fraction_seeds"] = {
                f: seeds for f, seeds in raw["fraction_seeds"].items() if parse_fractions([f])[0] in wanted
            } or None
    if args.seeds is not None:
        raw["seeds"] = args.seeds
        raw.pop("fraction_seeds", None)  # seeds typed on the command line apply to every fraction
    if args.backbone:
        raw["backbone"] = args.backbone
    sweep = with_overrides(validate_sweep(raw, where), parse_overrides(args.set))
    resolve_folders(args, {sweep.backbone_for(method) for method in sweep.methods})
    return sweep


def parse_overrides(pairs: list[str]) -> dict:
    overrides = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise KlmError(f"--set {pair!r}: expected key=value")
        key, value = pair.split("=", 1)
        overrides[key] = yaml.safe_load(value)
    return overrides


BENCHMARKS_HELP = (
    "the sweep configs' folder (default: $KLM_BENCHMARKS_DIR, else benchmarks/ of the source checkout, else the "
    "installed package's copy)"
)


def add_sweep_arguments(parser):
    # SUPPRESS: given before the command (klm --benchmarks-dir DIR bench), it is not reset here.
    parser.add_argument("--benchmarks-dir", type=Path, default=argparse.SUPPRESS, help=BENCHMARKS_HELP)
    parser.add_argument("--config", help="a sweep config, e.g. benchmarks/glue.yaml")
    parser.add_argument("--method", help="method name(s), comma-separated (default: baseline)")
    parser.add_argument("--dataset", help="dataset name; its benchmarks/<dataset>.yaml gives the defaults")
    parser.add_argument("--tasks", help="comma-separated tasks (default: the dataset's default tasks)")
    parser.add_argument("--fractions", help="train fractions in (0, 1], e.g. 0.01,0.1,1")
    parser.add_argument("--seeds", help="training seeds, e.g. 1,2,3")
    parser.add_argument("--backbone", help="minilm (default), tiny, a local directory or a hub name")
    parser.add_argument("--results-dir", type=Path, help=RESULTS_HELP)
    parser.add_argument(
        "--runs-dir", type=Path, help="checkpoints and logs of unfinished cells (default: runs/ of the project root)"
    )
    parser.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="override a training setting, e.g. lr=3e-5; cells run with settings other than their config's are "
        "a variant of their own, set-<hash of the settings>",
    )


def table_configs(name: str) -> list[Path]:
    """The sweep configs that fill a paper table (``benchmarks/tables.yaml``)."""
    tables = yaml.safe_load((benchmarks_dir() / "tables.yaml").read_text())
    if name not in tables:
        raise KlmError(f"unknown table {name!r}; known: {', '.join(tables)}")
    return [benchmarks_dir() / f"{config}.yaml" for config in tables[name]]


def print_written_leaderboards(
    results_dir: Path, out_dir: Path, data_dir=None, backbones="", force=False, datasets=None, methods=None
):
    """Regenerate the leaderboards of ``backbones`` (comma-separated, or all; default: the committed pages' own)
    where their inputs changed since the last regeneration (every page with ``force``), and print each file
    written."""
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
            results_dir, out_dir, data_dir, backbones=chosen, state_file=state_file, datasets=datasets, methods=methods
        )
    except PermissionError as error:
        raise KlmError(f"{out_dir}: cannot write {error.filename} ({error.strerror})") from None
    for path in written:
        print(f"wrote {path}")
    if not written:
        print(f"{out_dir}: every page up to date")


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


def print_plan(sweeps, results_dir: Path, runs_dir: Path, jobs: int, rerun_without_predictions: bool, only=None):
    """``klm bench --dry-run``: each sweep's cells, what a run would do with them (run, or leave: done, running
    elsewhere) and the expected wall time of each to run (``estimated_seconds``: the median of stored cells of its
    dataset, task, method and fraction, of the variants nearest its own, on its backbone where there are some; else
    unknown); then the totals."""
    wall_times = stored_wall_times(results_dir)
    total = {"cells": 0, "done": 0, "elsewhere": 0, "run": 0, "unknown": 0, "seconds": 0.0}
    for sweep in sweeps:
        print(f"{sweep.name}:")
        for cell, state, will_run in plan_sweep(sweep, results_dir, runs_dir, rerun_without_predictions, only):
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
    known = total["run"] - total["unknown"]
    print(
        f"{total['cells']} cells: {total['done']} already done, {total['run']} to run"
        + (f", {total['elsewhere']} running elsewhere" if total["elsewhere"] else "")
    )
    if total["run"]:
        estimate = f"estimated {duration_text(total['seconds'])} of cell time for {known} of the {total['run']} to run"
        if jobs > 1 and known:
            estimate += f" (~{duration_text(total['seconds'] / jobs)} at --jobs {jobs}, if they pack evenly)"
        if total["unknown"]:
            estimate += f"; unknown for {total['unknown']} (no stored cell of their method, task and fraction)"
        print(estimate)
    print("dry run: nothing was run")


def check_devices(sweeps, overrides: dict, executor: str):
    """A cell's ``devices`` (GPUs) available here: more than one wants as many visible GPUs (a scheduler's
    executor places its cells itself)."""
    if executor != "local":
        return
    wanted = max(sweep.train_config(task, overrides).devices for sweep in sweeps for task in sweep.tasks)
    if wanted > 1:
        gpus = visible_gpus()
        if len(gpus) < wanted:
            raise KlmError(
                f"a cell wants {wanted} GPUs (devices / --devices-per-cell) but {len(gpus)} are visible here"
            )


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


def check_backbone_weights(name: str) -> None:
    """A local backbone's weights readable: the header of a ``model.safetensors``, the archive of a
    ``pytorch_model.bin``; else a one-line error before any cell starts (the packaged and hub backbones are checked
    as they load)."""
    if name in ("tiny", "minilm"):
        return
    folder = Path(name).expanduser()
    if not folder.is_dir():
        return
    safetensors, pickled = folder / "model.safetensors", folder / "pytorch_model.bin"
    if safetensors.is_file():
        try:
            with open(safetensors, "rb") as handle:
                size = int.from_bytes(handle.read(8), "little")
                if not 2 <= size <= safetensors.stat().st_size - 8:
                    raise ValueError("bad header size")
                header = json.loads(handle.read(size))
            if not isinstance(header, dict):
                raise ValueError("header is not a mapping")
        except (OSError, ValueError, UnicodeDecodeError):
            raise KlmError(f"backbone {name!r}: {safetensors} is not readable safetensors weights") from None
    elif pickled.is_file() and not zipfile.is_zipfile(pickled):
        raise KlmError(f"backbone {name!r}: {pickled} is not a readable PyTorch weights archive")


def command_bench(args):
    if args.table and (args.config or args.dataset):
        raise KlmError("--table names its own configs: drop --config/--dataset")
    configs = table_configs(args.table) if args.table else [args.config]
    sweeps = []
    for config in configs:  # every config is checked before any cell runs
        args.config = str(config) if config else None
        sweep = sweep_from_args(args, table=bool(args.table))
        if sweep is not None:
            sweeps.append(sweep)
    if not sweeps:
        raise KlmError(f"--method {args.method}: no config of table {args.table!r} lists it")
    jobs = parse_jobs(args.jobs)
    shard = parse_shard(args.shard) if args.shard else None
    data_dir = check_data_dir(args.data_dir)
    overrides = parse_overrides(args.set)
    if args.devices_per_cell is not None:
        if args.devices_per_cell < 1:
            raise KlmError(f"--devices-per-cell {args.devices_per_cell}: expected at least 1 GPU per cell")
        overrides["devices"] = args.devices_per_cell
    check_devices(sweeps, overrides, args.executor)
    for folder in (args.results_dir, args.runs_dir, args.leaderboards_dir):
        check_writable_folder(folder)
    for sweep in sweeps:
        for backbone in {sweep.backbone_for(method) for method in sweep.methods}:
            check_backbone_weights(backbone)
    only = shard_keys([cell for sweep in sweeps for cell in sweep_cells(sweep)], shard) if shard else None
    if args.dry_run:  # before the method options' check, which imports the methods (torch with them)
        print_plan(sweeps, args.results_dir, args.runs_dir, jobs, args.rerun_without_predictions, only)
        return 0
    for sweep in sweeps:  # a table's later configs too: a typo fails before any of its cells runs
        check_method_options(sweep, sweep.source or f"sweep {sweep.name!r}", overrides)
    executor = None
    if args.executor != "local":
        from knowledge_lm.run.submit import make_executor

        devices = max(sweep.train_config(task, overrides).devices for sweep in sweeps for task in sweep.tasks)
        executor = make_executor(
            args.executor, args.runs_dir / "submitit", devices, parse_overrides(args.executor_option)
        )
    failed = 0
    while True:
        failed += run_sweeps(args, sweeps, overrides, data_dir, jobs, only, executor)
        unfinished = cells_running_elsewhere(sweeps, args.results_dir, args.runs_dir, only)
        if not unfinished or not args.wait or failed:
            break
        print(f"waiting for {len(unfinished)} cells that other processes run (--wait)", file=sys.stderr)
        while cells_running_elsewhere(sweeps, args.results_dir, args.runs_dir, only):
            time.sleep(WAIT_POLL_SECONDS)
        # their runners finished, failed or died: the next round runs what they left
    if shard:  # shards end at different times, and one page from several writers would be torn
        print(f"shard {args.shard} done; run `klm leaderboard` once every shard has finished")
    elif not args.no_leaderboard:
        # A scratch store's own pages show every backbone: its cells are of none of the committed pages'.
        backbones = "all" if getattr(args, "scratch_store", False) else ""
        print_written_leaderboards(args.results_dir, args.leaderboards_dir, data_dir, backbones)
    started = process_started()
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


# klm bench's exit code where cells remain unfinished because other processes run them.
UNFINISHED_EXIT = 3
WAIT_POLL_SECONDS = 30


def cells_running_elsewhere(sweeps, results_dir, runs_dir, only=None) -> list[str]:
    """The keys of the sweeps' cells (of ``only``'s keys, where given) claimed by another live process."""
    return [
        cell.key
        for sweep in sweeps
        for cell in sweep_cells(sweep)
        if (only is None or cell.key in only) and cell_status(cell, results_dir, runs_dir)[0] == "running"
    ]


def run_sweeps(args, sweeps, overrides, data_dir, jobs, only, executor) -> int:
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
            together = [s for s in sweeps if max(s.train_config(t, overrides).devices for t in s.tasks) == 1]
        if together:
            pool = stack.enter_context(worker_pool(jobs, args.runs_dir))
            failed += run_sweeps_together(together, overrides, pool=pool, **common)["failed"]
        for sweep in [sweep for sweep in sweeps if sweep not in together]:
            failed += run_sweep(sweep, overrides, executor=executor, isolate_cells=args.isolate_cells, **common)[
                "failed"
            ]
    return failed


def command_cell(args):
    """One cell of a sweep, in this process: what a launcher (torchrun, srun) starts on every node for a cell that
    spans nodes (``--set num_nodes=N --set devices=G``); Lightning reads the launcher's environment, and global
    rank 0 writes the result."""
    from knowledge_lm.run.cell import run_cell  # torch: loaded only when a cell runs here

    sweep = sweep_from_args(args)
    variant = args.variant or ""
    if sweep.overrides:  # the variant as --set renamed it
        tag = settings_tag(sweep.overrides)
        variant = f"{variant}-{tag}" if variant else tag
    cells = [cell for cell in sweep_cells(sweep) if cell.variant == variant]
    if len(cells) != 1:
        raise KlmError(
            f"klm cell runs one cell; the selection has {len(cells)}: name one method, task, fraction, "
            "seed (and --variant) of the sweep"
        )
    [cell] = cells
    state, detail = cell_status(cell, args.results_dir, args.runs_dir)
    if state == "done":
        print(f"{cell.key}: already done ({cell.stored_result_path(args.results_dir)})")
        return 0
    if state in ("corrupt", "misfiled"):
        moved = set_aside(cell.stored_result_path(args.results_dir))
        print(f"{detail}; set aside as {moved[0].name}, the cell runs again", file=sys.stderr)
    overrides = parse_overrides(args.set)
    check_method_options(sweep, sweep.source, overrides)
    run_cell(
        cell,
        sweep.train_config(cell.task, overrides, cell.variant),
        data_dir=check_data_dir(args.data_dir),
        results_dir=args.results_dir,
        runs_dir=args.runs_dir,
        dataset_options=sweep.variant_options(cell.variant),
    )
    return 0


def newest_log(log_dir: Path) -> Path | None:
    """Where a cell's newest training log is: its last attempt's ``version_N`` folder (csv, tensorboard), else its
    log folder (wandb's runs), or None where it has none."""
    versions = [path for path in log_dir.glob("version_*") if path.name[len("version_") :].isdigit()]
    newest = max(versions, key=lambda path: int(path.name[len("version_") :]), default=None)
    return newest or (log_dir if log_dir.is_dir() else None)


def command_status(args):
    sweep = sweep_from_args(args)
    for folder, what in ((args.results_dir, "--results-dir"), (args.runs_dir, "--runs-dir")):
        if Path(folder).exists():  # a store not yet made is every cell missing; a file is a typo
            check_folder(folder, what)
    table = Table(title=f"{sweep.name}")
    for column in ("cell", "state", "detail", "training log"):
        table.add_column(column, overflow="fold")  # a path cut short is no use
    tally = {}
    for cell in sweep_cells(sweep):
        state, detail = cell_status(cell, args.results_dir, args.runs_dir)
        tally[state] = tally.get(state, 0) + 1
        table.add_row(cell.key, state, detail, str(newest_log(cell.log_dir(args.results_dir)) or ""))
    console = Console()
    console.print(table)
    console.print(", ".join(f"{state}: {n}" for state, n in sorted(tally.items())))
    return 0


def command_prepare(args):
    sweep = sweep_from_args(args)
    options = {
        name: getattr(args, name)
        for name in (
            "kg_dir",
            "linking",
            "annotator",
            "phrases",
            "pmi_corpus",
            "pmi_unigrams",
            "pmi_top_k",
            "k_hop",
            "link_noise",
            "kg_embeddings",
        )
        if getattr(args, name) is not None
    }
    prepare_knowledge(
        sweep,
        sweep.methods,
        parse_overrides(args.set),
        data_dir=check_data_dir(args.data_dir),
        cache_dir=args.cache_dir,
        options=options,
        progress=not args.quiet,
    )
    return 0


def command_probe(args):
    from knowledge_lm.tools.probe import probe  # torch, transformers: loaded only when this command runs

    started = time.time()
    result = probe(args.backbone, check_data_dir(args.data_dir), args.relations.split(",") if args.relations else None)
    result["wall_time_s"] = round(time.time() - started, 2)
    path = (
        args.results_dir / "probes" / f"lama-{Cell('probe', 'lama', 'all', 1.0, 0, args.backbone).backbone_label}.json"
    )
    write_json_atomic(path, result)
    print(
        f"LAMA precision@1, mean over {len(result['relations'])} relations: {result['mean_precision_at_1']} "
        f"({result['kept']} of {result['facts']} facts kept); wrote {path}"
    )
    return 0


def command_attention(args):
    from knowledge_lm.tools.attention_maps import (
        render_attention,  # torch, transformers: loaded only when this command runs
    )

    if args.head != "mean" and not args.head.isdigit():
        raise KlmError(f"--head {args.head!r}: expected a head index or mean")
    head = None if args.head == "mean" else int(args.head)
    path = render_attention(
        args.text,
        args.out,
        backbone=args.backbone,
        method=args.method,
        options=parse_overrides(args.option),
        layer=args.layer,
        head=head,
        baseline_checkpoint=args.baseline_checkpoint,
        kam_checkpoint=args.kam_checkpoint,
        kg_dir=args.kg_dir,
        pmi_corpus=args.pmi_corpus,
        max_length=args.max_length,
    )
    print(f"wrote {path}")
    return 0


def add_attention_command(commands):
    attention = commands.add_parser(
        "attention", help="draw a sentence's attention maps, baseline beside KAM (paper Fig. 3)"
    )
    attention.add_argument("--text", required=True, help="the sentence")
    attention.add_argument("--out", required=True, type=Path, help="the PNG to write")
    attention.add_argument(
        "--backbone", default="minilm", help="minilm (default), tiny, a local directory or a hub name"
    )
    attention.add_argument("--method", default="kam", help="kam (default), one of its ablations or kam+si")
    attention.add_argument("--option", action="append", metavar="KEY=VALUE", help="a method option, e.g. alpha=0.2")
    attention.add_argument("--layer", type=int, default=-1, help="0-based layer (default -1: the last)")
    attention.add_argument("--head", default="mean", help="a head index, or mean (default)")
    attention.add_argument("--baseline-checkpoint", help="a baseline cell's checkpoint (.ckpt) for the left map")
    attention.add_argument("--kam-checkpoint", help="a KAM cell's checkpoint (.ckpt) for the right map")
    attention.add_argument("--kg-dir", help="knowledge graph folder for entity links (default: no links)")
    attention.add_argument("--pmi-corpus", help="text file (one text per line) for PMI (default: no PMI)")
    attention.add_argument("--max-length", type=int, default=128)
    attention.set_defaults(handler=command_attention)


# `klm pretrain`'s exit code when a run stopped early (--stop-after-steps, --time-budget-s) with its state saved:
# EX_TEMPFAIL, "try again" (the same command resumes).
PRETRAINING_UNFINISHED = 75


def command_pretrain(args):
    # The pretraining modules (torch, transformers) load only when this command runs.
    from knowledge_lm.run.pretraining import erica_checkpoint, erica_state_dir, knowbert_checkpoint
    from knowledge_lm.run.provenance import record_pretraining

    if args.method == "knowbert":
        out = knowbert_checkpoint(
            args.corpus,
            args.out,
            backbone=args.backbone,
            steps=args.steps,
            batch_size=args.batch_size or 32,
            max_length=args.max_length,
            data_dir=args.data_dir,
            cache_dir=args.cache_dir,
            seed=args.seed,
            lr=args.lr,
            progress=not args.quiet,
        )
        print(
            f"wrote {out} (use it as --backbone {out} with --method knowbert, knowbert+si or knowbert+si+sr); "
            f"its record: {record_pretraining(out, args.results_dir)}"
        )
        return 0
    from knowledge_lm.methods.erica import BATCH_SIZE

    args.batch_size, args.max_length = args.batch_size or BATCH_SIZE, args.max_length or 512
    exclude = (
        None
        if args.exclude_test is None
        else [name for name in args.exclude_test.split(",") if name not in ("", "none")]
    )
    options = {"lr": args.lr} if args.lr is not None else {}
    for option in ("stop_after_steps", "time_budget_s", "save_every_steps"):
        if getattr(args, option) is not None:
            if getattr(args, option) <= 0:
                raise KlmError(f"--{option.replace('_', '-')} must be > 0, got {getattr(args, option)}")
            options[option] = getattr(args, option)
    options["save_every_s"] = args.save_every_s if args.save_every_s > 0 else None
    state_dir = args.state_dir or erica_state_dir(args.out)
    out = erica_checkpoint(
        args.corpus,
        args.out,
        method=args.method,
        objectives=args.objectives,
        backbone=args.backbone,
        steps=args.steps,
        batch_size=args.batch_size,
        data_dir=args.data_dir,
        kg_dir=args.kg_dir,
        exclude_test=exclude,
        min_entities=args.min_entities,
        min_relations=args.min_relations,
        max_length=args.max_length,
        seed=args.seed,
        cache_dir=args.cache_dir,
        progress=not args.quiet,
        micro_batch_size=args.micro_batch_size,
        state_dir=state_dir,
        resumable=not args.no_resume,
        deterministic=not args.nondeterministic,
        **options,
    )
    if out is None:
        print(
            f"stopped before step {args.steps}; the state is in {state_dir}: run the same command again to resume",
            file=sys.stderr,
        )
        return PRETRAINING_UNFINISHED
    print(
        f"wrote {out} (use it as --backbone {out} with --method {args.method}); "
        f"its record: {record_pretraining(out, args.results_dir)}"
    )
    return 0


def command_speed(args):
    for name in ("batch_size", "max_length", "steps", "repeats"):
        if getattr(args, name) <= 0:
            raise KlmError(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    for method in args.methods.split(","):  # before the baseline is measured
        METHODS.check(method)
    check_writable_folder(args.results_dir)
    from knowledge_lm.report.speed import render_speed, speed_record_path
    from knowledge_lm.tools.speed import run_speed  # torch: loaded only when this command runs

    record = run_speed(
        args.methods.split(","),
        args.backbone,
        args.batch_size,
        args.max_length,
        args.warmup,
        args.steps,
        args.repeats,
        args.tokenizer,
        bare_loop=not args.no_bare_loop,
        compile=args.compile,
        padded=args.padded,
    )
    path = speed_record_path(args.results_dir, record)
    write_json_atomic(path, record)
    print(render_speed([record]))
    print(f"wrote {path}")
    if not args.no_leaderboard:
        print_written_leaderboards(args.results_dir, args.leaderboards_dir)
    return 0


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
        args.results_dir, args.out, check_data_dir(args.data_dir), args.backbones, args.force, datasets, methods
    )
    return 0


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


def command_export(args):
    from knowledge_lm.report.export import export_tables  # pandas: loaded only by the commands that need it
    from knowledge_lm.report.leaderboard import DEFAULT_BACKBONES

    backbones = args.backbones
    chosen = DEFAULT_BACKBONES if not backbones else None if backbones == "all" else tuple(backbones.split(","))
    written = export_tables(args.results_dir, args.out, check_data_dir(args.data_dir), chosen)
    for path in written:
        print(f"wrote {path}")
    if not written:
        print(f"{args.results_dir}: no results to export")
    return 0


def command_serve(args):
    if args.idle_minutes <= 0:
        raise KlmError(f"--idle-minutes {args.idle_minutes:g}: expected more than 0")
    return serve(args.idle_minutes)


def list_entries() -> dict:
    """``klm list``'s content, read from the source (nothing imported): each method's one-line description, options
    and whether it needs ``klm prepare``; each dataset's description, tasks and default tasks."""
    methods = {
        name: {
            "description": class_description(METHODS, name),
            "options": option_fields(METHODS, name),
            "needs_prepare": static_flag(METHODS, name, "needs_knowledge"),
        }
        for name in METHODS.names()
    }
    datasets = {}
    for name in DATASETS.names():
        tasks = list(DATASETS.class_attribute(name, "tasks"))
        default_tasks = list(DATASETS.class_attribute(name, "default_tasks") or tasks)
        datasets[name] = {
            "description": class_description(DATASETS, name),
            "tasks": tasks,
            "default_tasks": default_tasks,
        }
    return {"methods": methods, "datasets": datasets}


def command_list(args):
    entries = list_entries()
    if args.json:
        print(json.dumps(entries, indent=1))
        return 0
    print("methods:", ", ".join(entries["methods"]))
    for name, method in entries["methods"].items():
        print(f"  {name}: {method['description']}" + (" (needs klm prepare)" if method["needs_prepare"] else ""))
        if method["options"]:
            print(f"    options: {', '.join(method['options'])}")
    for name, dataset in entries["datasets"].items():
        print(
            f"dataset {name}: tasks {', '.join(dataset['tasks'])} (default {', '.join(dataset['default_tasks'])})"
            + (f"; {dataset['description']}" if dataset["description"] else "")
        )
    return 0


def package_version() -> str:
    """The installed knowledge-lm's version, else pyproject.toml's beside this source."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("knowledge-lm")
    except PackageNotFoundError:
        import tomllib

        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        return tomllib.loads(pyproject.read_text())["project"]["version"]


def build_parser():
    parser = argparse.ArgumentParser(prog="klm", description="knowledge-lm: knowledge-injection benchmark suite")
    parser.add_argument("--version", action="version", version=f"klm (knowledge-lm) {package_version()}")
    parser.add_argument("--benchmarks-dir", type=Path, help=BENCHMARKS_HELP)
    commands = parser.add_subparsers(dest="command", required=True)

    bench = commands.add_parser("bench", help="run a sweep of cells (skipping finished ones), then the leaderboards")
    add_sweep_arguments(bench)
    bench.add_argument(
        "--table", help="a paper table's sweeps (benchmarks/tables.yaml), e.g. kam-table6; all: the full grid"
    )
    bench.add_argument("--data-dir", default=os.environ.get("DATA_DIR") or None, help="data directory (or DATA_DIR)")
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
        help="a submitit parameter of every job, e.g. slurm_partition=gpu, timeout_min=240, cpus_per_task=8",
    )
    bench.add_argument("--leaderboards-dir", type=Path, help=LEADERBOARDS_HELP)
    bench.add_argument("--no-leaderboard", action="store_true")
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

    cell = commands.add_parser(
        "cell", help="run one cell in this process (start it on every node for a multi-node cell)"
    )
    add_sweep_arguments(cell)
    cell.add_argument("--variant", help="the sweep variant of the cell, where the sweep has variants")
    cell.add_argument("--data-dir", default=os.environ.get("DATA_DIR") or None, help="data directory (or DATA_DIR)")
    cell.set_defaults(handler=command_cell)

    status = commands.add_parser(
        "status",
        help="list done / running (by whom) / partial / failed / corrupt / misfiled / missing cells of a sweep",
    )
    add_sweep_arguments(status)
    status.set_defaults(handler=command_status)

    prepare = commands.add_parser(
        "prepare", help="compute and cache knowledge features (entity links, NER, phrases, PMI)"
    )
    add_sweep_arguments(prepare)
    prepare.add_argument("--data-dir", default=os.environ.get("DATA_DIR") or None, help="data directory (or DATA_DIR)")
    prepare.add_argument("--cache-dir", type=Path, help="default: $KLM_CACHE_DIR or .cache/knowledge-lm")
    prepare.add_argument(
        "--kg-dir", help="knowledge graph folder (default: the dataset's own, else <data-dir>/wikidata_kg)"
    )
    prepare.add_argument(
        "--linking", choices=("auto", "gold", "alias"), help="gold links, alias-table candidates, or auto"
    )
    prepare.add_argument("--annotator", choices=("spacy", "stanza"))
    prepare.add_argument("--phrases", choices=("noun_chunks", "subtrees"))
    prepare.add_argument(
        "--pmi-corpus", help="text file (one text per line) for PMI; default: the dataset's train text"
    )
    prepare.add_argument("--pmi-unigrams", help="'word count' file for unigram probabilities, e.g. enwiki_word_freq")
    prepare.add_argument("--pmi-top-k", type=int, help="PMI neighbours kept per example (default 10)")
    prepare.add_argument(
        "--k-hop", type=int, help="KG distance below which linked entities count as close for SI (default 6)"
    )
    prepare.add_argument(
        "--link-noise", type=float, help="share of linked entities replaced by a random entity of another type"
    )
    prepare.add_argument(
        "--kg-embeddings", action="store_true", default=None, help="also train and cache TransE embeddings"
    )
    prepare.add_argument("--quiet", action="store_true", help="no progress bars")
    prepare.set_defaults(handler=command_prepare)
    add_attention_command(commands)

    probe = commands.add_parser("probe", help="LAMA precision@1 of a masked-LM backbone (zero-shot)")
    probe.add_argument("--backbone", required=True, help="a local masked-LM checkpoint directory or a hub name")
    probe.add_argument("--data-dir", default=os.environ.get("DATA_DIR") or None, help="data directory holding lama/")
    probe.add_argument("--relations", help="comma-separated relation ids (default: all)")
    probe.add_argument("--results-dir", type=Path, help=RESULTS_HELP)
    probe.set_defaults(handler=command_probe)

    pretrain = commands.add_parser(
        "pretrain", help="pretraining stages (ERICA; KnowBERT's MLM + linking): save a checkpoint DIR"
    )
    pretrain.add_argument(
        "--method",
        default="erica",
        help="erica or an ablation: erica-mlm-only, erica-ed, erica-rd, erica-rd-intra, erica-rd-cross; or knowbert",
    )
    pretrain.add_argument(
        "--corpus",
        required=True,
        help="ERICA: comma-separated redocred, fewrel, lama, generated, or .jsonl "
        "paths; knowbert: one prepared dataset (its train split)",
    )
    pretrain.add_argument("--backbone", default="minilm", help="minilm (default), tiny, or a local model directory")
    pretrain.add_argument("--steps", type=int, required=True, help="optimiser steps")
    pretrain.add_argument("--batch-size", type=int, help="documents per step (ERICA: 64) or texts (knowbert: 32)")
    pretrain.add_argument(
        "--micro-batch-size",
        type=int,
        help="ERICA: documents per forward pass (divides --batch-size; gradients accumulate, and RD contrasts within "
        "each micro-batch, as the official code's 16 per GPU); default: the batch size",
    )
    pretrain.add_argument("--out", required=True, type=Path, help="checkpoint directory to create")
    pretrain.add_argument(
        "--results-dir",
        type=Path,
        help="where the run's record goes (<results-dir>/pretraining/<checkpoint name>.json)",
    )
    pretrain.add_argument("--data-dir", default=os.environ.get("DATA_DIR") or None, help="data directory (or DATA_DIR)")
    pretrain.add_argument(
        "--objectives", help="mlm,ed,rd (or rd-intra, rd-cross) or an ablation name; must agree with --method"
    )
    pretrain.add_argument("--kg-dir", help="Wikidata KG folder (default <data-dir>/wikidata_kg)")
    pretrain.add_argument(
        "--exclude-test", help="test sets whose entity pairs are removed (default: the corpus sources' own; none)"
    )
    pretrain.add_argument("--min-entities", type=int, default=4)
    pretrain.add_argument("--min-relations", type=int, default=4)
    pretrain.add_argument("--max-length", type=int, help="ERICA: 512; knowbert: the dataset config's, as prepared")
    pretrain.add_argument("--lr", type=float, help="default 3e-5 (the paper's)")
    pretrain.add_argument("--seed", type=int, default=0)
    pretrain.add_argument(
        "--cache-dir", type=Path, help="corpus cache (default: $KLM_CACHE_DIR or .cache/knowledge-lm)"
    )
    pretrain.add_argument("--quiet", action="store_true", help="no progress bar")
    pretrain.add_argument(
        "--state-dir",
        type=Path,
        help="ERICA: where the resumable state goes (default: <out>.resume beside --out); the same command resumes "
        "from it, and it is removed once the checkpoint is written",
    )
    pretrain.add_argument(
        "--save-every-s", type=float, default=300, help="ERICA: save the state every that many seconds (0: never)"
    )
    pretrain.add_argument("--save-every-steps", type=int, help="ERICA: also save the state every that many steps")
    pretrain.add_argument(
        "--stop-after-steps",
        type=int,
        help=f"ERICA: stop (state saved, exit code {PRETRAINING_UNFINISHED}) after that many steps of this run",
    )
    pretrain.add_argument(
        "--time-budget-s",
        type=float,
        help=f"ERICA: stop (state saved, exit code {PRETRAINING_UNFINISHED}) before a step would end past that many "
        "seconds of training in this run (model loading and the final save not counted: leave a margin)",
    )
    pretrain.add_argument("--no-resume", action="store_true", help="ERICA: keep no resumable state")
    pretrain.add_argument(
        "--nondeterministic", action="store_true", help="ERICA: allow nondeterministic (faster) kernels"
    )
    pretrain.set_defaults(handler=command_pretrain)

    speed = commands.add_parser(
        "speed", help="step time, samples/s, memory, TFLOP/s of methods vs the baseline and a bare loop"
    )
    speed.add_argument(
        "--methods",
        default="baseline,knowbert,knowbert+si+sr,bert+sr,kam",
        help="comma-separated; the baseline is always measured first",
    )
    speed.add_argument(
        "--backbone",
        default="minilm",
        help="a backbone, or bert-base-shaped (random weights: hidden 768, 12 layers, 12 heads)",
    )
    speed.add_argument("--tokenizer", default="minilm", help="the backbone whose tokenizer bert-base-shaped uses")
    speed.add_argument("--batch-size", type=int, default=32)
    speed.add_argument(
        "--max-length", type=int, default=48, help="as benchmarks/generated.yaml, so the prepared features match"
    )
    speed.add_argument(
        "--padded",
        action="store_true",
        help="pad every batch to --max-length (one shape, e.g. 128 as GLUE's cells), not to its longest text",
    )
    speed.add_argument("--warmup", type=int, default=20)
    speed.add_argument("--steps", type=int, default=100)
    speed.add_argument(
        "--repeats", type=int, default=2, help="interleaved runs of the method list; each method's best median counts"
    )
    speed.add_argument("--no-bare-loop", action="store_true", help="skip the plain PyTorch loop")
    speed.add_argument(
        "--compile",
        nargs="?",
        const="default",
        choices=COMPILE_MODES,
        metavar="MODE",
        help="torch.compile every method's layers, as the training setting compile, in torch.compile's "
        f"MODE ({', '.join(COMPILE_MODES)}; default: default); the bare loop stays eager",
    )
    speed.add_argument("--results-dir", type=Path, help=RESULTS_HELP)
    speed.add_argument("--leaderboards-dir", type=Path, help=LEADERBOARDS_HELP)
    speed.add_argument("--no-leaderboard", action="store_true")
    speed.set_defaults(handler=command_speed)

    leaderboard = commands.add_parser("leaderboard", help="regenerate leaderboards/*.md from the results store")
    leaderboard.add_argument("--results-dir", type=Path, help=RESULTS_HELP)
    leaderboard.add_argument("--out", type=Path, help="default: leaderboards/ of the project root")
    leaderboard.add_argument(
        "--data-dir",
        default=os.environ.get("DATA_DIR") or None,
        help="data directory (or DATA_DIR) whose gold the kept predictions are checked against and scored with",
    )
    leaderboard.add_argument(
        "--backbones",
        help="the backbones whose results the dataset pages show, comma-separated, or all (default: minilm; a "
        "smoke run's tiny results render only when named, best with another --out)",
    )
    leaderboard.add_argument("--force", action="store_true", help="rebuild every page, changed inputs or not")
    leaderboard.add_argument("--datasets", help="only these datasets' pages, comma-separated (with --out)")
    leaderboard.add_argument(
        "--methods", help="only these methods on the pages (the baseline stays: Δ is against it), with --out"
    )
    leaderboard.set_defaults(handler=command_leaderboard)

    comparing = commands.add_parser(
        "compare",
        help="two methods or variants (METHOD or METHOD/VARIANT) compared on the cells both ran: Δ paired by seed, "
        "its interval and the BH-corrected verdict per dataset, task and fraction",
    )
    comparing.add_argument("first", help="a method, or METHOD/VARIANT, e.g. kam")
    comparing.add_argument("second", help="the method or variant it is compared with, e.g. kam-no-entity")
    comparing.add_argument("--dataset", help="only these datasets, comma-separated")
    comparing.add_argument("--results-dir", type=Path, help=RESULTS_HELP)
    comparing.add_argument("--backbones", help="comma-separated, or all (default: minilm)")
    comparing.add_argument("--json", action="store_true", help="the rows as JSON")
    comparing.set_defaults(handler=command_compare)

    export = commands.add_parser(
        "export",
        help="write the leaderboards' tables as CSV and JSON: one row per method, variant, dataset, task and fraction",
    )
    export.add_argument("--results-dir", type=Path, help=RESULTS_HELP)
    export.add_argument("--out", type=Path, help="default: leaderboards/data of the project root")
    export.add_argument(
        "--data-dir",
        default=os.environ.get("DATA_DIR") or None,
        help="data directory (or DATA_DIR) whose gold the kept predictions are checked against, as klm leaderboard's",
    )
    export.add_argument(
        "--backbones", help="the backbones whose results are exported, comma-separated, or all (default: minilm)"
    )
    export.set_defaults(handler=command_export)

    serving = commands.add_parser(
        "serve",
        help="keep a warm process that forks sweep workers already imported (later klm bench runs start at once)",
    )
    serving.add_argument(
        "--idle-minutes", type=float, default=30.0, help="end after this long without workers (default 30)"
    )
    serving.set_defaults(handler=command_serve)

    listing = commands.add_parser(
        "list", help="registered methods (description, options, needs prepare) and datasets (tasks)"
    )
    listing.add_argument("--json", action="store_true", help="as one JSON object")
    listing.set_defaults(handler=command_list)
    return parser


# Commands that run where they are started: serve is the server, and cell may be relaunched by Lightning's DDP
# from its own command line.
NOT_FORWARDED = ("serve", "cell")
# How long a server that `klm bench` starts for the runs after it stays up without work.
BACKGROUND_SERVER_IDLE_MINUTES = 10


def main(argv=None) -> int:
    """``klm``'s entry point. Run as the program (``argv`` None), a command goes to a running ``klm serve`` of this
    code and environment where there is one, already imported; where there is none, ``klm bench`` runs here, and
    starts one in the background for the runs after it only where asked (``KLM_SERVE=1``): nothing keeps running
    after a command unless the user opts in."""
    as_program = argv is None and sys.argv[1:2] and sys.argv[1] not in NOT_FORWARDED and not forked_by_server()
    if as_program:
        code = forward(sys.argv[1:])
        if code is not None:
            return code
    args = build_parser().parse_args(argv)  # --help and argument errors end here, before any server starts
    if args.benchmarks_dir is not None:
        os.environ[BENCHMARKS_ENV] = str(args.benchmarks_dir)  # read by benchmarks_dir(), here and in workers
    if as_program and args.command == "bench" and not args.dry_run and os.environ.get("KLM_SERVE", "0") == "1":
        log = start_in_background(BACKGROUND_SERVER_IDLE_MINUTES)
        if log is not None:
            print(
                f"klm: started klm serve in the background for later runs ({BACKGROUND_SERVER_IDLE_MINUTES} idle "
                f"minutes; log {log}; unset KLM_SERVE to run without)",
                file=sys.stderr,
            )
    try:
        if args.command not in ("bench", "cell", "status", "prepare"):  # those resolve them once the sweep is read
            resolve_folders(args, [args.backbone] if isinstance(getattr(args, "backbone", None), str) else [])
        return args.handler(args)
    except KlmError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupt:  # Ctrl-C: one line, not a traceback; the shell's status for SIGINT
        resumable = getattr(interrupt, "resumable", None)
        print("interrupted" + (f": {resumable} cells will resume" if resumable is not None else ""), file=sys.stderr)
        return INTERRUPTED_EXIT


if __name__ == "__main__":
    sys.exit(main())
