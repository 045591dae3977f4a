"""``klm``: run sweeps, show their state, regenerate leaderboards.

One module per subcommand holds its ``add_parser`` and its command; ``entry`` builds the parser and dispatches.
The modules imported here load no torch, transformers or Lightning, so that ``klm list``, ``klm status`` and
every argument error answer at once; a command that trains, probes or draws imports its module when it runs.
"""

from knowledge_lm.cli.arguments import resolve_folders, sweep_from_args, table_configs
from knowledge_lm.cli.bench import UNFINISHED_EXIT
from knowledge_lm.cli.entry import build_parser, main
from knowledge_lm.cli.pretrain import PRETRAINING_UNFINISHED

__all__ = [
    "PRETRAINING_UNFINISHED",
    "UNFINISHED_EXIT",
    "build_parser",
    "main",
    "resolve_folders",
    "sweep_from_args",
    "table_configs",
]
