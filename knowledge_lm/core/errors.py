"""The one error type users see (``KlmError``), an error in one line, and the check of names that become parts of
results paths."""

import errno
import os
import re


class KlmError(Exception):
    """A user-facing error: the CLI prints its message as one line and exits non-zero."""


# Errors of a full disk, said as the cause they are: ``no space left on device: <path>``.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def error_line(error: BaseException) -> str:
    """An error in one line: a ``KlmError``'s message, a full disk's ``no space left on device: <path>``, else its
    type and message."""
    if isinstance(error, KlmError):
        return str(error)
    if isinstance(error, OSError) and error.errno in DISK_FULL:
        return f"{os.strerror(error.errno).lower()}: {error.filename2 or error.filename or '?'}"  # a copy's target
    return f"{type(error).__name__}: {error}"


NAME = re.compile(r"[A-Za-z0-9._+-]+")


def check_name(what: str, name: str) -> str:
    """``name`` as it is, where it can be one part of a results path: letters, digits and ``._+-``, neither ``.``
    nor ``..``; else a one-line error naming ``what`` it is."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or name in (".", ".."):
        raise KlmError(f"{what} {name!r}: a name of letters, digits and . _ + - (not '.' or '..') is expected")
    return name
