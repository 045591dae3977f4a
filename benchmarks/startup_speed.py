"""A ``klm bench``'s start-up on CPU: the seconds from its process's start to its first cell's start (interpreter,
imports, checks, data read), against the floor of the same run: a fresh interpreter importing torch, Lightning and
transformers, which every cell process pays too. The bench runs a sweep one of whose cells is stored already and
one is not, so that its checks read the data both for the stored cell's record hashes and for the cell to run.

    python benchmarks/startup_speed.py --data-dir ../shared/data --repeats 3
Prints each repeat's start-up and floor, then their medians and the ratio start-up / floor (issue 48, item 2).
"""

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FLOOR = [sys.executable, "-c", "import torch, pytorch_lightning, transformers"]
# One seed stored first, then a bench of two: the second's start-up is measured. Two steps a cell: the cells are
# not what is measured.
SWEEP = ["--config", "benchmarks/glue.yaml", "--tasks", "rte", "--fractions", "1", "--backbone", "tiny"]
SETTINGS = ["--set", "max_steps=2", "--set", "evaluations=1", "--no-leaderboard"]
BEFORE_FIRST = re.compile(r"\(([0-9.]+) s before the first started")


def bench(folder: Path, data_dir: str, seeds: str) -> float:
    """``klm bench`` of seeds ``seeds`` with its store under ``folder``: its seconds before the first cell started."""
    where = [f"--{name}-dir" for name in ("results", "runs", "leaderboards")]
    paths = [str(folder / name) for name in ("results", "runs", "leaderboards")]
    command = [sys.executable, "-m", "knowledge_lm.cli", "bench", *SWEEP, "--seeds", seeds, "--data-dir", data_dir]
    command += [argument for pair in zip(where, paths) for argument in pair] + SETTINGS
    done = subprocess.run(command, capture_output=True, text=True)
    found = BEFORE_FIRST.search(done.stdout)
    if done.returncode or not found:
        sys.exit(f"klm bench failed (rc {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return float(found.group(1))


def floor_seconds() -> float:
    started = time.perf_counter()
    subprocess.run(FLOOR, check=True)
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data", help="GLUE's RTE lives there")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    startups, floors = [], []
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory() as scratch:
            bench(Path(scratch), args.data_dir, "1")  # the stored cell
            floors.append(floor_seconds())
            startups.append(bench(Path(scratch), args.data_dir, "1,2"))
        print(f"repeat {repeat + 1}: start-up {startups[-1]:.1f} s, floor (import torch, lightning, transformers) "
              f"{floors[-1]:.1f} s")  # fmt: skip
    startup, floor = statistics.median(startups), statistics.median(floors)
    print(f"median start-up {startup:.1f} s, floor {floor:.1f} s: start-up / floor {startup / floor:.2f}")


if __name__ == "__main__":
    main()
