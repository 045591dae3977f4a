"""``python -m knowledge_lm.cli``: the ``klm`` program."""

import sys

from knowledge_lm.cli import main

sys.exit(main())
