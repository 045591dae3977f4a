"""``klm``'s entry point: the parser built from one module per subcommand, and the dispatch to its command."""

import argparse
import os
import sys
from pathlib import Path

# The subcommands by module path: the package (knowledge_lm.cli) imports this module, not the other way round.
import knowledge_lm.cli.attention as attention
import knowledge_lm.cli.bench as bench
import knowledge_lm.cli.cell as cell
import knowledge_lm.cli.compare as compare
import knowledge_lm.cli.export as export
import knowledge_lm.cli.leaderboard as leaderboard
import knowledge_lm.cli.listing as listing
import knowledge_lm.cli.prepare as prepare
import knowledge_lm.cli.pretrain as pretrain
import knowledge_lm.cli.probe as probe
import knowledge_lm.cli.serve as serve
import knowledge_lm.cli.speed as speed
import knowledge_lm.cli.status as status
from knowledge_lm.cli.arguments import BENCHMARKS_HELP, resolve_folders
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.paths import BENCHMARKS_ENV
from knowledge_lm.run.claims import INTERRUPTED_EXIT
from knowledge_lm.sweep.serve import forked_by_server, forward, start_in_background

# Each module adds its subcommand (``add_parser``), in the order ``klm --help`` lists them.
SUBCOMMANDS = (
    bench,
    cell,
    status,
    prepare,
    attention,
    probe,
    pretrain,
    speed,
    leaderboard,
    compare,
    export,
    serve,
    listing,
)


def package_version() -> str:
    """The installed knowledge-lm's version, else pyproject.toml's beside this source."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("knowledge-lm")
    except PackageNotFoundError:
        import tomllib

        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        return tomllib.loads(pyproject.read_text())["project"]["version"]


def build_parser():
    parser = argparse.ArgumentParser(prog="klm", description="knowledge-lm: knowledge-injection benchmark suite")
    parser.add_argument("--version", action="version", version=f"klm (knowledge-lm) {package_version()}")
    parser.add_argument("--benchmarks-dir", type=Path, help=BENCHMARKS_HELP)
    commands = parser.add_subparsers(dest="command", required=True)
    for subcommand in SUBCOMMANDS:
        subcommand.add_parser(commands)
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
