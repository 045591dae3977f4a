"""The sweep runner: cells run by a worker process per slot (one that imports once and runs cells back to back) or
each in its own process, finished cells skipped, crashed ones resumed, cells claimed by another live process (another
runner, here or on another machine sharing the directories) left to it."""

import functools
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from knowledge_lm.core.backbones import load_tokenizer
from knowledge_lm.core.caches import NOTICES_ENV, take_notices
from knowledge_lm.core.errors import KlmError, error_line
from knowledge_lm.core.registry import DATASETS, METHODS
from knowledge_lm.core.results import (
    FAILURE_FILE,
    Cell,
    restore,
    supersede,
    write_failure,
    write_json_atomic,
)
from knowledge_lm.knowledge.coverage import coverage_line
from knowledge_lm.knowledge.prepare import KnowledgeConfig, prepare
from knowledge_lm.run.claims import CLAIMED_EXIT, INTERRUPTED_EXIT, is_stale, read_claim
from knowledge_lm.run.config import Sweep
from knowledge_lm.run.spec import CellSpec
from knowledge_lm.sweep.inputs import check_backbone_ready, check_dataset_options, check_train_sizes
from knowledge_lm.sweep.plan import (
    SweepRun,
    cell_status,
    cells_sure_to_run,
    duration_text,
    failure_message,
    plan_line,
    read_task_data,
    sort_out_sweep,
)
from knowledge_lm.sweep.serve import spawn
from knowledge_lm.sweep.startup import phase_ended, record_cells
from knowledge_lm.sweep.submit import (
    LIVE_STATES,
    QUEUED_FILE,
    accounted_states,
    array_line,
    cancel_hint,
    ended_reason,
    job_error_line,
    job_log,
    queue_states,
    run_command,
)

console = Console(stderr=True)
# Ctrl-C: how long the runner waits for its running cells to save their checkpoints, and after how long it passes
# the interrupt on to those that have not stopped (a SIGINT sent to the runner alone, not to its process group).
INTERRUPT_WAIT_S = 120.0
INTERRUPT_RELAY_S = 5.0
# The lines of a cell's log that its failed.json keeps where the cell could not record its error itself.
LOG_TAIL_LINES = 30


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a sweep: its running cells saved their checkpoints; ``resumable`` of them resume next time."""

    def __init__(self, resumable: int):
        super().__init__(resumable)
        self.resumable = resumable


def cell_spec(
    cell: Cell,
    sweep: Sweep,
    *,
    overrides: dict,
    data_dir,
    results_dir,
    runs_dir,
    progress: bool,
    parent_pid: int | None = -1,
) -> CellSpec:
    """What a cell's process (``knowledge_lm.run.cell``) or a worker (``knowledge_lm.sweep.worker``) runs the cell
    from; a cell process ends with ``parent_pid`` (default: this runner; None: a scheduler's job, whose own process
    is its parent, so it does not watch one)."""
    return CellSpec(
        cell=cell,
        train=sweep.train_config(cell.task, overrides, cell.variant),
        data_dir=str(data_dir) if data_dir else None,
        results_dir=str(results_dir),
        runs_dir=str(runs_dir),
        dataset_options=sweep.variant_options(cell.variant),
        progress=progress,
        # the cell process ends with this runner (knowledge_lm.run.cell.die_with_parent)
        parent_pid=os.getpid() if parent_pid == -1 else parent_pid,
    )


def spec_command(spec: CellSpec) -> list[str]:
    """The command of a cell's own process."""
    return [sys.executable, "-m", "knowledge_lm.run.cell", spec.to_json()]


def visible_gpus() -> list[str]:
    """The GPUs cells may use: ``CUDA_VISIBLE_DEVICES`` where set, else every device ``nvidia-smi`` lists
    (asked without initialising CUDA in this process, which only schedules)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [gpu.strip() for gpu in listed.split(",") if gpu.strip() and gpu.strip() != "-1"]
    return list(host_gpus())


@functools.cache
def host_gpus() -> tuple[str, ...]:
    """Every GPU ``nvidia-smi`` lists, asked once a process: a run asks before each sweep, and MPS before it, each
    time before its first cell."""
    try:
        found = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(line.strip() for line in found.stdout.splitlines() if line.strip()) if found.returncode == 0 else ()


def gpu_groups(gpus: list[str], devices_per_cell: int) -> list[tuple[str, ...]]:
    """Disjoint groups of ``devices_per_cell`` GPUs: the units a cell is placed on (one cell's DDP ranks)."""
    return [tuple(gpus[i : i + devices_per_cell]) for i in range(0, len(gpus) - devices_per_cell + 1, devices_per_cell)]


def ended_how(returncode: int) -> str:
    """A process's exit status in words: ``exit code N`` or ``signal NAME`` (killed: out of memory, a crash)."""
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


class CellProcesses:
    """A slot that runs each cell in a process of its own (``knowledge_lm.run.cell``), its output in the cell's
    ``log.txt`` or, with ``progress``, on this terminal."""

    def __init__(self, env: dict, progress: bool):
        self.env, self.progress = env, progress
        self.process = self.log = None

    def start(self, spec: CellSpec):
        command = spec_command(spec)
        if self.progress:
            self.process = subprocess.Popen(command, env=self.env)
            return
        self.log = open(spec.cell.run_dir(spec.runs_dir) / "log.txt", "a")
        self.process = subprocess.Popen(command, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)

    def ended(self) -> tuple[int, str] | None:
        """None while the cell runs; then its process's exit status, and how it ended in words."""
        if self.process.poll() is None:
            return None
        if self.log is not None:
            self.log.close()
            self.log = None
        return self.process.returncode, f"its process ended with {ended_how(self.process.returncode)}"

    def interrupt(self):
        """Pass Ctrl-C on to the cell's process."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)

    def close(self):
        pass


class Worker:
    """A slot's worker process (``knowledge_lm.sweep.worker``): started for the slot's first cell, and again for the
    next cell after it died; its own output (not its cells') in ``log``, or with ``progress`` on this terminal."""

    def __init__(self, env: dict, progress: bool, log: Path):
        self.env, self.progress, self.log_path = env, progress, log
        self.process = self.replies = None
        self.error = {}  # the last cell's reply: a failed cell's error and traceback
        self.began: list[float] = []  # when the worker began each of its cells (its replies' "began"), in order

    def launch(self):
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a") as log:
            arguments = [str(os.getpid())]
            # Forked, already imported, by a `klm serve` of this code and environment where one runs.
            stderr = None if self.progress else log.fileno()
            self.process = spawn("knowledge_lm.sweep.worker", arguments, self.env, stderr)
            if self.process is None:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "knowledge_lm.sweep.worker", *arguments],
                    env=self.env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    text=True,
                )
        self.replies = queue.Queue()
        threading.Thread(target=self.read_replies, args=(self.process, self.replies), daemon=True).start()

    @staticmethod
    def read_replies(process: subprocess.Popen, replies: queue.Queue):
        for line in process.stdout:
            replies.put(json.loads(line))
        replies.put(None)  # the worker ended

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, spec: CellSpec):
        if not self.alive():
            self.launch()
        try:
            self.process.stdin.write(spec.to_json() + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:  # it died meanwhile: ``ended`` says so
            pass

    def ended(self) -> tuple[int, str] | None:
        """None while the cell runs; then its exit status (as its own process's would be), and how it ended in
        words; a worker that died with the cell is started again for the next."""
        try:
            reply = self.replies.get_nowait()
        except queue.Empty:
            return None
        if reply is not None:
            self.error = reply
            if "began" in reply:
                self.began.append(reply["began"])
            if reply.get("worker_ends"):  # ended before the slot's next cell, which then gets a new worker
                self.stop_waiting()
            return reply["status"], reply.get("error") or f"exit code {reply['status']}"
        returncode = self.stop_waiting()
        return returncode or 1, f"its worker (pid {self.process.pid}) ended with {ended_how(returncode)}"

    def stop_waiting(self) -> int:
        """The exit status of the worker, which is ending: waited for, and killed where it has not ended in 30 s."""
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # its output ended, the process did not
            self.process.kill()
            return self.process.wait()

    def interrupt(self):
        """Pass Ctrl-C on to the worker."""
        if self.alive():
            self.process.send_signal(signal.SIGINT)

    def close(self):
        """End the worker. Killed: an idle one holds no cell (and one still importing, where the checks before the
        first cell failed, need not finish), and one still running a cell (this runner stops early) leaves it to
        resume."""
        if not self.alive():
            return
        self.process.kill()
        self.process.wait()


def record_process_failure(cell: Cell, runs_dir: Path, how: str, trace: str = ""):
    """Record in ``failed.json`` a cell whose process ended without recording why (killed, crashed, its disk full),
    unless another live process holds the cell now: ``how`` (its worker's reply's error, or how its process ended)
    and ``trace`` (the reply's traceback), else the end of the cell's log. Where even that cannot be written, it is
    said on the console."""
    run_dir = cell.run_dir(runs_dir)
    claim = read_claim(run_dir)
    if (run_dir / FAILURE_FILE).is_file() or (claim is not None and not is_stale(claim)):
        return
    try:
        if not trace:
            lines = (run_dir / "log.txt").read_text(errors="replace").splitlines()
            trace = "\n".join(lines[-LOG_TAIL_LINES:])
    except OSError:
        pass
    try:
        write_failure(run_dir, how, trace)
    except OSError as error:
        console.print(f"{run_dir / FAILURE_FILE} not written ({error_line(error)})", markup=False, style="red")


def check_data(sweep: Sweep, data_dir, read: dict | None = None) -> dict[str, int]:
    """Read every task's splits once before any cell starts (``read``: those read already, ``read_task_data``):
    bad data, and a fraction that leaves too few train examples (``check_train_sizes``), fail here, with one line.
    Returns each task's train examples."""
    check_dataset_options(sweep, data_dir)
    read = {} if read is None else read
    train_sizes = {
        task: len(read_task_data(sweep, task, sweep.dataset_options, data_dir, read)["train"]) for task in sweep.tasks
    }
    check_train_sizes(sweep, train_sizes)
    return train_sizes


def knowledge_methods(sweep: Sweep) -> list[str]:
    """The sweep's methods that train on prepared knowledge features (imports their modules)."""
    return [method for method in sweep.methods if METHODS.entry(method).needs_knowledge]


def prepare_knowledge(
    sweep: Sweep,
    methods: list[str],
    overrides: dict | None = None,
    *,
    data_dir=None,
    cache_dir=None,
    options: dict | None = None,
    progress: bool = True,
) -> None:
    """The knowledge features of every task and variant of ``sweep``, for the tokenizer of each of ``methods``'
    backbones and the ``max_length`` its cells train with: what ``klm prepare`` computes (``options``: its
    knowledge options over each variant's), and what ``klm bench`` computes first where its cells would miss them.
    Cached: a task prepared before costs a read of its splits. Prints one line per task."""
    configs = {  # every variant's, checked before any is prepared
        variant: KnowledgeConfig.from_dict(
            {**(sweep.variant_options(variant).get("knowledge") or {}), **(options or {})}
        )
        for variant in sweep.variants
    }
    tokenizers = [load_tokenizer(backbone) for backbone in sorted({sweep.backbone_for(m) for m in methods})]
    for variant, config in configs.items():
        variant_options = sweep.variant_options(variant)
        dataset_options = {k: v for k, v in variant_options.items() if k != "knowledge"}
        for tokenizer in tokenizers:
            for task in sweep.tasks:
                started = time.time()
                data = DATASETS.get(sweep.dataset)(
                    task=task,
                    data_dir=data_dir,
                    max_length=sweep.train_config(task, overrides, variant).max_length,
                    cache_dir=cache_dir,
                    **dataset_options,
                )
                manifest = prepare(data, tokenizer, config, data.cache_dir, progress=progress)
                console.print(
                    f"{sweep.dataset}/{task}{f' [{variant}]' if variant else ''}: knowledge features in "
                    f"{time.time() - started:.1f} s (first build {manifest['total_s']:.1f} s); "
                    f"{'gold' if manifest['gold_links'] else 'alias-table'} links"
                )
                for split, stats in manifest["splits"].items():
                    console.print(f"  {split}: {coverage_line(stats.get('coverage'), stats['linked_coverage'])}")


def check_and_prepare(run: SweepRun, overrides: dict, *, data_dir, results_dir, jobs: int) -> None:
    """What every cell of ``run`` to run needs, checked (backbones, data) and prepared (knowledge features) once
    before any starts, its cells sorted longest first, and its plan printed."""
    todo = run.todo
    if todo:
        for backbone in sorted({cell.backbone for cell in todo}):
            check_backbone_ready(backbone)
        run.train_sizes = check_data(run.sweep, data_dir, run.read)
        # The longest cells first: side-by-side jobs end together, and no long cell starts last.
        todo.sort(key=lambda cell: -run.length(cell))
    run.read = {}  # checked: the cells read their data themselves
    console.print(
        plan_line(run.sweep.name, run.cells, todo, run.counts["done_before"], run.elsewhere, results_dir, jobs)
    )
    if run.renamed:
        console.print(run.renamed)
    if todo:
        methods = knowledge_methods(run.sweep)
        if methods:
            prepare_knowledge(run.sweep, methods, overrides, data_dir=data_dir, progress=sys.stderr.isatty())


def import_data_module(sweep: Sweep) -> None:
    """Load the sweep's data module, and with it torch, Lightning and transformers: what its plan and checks need
    once any cell is stored or to run, loaded here so that the start-up's parts (``phase_ended``) show its cost."""
    DATASETS.get(sweep.dataset)
    phase_ended("imports")


def cell_gpu_groups(sweep: Sweep, overrides: dict, gpus: list[str] | None) -> tuple[int, list]:
    """``(devices_per_cell, groups)``: the GPUs a cell of ``sweep`` takes, and ``gpus`` (default: the visible ones)
    in groups of that many; too few GPUs for one cell is an error."""
    devices_per_cell = sweep.devices_per_cell(overrides)
    gpus = visible_gpus() if gpus is None else gpus
    groups = gpu_groups(gpus, devices_per_cell)
    if gpus and not groups:
        raise KlmError(f"a cell wants {devices_per_cell} GPUs (devices) but {len(gpus)} are visible")
    return devices_per_cell, groups


def open_sweep_slots(open_slots: ExitStack, cells: int, *, pool, jobs: int, groups, in_workers: bool, runs_dir):
    """The job slots that run a sweep's ``cells``: the shared ``pool`` where its cells run in workers, else new
    slots closed with ``open_slots``; the workers the sweep will use start now, so that their imports overlap the
    sweep's plan and checks instead of following them."""
    if pool is not None and in_workers:
        slots = pool
    else:
        slots = make_slots(min(jobs, cells), groups, in_workers, cell_progress_bars(jobs), runs_dir)
        for slot in slots:
            open_slots.callback(slot.close)
    for slot in slots[:cells]:  # a shared pool's others stay idle (or unstarted) for a small sweep
        if in_workers and not slot.alive():
            slot.launch()
    return slots


def planned_slots(open_slots: ExitStack, early: list, cells: int, *, pool, jobs: int, **options) -> list:
    """The slots that run a sweep's ``cells``, once its plan knows them: those started ``early`` (before the plan,
    ``open_sweep_slots``) where they are as many as it would start now (so each gets the same share of the cores),
    else new ones, the early ones ended; a shared ``pool`` in any case."""
    if pool is None and len(early) == min(jobs, cells):
        return early
    for slot in early if pool is None else ():
        slot.close()
    return open_sweep_slots(open_slots, cells, pool=pool, jobs=jobs, **options)


def run_sweep(
    sweep: Sweep,
    overrides: dict | None = None,
    *,
    data_dir=None,
    results_dir=Path("results"),
    runs_dir=Path("runs"),
    jobs: int = 1,
    retry_failed: bool = True,
    gpus: list[str] | None = None,
    rerun_without_predictions: bool = False,
    only: set[str] | None = None,
    executor=None,
    isolate_cells: bool = False,
    pool: list["Worker"] | None = None,
) -> dict[str, int]:
    """Run every unfinished cell (of those whose keys are in ``only``, where given: a shard); ``jobs`` cells at a
    time, spread over ``gpus`` (default: the visible ones) in groups of the cells' ``devices`` (DDP within a cell),
    or each as a job of a submitit ``executor`` (``knowledge_lm.sweep.submit``). Each of the ``jobs`` slots runs its
    cells in one worker process (``knowledge_lm.sweep.worker``), started again where a cell took it down; with
    ``isolate_cells``, and for DDP cells, each cell runs in a process of its own. ``pool``: workers shared with the
    other sweeps of one invocation (``worker_pool``), used instead of new ones and left running.
    With ``rerun_without_predictions``, finished cells that kept no predictions (results from before cells kept
    them) run again, and the old result moves to ``results/superseded/`` as the re-run starts (back, if it
    fails). A cell claimed by another live process is left to it, and a bad result file (``read_result``) is set
    aside and its cell run again. Returns counts: ``elsewhere`` the cells another process ran or runs."""
    overrides = overrides or {}
    if jobs < 1:
        raise KlmError(f"jobs {jobs}: expected at least 1 cell at a time")
    devices_per_cell, groups = cell_gpu_groups(sweep, overrides, gpus)
    # A DDP cell starts its ranks from its own process: such cells keep a process each.
    in_workers = executor is None and not isolate_cells and devices_per_cell == 1
    with ExitStack() as open_slots:
        # Bad input leaves nothing behind: the worker logs of a sweep whose checks fail go with their folders.
        new_folders = [folder for folder in (Path(runs_dir), Path(runs_dir) / "workers") if not folder.exists()]
        checked = False
        open_slots.callback(lambda: checked or remove_new_folders(new_folders))
        slot_options = {"pool": pool, "jobs": jobs, "groups": groups, "in_workers": in_workers, "runs_dir": runs_dir}
        # The workers of the cells sure to run start before the plan: their imports overlap the runner's.
        sure = cells_sure_to_run(sweep, results_dir, runs_dir, rerun_without_predictions, only) if in_workers else 0
        early = open_sweep_slots(open_slots, sure, **slot_options) if sure else []
        phase_ended("workers")
        import_data_module(sweep)
        where = {"data_dir": data_dir, "results_dir": results_dir, "runs_dir": runs_dir}
        reruns = {"retry_failed": retry_failed, "rerun_without_predictions": rerun_without_predictions}
        started = sort_out_sweep(sweep, overrides, only=only, **reruns, **where)
        phase_ended("plan")
        slots = planned_slots(open_slots, early, len(started.todo), **slot_options)
        check_and_prepare(started, overrides, data_dir=data_dir, results_dir=results_dir, jobs=jobs)
        phase_ended("data")
        checked = True
        counts, elsewhere = started.counts, started.elsewhere
        if not started.todo:
            counts["elsewhere"] = len(elsewhere)
            report_elsewhere(elsewhere)
            return counts
        if executor is not None:
            return run_on_executor(
                executor, started.todo, sweep, overrides=overrides, reruns=started.reruns, counts=counts, **where
            )
        run_cells(
            slots,
            started.todo,
            sweep,
            overrides=overrides,
            reruns=started.reruns,
            counts=counts,
            elsewhere=elsewhere,
            **where,
        )
    counts["elsewhere"] = len(elsewhere)
    report_elsewhere(elsewhere)
    report_outcome(counts, runs_dir)
    return counts


def run_sweeps_together(
    sweeps: list[Sweep],
    overrides: dict,
    *,
    pool: list["Worker"],
    data_dir,
    results_dir,
    runs_dir,
    jobs: int,
    rerun_without_predictions: bool = False,
    only: set[str] | None = None,
) -> dict[str, int]:
    """Run the cells of several sweeps (a table's configs, one GPU each) as one queue on ``pool``: every sweep is
    checked, planned and prepared first, then their cells run longest first, so no GPU idles while a small sweep
    ends before the next starts. Returns the counts summed over the sweeps."""
    new_folders = [folder for folder in (Path(runs_dir), Path(runs_dir) / "workers") if not folder.exists()]
    try:
        # The workers of the cells sure to run start before the plan: their imports overlap the runner's.
        sure = sum(cells_sure_to_run(sweep, results_dir, runs_dir, rerun_without_predictions, only) for sweep in sweeps)
        for slot in pool[:sure]:
            if not slot.alive():
                slot.launch()
        phase_ended("workers")
        for sweep in sweeps:
            import_data_module(sweep)
        started = [
            sort_out_sweep(
                sweep,
                overrides,
                results_dir=results_dir,
                runs_dir=runs_dir,
                data_dir=data_dir,
                rerun_without_predictions=rerun_without_predictions,
                only=only,
            )
            for sweep in sweeps
        ]
        phase_ended("plan")
        for slot in pool[: sum(len(run.todo) for run in started)]:  # imports overlap the checks
            if not slot.alive():
                slot.launch()
        for run in started:
            check_and_prepare(run, overrides, data_dir=data_dir, results_dir=results_dir, jobs=jobs)
        phase_ended("data")
    except BaseException:
        remove_new_folders(new_folders)
        raise
    ordered = sorted(((cell, run) for run in started for cell in run.todo), key=lambda pair: -pair[1].length(pair[0]))
    counts = {key: sum(run.counts[key] for run in started) for key in ("done_before", "finished", "failed")}
    counts["elsewhere"] = 0
    elsewhere = {key: detail for run in started for key, detail in run.elsewhere.items()}
    if ordered:
        run_cells(
            pool,
            [cell for cell, _ in ordered],
            {cell.key: run.sweep for cell, run in ordered},
            overrides=overrides,
            data_dir=data_dir,
            results_dir=results_dir,
            runs_dir=runs_dir,
            reruns=set().union(*(run.reruns for run in started)),
            counts=counts,
            elsewhere=elsewhere,
        )
    counts["elsewhere"] = len(elsewhere)
    report_elsewhere(elsewhere)
    if ordered:
        report_outcome(counts, runs_dir)
    return counts


def report_outcome(counts: dict, runs_dir) -> None:
    """What a run did, at its end: the cells finished, and each failed cell (``counts``' "failures", taken out of
    it) with its error and log."""
    console.print(f"finished {counts['finished']}, failed {counts['failed']}, elsewhere {counts['elsewhere']}")
    for key, error in counts.pop("failures", {}).items():
        log = Path(runs_dir).resolve() / key / "log.txt"
        pointer = f" (log: {log})" if log.is_file() and str(log) not in error else ""  # a log that is there
        console.print(f"[red]failed: {key}[/]: {error}{pointer}")


def remove_new_folders(folders: list[Path]):
    """Remove ``folders`` (created by this run, outermost first): the last of them with what it holds (the worker
    logs), the others only where that left them empty."""
    if folders:
        shutil.rmtree(folders[-1], ignore_errors=True)
    for folder in reversed(folders[:-1]):
        try:
            folder.rmdir()
        except OSError:
            pass


@contextmanager
def worker_pool(jobs: int, runs_dir, gpus: list[str] | None = None):
    """``jobs`` workers for several sweeps of one invocation (``run_sweep``'s ``pool``), spread over ``gpus`` (default:
    the visible ones) as one sweep spreads its own, ended when the block ends."""
    gpus = visible_gpus() if gpus is None else gpus
    workers = make_slots(jobs, gpu_groups(gpus, 1), True, cell_progress_bars(jobs), runs_dir)
    try:
        yield workers
    finally:
        for worker in workers:
            worker.close()


def cell_progress_bars(jobs: int) -> bool:
    """Whether cells show their own progress bars on this terminal: one cell at a time, on a terminal."""
    return jobs == 1 and sys.stderr.isatty()


def make_slots(
    count: int, groups: list[tuple[str, ...]], in_workers: bool, progress: bool, runs_dir
) -> list["CellProcesses | Worker"]:
    """``count`` job slots spread over the GPU ``groups`` in turn: workers, or (``in_workers`` false) slots that
    start a process per cell."""
    # Cells running side by side share the cores instead of each spinning up a thread per core.
    env = {
        "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // max(count, 1))),
        **os.environ,
        "TOKENIZERS_PARALLELISM": "false",
    }
    slots = []
    for index in range(count):
        group = groups[index % len(groups)] if groups else None
        slot_env = env if group is None else {**env, "CUDA_VISIBLE_DEVICES": ",".join(group)}
        # What its cells set aside or drop (``knowledge_lm.core.caches.notice``), said here when each cell ends.
        slot_env = {**slot_env, NOTICES_ENV: str((Path(runs_dir) / "workers" / f"slot-{index}.notices").resolve())}
        if in_workers:
            slots.append(Worker(slot_env, progress, Path(runs_dir) / "workers" / f"slot-{index}.log"))
        else:
            slots.append(CellProcesses(slot_env, progress))
    return slots


def run_cells(slots, todo, sweep, *, overrides, data_dir, results_dir, runs_dir, reruns, counts, elsewhere):
    """Run ``todo`` on ``slots`` in its order, each taking the next waiting cell when its last one ends (``sweep``:
    the cells' sweep, or each cell's by its key); ``counts`` and ``elsewhere`` are updated in place. Each cell that
    ends is counted on a bar, or, where the console is not a terminal (which shows a bar only at its end), in a
    line of its own (``ended_line``). Ctrl-C: ``SweepInterrupted``, once the running cells have saved their
    checkpoints (``stop_cells``)."""
    show_cell_progress = bool(slots) and slots[0].progress
    running: dict[CellProcesses | Worker, tuple[Cell, dict]] = {}
    waiting, first_started, started_at, ended = list(todo), None, {}, 0
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
        disable=show_cell_progress,
    ) as bar:
        overall = bar.add_task("cells", total=len(todo))
        try:
            while waiting or running:
                outcomes = []
                for slot in [slot for slot in slots if slot not in running]:
                    if not waiting:
                        break
                    cell = waiting.pop(0)
                    started_at[cell.key] = time.time()
                    state, detail = cell_status(cell, results_dir, runs_dir)
                    if cell.key not in reruns and state in ("done", "running"):  # another process took it meanwhile
                        elsewhere[cell.key] = detail or "finished elsewhere"
                        outcomes.append((cell, "elsewhere"))
                    else:
                        spec = cell_spec(
                            cell,
                            sweep[cell.key] if isinstance(sweep, dict) else sweep,
                            overrides=overrides,
                            data_dir=data_dir,
                            results_dir=results_dir,
                            runs_dir=runs_dir,
                            progress=show_cell_progress,
                        )
                        outcomes += start_cell(slot, spec, cell.key in reruns, running, counts)
                        first_started = first_started or time.time()
                time.sleep(0.2)
                outcomes += ended_cells(
                    running, results_dir=results_dir, runs_dir=runs_dir, counts=counts, elsewhere=elsewhere
                )
                for cell, outcome in outcomes:
                    ended += 1
                    bar.advance(overall)
                    if not console.is_terminal:
                        console.print(ended_line(ended, len(todo), outcome, cell, started_at), markup=False)
        except KeyboardInterrupt:
            raise SweepInterrupted(stop_cells(running, results_dir, runs_dir, counts, elsewhere)) from None
    if first_started:
        # A worker still importing when handed its cell began it later: the first start is the earliest one it reports.
        began = [moment for slot in slots for moment in getattr(slot, "began", ()) if moment >= first_started]
        record_cells(min(began, default=first_started), time.time())


def start_cell(slot, spec: CellSpec, rerun: bool, running: dict, counts: dict) -> list[tuple[Cell, str]]:
    """Start ``spec``'s cell on ``slot`` (its finished result superseded first where it is a ``rerun``), added to
    ``running``; where its run directory or log cannot be made (a full disk), it failed at once: ``[(cell,
    "failed")]``, the cause counted in ``counts`` and said."""
    cell = spec.cell
    superseded = supersede(cell.stored_result_path(spec.results_dir), spec.results_dir) if rerun else {}
    try:
        cell.run_dir(spec.runs_dir).mkdir(parents=True, exist_ok=True)
        if spec.progress:
            console.print(f"[cyan]→ {cell.key}[/]")
        slot.start(spec)
    except OSError as error:
        restore(superseded)
        cell_failed(cell, spec.runs_dir, error_line(error), counts)
        return [(cell, "failed")]
    running[slot] = (cell, superseded)
    return []


def ended_line(count: int, total: int, outcome: str, cell: Cell, started_at: dict[str, float]) -> str:
    """A cell that ended, in one plain line: ``[3/9] finished glue/rte/baseline/minilm/f1-s1 in 42s``."""
    return f"[{count}/{total}] {outcome} {cell.key} in {duration_text(time.time() - started_at[cell.key])}"


def ended_cells(running: dict, *, results_dir, runs_dir, counts, elsewhere) -> list[tuple[Cell, str]]:
    """Account (``cell_ended``) for each of the ``running`` slots whose cell has ended, taking it out of ``running``;
    each such cell with how it ended (``cell_ended``'s outcome)."""
    outcomes = []
    for slot in list(running):
        ended = slot.ended()
        if ended is not None:
            started = running.pop(slot)
            outcome = cell_ended(
                slot, started, ended, results_dir=results_dir, runs_dir=runs_dir, counts=counts, elsewhere=elsewhere
            )
            outcomes.append((started[0], outcome))
    return outcomes


def cell_ended(slot, started: tuple[Cell, dict], ended: tuple[int, str], *, results_dir, runs_dir, counts, elsewhere):
    """Account for a cell whose slot reports it ended (``ended``: its exit status and how, in words): its
    notices said, then finished, elsewhere, interrupted (it resumes: nothing recorded) or failed (recorded, said).
    Returns which of these it was."""
    (returncode, how), (cell, superseded) = ended, started
    for line in take_notices(slot.env[NOTICES_ENV]):
        console.print(f"{cell.key}: {line}", markup=False, style="yellow")
    if returncode == 0 and cell.result_path(results_dir).is_file():
        counts["finished"] += 1
        return "finished"
    restore(superseded)
    if returncode == CLAIMED_EXIT:
        elsewhere[cell.key] = cell_status(cell, results_dir, runs_dir)[1] or "finished elsewhere"
        return "elsewhere"
    if returncode == INTERRUPTED_EXIT:
        return "interrupted"
    record_process_failure(cell, runs_dir, how, getattr(slot, "error", {}).get("traceback", ""))
    cell_failed(cell, runs_dir, failure_message(cell, runs_dir) or how, counts)
    return "failed"


def cell_failed(cell: Cell, runs_dir, reason: str, counts: dict):
    """Count a failed cell, its ``reason`` kept for the run's end (``report_outcome``) and said now."""
    counts["failed"] += 1
    counts.setdefault("failures", {})[cell.key] = reason
    console.print(f"[red]✗ {cell.key}[/]: {reason} (log: {cell.run_dir(runs_dir) / 'log.txt'})")


def stop_cells(running: dict, results_dir, runs_dir, counts, elsewhere) -> int:
    """After Ctrl-C: wait (``INTERRUPT_WAIT_S`` at most, a second Ctrl-C ignored) for the ``running`` cells, which
    got the interrupt too, to save their checkpoints and end; pass it on to those still running after
    ``INTERRUPT_RELAY_S``. Returns how many of them will resume (neither finished nor failed meanwhile)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    started, relayed, resumable = time.time(), False, 0
    try:
        while running and time.time() - started < INTERRUPT_WAIT_S:
            if not relayed and time.time() - started > INTERRUPT_RELAY_S:
                for slot in running:
                    slot.interrupt()
                relayed = True
            resumable += sum(
                outcome not in ("finished", "failed")
                for _, outcome in ended_cells(
                    running, results_dir=results_dir, runs_dir=runs_dir, counts=counts, elsewhere=elsewhere
                )
            )
            time.sleep(0.1)
    finally:
        signal.signal(signal.SIGINT, previous)
    return resumable + len(running)  # those still running are killed; they resume from their last checkpoint


def report_elsewhere(elsewhere: dict[str, str]):
    """The cells another process ran or runs, and which (``host:pid``, its heartbeat's age)."""
    for key, detail in elsewhere.items():
        console.print(f"[blue]running elsewhere: {key}[/] ({detail})")


def run_on_executor(executor, todo, sweep, *, overrides, data_dir, results_dir, runs_dir, reruns, counts) -> dict:
    """``todo``'s cells submitted as one job array of a submitit ``executor``, each job the cell's own process
    (paths made absolute: a job may start elsewhere), waited for; ``counts`` completed and returned. Ctrl-C stops
    the waiting only: the jobs keep running (and say how to cancel them)."""
    results_dir, runs_dir = Path(results_dir).resolve(), Path(runs_dir).resolve()
    data_dir = Path(data_dir).resolve() if data_dir else None
    superseded, submitted = {}, {}
    with executor.batch():
        for cell in todo:
            if cell.key in reruns:
                superseded[cell.key] = supersede(cell.stored_result_path(results_dir), results_dir)
            cell.run_dir(runs_dir).mkdir(parents=True, exist_ok=True)
            spec = cell_spec(
                cell,
                sweep,
                overrides=overrides,
                data_dir=data_dir,
                results_dir=results_dir,
                runs_dir=runs_dir,
                progress=False,
                parent_pid=None,
            )
            command = spec_command(spec)
            log = str(cell.run_dir(runs_dir) / "log.txt")
            result = str(cell.result_path(results_dir))
            submitted[cell] = executor.submit(run_command, command, log, {"TOKENIZERS_PARALLELISM": "false"}, result)
    job_ids = [job.job_id for job in submitted.values()]
    for cell, job in submitted.items():
        if cell.run_dir(runs_dir).is_dir():  # else its job ran already and its cell finished (any left goes below)
            write_json_atomic(cell.run_dir(runs_dir) / QUEUED_FILE, {"job": job.job_id})
    console.print(f"submitted {len(submitted)} cells as {array_line(job_ids)} (job files: {executor.folder})")
    started = time.time()
    try:
        for cell, job, outcome in ended_jobs(submitted, watch_queue=getattr(executor, "cluster", "") == "slurm"):
            (cell.run_dir(runs_dir) / QUEUED_FILE).unlink(missing_ok=True)
            try:
                cell.run_dir(runs_dir).rmdir()  # a finished cell's, emptied by its job but for the marker
            except OSError:
                pass
            if outcome == 0 and cell.result_path(results_dir).is_file():
                counts["finished"] += 1
                record_cells(started, time.time())
            elif outcome == CLAIMED_EXIT:
                restore(superseded.get(cell.key, {}))
                counts["elsewhere"] += 1
            else:
                counts["failed"] += 1
                restore(superseded.get(cell.key, {}))
                reason = failure_message(cell, runs_dir) or str(outcome)
                log = cell.run_dir(runs_dir) / "log.txt"
                log = log if log.is_file() else job_log(job)
                reason += f" (log: {log})" if log.is_file() else ""
                counts.setdefault("failures", {})[cell.key] = reason
                console.print(f"[red]✗ {cell.key}[/]: {reason}")
    except KeyboardInterrupt:
        console.print(
            f"stopped waiting: the submitted jobs ({array_line(job_ids)}) keep running and store their results; "
            f"`{cancel_hint(job_ids)}` cancels them, and running this command again picks up what they left"
        )
        raise
    report_outcome(counts, runs_dir)
    return counts


def ended_jobs(submitted: dict, watch_queue: bool, poll_s: float = 2.0, grace_s: float = 6.0):
    """``(cell, job, outcome)`` of each of the ``submitted`` jobs (cell → submitit job) as it ends, under a progress
    bar. ``outcome``: the job's function's return value (task 0's, for a job of several tasks), else why it failed
    (a line). With ``watch_queue`` (SLURM), a job that ended without a result (cancelled, timed out, killed; before
    it started or after) is noticed from the queue's states, with or without accounting; one the queue forgot, from
    the accounting's (``sacct``) where the cluster keeps it; a job neither knows (``grace_s`` after it was last seen
    live) is reported as gone."""
    pending, last_live = dict(submitted), {}
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as bar:
        overall = bar.add_task("jobs", total=len(submitted))
        while pending:
            states = queue_states() if watch_queue else None
            if states is not None:  # the queue's word first: the accounting's lags behind it
                forgotten = [job.job_id for job in pending.values() if job.job_id not in states]
                states = {**accounted_states(forgotten), **states}
            for cell, job in list(pending.items()):
                task = job.task(0) if job.num_tasks > 1 else job  # rank 0 writes the result
                state = (states or {}).get(job.job_id)
                if state in LIVE_STATES:
                    last_live[cell] = time.time()
                if task.paths.result_pickle.exists() or (states is None and job.done()):
                    outcome = task_outcome(task, state)
                    if outcome not in (0, CLAIMED_EXIT) and isinstance(outcome, int):
                        stopped = " (interrupted: a rerun resumes it)" if outcome == INTERRUPTED_EXIT else ""
                        outcome = f"job {job.job_id}{' ' + state if state else ''}: exit code {outcome}{stopped}"
                elif states is not None and state not in LIVE_STATES:
                    if time.time() - last_live.setdefault(cell, time.time()) < grace_s:
                        continue  # its result may be on its way (a shared file system)
                    outcome = ended_reason(job, state)
                else:
                    continue
                del pending[cell]
                bar.advance(overall)
                yield cell, job, outcome
            if pending:
                time.sleep(poll_s)


def task_outcome(task, state: str | None):
    """The return value of a submitit job (``task``) that ended, or a line saying why it failed."""
    try:
        return task.result()
    except Exception as error:  # the scheduler's or submitit's: a job killed, timed out or never started
        lines = str(error).strip().splitlines()
        why = job_error_line(task) or (lines[0] if lines else repr(error))
        return f"job {task.job_id}{' ' + state if state else ''}: {why}"
