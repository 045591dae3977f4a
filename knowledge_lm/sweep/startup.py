"""A ``klm bench``'s time outside its cells: from the process's start to its first cell's start (interpreter,
imports, checks, knowledge preparation; a ``klm bench`` handed to ``klm serve``: from the start of the ``klm`` that
handed it over), in the parts the runner marks (``phase_ended``), and from its last cell's end to its exit (leaderboard
pages)."""

import os
import re
import time

# What ``outside_cells_line`` says of the start-up: its seconds and its parts' text, each part "name N s".
BEFORE_FIRST = re.compile(r"\(([0-9.]+) s before the first started: ([^;]*);")
PART = re.compile(r"([a-z][a-z' -]*?) ([0-9.]+) s")

# (first cell's start, last cell's end) of each batch of cells this process ran (``run_cells``), in order.
CELL_SPANS: list[tuple[float, float]] = []
# (part, its end) of each part of the start-up this process went through, in order: "start-up" (the interpreter,
# klm's imports, the arguments), "checks", "workers" (MPS, the GPUs listed, the workers of the cells sure to run
# started), "imports" (torch, Lightning, transformers), "plan", "data".
PHASES: list[tuple[str, float]] = []


def record_cells(first_started: float, last_ended: float):
    CELL_SPANS.append((first_started, last_ended))


def phase_ended(name: str):
    """Mark the end of the start-up's part ``name`` (its time: since the previous part's end)."""
    PHASES.append((name, time.time()))


def cell_spans_since(started: float) -> list[tuple[float, float]]:
    """The spans of the cells this process started since ``started``."""
    return [span for span in CELL_SPANS if span[0] >= started]


def process_started(pid: int | None = None) -> float:
    """The start (epoch seconds) of process ``pid`` (default: this one) as the kernel records it; where /proc is not,
    now."""
    try:
        stat = open(f"/proc/{pid or 'self'}/stat").read()
        ticks = int(stat.rpartition(")")[2].split()[19])  # field 22: starttime
        boot = next(float(line.split()[1]) for line in open("/proc/stat") if line.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def startup_parts(started: float, first: float, phases: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """The seconds from ``started`` to the first cell's start ``first``, by part (``phases``' names in their order,
    each part's spells summed), and last the rest as "waiting for its worker": until the first cell began in its
    process (a worker still importing)."""
    parts, previous = {}, started
    for name, ended in phases:
        if started <= ended <= first:
            parts[name] = parts.get(name, 0.0) + ended - previous
            previous = ended
    return [*parts.items(), ("waiting for its worker", first - previous)]


def outside_cells_line(
    started: float, spans: list[tuple[float, float]], ended: float | None = None, phases: list | None = None
) -> str:
    """One line: the wall time since ``started`` and the part of it before the first cell (in its parts, where the
    runner marked ``phases``: ``startup_parts``) and after the last (``spans``: each sweep's first cell start and last
    cell end; sweeps that ran no cell left out)."""
    ended = time.time() if ended is None else ended
    total = ended - started
    if not spans:
        return f"klm bench: {total:.1f} s, no cell ran"
    first = min(first for first, _ in spans)
    before, after = first - started, ended - max(last for _, last in spans)
    parts = startup_parts(started, first, PHASES if phases is None else phases)
    named = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in parts) if len(parts) > 1 else ""
    return (
        f"klm bench: {total:.1f} s wall; outside its cells {before + after:.1f} s "
        f"({before:.1f} s before the first started: {named or 'start-up, imports, checks'}; {after:.1f} s after the "
        "last ended)"
    )


def read_outside_cells_line(output: str) -> tuple[float, dict[str, float]] | None:
    """From a ``klm bench``'s ``output``, what its ``outside_cells_line`` says of the start-up: the seconds before the
    first cell started and their parts by name ({} where the runner marked none); None where no cell ran."""
    found = BEFORE_FIRST.search(output)
    if found is None:
        return None
    return float(found.group(1)), {name: float(seconds) for name, seconds in PART.findall(found.group(2))}
