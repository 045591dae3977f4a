"""``klm serve``: a warm process that forks ``klm`` commands and sweep workers already imported, so that a one-cell
``klm bench`` starts training without waiting for PyTorch, transformers and Lightning to import (10 s and more on
a GPU host, in the runner and again in each worker).

Everything imported at the top of this file is the standard library (and the suite's errors): ``klm`` and runners
import it at no cost.
"""

import hashlib
import importlib
import json
import os
import selectors
import signal
import site
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from knowledge_lm.core.errors import KlmError

PACKAGE_DIR = Path(__file__).resolve().parents[1]
# What the server imports before forking: what a worker would spend its first seconds importing.
PRELOADED = ("torch", "transformers", "pytorch_lightning", "knowledge_lm.sweep.worker", "knowledge_lm.cli")
# Environment read while those modules import (so a server started under other values would behave otherwise):
# the Hugging Face hub's settings (offline mode, caches) and the import path. Not torch's own variables: torch
# reads them when used, and importing Lightning and torch sets some (PYTORCH_NVML_BASED_CUDA_CHECK,
# TORCHINDUCTOR_CACHE_DIR), which a klm started from such a process would inherit.
IMPORT_TIME_ENV = ("HF_", "TRANSFORMERS_", "PYTHONPATH")
REQUESTER: int | None = None  # in the children the server forks: the pid of the process each runs for


def server_key(environ=None) -> str:
    """What a server's imports depend on, hashed: the interpreter and its environment (a venv's ``sys.prefix``),
    every source file of the package (path, size, modification time), the installed distributions' versions
    (``installed_distributions``) and the environment variables read at import time."""
    environ = os.environ if environ is None else environ
    digest = hashlib.sha256(f"{os.path.realpath(sys.executable)}\n{sys.prefix}\n{sys.version}\n".encode())
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(PACKAGE_DIR)} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    for record in installed_distributions():
        digest.update(f"{record}\n".encode())
    for name in sorted(environ):
        if name.startswith(IMPORT_TIME_ENV):
            digest.update(f"{name}={environ[name]}\n".encode())
    return digest.hexdigest()[:20]


def installed_distributions(path=None) -> list[str]:
    """The distributions installed where this interpreter installs them (``path``, default the site-packages
    folders: what a process of this interpreter starts with, whatever its ``sys.path`` has grown since; PYTHONPATH
    is keyed apart): the metadata folders importlib.metadata reads (``<name>-<version>.dist-info`` or
    ``.egg-info``), each with its modification time, so that an upgrade or a reinstall changes the list. Listed
    rather than read through importlib.metadata, which takes ~0.15 s a call. This project's own metadata is left
    out: the code's fingerprint keys it."""
    if path is None:
        path = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    records = set()
    for entry in path:
        try:
            with os.scandir(entry or ".") as found:
                for item in found:
                    if item.name.endswith((".dist-info", ".egg-info")) and not item.name.startswith("knowledge_lm"):
                        records.add(f"{item.name} {item.stat().st_mtime_ns}")
        except OSError:  # a zip file, or a folder that is gone
            continue
    return sorted(records)


def socket_path(key: str) -> Path:
    """Where the server of ``key`` listens: in a folder of this user's alone."""
    return Path(tempfile.gettempdir()) / f"klm-serve-{os.getuid()}" / f"{key}.sock"


class ServedProcess:
    """A process forked by the server for this one, used as a ``subprocess.Popen``: ``pid``, its pipes (``stdin``,
    ``stdout``: text, where it has them) and ``poll`` / ``wait`` / ``kill``; its exit status arrives from the server
    (negative: the signal that ended it). ``pending``: bytes the server sent after the pid, read with it."""

    def __init__(self, connection: socket.socket, pid: int, pending: bytes = b"", stdin=None, stdout=None):
        self.connection, self.pid, self.pending, self.stdin, self.stdout = connection, pid, pending, stdin, stdout
        self.returncode = None

    def poll(self) -> int | None:
        if self.returncode is None and (b"\n" in self.pending or readable(self.connection, 0)):
            self.read_status()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if b"\n" not in self.pending and not readable(self.connection, timeout):
                raise subprocess.TimeoutExpired(f"process {self.pid}", timeout)
            self.read_status()
        return self.returncode

    def read_status(self):
        line, self.pending = receive_line(self.connection, self.pending)
        self.returncode = json.loads(line)["exit"] if line else 1  # the server went first: its children with it
        self.connection.close()

    def kill(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def readable(connection: socket.socket, timeout: float | None) -> bool:
    """Whether ``connection`` has bytes (or its end) to read within ``timeout`` seconds (None: wait)."""
    with selectors.DefaultSelector() as selector:
        selector.register(connection, selectors.EVENT_READ)
        return bool(selector.select(timeout))


def receive_line(connection: socket.socket, pending: bytes = b"") -> tuple[bytes, bytes]:
    """The next line from ``connection`` after ``pending`` (b"" where it closes first), and the bytes read past it."""
    while b"\n" not in pending:
        chunk = connection.recv(4096)
        if not chunk:
            return b"", b""
        pending += chunk
    line, _, rest = pending.partition(b"\n")
    return line, rest


def send_line(connection: socket.socket, message: dict):
    """``message`` as one JSON line to a requester (none sent where it is gone)."""
    try:
        connection.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        pass


def private_folder(path: Path) -> bool:
    """Make ``path``'s folder where missing; whether it is this user's alone (``own_folder``)."""
    path.parent.mkdir(mode=0o700, exist_ok=True)
    return own_folder(path)


def own_folder(path: Path) -> bool:
    """Whether ``path``'s folder is this user's alone: a socket in a folder another user made could be theirs."""
    try:
        folder = path.parent.stat()
    except OSError:
        return False
    return folder.st_uid == os.getuid() and not folder.st_mode & 0o077


def request_child(module: str, argv: list[str], env: dict, descriptors: list[int]) -> ServedProcess | None:
    """``module.main(argv)`` forked by the server whose key ``env`` gives, with ``descriptors`` as its stdin, stdout
    and stderr, this process's folder and ``env``; it ends when this process does. None where no such server runs
    (or it ended meanwhile)."""
    path = socket_path(server_key(env))
    if not path.exists() or not own_folder(path):
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    request = {"module": module, "argv": argv, "env": env, "cwd": os.getcwd(), "requester": os.getpid()}
    payload = json.dumps(request).encode() + b"\n"
    try:
        connection.connect(str(path))
        sent = socket.send_fds(connection, [payload], descriptors)
        connection.sendall(payload[sent:])
        line, pending = receive_line(connection)
    except OSError:  # a socket left by a server that was killed, or one ending now
        line = b""
    if not line:
        connection.close()
        return None
    return ServedProcess(connection, json.loads(line)["pid"], pending)


def spawn(module: str, argv: list[str], env: dict, stderr: int | None = None) -> ServedProcess | None:
    """``module.main(argv)`` forked by the server whose key ``env`` gives, its stdin and stdout piped to this
    process and its stderr to descriptor ``stderr`` (default: this process's); None where no such server runs."""
    child_stdin, stdin = os.pipe()
    stdout, child_stdout = os.pipe()
    try:
        process = request_child(module, argv, env, [child_stdin, child_stdout, 2 if stderr is None else stderr])
    finally:
        os.close(child_stdin)
        os.close(child_stdout)
    if process is None:
        os.close(stdin)
        os.close(stdout)
        return None
    process.stdin, process.stdout = os.fdopen(stdin, "w"), os.fdopen(stdout)
    return process


def forward(argv: list[str]) -> int | None:
    """Run ``klm argv`` in a child of a server of this code and environment, on this terminal, passing it the
    signals this process gets (Ctrl-C); its exit status, or None where no such server runs."""
    process = request_child("knowledge_lm.cli", argv, dict(os.environ), [0, 1, 2])
    if process is None:
        return None

    def relay(signum, frame):
        try:
            os.kill(process.pid, signum)
        except ProcessLookupError:
            pass

    for relayed in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(relayed, relay)
    returncode = process.wait()
    return 128 - returncode if returncode < 0 else returncode  # a signal's number, as a shell reports it


def start_in_background(idle_minutes: float) -> Path | None:
    """Start ``klm serve`` for this code and environment, detached (its own session), without waiting for it to
    listen; its log's path (beside its socket), or None where its folder is not this user's alone."""
    log_path = socket_path(server_key()).with_suffix(".log")
    if not private_folder(log_path):
        return None  # klm serve would refuse it
    with open(log_path, "w") as log:
        subprocess.Popen(
            [sys.executable, "-m", "knowledge_lm.cli", "serve", "--idle-minutes", f"{idle_minutes:g}"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return log_path


def forked_by_server() -> bool:
    """Whether this process is a child ``klm serve`` forked (its parent is the server, not its requester)."""
    return REQUESTER is not None


def requester_pid() -> int | None:
    """In a child ``klm serve`` forked, the pid of the process it runs for (a ``klm`` or a runner); else None."""
    return REQUESTER


def serve(idle_minutes: float = 30.0) -> int:
    """Import, then fork the children runners ask for until ``idle_minutes`` pass without any (or a signal).

    The server imports those libraries and the suite's modules once, touches no GPU, and listens on a Unix socket named
    after what its imports depend on (``server_key``: the Python, the package's source files, the import-time
    environment). ``klm`` (``forward``) hands its command to a live server of its key, and a sweep runner asks it for
    its workers (``spawn``): for each request the server forks a child, which takes the requester's descriptors as its
    stdin, stdout and stderr, its environment and working directory, calls ``MODULE.main(ARGV)`` (what ``python -m
    MODULE ARGV`` runs), and ends with its requester; the server reports the child's pid, then its exit status, and
    prints a line for each child (its pid, its requester's, the module and the first argument: ``klm``'s command). A
    source file edited since the server started changes the key: such a ``klm`` runs as if no server were there. The
    server ends after ``idle_minutes`` without children, or on SIGTERM / Ctrl-C, and removes its socket.
    """
    path = socket_path(server_key())  # the key before the imports, some of which set environment variables
    if not private_folder(path):
        raise KlmError(f"klm serve: {path.parent} is not this user's alone (another user made it?); remove it")
    if path.exists():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            if probe.connect_ex(str(path)) == 0:
                raise KlmError(f"klm serve: a server of this code and environment already listens at {path}")
        path.unlink()  # left by a server that was killed
    for module in PRELOADED:
        importlib.import_module(module)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()
    stopping = threading.Event()
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop_signal, lambda *_: stopping.set())
    print(f"klm serve: pid {os.getpid()}, listening at {path}; ends after {idle_minutes:g} idle minutes")
    sys.stdout.flush()
    children: dict[int, socket.socket] = {}
    idle_since = time.monotonic()
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(listener, selectors.EVENT_READ)
            while not stopping.is_set():
                if selector.select(0.2):
                    connection, _ = listener.accept()
                    pid = fork_child(connection, listener, children)
                    if pid is not None:
                        children[pid] = connection
                report_ended(children)
                if children:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since > 60 * idle_minutes:
                    break
    finally:
        listener.close()
        path.unlink(missing_ok=True)
        for pid in children:
            os.kill(pid, signal.SIGKILL)
        report_ended(children, wait=True)
    return 0


def fork_child(connection: socket.socket, listener: socket.socket, children: dict) -> int | None:
    """Read one request and fork its child; the child's pid, sent back too (None for a request that broke off).
    The child keeps none of the server's sockets: a requester sees the server's end when the server ends."""
    descriptors = []
    try:
        data, descriptors, _, _ = socket.recv_fds(connection, 1 << 16, 3)
        line, _ = receive_line(connection, data)
        request = json.loads(line)  # b"": the request broke off, and json says so
    except (OSError, ValueError):
        for descriptor in descriptors:
            os.close(descriptor)
        connection.close()
        return None
    pid = os.fork()
    if pid == 0:
        for server_socket in (listener, connection, *children.values()):
            server_socket.close()
        run_child(request, descriptors)  # never returns
    for descriptor in descriptors:
        os.close(descriptor)
    send_line(connection, {"pid": pid})
    command = " ".join([request["module"], *request["argv"][:1]])  # klm's command, or a worker's runner
    print(f"klm serve: forked pid {pid} for pid {request['requester']}: {command}")
    sys.stdout.flush()
    return pid


def report_ended(children: dict[int, socket.socket], wait: bool = False):
    """Reap the children that ended and send each one's exit status to its requester."""
    while children:
        pid, status = os.waitpid(-1, 0 if wait else os.WNOHANG)
        if pid == 0:
            return
        connection = children.pop(pid, None)
        if connection is None:
            continue
        send_line(connection, {"exit": os.waitstatus_to_exitcode(status)})
        connection.close()


def run_child(request: dict, descriptors: list[int]):
    """In the forked child: take the requester's descriptors, environment and folder, end with the requester, call
    the module's ``main`` with the request's arguments, and exit with its status."""
    global REQUESTER
    REQUESTER = request["requester"]
    for target, descriptor in enumerate(descriptors):
        os.dup2(descriptor, target)
    for descriptor in descriptors:
        if descriptor > 2:
            os.close(descriptor)
    # Fresh stream objects: the server's own may hold a lock or buffered bytes.
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit():  # OpenMP read the server's value when torch loaded
        sys.modules["torch"].set_num_threads(int(threads))
    threading.Thread(target=end_with, args=(request["requester"],), name="klm-requester-watch", daemon=True).start()
    sys.argv = ["klm" if request["module"] == "knowledge_lm.cli" else request["module"], *request["argv"]]
    code = 0
    try:
        code = importlib.import_module(request["module"]).main(request["argv"]) or 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except KeyboardInterrupt:  # Ctrl-C, relayed: the status a Python ended by SIGINT gives
        traceback.print_exc()
        code = 128 + signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except OSError:
                pass
    os._exit(code)


def end_with(pid: int):
    """End this process once process ``pid`` has ended (polled each second): a runner killed with -9 leaves no
    worker, and a ``klm`` killed so no sweep, running on in the server's children."""
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            os._exit(1)
        time.sleep(1.0)
