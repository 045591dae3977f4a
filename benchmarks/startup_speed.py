"""A ``klm bench``'s start-up: the seconds from its process's start to its first cell's start, in the parts the
runner prints (``knowledge_lm.sweep.startup``: start-up = interpreter, klm's imports and arguments; checks; workers =
MPS, the GPUs listed and the workers started; imports = torch, Lightning and transformers; plan; data; waiting for its
worker = the worker's own imports not yet done when the runner handed it the cell), against the floor: a fresh
interpreter importing torch, Lightning and transformers, which the runner and its worker each pay (at once, since
the workers start before the runner's imports). The bench runs a sweep one of whose cells is stored already and one
is not, so that its checks read the data both for the stored cell's record hashes and for the cell to run.

    python benchmarks/startup_speed.py --data-dir ../shared/data --repeats 3
Prints each repeat's start-up with its parts, the first cell's start by its own clock (its result's end less its
wall time: to the second, and the same for code whose runner prints no parts), and the floor; then their medians and
the ratio start-up / floor (issue 48, item 2). Run from a checkout's root, it measures that checkout's code.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from knowledge_lm.sweep.startup import read_outside_cells_line

FLOOR = [sys.executable, "-c", "import torch, pytorch_lightning, transformers"]
# One seed stored first, then a bench of two: the second's start-up is measured. Two steps a cell: the cells are
# not what is measured.
SWEEP = ["--config", "benchmarks/glue.yaml", "--tasks", "rte", "--fractions", "1", "--backbone", "tiny"]
SETTINGS = ["--set", "max_steps=2", "--set", "evaluations=1", "--no-leaderboard"]
RESULT = "glue/rte/baseline/tiny/f1-s{seed}.json"


def bench(folder: Path, data_dir: str, seeds: str) -> dict:
    """``klm bench`` of seeds ``seeds`` with its store under ``folder``: its seconds before the first cell started
    (``startup``), by part where the runner gives them (``parts``), and the seconds from its start to its last seed's
    cell start by that cell's clock (``cell_clock``)."""
    where = [f"--{name}-dir" for name in ("results", "runs", "leaderboards")]
    paths = [str(folder / name) for name in ("results", "runs", "leaderboards")]
    command = [sys.executable, "-m", "knowledge_lm.cli", "bench", *SWEEP, "--seeds", seeds, "--data-dir", data_dir]
    command += [argument for pair in zip(where, paths) for argument in pair] + SETTINGS
    started = time.time()
    done = subprocess.run(command, capture_output=True, text=True)
    found = read_outside_cells_line(done.stdout)
    if done.returncode or not found:
        sys.exit(f"klm bench failed (rc {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    startup, parts = found
    result = folder / "results" / RESULT.format(seed=seeds.split(",")[-1])
    return {"startup": startup, "parts": parts, "cell_clock": cell_clock(result, started)}


def cell_clock(result_path: Path, since: float) -> float:
    """The seconds from ``since`` to the start of the cell of ``result_path`` by its own clock (``finished_at``, to
    the second, less ``wall_time_s``)."""
    result = json.loads(result_path.read_text())
    return datetime.fromisoformat(result["finished_at"]).timestamp() - result["wall_time_s"] - since


def floor_seconds() -> float:
    started = time.perf_counter()
    subprocess.run(FLOOR, check=True)
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data", help="GLUE's RTE lives there")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs, floors = [], []
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory() as scratch:
            bench(Path(scratch), args.data_dir, "1")  # the stored cell
            floors.append(floor_seconds())
            runs.append(bench(Path(scratch), args.data_dir, "1,2"))
        print(f"repeat {repeat + 1}: {summary(runs[-1])}; floor (import torch, lightning, transformers) "
              f"{floors[-1]:.1f} s")  # fmt: skip
    middle = {
        "startup": statistics.median(run["startup"] for run in runs),
        "parts": {name: statistics.median(run["parts"].get(name, 0.0) for run in runs) for name in runs[-1]["parts"]},
        "cell_clock": statistics.median(run["cell_clock"] for run in runs),
    }
    floor = statistics.median(floors)
    print(f"median {summary(middle)}; floor {floor:.1f} s: start-up / floor {middle['startup'] / floor:.2f}")


def summary(run: dict) -> str:
    """A bench's start-up in words: the runner's count with its parts, and the cell's own clock."""
    parts = ", ".join(f"{name} {seconds:.1f}" for name, seconds in run["parts"].items()) or "no parts printed"
    return f"start-up {run['startup']:.1f} s ({parts}); the cell's own clock started at {run['cell_clock']:.0f} s"


if __name__ == "__main__":
    main()
