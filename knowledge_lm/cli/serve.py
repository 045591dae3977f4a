"""``klm serve``: a warm process that forks sweep workers already imported."""

from knowledge_lm.core.errors import KlmError
from knowledge_lm.sweep.serve import serve


def command_serve(args):
    if args.idle_minutes <= 0:
        raise KlmError(f"--idle-minutes {args.idle_minutes:g}: expected more than 0")
    return serve(args.idle_minutes)


def add_parser(commands):
    serving = commands.add_parser(
        "serve",
        help="keep a warm process that forks sweep workers already imported (later klm bench runs start at once)",
    )
    serving.add_argument(
        "--idle-minutes", type=float, default=30.0, help="end after this long without workers (default 30)"
    )
    serving.set_defaults(handler=command_serve)
