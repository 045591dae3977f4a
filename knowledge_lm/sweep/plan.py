"""A sweep's plan, before any cell runs: its cells (``sweep_cells``, a shard of them), each one's state in the
stores and the key its identity gives it (``planned_cells``), those to run (``sort_out_sweep``), and how long they
should take from the wall times stored (``estimated_seconds``, ``plan_line``)."""

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import DATASETS
from knowledge_lm.core.results import (
    FAILURE_FILE,
    LAST_CHECKPOINT,
    BadResult,
    Cell,
    predictions_path,
    read_result,
    result_files,
    set_aside,
)
from knowledge_lm.run.claims import describe, is_stale, read_claim
from knowledge_lm.run.config import Sweep
from knowledge_lm.run.identity import PlannedCell, identify
from knowledge_lm.sweep.inputs import check_sweep
from knowledge_lm.sweep.submit import (
    LIVE_STATES,
    QUEUED_FILE,
    queue_states,
)

console = Console(stderr=True)


def sweep_cells(sweep: Sweep) -> list[Cell]:
    return [
        Cell(method, sweep.dataset, task, fraction, seed, sweep.backbone_for(method), variant)
        for variant in sweep.variants
        for method in sweep.methods
        for task in sweep.tasks
        for fraction in sweep.fractions
        for seed in sweep.seeds_for(fraction)
    ]


def parse_shard(text: str) -> tuple[int, int]:
    """``--shard K/N``: ``(K, N)`` with 1 ≤ K ≤ N, else a one-line error."""
    k, _, n = str(text).partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise KlmError(f"--shard {text!r}: expected K/N with 1 ≤ K ≤ N, e.g. 1/4")
    return int(k), int(n)


def shard_keys(cells: list[Cell], shard: tuple[int, int]) -> set[str]:
    """The keys of shard K of N: of the cells' distinct keys in sorted order, every N-th from the K-th (indices
    K-1, K-1+N, ...). It depends on the cells alone, not on what is done, so every node agrees on it, and each
    shard gets a similar mix of methods, tasks and seeds."""
    k, n = shard
    return {key for index, key in enumerate(sorted({cell.key for cell in cells})) if index % n == k - 1}


def cell_status(cell: Cell, results_dir: Path, runs_dir: Path) -> tuple[str, str]:
    """``(state, detail)``: done; corrupt or misfiled (a result file ``read_result`` refuses; detail: why); running
    (claimed by a live process; detail: which); failed (detail: its error); queued (a SLURM job waiting to start;
    detail: its id); partial (a checkpoint to resume from); or missing."""
    path = cell.stored_result_path(results_dir)
    if path.is_file():
        try:
            read_result(path, results_dir)
            return "done", ""
        except BadResult as error:
            return error.kind, str(error)
    run_dir = cell.run_dir(runs_dir)
    claim = read_claim(run_dir)
    if claim is not None and not is_stale(claim):
        return "running", describe(claim)
    queued = queued_job(run_dir)
    if queued:
        return "queued", f"job {queued}"
    if (run_dir / FAILURE_FILE).is_file():
        return "failed", failure_message(cell, runs_dir)
    if (run_dir / LAST_CHECKPOINT).is_file():
        return "partial", ""
    return "missing", ""


def queued_job(run_dir: Path) -> str:
    """The id of the SLURM job submitted for the cell of ``run_dir`` and waiting in the queue (``klm bench
    --executor slurm`` marks it), or ""; a mark whose job the queue no longer holds (cancelled) is no job."""
    try:
        job = json.loads((run_dir / QUEUED_FILE).read_text())["job"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    states = queue_states()
    return job if states is None or states.get(job) in LIVE_STATES else ""


def planned_cells(
    sweep: Sweep, overrides: dict, results_dir: Path, only=None, data_hashes: dict | None = None
) -> list[PlannedCell]:
    """The sweep's cells (of ``only``'s keys, as the sweep names them: a shard's) under the keys a run takes them
    (``knowledge_lm.run.identity.identify``: a stored namesake trained otherwise makes a cell of its own);
    ``data_hashes``: (task, variant) → split → sha256 of the records the run would read, where read."""
    return [
        identify(cell, sweep, overrides, results_dir, (data_hashes or {}).get((cell.task, cell.variant)))
        for cell in sweep_cells(sweep)
        if only is None or cell.key in only
    ]


def unstored_keys(sweep: Sweep, results_dir: Path, only=None) -> set[str]:
    """The keys of the sweep's cells (of ``only``'s keys, where given) with no result stored under them: cells whose
    plan needs no identity (``identify``), so it loads no method or dataset module (torch)."""
    return {
        cell.key
        for cell in sweep_cells(sweep)
        if (only is None or cell.key in only) and not cell.stored_result_path(results_dir).is_file()
    }


def cells_sure_to_run(sweep: Sweep, results_dir: Path, runs_dir: Path, rerun_without_predictions=False, only=None):
    """How many of the sweep's cells run whatever the stored cells' identities say, counted before those are read
    (``sort_out_sweep``'s ``todo`` holds at least as many): those with no stored result that ``runs`` (none held by
    another live process), and the stored ones named for a re-run."""
    unstored = unstored_keys(sweep, results_dir, only)
    stored = [cell for cell in sweep_cells(sweep) if (only is None or cell.key in only) and cell.key not in unstored]
    fresh = plan_sweep(sweep, results_dir, runs_dir, only=unstored)
    reruns = rerun_keys(stored, results_dir, rerun_without_predictions)
    return sum(will_run for _, _, will_run in fresh) + len(reruns)


def rerun_keys(cells: list[Cell], results_dir: Path, rerun_without_predictions: bool) -> set[str]:
    """The keys of ``cells`` finished that run again: with ``rerun_without_predictions``, those that kept no
    predictions."""
    if not rerun_without_predictions:
        return set()
    return {
        cell.key
        for cell in cells
        if cell.stored_result_path(results_dir).is_file()
        and not predictions_path(cell.stored_result_path(results_dir)).is_file()
    }


def runs(state: str, rerun: bool, retry_failed: bool = True) -> bool:
    """Whether ``run_sweep`` runs a cell in ``state`` (``cell_status``'s): every one not done and not running
    elsewhere (a failed one only with ``retry_failed``), and a done one named for a re-run."""
    return rerun or (state not in ("done", "running") and (retry_failed or state != "failed"))


def plan_sweep(
    sweep: Sweep,
    results_dir: Path,
    runs_dir: Path,
    rerun_without_predictions: bool = False,
    only=None,
    overrides: dict | None = None,
) -> list[tuple[PlannedCell, str, bool]]:
    """What ``run_sweep`` would do, touching nothing and reading no data: each cell (of ``only``'s keys, where
    given) as the run takes it (``planned_cells``), with its state (``cell_status``'s) and whether it would run."""
    planned = planned_cells(sweep, overrides or {}, results_dir, only)
    reruns = rerun_keys([p.cell for p in planned], results_dir, rerun_without_predictions)
    states = [cell_status(p.cell, results_dir, runs_dir)[0] for p in planned]
    return [(p, state, runs(state, p.cell.key in reruns)) for p, state in zip(planned, states)]


def renamed_line(planned: list[PlannedCell]) -> str | None:
    """One line on the cells that run under a variant of their own because their stored namesakes were trained
    otherwise, naming how; None where there are none."""
    renamed = [p for p in planned if p.found]
    if not renamed:
        return None
    how = sorted({", ".join(str(difference) for difference in p.found) for p in renamed})
    variants = sorted({p.cell.variant for p in renamed})
    return (
        f"{len(renamed)} of them differ from the stored cells of their names ({'; '.join(how)}): they are cells of "
        f"their own, variant {', '.join(variants)}, stored beside those"
    )


def wall_time_key(cell: dict) -> tuple:
    """What cells share a wall time estimate by: dataset, task, method and train fraction."""
    return cell["dataset"], cell["task"], cell["method"], round(float(cell["fraction"]), 6)


def estimate_folders(cells) -> set[str]:
    """The store's folders whose results can estimate ``cells``' wall times (``estimated_seconds``: those of the
    same ``wall_time_key``), one per dataset, task and method: ``glue/rte/baseline``."""
    return {f"{cell.dataset}/{cell.task}/{cell.method}" for cell in cells}


def stored_wall_times(results_dir: Path, folders: set[str]) -> dict[tuple, dict[str, dict[str, list[float]]]]:
    """The wall times (``wall_time_s``) of the store's finished cells in ``folders`` (``estimate_folders``: the
    estimates of a sweep's cells read no other results) by ``wall_time_key``, then backbone label, then variant."""
    times = {}
    for _, result in result_files(results_dir, folders) if folders and Path(results_dir).is_dir() else ():
        if isinstance(result["wall_time_s"], (int, float)) and not isinstance(result["wall_time_s"], bool):
            by_backbone = times.setdefault(wall_time_key(result["cell"]), {})
            by_variant = by_backbone.setdefault(result["cell"]["backbone"], {})
            by_variant.setdefault(result["cell"].get("variant", ""), []).append(float(result["wall_time_s"]))
    return times


def nearest_variants(variant: str, stored: dict[str, list[float]]) -> list[float]:
    """The stored wall times most like ``variant``'s: its own; else those of the variant its name extends and of
    that variant's other extensions (``t20k-relations-permuted``: ``t20k``, ``t20k-zeroed``, ..., the same data size);
    else every variant's."""
    if stored.get(variant):
        return stored[variant]
    world = variant.split("-")[0]
    if variant != world and world in stored:
        alike = [seconds for name, times in stored.items() if name.split("-")[0] == world for seconds in times]
        if alike:
            return alike
    return [seconds for times in stored.values() for seconds in times]


def estimated_seconds(
    cell: Cell, wall_times: dict[tuple, dict[str, dict[str, list[float]]]]
) -> tuple[float, bool] | None:
    """A cell's expected wall time and whether it is of its own backbone: the median of the stored cells of its
    ``wall_time_key`` on its backbone, else on any backbone (``False``), of the variants nearest its own
    (``nearest_variants``); None where none is stored."""
    by_backbone = wall_times.get(wall_time_key(cell.__dict__), {})
    own = nearest_variants(cell.variant, by_backbone.get(cell.backbone_label, {}))
    if own:
        return statistics.median(own), True
    merged = {}
    for by_variant in by_backbone.values():
        for name, times in by_variant.items():
            merged.setdefault(name, []).extend(times)
    others = nearest_variants(cell.variant, merged)
    return (statistics.median(others), False) if others else None


def cell_state(cell: Cell, results_dir: Path, runs_dir: Path) -> str:
    return cell_status(cell, results_dir, runs_dir)[0]


def failure_message(cell: Cell, runs_dir: Path) -> str:
    path = cell.run_dir(runs_dir) / FAILURE_FILE
    try:
        return json.loads(path.read_text())["error"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""


@dataclass
class SweepRun:
    """A sweep's cells sorted out before any runs (``sort_out_sweep``): those to run (longest first, once
    ``check_and_prepare`` has read the train sizes), its re-runs, counts and the cells other processes run."""

    sweep: Sweep
    cells: list[Cell]
    todo: list[Cell]
    reruns: set[str]
    counts: dict[str, int]
    elsewhere: dict[str, str]
    devices_per_cell: int
    train_sizes: dict[str, int] = field(default_factory=dict)
    renamed: str | None = None  # renamed_line of its cells
    read: dict = field(default_factory=dict)  # the splits read while sorting out (``read_task_data``), until checked

    def length(self, cell: Cell) -> float:
        """How long ``cell`` runs, relatively: its train examples, which its steps follow."""
        return cell.fraction * self.train_sizes.get(cell.task, 0)


def sort_out_sweep(
    sweep: Sweep,
    overrides: dict,
    *,
    results_dir,
    runs_dir,
    data_dir=None,
    retry_failed: bool = True,
    rerun_without_predictions: bool = False,
    only: set[str] | None = None,
) -> SweepRun:
    """A sweep's cells sorted out by their state: each under the key its identity gives (``planned_cells``, the
    records it would read compared too: ``stored_data_hashes``), bad results set aside, those to run chosen
    (``runs``)."""
    check_sweep(sweep, overrides)
    devices_per_cell = sweep.devices_per_cell(overrides)
    read = {}
    hashes = stored_data_hashes(sweep, results_dir, data_dir, only, read)
    planned = planned_cells(sweep, overrides, results_dir, only, hashes)
    cells = [p.cell for p in planned]
    reruns = rerun_keys(cells, results_dir, rerun_without_predictions)
    states = {cell.key: cell_status(cell, results_dir, runs_dir) for cell in cells}
    elsewhere = {key: detail for key, (state, detail) in states.items() if state == "running"}
    for cell in cells:
        if states[cell.key][0] in ("corrupt", "misfiled"):
            moved = set_aside(cell.stored_result_path(results_dir))
            console.print(f"[yellow]{states[cell.key][1]}; set aside as {moved[0].name}, the cell runs again[/]")
    todo = [c for c in cells if runs(states[c.key][0], c.key in reruns, retry_failed)]
    counts = {"done_before": len(cells) - len(todo) - len(elsewhere), "finished": 0, "failed": 0, "elsewhere": 0}
    renamed = renamed_line(planned)
    return SweepRun(sweep, cells, todo, reruns, counts, elsewhere, devices_per_cell, renamed=renamed, read=read)


def data_key(task: str, options: dict) -> tuple[str, str]:
    """What a task's records depend on: the task and its dataset options but ``knowledge`` (which changes none)."""
    return task, json.dumps({k: v for k, v in options.items() if k != "knowledge"}, sort_keys=True, default=str)


def read_task_data(sweep: Sweep, task: str, options: dict, data_dir, read: dict) -> dict[str, list[dict]]:
    """``task``'s labelled splits under the dataset ``options``, read once into ``read`` (``data_key`` → splits)
    however often a sweep's checks ask for them."""
    key = data_key(task, options)
    if key not in read:
        options = {k: v for k, v in options.items() if k != "knowledge"}
        read[key] = DATASETS.get(sweep.dataset)(task=task, data_dir=data_dir, **options).read_labelled()
    return read[key]


def stored_data_hashes(
    sweep: Sweep, results_dir, data_dir, only=None, read: dict | None = None
) -> dict[tuple[str, str], dict[str, str]]:
    """(task, variant) → split → the sha256 of the records its cells would read now, for the tasks and variants
    with a stored result to compare them with (read once per distinct dataset options, into ``read``:
    ``read_task_data``). Data that cannot be read is said in one line and left out: those cells are then compared
    by their settings alone."""
    wanted = {
        (cell.task, cell.variant)
        for cell in sweep_cells(sweep)
        if (only is None or cell.key in only) and cell.stored_result_path(results_dir).is_file()
    }
    if not wanted:
        return {}
    from knowledge_lm.run.provenance import records_sha256  # torch: loaded where a stored cell is compared

    read = {} if read is None else read
    hashes, by_options = {}, {}
    for task, variant in sorted(wanted):
        options = sweep.variant_options(variant)
        key = data_key(task, options)
        if key not in by_options:
            try:
                splits = read_task_data(sweep, task, options, data_dir, read)
                by_options[key] = {split: records_sha256(rows) for split, rows in splits.items()}
            except KlmError as error:
                console.print(f"[yellow]{sweep.dataset}/{task}: data not read ({error}); stored cells compared by "
                              "their settings alone[/]")  # fmt: skip
                by_options[key] = None
        if by_options[key] is not None:
            hashes[(task, variant)] = by_options[key]
    return hashes


def plan_line(name: str, cells, todo, done: int, elsewhere: dict, results_dir, jobs: int) -> str:
    """The plan of a sweep, printed before anything is prepared: its cells, those already done, those to run and
    running elsewhere, and the expected wall time of those to run (``estimated_seconds``, spread over ``jobs``)."""
    line = f"[bold]{name}[/]: {len(cells)} cells, {done} already done, {len(todo)} to run" + (
        f", {len(elsewhere)} running elsewhere" if elsewhere else ""
    )
    if not todo:
        return line
    wall_times = stored_wall_times(results_dir, estimate_folders(todo))
    estimates = [estimated_seconds(cell, wall_times) for cell in todo]
    known = [found[0] for found in estimates if found is not None]
    if known:
        line += f"; estimated {duration_text(sum(known) / jobs)}" + (
            f" for {len(known)} of them" if len(known) < len(todo) else ""
        )
    else:
        line += "; time unknown (no stored cell of their method, task and fraction)"
    return line


def duration_text(seconds: float) -> str:
    """Seconds as 45s, 3m 20s or 2h 05m."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
