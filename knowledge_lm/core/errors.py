"""The one error type users see (``KlmError``), and the check of names that become parts of results paths."""

import re


class KlmError(Exception):
    """A user-facing error: the CLI prints its message as one line and exits non-zero."""


NAME = re.compile(r"[A-Za-z0-9._+-]+")


def check_name(what: str, name: str) -> str:
    """``name`` as it is, where it can be one part of a results path: letters, digits and ``._+-``, neither ``.``
    nor ``..``; else a one-line error naming ``what`` it is."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or name in (".", ".."):
        raise KlmError(f"{what} {name!r}: a name of letters, digits and . _ + - (not '.' or '..') is expected")
    return name
