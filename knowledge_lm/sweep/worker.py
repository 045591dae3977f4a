"""A sweep worker: one long-lived process per GPU slot that imports once and runs cells back to back.

Run as ``python -m knowledge_lm.sweep.worker <runner pid>`` by the sweep runner (or forked so, already imported, by
``klm serve``), with the GPUs of its slot in ``CUDA_VISIBLE_DEVICES``. It reads cell specs
(``knowledge_lm.run.spec.CellSpec``), one JSON line each, from stdin, and runs each as a cell process would
(``knowledge_lm.run.cell.run_spec``: claimed by this process, seeded, its failure recorded), its output in the
cell's ``log.txt`` (on the terminal where the spec asks for progress bars). After each cell it writes one JSON line
to stdout, ``{"key": cell key, "status": exit status, "began": when it began the cell}`` (epoch seconds; a failed
cell's also ``error`` and ``traceback``, and ``worker_ends`` where the worker ends after it: its GPU stopped running
work).
Backbones and tokenized splits stay in memory between cells; each cell trains a fresh model. It ends at the end of
its input, with its runner, or after a cell stopped by Ctrl-C.
"""

import gc
import json
import os
import sys
import time
import traceback

import torch

from knowledge_lm.core.backbones import keep_backbones_loaded
from knowledge_lm.core.errors import error_line
from knowledge_lm.data.base import TaskDataModule
from knowledge_lm.run.cell import die_with_parent, run_spec
from knowledge_lm.run.claims import INTERRUPTED_EXIT
from knowledge_lm.run.spec import CellSpec
from knowledge_lm.sweep.serve import forked_by_server


def output_to(descriptor: int):
    """Send this process's stdout and stderr (its own and its libraries') to ``descriptor`` from now on."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:  # its file's disk is full: what it held is lost, the output moves on all the same
            pass
    os.dup2(descriptor, 1)
    os.dup2(descriptor, 2)


def run_logged(spec: CellSpec, error: dict, own_output: int) -> int:
    """``run_spec``, its output in the cell's ``log.txt`` (on the terminal where the spec asks for progress bars)."""
    if spec.progress:
        return run_spec(spec, error)
    with open(spec.cell.run_dir(spec.runs_dir) / "log.txt", "a") as log:
        output_to(log.fileno())
        try:
            return run_spec(spec, error)
        finally:
            output_to(own_output)


def device_lost() -> bool:
    """Whether this process's GPU has stopped running its work: a CUDA error such as an illegal memory access is
    sticky, so every later cell of this process would fail on it, where a new worker starts with a working device."""
    if not torch.cuda.is_initialized():
        return False
    try:
        torch.cuda.synchronize()
    except RuntimeError:  # torch.AcceleratorError is one
        return True
    return False


def serve(runner_pid: int):
    """Run the cell specs of stdin one after another, answering each on stdout, until stdin ends."""
    if forked_by_server():  # its parent is the server, which ends it with the runner
        print(f"worker pid {os.getpid()}: forked by klm serve (pid {os.getppid()})", file=sys.stderr)
    else:
        die_with_parent(runner_pid)
    keep_backbones_loaded()
    TaskDataModule.keep_encodings()
    replies = os.fdopen(os.dup(1), "w", buffering=1)  # stdout is the runner's: the cells' output goes elsewhere
    own_output = os.dup(2)
    output_to(own_output)
    for line in sys.stdin:
        began = time.time()
        spec = CellSpec.from_json(line)
        cell = spec.cell
        error = {}
        try:
            status = run_logged(spec, error, own_output)
        except OSError as failure:  # its log unwritable (a full disk): the reply says why, where nothing else can
            status = 1
            if "error" not in error:
                log = cell.run_dir(spec.runs_dir) / "log.txt"
                failure = failure if failure.filename else OSError(failure.errno, failure.strerror, str(log))
                error = {"error": error_line(failure), "traceback": traceback.format_exc()[-4000:]}
        lost = status not in (0, INTERRUPTED_EXIT) and device_lost()
        gc.collect()  # the cell's model and trainer, before its successor allocates: as a process of its own would
        if not lost:
            torch.cuda.empty_cache()  # and the GPU memory it held, for the other workers on this GPU
        ending = {"worker_ends": "its GPU stopped running work"} if lost else {}
        replies.write(json.dumps({"key": cell.key, "status": status, "began": began, **error, **ending}) + "\n")
        if status == INTERRUPTED_EXIT:  # Ctrl-C: the runner stops too
            return status
        if lost:  # the runner starts a new worker for the next cell
            return 1
    return 0


def main(argv: list[str] | None = None):
    """``python -m knowledge_lm.sweep.worker <runner pid>``; Ctrl-C while idle ends it quietly."""
    try:
        sys.exit(serve(int((sys.argv[1:] if argv is None else argv)[0])))
    except KeyboardInterrupt:
        sys.exit(INTERRUPTED_EXIT)


if __name__ == "__main__":
    main()
