"""Paired bootstrap over test examples (Efron & Tibshirani; Berg-Kirkpatrick et al. 2012) from the predictions
each cell keeps beside its result (``<cell>.predictions.json.gz``) and the reported split's gold, recomputed
from the data directory (``knowledge_lm.gold``: the files keep only its sha256).

A replicate draws the reported split's examples with replacement, the same draw for every seed and for both
methods, and scores each seed's predictions on it with the task's own scorer; the method's value is the mean
over seeds, Δ its difference from the baseline's. Reported: the 95 % percentile intervals of both and the
share of replicates in which Δ ≤ 0 (one-sided p for "better"; ≥ 0 for "worse"). It complements the paired
t-test over seeds: that one asks whether the gain survives a new seed, this one whether it survives a new
test set. Replicates are seeded by the inputs' bytes, so the numbers are the same on every regeneration;
they are cached under the cache directory, since scoring thousands of resamples takes seconds per comparison.
"""

import hashlib
import json
from pathlib import Path

import numpy as np

from knowledge_lm.results import gold_sha256, read_predictions

REPLICATES = 500
LEVEL = 0.95


def task_scorer(dataset: str, task: str):
    from knowledge_lm.registry import DATASETS
    from knowledge_lm.tasks.base import TASK_KINDS

    spec = DATASETS.get(dataset).spec(task)
    return TASK_KINDS.get(spec.kind)(spec).score


def cache_file(paths: list[Path], metric: str, replicates: int) -> Path:
    from knowledge_lm.data.base import default_cache_dir

    key = hashlib.sha256(f"{metric}:{replicates}:{LEVEL}".encode())
    for path in paths:
        key.update(Path(path).read_bytes())
    return default_cache_dir() / "bootstrap" / f"{key.hexdigest()[:24]}.json"


def paired_bootstrap(dataset: str, task: str, metric: str, gold: list, ours: list[Path], baseline: list[Path],
                     replicates: int = REPLICATES) -> dict | None:
    """``ours[i]`` and ``baseline[i]`` are one seed's prediction files, ``gold`` the answers they were scored
    against. None when their splits differ or a file's ``gold_sha256`` is not ``gold``'s."""
    cached = cache_file(list(ours) + list(baseline), metric, replicates)  # the files pin the gold by its sha256
    if cached.is_file():
        return json.loads(cached.read_text())
    runs = [read_predictions(path) for path in list(ours) + list(baseline)]
    digest = gold_sha256(gold)
    if any(run["gold_sha256"] != digest or run["split"] != runs[0]["split"] for run in runs):
        return None
    score = task_scorer(dataset, task)
    generator = np.random.default_rng(int.from_bytes(bytes.fromhex(cached.stem[:16]), "big"))
    size, seeds = len(gold), len(ours)
    means, deltas = [], []
    for _ in range(replicates):
        draw = generator.integers(0, size, size)
        resampled_gold = [gold[i] for i in draw]
        values = [score([run["predicted"][i] for i in draw], resampled_gold)[metric] for run in runs]
        means.append(float(np.mean(values[:seeds])))
        deltas.append(means[-1] - float(np.mean(values[seeds:])))
    tail = (1 - LEVEL) / 2
    found = {"replicates": replicates, "examples": size,
             "interval": [float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))],
             "delta_interval": [float(np.quantile(deltas, tail)), float(np.quantile(deltas, 1 - tail))],
             "p_not_better": float(np.mean(np.asarray(deltas) <= 0)), "p_not_worse": float(np.mean(np.asarray(deltas) >= 0))}
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(found))
    return found
