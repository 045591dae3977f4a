"""The numbers pages derive from the reported splits' gold, kept in the results store so that every page renders
byte for byte without the data directory.

The gold itself is a copy of the datasets' labels and never enters the repository (``results/gold/`` is a local
cache). What a page computes from it is kept instead: ``results/derived/<dataset>.json`` maps a key, the sha256 of
everything the number was computed from (the kept predictions files' bytes, the metric, the resampling), to the
number: a bootstrap's outcome (``knowledge_lm.report.bootstrap``), per-bucket scores
(``knowledge_lm.report.comparisons.frequency_buckets``) or the size of a gold (``knowledge_lm.report.frame``).
A key names its inputs' bytes, so a number read back is the one the gold would give; a changed predictions file is
a new key. ``klm leaderboard`` and ``klm export`` read the store first and compute what it lacks from the gold (the
store's gold, else the data directory); a build keeps, of each dataset whose page it rendered again, only the
numbers it used. Only a full build of the committed pages (``klm leaderboard`` without ``--out`` or filters) writes
them: a filtered build or one into another folder computes what it lacks and keeps it in memory alone.
"""

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

from knowledge_lm.core.results import DERIVED_DIR, write_file_atomic

FORMAT = 1


class DerivedNumbers:
    """The derived numbers of one results store, by dataset: those read from ``results/derived/``, those computed
    since, and which of them a build used; ``store`` false: ``save`` writes nothing."""

    def __init__(self, results_dir: Path, store: bool = True):
        self.folder, self.store = Path(results_dir) / DERIVED_DIR, store
        self.numbers: dict[str, dict[str, Any]] = {}
        self.used: dict[str, set[str]] = {}
        self.added: set[str] = set()
        self.prune: set[str] = set()  # datasets whose pages a build rendered again: keep only the numbers it used
        for path in sorted(self.folder.glob("*.json")):
            stored = json.loads(path.read_text())
            if stored.get("format") == FORMAT:
                self.numbers[path.stem] = stored["numbers"]

    def recall(self, dataset: str, key: str, compute: Callable[[], Any]) -> Any:
        """The number of ``key`` for ``dataset``: the stored one, else ``compute()`` (kept unless None)."""
        numbers = self.numbers.setdefault(dataset, {})
        if key not in numbers:
            value = compute()
            if value is None:
                return None
            numbers[key] = json.loads(json.dumps(value))  # as it reads back: tuples become lists
            self.added.add(dataset)
        self.used.setdefault(dataset, set()).add(key)
        return numbers[key]

    def lookup(self, dataset: str, key: str) -> Any:
        """The stored number of ``key`` (marked used), else None."""
        value = self.numbers.get(dataset, {}).get(key)
        if value is not None:
            self.used.setdefault(dataset, set()).add(key)
        return value

    def save(self) -> list[Path]:
        """Write the datasets whose numbers changed; those in ``prune`` keep only the numbers used. One number per
        line, keys sorted: the same numbers give the same bytes."""
        written = []
        for dataset in sorted(self.numbers) if self.store else ():
            numbers = self.numbers[dataset]
            if dataset in self.prune:
                numbers = {key: numbers[key] for key in self.used.get(dataset, ())}
            if dataset not in self.added and numbers == self.numbers[dataset]:
                continue
            path = self.folder / f"{dataset}.json"
            lines = [f"{json.dumps(key)}: {json.dumps(numbers[key], sort_keys=True)}" for key in sorted(numbers)]
            text = '{"format": %d, "numbers": {\n%s\n}}\n' % (FORMAT, ",\n".join(lines))

            def write(staging, text=text):
                Path(staging).write_text(text)

            write_file_atomic(path, write)
            written.append(path)
        return written


active: DerivedNumbers | None = None


@contextmanager
def keeping_derived(results_dir: Path, store: bool = True):
    """While a build renders pages from ``results_dir``, derived numbers are read from and added to its store
    (``DerivedNumbers``, yielded), written when the build ends without an error (its ``prune`` set: keeping only
    those it used), unless ``store`` is false."""
    global active
    previous, active = active, DerivedNumbers(results_dir, store)
    try:
        yield active
        active.save()
    finally:
        active = previous


def recall(dataset: str, key: str, compute: Callable[[], Any]) -> Any:
    """``DerivedNumbers.recall`` of the build under way; outside a build, ``compute()``."""
    return compute() if active is None else active.recall(dataset, key, compute)


def lookup(dataset: str, key: str) -> Any:
    """``DerivedNumbers.lookup`` of the build under way; outside a build, None."""
    return None if active is None else active.lookup(dataset, key)
