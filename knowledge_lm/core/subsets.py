"""Train-fraction subsets: drawn once per dataset from a subset seed, stratified by label, nested.

Each label group is shuffled once with the subset seed; the fraction-f subset takes the first
``max(1, round(f * n_group))`` of every group. Prefixes of one permutation make 1% ⊂ 10% ⊂ 100%,
and the draw depends on the seed and the labels only, never on the row order of the file.
"""

import hashlib
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from knowledge_lm.core.errors import KlmError

REGRESSION_BINS = 5


def check_fraction(fraction: float) -> float:
    fraction = float(fraction)
    if not 0.0 < fraction <= 1.0:
        raise KlmError(f"train fraction {fraction} is outside (0, 1]")
    return fraction


def quantile_bins(values: Sequence[float]) -> list[int]:
    """Strata for a real-valued label: its quantile bin."""
    values = np.asarray(values, dtype=float)
    edges = np.quantile(values, np.linspace(0, 1, REGRESSION_BINS + 1)[1:-1])
    return np.searchsorted(edges, values, side="right").tolist()


def fraction_subset(ids: Sequence[str], strata: Sequence, fraction: float, seed: int) -> np.ndarray:
    """Sorted row indices of the ``fraction`` subset, stratified by ``strata`` (a label or any hashable key per row)."""
    fraction = check_fraction(fraction)
    if fraction == 1.0:
        return np.arange(len(ids))
    groups = defaultdict(list)
    for index, key in enumerate(strata):
        groups[tuple(key) if isinstance(key, list) else key].append(index)
    chosen = []
    for key in sorted(groups, key=repr):
        members = sorted(groups[key], key=lambda index: ids[index])
        # One generator per (seed, group) so a group's order ignores how many groups precede it.
        digest = hashlib.sha256(f"{seed}:{key!r}".encode()).digest()
        order = np.random.default_rng(int.from_bytes(digest[:8], "little")).permutation(len(members))
        take = max(1, int(np.floor(fraction * len(members) + 0.5)))
        chosen.extend(members[i] for i in order[:take])
    return np.array(sorted(chosen), dtype=np.int64)


def subset_hash(ids: Sequence[str], indices: Sequence[int]) -> str:
    digest = hashlib.sha256("\n".join(sorted(str(ids[i]) for i in indices)).encode())
    return digest.hexdigest()[:16]
