"""``klm``: run sweeps, show their state, regenerate leaderboards.

The modules imported here load no torch, transformers or Lightning, so that ``klm list``, ``klm status`` and
every argument error answer at once; a command that trains, probes or draws imports its module when it runs.
"""

import argparse
import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

from knowledge_lm.errors import KlmError
from knowledge_lm.registry import DATASETS, METHODS
from knowledge_lm.results import Cell, set_aside, write_json_atomic
from knowledge_lm.run.config import (
    BENCHMARKS_DIR,
    COMPILE_MODES,
    check_data_dir,
    check_method_options,
    dataset_defaults,
    read_sweep_yaml,
    validate_sweep,
)
from knowledge_lm.run.mps import mps_for_sweep
from knowledge_lm.run.runner import (
    cell_status,
    estimated_seconds,
    parse_shard,
    plan_sweep,
    prepare_knowledge,
    run_sweep,
    shard_keys,
    stored_wall_times,
    sweep_cells,
    worker_pool,
)
from knowledge_lm.run.serve import forked_by_server, forward, serve, start_in_background
from knowledge_lm.run.startup import cell_spans_since, outside_cells_line, process_started


def sweep_from_args(args):
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
        raw["methods"] = args.method.split(",")
        raw["name"] = f"{raw.get('name', raw.get('dataset'))}:{args.method}"
    raw.setdefault("methods", ["baseline"])
    for option in ("tasks",):
        if getattr(args, option):
            raw[option] = getattr(args, option).split(",")
    if args.fractions:
        raw["fractions"] = args.fractions
    if args.seeds:
        raw["seeds"] = args.seeds
    if args.backbone:
        raw["backbone"] = args.backbone
    return validate_sweep(raw, where)


def parse_overrides(pairs: list[str]) -> dict:
    overrides = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise KlmError(f"--set {pair!r}: expected key=value")
        key, value = pair.split("=", 1)
        overrides[key] = yaml.safe_load(value)
    return overrides


def add_sweep_arguments(parser):
    parser.add_argument("--config", help="a sweep config, e.g. benchmarks/glue.yaml")
    parser.add_argument("--method", help="method name(s), comma-separated (default: baseline)")
    parser.add_argument("--dataset", help="dataset name; its benchmarks/<dataset>.yaml gives the defaults")
    parser.add_argument("--tasks", help="comma-separated tasks (default: the dataset's default tasks)")
    parser.add_argument("--fractions", help="train fractions in (0, 1], e.g. 0.01,0.1,1")
    parser.add_argument("--seeds", help="training seeds, e.g. 1,2,3")
    parser.add_argument("--backbone", help="minilm (default), tiny, a local directory or a hub name")
    parser.add_argument("--results-dir", default="results", type=Path)
    parser.add_argument("--runs-dir", default="runs", type=Path, help="checkpoints and logs of unfinished cells")


def table_configs(name: str) -> list[Path]:
    """The sweep configs that fill a paper table (``benchmarks/tables.yaml``)."""
    tables = yaml.safe_load((BENCHMARKS_DIR / "tables.yaml").read_text())
    if name not in tables:
        raise KlmError(f"unknown table {name!r}; known: {', '.join(tables)}")
    return [BENCHMARKS_DIR / f"{config}.yaml" for config in tables[name]]


def print_written_leaderboards(results_dir: Path, out_dir: Path, data_dir=None, backbones="", force=False):
    """Regenerate the leaderboards of ``backbones`` (comma-separated, or all; default: the committed pages' own)
    where their inputs changed since the last regeneration (every page with ``force``), and print each file
    written."""
    from knowledge_lm.data.io import default_cache_dir
    from knowledge_lm.report.leaderboard import (  # pandas: loaded only by the commands that write them
        DEFAULT_BACKBONES,
        write_leaderboards,
    )

    chosen = DEFAULT_BACKBONES if not backbones else None if backbones == "all" else tuple(backbones.split(","))
    state_file = default_cache_dir() / "leaderboards.json"
    if force:
        state_file.unlink(missing_ok=True)
    written = write_leaderboards(results_dir, out_dir, data_dir, backbones=chosen, state_file=state_file)
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


def duration_text(seconds: float) -> str:
    """Seconds as 45s, 3m 20s or 2h 05m."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


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


def command_bench(args):
    if args.table and (args.config or args.dataset):
        raise KlmError("--table names its own configs: drop --config/--dataset")
    configs = table_configs(args.table) if args.table else [args.config]
    sweeps = []
    for config in configs:  # every config is checked before any cell runs
        args.config = str(config) if config else None
        sweeps.append(sweep_from_args(args))
    jobs = parse_jobs(args.jobs)
    shard = parse_shard(args.shard) if args.shard else None
    data_dir = check_data_dir(args.data_dir)
    overrides = parse_overrides(args.set)
    if args.devices_per_cell:
        overrides["devices"] = args.devices_per_cell
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
    with ExitStack() as stack:
        # A table's configs share one set of workers: each imports once and keeps its caches for the next sweep.
        shared = len(sweeps) > 1 and executor is None and not args.isolate_cells
        stack.enter_context(mps_for_sweep(jobs, args.runs_dir, enabled=not args.no_mps and executor is None))
        pool = stack.enter_context(worker_pool(jobs, args.runs_dir)) if shared else None
        for sweep in sweeps:
            failed += run_sweep(
                sweep,
                overrides,
                data_dir=data_dir,
                results_dir=args.results_dir,
                runs_dir=args.runs_dir,
                jobs=jobs,
                rerun_without_predictions=args.rerun_without_predictions,
                only=only,
                executor=executor,
                isolate_cells=args.isolate_cells,
                pool=pool,
            )["failed"]
    if shard:  # shards end at different times, and one page from several writers would be torn
        print(f"shard {args.shard} done; run `klm leaderboard` once every shard has finished")
    elif not args.no_leaderboard:
        print_written_leaderboards(args.results_dir, args.leaderboards_dir, data_dir)
    started = process_started()
    print(outside_cells_line(started, cell_spans_since(started)))
    return 1 if failed else 0


def command_cell(args):
    """One cell of a sweep, in this process: what a launcher (torchrun, srun) starts on every node for a cell that
    spans nodes (``--set num_nodes=N --set devices=G``); Lightning reads the launcher's environment, and global
    rank 0 writes the result."""
    from knowledge_lm.run.cell import run_cell  # torch: loaded only when a cell runs here

    sweep = sweep_from_args(args)
    cells = [cell for cell in sweep_cells(sweep) if cell.variant == (args.variant or "")]
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


def command_pretrain(args):
    # The pretraining modules (torch, transformers) load only when this command runs.
    from knowledge_lm.run.pretraining import erica_checkpoint, knowbert_checkpoint
    from knowledge_lm.run.provenance import record_pretraining

    if args.method == "knowbert":
        out = knowbert_checkpoint(
            args.corpus,
            args.out,
            args.backbone,
            args.steps,
            args.batch_size or 32,
            args.max_length,
            args.data_dir,
            args.cache_dir,
            args.seed,
            args.lr,
            progress=not args.quiet,
        )
        print(
            f"wrote {out} (use it as --backbone {out} with --method knowbert, knowbert+si or knowbert+si+sr); "
            f"its record: {record_pretraining(out, args.results_dir)}"
        )
        return 0
    args.batch_size, args.max_length = args.batch_size or 8, args.max_length or 512
    exclude = (
        None
        if args.exclude_test is None
        else [name for name in args.exclude_test.split(",") if name not in ("", "none")]
    )
    options = {"lr": args.lr} if args.lr is not None else {}
    out = erica_checkpoint(
        args.corpus,
        args.out,
        args.method,
        args.objectives,
        args.backbone,
        args.steps,
        args.batch_size,
        args.data_dir,
        args.kg_dir,
        exclude,
        args.min_entities,
        args.min_relations,
        args.max_length,
        args.seed,
        args.cache_dir,
        progress=not args.quiet,
        **options,
    )
    print(
        f"wrote {out} (use it as --backbone {out} with --method {args.method}); "
        f"its record: {record_pretraining(out, args.results_dir)}"
    )
    return 0


def command_speed(args):
    from knowledge_lm.tools.speed import (  # torch: loaded only when this command runs
        render_speed,
        run_speed,
        speed_record_path,
    )

    for name in ("batch_size", "max_length", "steps", "repeats"):
        if getattr(args, name) <= 0:
            raise KlmError(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
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


def command_leaderboard(args):
    print_written_leaderboards(args.results_dir, args.out, check_data_dir(args.data_dir), args.backbones, args.force)
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


def command_list(args):
    print("methods:", ", ".join(METHODS.names()))
    for name in DATASETS.names():
        tasks, default_tasks = DATASETS.class_attribute(name, "tasks"), DATASETS.class_attribute(name, "default_tasks")
        print(f"dataset {name}: tasks {', '.join(tasks)} (default {', '.join(default_tasks or tasks)})")
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="klm", description="knowledge-lm: knowledge-injection benchmark suite")
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
    bench.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a training setting, e.g. lr=3e-5")
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
    bench.add_argument("--leaderboards-dir", default="leaderboards", type=Path)
    bench.add_argument("--no-leaderboard", action="store_true")
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
    cell.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="override a training setting, e.g. num_nodes=2"
    )
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
    probe.add_argument("--results-dir", default="results", type=Path)
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
    pretrain.add_argument("--batch-size", type=int, help="documents per step (ERICA: 8) or texts (knowbert: 32)")
    pretrain.add_argument("--out", required=True, type=Path, help="checkpoint directory to create")
    pretrain.add_argument(
        "--results-dir",
        default="results",
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
    speed.add_argument("--results-dir", default="results", type=Path)
    speed.add_argument("--leaderboards-dir", default="leaderboards", type=Path)
    speed.add_argument("--no-leaderboard", action="store_true")
    speed.set_defaults(handler=command_speed)

    leaderboard = commands.add_parser("leaderboard", help="regenerate leaderboards/*.md from the results store")
    leaderboard.add_argument("--results-dir", default="results", type=Path)
    leaderboard.add_argument("--out", default="leaderboards", type=Path)
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
    leaderboard.set_defaults(handler=command_leaderboard)

    export = commands.add_parser(
        "export",
        help="write the leaderboards' tables as CSV and JSON: one row per method, variant, dataset, task and fraction",
    )
    export.add_argument("--results-dir", default="results", type=Path)
    export.add_argument("--out", default=Path("leaderboards") / "data", type=Path, help="default: leaderboards/data")
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

    listing = commands.add_parser("list", help="registered methods and datasets")
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
    if as_program and args.command == "bench" and not args.dry_run and os.environ.get("KLM_SERVE", "0") == "1":
        log = start_in_background(BACKGROUND_SERVER_IDLE_MINUTES)
        if log is not None:
            print(
                f"klm: started klm serve in the background for later runs ({BACKGROUND_SERVER_IDLE_MINUTES} idle "
                f"minutes; log {log}; unset KLM_SERVE to run without)",
                file=sys.stderr,
            )
    try:
        return args.handler(args)
    except KlmError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
