"""The peer benchmark: the same GLUE cells through ``klm bench`` and through Hugging Face's ``Trainer`` (one
process per cell, ``benchmarks/peer_hf_cell.py``), on one device, in one process tree; prints the ratios
and stores the record under ``results/speed/``, which ``klm leaderboard`` renders into
``leaderboards/speed.md``.

Two measurements, each cell run by both sides with the suite's protocol (``benchmarks/glue.yaml``'s
training settings and step budget: batch 32, lr 5e-5, 3 epochs but at least 150 steps, warm-up 0.1,
weight decay 0.01, length 128, 10 evaluations, the best dev evaluation selected):

1. one cell (RTE, 100 %, seed 1): each side's process wall (process start to exit) and cell time (from
   loading the backbone to the end of the last evaluation: a ``klm`` result's ``wall_time_s``);
2. the small-GLUE baseline grid (5 tasks × 1/10/100 % × 3 seeds; ``--grid-tasks``, ``--grid-fractions``,
   ``--grid-seeds`` limit it, ``--no-grid`` skips it): one ``klm bench`` against one Trainer process per
   cell, ``--jobs`` at a time on each side.

``--served-startup N`` adds, last, klm's start-up (before its first cell) with a warm server: N one-cell ``klm
bench`` runs handed to a ``klm serve`` started for them and stopped after them, beside the cold runs' start-up.

Both sides read the same rows: the splits come from the suite's ``GlueDataModule`` (its train fraction and
the dev split it holds out of GLUE train; GLUE dev is the reported test), exported for the Trainer as JSON
lines; a cell whose ``klm`` subset hash differs from the exported one is flagged. ``klm`` gets a cache
directory of its own, empty at the start, so its first cell tokenizes as the Trainer's always does. The
Trainer side needs ``accelerate`` (``pip install 'knowledge-lm[peer]'``).

    python benchmarks/peer_speed.py --jobs 8                       # on a GPU: the cell, then the grid
    python benchmarks/peer_speed.py --no-grid --served-startup 5   # the cell, then 5 start-ups with klm serve
    python benchmarks/peer_speed.py --jobs 8 --no-cell --grid-sides klm --klm-no-mps   # the grid without MPS
    python benchmarks/peer_speed.py --backbone tiny --max-steps 3 --grid-tasks rte --grid-fractions 0.1
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import product
from pathlib import Path

from transformers import TrainingArguments
from transformers.utils import logging as transformers_logging

from knowledge_lm.core.backbones import load_backbone, resolve_backbone
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.paths import benchmarks_dir
from knowledge_lm.core.results import load_results, write_json_atomic
from knowledge_lm.core.subsets import subset_hash
from knowledge_lm.data.glue import GlueDataModule
from knowledge_lm.methods.trainer import resolve_precision
from knowledge_lm.report.speed import render_peer, speed_record_path
from knowledge_lm.run.config import TrainConfig, load_sweep, parse_fractions, parse_seeds
from knowledge_lm.run.provenance import device_name, measured_now
from knowledge_lm.sweep.startup import read_outside_cells_line

GLUE_CONFIG = benchmarks_dir() / "glue.yaml"
HF_CELL = Path(__file__).resolve().with_name("peer_hf_cell.py")
SINGLE_CELL = ("rte", 1.0, 1)
LONG_CELL = ("sst2", 1.0, 1)
# The served start-up's runs: two steps and one evaluation, for what is measured is the time before the cell.
SERVED_SETTINGS = ["--set", "max_steps=2", "--set", "evaluations=1"]
SERVER_IDLE_MINUTES = 2  # the server ends by itself after this long without work, should this script be killed
SERVER_START_TIMEOUT_S = 300  # its imports take 12–17 s on the GPU hosts; more from a cold disk


def last_line(output: str) -> str:
    """A process's last line of ``output``, what a one-line failure quotes; "(no output)" where it printed none."""
    return (output.strip().splitlines() or ["(no output)"])[-1]


def fail(message: str):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def check_trainer():
    """Exit with one line where transformers' Trainer lacks a package it needs (``accelerate``: the ``[peer]``
    extra), before any cell runs."""
    try:
        TrainingArguments(output_dir=tempfile.gettempdir(), report_to="none")
    except ImportError as error:
        fail(
            f"Hugging Face's Trainer cannot run here ({str(error).splitlines()[0].strip()}); "
            "pip install 'knowledge-lm[peer]'"
        )


def export_cell(sweep, task: str, fraction: float, overrides: dict, data_dir, folder: Path) -> dict:
    """The cell's rows as the suite reads them, written as JSON lines under ``folder``, with the step budget,
    the task's metrics and the train subset's hash: what the Trainer side needs, seed aside."""
    train = sweep.train_config(task, overrides)
    data = GlueDataModule(
        task=task,
        data_dir=data_dir,
        fraction=fraction,
        subset_seed=train.subset_seed,
        max_length=train.max_length,
    )
    splits, indices = data.read_labelled(), data.train_subset()
    rows = {"train": [splits["train"][index] for index in indices], "dev": splits["dev"], "test": splits["test"]}
    paths = {}
    for split, records in rows.items():
        paths[split] = str(folder / f"{task}-{fraction}-{split}.jsonl")
        Path(paths[split]).write_text(
            "".join(
                json.dumps({"text_a": r["text_a"], "text_b": r["text_b"], "label": r["label"]}) + "\n" for r in records
            )
        )
    spec = data.task_spec
    return {
        "splits": paths,
        "train": {name: value for name, value in vars(train).items() if name != "method_options"},
        "budget": train.budget(len(indices)),
        "kind": spec.kind,
        "metrics": list(spec.metrics),
        "main_metric": spec.main_metric,
        "num_labels": spec.num_labels,
        "subset_hash": subset_hash([record["id"] for record in splits["train"]], indices),
    }


def trainer_backbone(name: str, folder: Path) -> str:
    """What ``from_pretrained`` loads for the Trainer: the backbone's directory (or hub id); ``tiny``, built here,
    is saved into ``folder`` first."""
    if name != "tiny":
        return str(resolve_backbone(name)[0])
    model, tokenizer, _ = load_backbone("tiny")
    model.save_pretrained(folder / "tiny")
    tokenizer.save_pretrained(folder / "tiny")
    return str(folder / "tiny")


def run_trainer_cells(cells: list[dict], jobs: int, folder: Path) -> tuple[float, list[dict]]:
    """``(process wall, outcomes)`` of one Trainer process per cell, ``jobs`` at a time; the first failure ends
    the benchmark with the process's last line."""

    def run(index_cell):
        index, cell = index_cell
        spec_path, out_path = folder / f"hf-{index}.json", folder / f"hf-{index}-out.json"
        spec_path.write_text(json.dumps(cell))
        process = subprocess.run(
            [sys.executable, str(HF_CELL), str(spec_path), str(out_path)], capture_output=True, text=True
        )
        if process.returncode != 0:
            last = last_line(process.stderr)
            fail(f"Trainer cell {cell['task']} {cell['fraction']} seed {cell['seed']}: {last.removeprefix('error: ')}")
        return json.loads(out_path.read_text())

    started = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        outcomes = list(pool.map(run, enumerate(cells)))
    return time.perf_counter() - started, outcomes


def klm_bench_command(args, tasks, fractions, seeds, folder: Path) -> list[str]:
    """The ``klm bench`` of the cells ``tasks × fractions × seeds`` with the klm side's settings, its results and
    runs under ``folder``."""
    return [
        sys.executable,
        "-m",
        "knowledge_lm.cli",
        "bench",
        "--config",
        str(GLUE_CONFIG),
        "--tasks",
        ",".join(tasks),
        "--fractions",
        ",".join(map(str, fractions)),
        "--seeds",
        ",".join(map(str, seeds)),
        "--backbone",
        args.backbone,
        "--results-dir",
        str(folder / "klm-results"),
        "--runs-dir",
        str(folder / "klm-runs"),
        "--jobs",
        str(args.jobs),
        "--no-leaderboard",
        *(["--set", f"max_steps={args.max_steps}"] if args.max_steps else []),
        *[part for setting in args.klm_set for part in ("--set", setting)],
        *(["--no-mps"] if args.klm_no_mps else []),
        *(["--data-dir", args.data_dir] if args.data_dir else []),
    ]


def klm_environment(cache: Path) -> dict:
    """The environment of the klm side, with the tokenization cache ``cache``."""
    # KLM_SERVE=0: a cold klm starts no server beside the cells it is timed on (a warm one is started beforehand).
    return {**os.environ, "KLM_CACHE_DIR": str(cache), "KLM_SERVE": "0"}


def run_klm(args, tasks, fractions, seeds, folder: Path, cache: Path | None = None) -> tuple[float, dict, float]:
    """``(process wall, results by (task, fraction, seed), start-up)`` of one ``klm bench`` over the grid, with the
    tokenization cache ``cache`` (default: its own, empty); start-up: the seconds before its first cell started,
    as it prints them."""
    results_dir = folder / "klm-results"
    command = klm_bench_command(args, tasks, fractions, seeds, folder)
    environment = klm_environment(cache or folder / "klm-cache")
    log = folder / "klm.log"
    started = time.perf_counter()
    with open(log, "w") as output:
        code = subprocess.run(command, stdout=output, stderr=subprocess.STDOUT, env=environment).returncode
    wall = time.perf_counter() - started
    if code != 0:
        last = last_line(log.read_text())
        fail(f"klm bench exited {code}: {last}")
    found = read_outside_cells_line(log.read_text())
    results = {(r["cell"]["task"], r["cell"]["fraction"], r["cell"]["seed"]): r for r in load_results(results_dir)}
    return wall, results, found[0] if found else None


def measure(
    args, sweep, tasks, fractions, seeds, overrides, backbone_dir, folder: Path, trainer: bool = True, cache=None
) -> dict:
    """Both sides (``klm`` alone where ``trainer`` is false) over the cells ``tasks × fractions × seeds``: process
    walls, klm's start-up, and per cell its time, steps, CUDA graphs and its selected evaluation's dev and test main
    metric; ``cache``: klm's tokenization cache (default: its own, empty)."""
    folder.mkdir(parents=True, exist_ok=True)
    exported = {
        (task, fraction): export_cell(sweep, task, fraction, overrides, args.data_dir, folder)
        for task, fraction in product(tasks, fractions)
    }
    keys = list(product(tasks, fractions, seeds))
    cells = [
        {**exported[task, fraction], "task": task, "fraction": fraction, "seed": seed, "backbone": backbone_dir}
        for task, fraction, seed in keys
    ]
    hf_wall, outcomes = run_trainer_cells(cells, args.jobs, folder) if trainer else (None, [None] * len(cells))
    klm_wall, results, startup = run_klm(args, tasks, fractions, seeds, folder, cache)
    rows = []
    for (task, fraction, seed), cell, outcome in zip(keys, cells, outcomes):
        result = results.get((task, fraction, seed))
        if result is None:
            fail(f"klm bench left no result for {task} {fraction} seed {seed} (see {folder / 'klm.log'})")
        metric = cell["main_metric"]
        rows.append(
            {
                "task": task,
                "fraction": fraction,
                "seed": seed,
                "metric": metric,
                "steps": cell["budget"]["max_steps"],
                "same_rows": result["data"]["subset_hash"] == cell["subset_hash"],
                "klm": {
                    "cell_s": result["wall_time_s"],
                    "dev": result["metrics"]["dev"][metric],
                    "test": result["metrics"][result["report_split"]][metric],
                    "cuda_graphs": TrainConfig.from_dict(result["config"]["train"]).cuda_graphs,
                    "compile_mode": result["config"]["train"].get("compile_mode"),
                    "mps": bool(result["device"].get("mps")),
                },
                **(
                    {
                        "hf": {
                            "cell_s": outcome["cell_s"],
                            "dev": outcome["metrics"]["dev"][metric],
                            "test": outcome["metrics"]["test"][metric],
                            "weights_dtype": outcome["weights_dtype"],
                        }
                    }
                    if trainer
                    else {}
                ),
            }
        )
    return {
        "tasks": tasks,
        "fractions": fractions,
        "seeds": seeds,
        "klm": {"process_wall_s": round(klm_wall, 2), "startup_s": startup},
        **({"hf": {"process_wall_s": round(hf_wall, 2)}} if trainer else {}),
        "cells": rows,
    }


def stored_reference(results_dir: Path, backbone: str, cell: tuple) -> dict | None:
    """The stored result of the baseline's ``cell`` (task, fraction, seed) on ``backbone`` in the results store, as
    the long cell's reference: its metrics, cell time, compile mode and commit; None where none is stored."""
    task, fraction, seed = cell
    path = Path(results_dir) / "glue" / task / "baseline" / Path(backbone).name / f"f{fraction:g}-s{seed}.json"
    if not path.is_file():
        return None
    stored = json.loads(path.read_text())
    train, metric = stored["config"]["train"], next(iter(stored["metrics"]["dev"]))
    return {
        "dev": stored["metrics"]["dev"][metric],
        "test": stored["metrics"][stored["report_split"]][metric],
        "cell_s": stored["wall_time_s"],
        "compile_mode": train.get("compile_mode") if train.get("compile") else "eager",
        "commit": stored["git"]["commit"],
        "device": stored["device"].get("name"),
    }


def served_startup(args, runs: int, folder: Path) -> dict:
    """The start-up of ``runs`` one-cell ``klm bench`` runs (``SINGLE_CELL`` with ``SERVED_SETTINGS``, each with
    results and runs folders of its own) handed to a ``klm serve`` started for them with the same environment, so
    under the same ``server_key``, and stopped after them: the commands, and per run ``served_run``'s figures. A
    server that does not listen, or a run that fails, ends the runs with ``error``."""
    folder.mkdir(parents=True, exist_ok=True)
    cache = folder / "klm-cache"
    environment = klm_environment(cache)  # the server's and every run's
    task, fraction, seed = SINGLE_CELL
    serve = [sys.executable, "-m", "knowledge_lm.cli", "serve", "--idle-minutes", str(SERVER_IDLE_MINUTES)]
    run_folders = [folder / f"run-{run}" for run in range(1, runs + 1)]
    benches = [[*klm_bench_command(args, [task], [fraction], [seed], run), *SERVED_SETTINGS] for run in run_folders]
    measured = {
        "command": f"export KLM_SERVE=0 KLM_CACHE_DIR={shlex.quote(str(cache))}; {shlex.join(serve)} & (until it "
        f"listens); then {runs}× (run-1, run-2, …): {shlex.join(benches[0])}; then SIGTERM to the server",
        "runs": [],
    }
    log = folder / "serve.log"
    with open(log, "w") as output:
        server = subprocess.Popen(
            serve, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, env=environment
        )
    try:
        wait_listening(server, klm_socket_path(environment), log, SERVER_START_TIMEOUT_S)
        for command, run_folder in zip(benches, run_folders):
            measured["runs"].append(served_run(command, environment, run_folder, log))
    except KlmError as error:
        measured["error"] = str(error)
    finally:
        stop_server(server)
    return measured


def klm_socket_path(environment: dict) -> Path:
    """Where a ``klm serve`` of the klm side's code and ``environment`` listens (``socket_path``), asked of a fresh
    process started as the klm side's are: from the working folder, which may hold another copy of the suite than the
    one this script imports, and so another ``server_key``."""
    asked = subprocess.run(
        [
            sys.executable,
            "-c",
            "from knowledge_lm.sweep.serve import server_key, socket_path as p; print(p(server_key()))",
        ],
        capture_output=True,
        text=True,
        env=environment,
    )
    if asked.returncode != 0:
        fail(f"cannot import knowledge_lm here: {last_line(asked.stderr)}")
    return Path(asked.stdout.strip())


def wait_listening(server: subprocess.Popen, path: Path, log: Path, timeout_s: float):
    """Return once ``server`` (a ``klm serve``, its output in ``log``) listens at ``path``; a KlmError where it exits
    first or ``timeout_s`` seconds pass."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if server.poll() is not None:
            last = last_line(log.read_text())
            raise KlmError(f"klm serve exited {server.returncode} before it listened: {last}")
        if time.monotonic() > deadline:
            raise KlmError(f"klm serve did not listen at {path} within {timeout_s:g} s (its output: {log})")
        time.sleep(0.2)


def served_run(command: list[str], environment: dict, folder: Path, server_log: Path) -> dict:
    """One ``klm bench`` (``command``, its output in ``folder``) for the server whose output is ``server_log``: its
    start-up and its parts ``[name, seconds]`` as it prints them (counted from the start of the ``klm`` that handed
    it over), its process wall, and ``served``: whether the server forked both it and its worker (the server's line
    for each)."""
    folder.mkdir(parents=True)
    log = folder / "klm.log"
    started = time.perf_counter()
    with open(log, "w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=environment)
        code = process.wait()
    wall = time.perf_counter() - started
    found = read_outside_cells_line(log.read_text())
    if code != 0 or found is None:
        last = last_line(log.read_text())
        raise KlmError(f"klm bench for klm serve exited {code}: {last}")
    forked = re.search(rf"forked pid (\d+) for pid {process.pid}: knowledge_lm.cli bench", server_log.read_text())
    worker = forked and f"for pid {forked.group(1)}: knowledge_lm.sweep.worker" in server_log.read_text()
    startup, parts = found
    # The parts as pairs, in the order the runner went through them (a record's mappings are stored sorted).
    return {
        "startup_s": startup,
        "parts": list(parts.items()),
        "process_wall_s": round(wall, 2),
        "served": bool(worker),
    }


def stop_server(server: subprocess.Popen):
    """End ``server`` (a ``klm serve``) by SIGTERM, as it ends by itself: its children killed, its socket removed."""
    server.terminate()
    try:
        server.wait(60)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backbone", default="minilm", help="minilm, tiny, or a local model directory")
    parser.add_argument("--data-dir", default=os.environ.get("DATA_DIR") or None)
    parser.add_argument("--jobs", type=int, default=1, help="cells at once on each side (klm bench --jobs)")
    parser.add_argument("--max-steps", type=int, default=0, help="cap every cell's steps (a smoke run); 0: none")
    parser.add_argument("--no-cell", action="store_true", help="skip the single RTE cell")
    parser.add_argument(
        "--repeats", type=int, default=1, help="the single cell this many times, the sides alternating (median, range)"
    )
    parser.add_argument(
        "--long-cell",
        action="store_true",
        help="also SST-2 100 %% seed 1 through klm alone, last, with the grid's tokenization cache",
    )
    parser.add_argument("--no-grid", action="store_true", help="skip the grid")
    parser.add_argument(
        "--grid-sides", choices=("both", "klm"), default="both", help="klm: the grid through klm bench alone"
    )
    parser.add_argument(
        "--klm-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a training setting of the klm side (klm bench --set), e.g. compile=true; repeatable",
    )
    parser.add_argument(
        "--klm-no-mps", action="store_true", help="the klm side without an MPS daemon (klm bench --no-mps)"
    )
    parser.add_argument("--grid-tasks", help="comma-separated (default: glue.yaml's five)")
    parser.add_argument("--grid-fractions", help="e.g. 0.01,0.1,1 (default: glue.yaml's)")
    parser.add_argument("--grid-seeds", help="e.g. 1,2,3 (default: glue.yaml's)")
    parser.add_argument(
        "--served-startup",
        type=int,
        default=0,
        metavar="N",
        help="last, N one-cell klm bench runs handed to a klm serve started for them (their start-up); 0: none",
    )
    parser.add_argument("--results-dir", default="results", type=Path)
    parser.add_argument("--work-dir", type=Path, help="keep the exported splits and both sides' outputs here")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.max_steps < 0 or args.repeats < 1 or args.served_startup < 0:
        fail("--jobs and --repeats must be ≥ 1, --max-steps and --served-startup ≥ 0")
    malformed = [setting for setting in args.klm_set if "=" not in setting]
    if malformed:
        fail(f"--klm-set {malformed[0]!r}: expected KEY=VALUE, e.g. compile=true")
    parts = [
        part
        for part, skipped in (
            ("cell", args.no_cell),
            ("grid", args.no_grid),
            ("long", not args.long_cell),
            ("served", not args.served_startup),
        )
        if not skipped
    ]
    earlier = [args.work_dir / part for part in parts if args.work_dir and (args.work_dir / part).exists()]
    if earlier:  # klm bench would skip the cells an earlier run left finished there, and time nothing
        fail(f"--work-dir {args.work_dir}: {earlier[0]} holds an earlier run's outputs; give an empty or new folder")
    served_socket = klm_socket_path(dict(os.environ))
    if args.served_startup and served_socket.exists():
        fail(
            f"--served-startup: a klm serve of this code and environment listens already ({served_socket}), and "
            "every klm run here would go to it; stop it, or leave out --served-startup"
        )
    check_trainer()
    transformers_logging.disable_progress_bar()
    try:
        sweep = load_sweep(GLUE_CONFIG)
        tasks = args.grid_tasks.split(",") if args.grid_tasks else sweep.tasks
        fractions = parse_fractions(args.grid_fractions) if args.grid_fractions else sweep.fractions
        seeds = parse_seeds(args.grid_seeds) if args.grid_seeds else sweep.seeds
        unknown = [task for task in tasks if task not in sweep.tasks]
        if unknown:
            fail(f"--grid-tasks {','.join(unknown)}: not among glue.yaml's {','.join(sweep.tasks)}")
        overrides = {"max_steps": args.max_steps} if args.max_steps else {}
        with tempfile.TemporaryDirectory(prefix="klm-peer-") as temporary:
            folder = args.work_dir or Path(temporary)
            backbone_dir = trainer_backbone(args.backbone, folder)
            record = {
                "schema": 1,
                "kind": "peer",
                "device": device_name(),
                "backbone": args.backbone,
                "precision": resolve_precision(),
                "jobs": args.jobs,
                "max_steps": args.max_steps or None,
                "klm_settings": dict(setting.split("=", 1) for setting in args.klm_set),
                "command": " ".join(["python", "benchmarks/peer_speed.py", *(sys.argv[1:] if argv is None else argv)]),
                # The klm side handed to a warm `klm serve` (its imports done before the clock starts)?
                "klm_served": served_socket.exists(),
            }
            if not args.no_cell:
                task, fraction, seed = SINGLE_CELL
                repeats = [
                    measure(args, sweep, [task], [fraction], [seed], overrides, backbone_dir, folder / "cell" / str(i))
                    for i in range(args.repeats)
                ]
                record["cell"] = repeats[0]
                if args.repeats > 1:
                    record["cell_repeats"] = repeats
            if not args.no_grid:
                record["grid"] = measure(
                    args,
                    sweep,
                    tasks,
                    fractions,
                    seeds,
                    overrides,
                    backbone_dir,
                    folder / "grid",
                    trainer=args.grid_sides == "both",
                )
            if args.long_cell:
                task, fraction, seed = LONG_CELL
                grid_cache = folder / "grid" / "klm-cache"
                record["long_cell"] = measure(
                    args,
                    sweep,
                    [task],
                    [fraction],
                    [seed],
                    overrides,
                    backbone_dir,
                    folder / "long",
                    trainer=False,
                    cache=grid_cache if grid_cache.is_dir() else None,
                )
                record["long_cell"]["reference"] = stored_reference(args.results_dir, args.backbone, LONG_CELL)
            if args.served_startup:
                record["served_startup"] = served_startup(args, args.served_startup, folder / "served")
    except KlmError as error:
        fail(str(error))
    record.update(measured_now())
    path = speed_record_path(args.results_dir, record)
    write_json_atomic(path, record)
    print("\n".join(render_peer([record])))
    print(f"wrote {path}")
    error = record.get("served_startup", {}).get("error")
    if error:  # the parts before it are kept in the record
        fail(f"--served-startup: {error}")


if __name__ == "__main__":
    main()
