"""Name → class registries for methods, datasets and task kinds, over the plain-data tables of
``knowledge_lm.core.catalog``.

Listing names, checking a sweep's names and answering an unknown one read the tables only, so they cost no torch
import; ``get`` imports only the module of the class asked for. A class defined outside the package (a test's, a
plugin's) becomes known with ``add``.
"""

import importlib

from knowledge_lm.core.catalog import DATASET_ENTRIES, METHOD_ENTRIES, TASK_KIND_ENTRIES
from knowledge_lm.core.errors import KlmError


class Registry:
    """The entries of one kind (``method``, ``dataset``, ...) by name, each naming its class as ``module:Class``."""

    def __init__(self, kind: str, entries: dict):
        self.kind = kind
        self.entries = dict(entries)

    def add(self, name: str, entry) -> None:
        """Make ``name`` known (the same entry again is no change)."""
        if self.entries.get(name, entry) != entry:
            raise ValueError(f"{self.kind} {name!r} registered twice ({self.entries[name].target} has it)")
        self.entries[name] = entry

    def names(self) -> list[str]:
        return sorted(self.entries)

    def items(self) -> list[tuple[str, object]]:
        """``(name, entry)`` of every name, in name order."""
        return [(name, self.entries[name]) for name in self.names()]

    def check(self, name: str) -> None:
        """Raise the one-line ``KlmError`` for a name no entry has (nothing is imported)."""
        if name not in self.entries:
            raise KlmError(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}")

    def entry(self, name: str):
        """The entry of ``name``: what is known of its class without importing it."""
        self.check(name)
        return self.entries[name]

    def locate(self, name: str) -> str:
        """``module:Class`` of the class registered under ``name``, without importing it."""
        return self.entry(name).target

    def get(self, name: str) -> type:
        """The class registered under ``name``; its module is imported (that one only) if it was not."""
        module, _, qualified_name = self.locate(name).partition(":")
        found = importlib.import_module(module)
        for part in qualified_name.split("."):
            found = getattr(found, part)
        return found


METHODS = Registry("method", METHOD_ENTRIES)
DATASETS = Registry("dataset", DATASET_ENTRIES)
TASK_KINDS = Registry("task kind", TASK_KIND_ENTRIES)


def cannot_run(method: str, dataset: str) -> str | None:
    """Why ``method`` cannot run on ``dataset``, in one line, or None where it can: a method that reads knowledge
    features (its entry's ``needs_knowledge``) on a dataset whose examples carry none (its ``no_knowledge`` says
    why). Read from the entries, so ``klm bench`` refuses the pair before importing anything and the README gives
    the same reason for the cell it leaves empty."""
    if not METHODS.entry(method).needs_knowledge:
        return None
    return DATASETS.entry(dataset).no_knowledge
