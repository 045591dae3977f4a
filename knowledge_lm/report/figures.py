"""Figures for the leaderboards, drawn from the results store alone (``klm leaderboard`` writes them to
``leaderboards/figures/`` and links them from the markdown): the main metric against the train fraction
per method, and against a sweep's numbered variants (e.g. the share of wrong entity links: the SI+SR paper
Fig. 5d). Same results, same bytes: no timestamps or software tags go into the PNGs."""

import re
from pathlib import Path

import pandas as pd

PNG_METADATA = {"Software": None}


def _figure():
    from matplotlib.figure import Figure

    figure = Figure(figsize=(5.2, 3.4), dpi=110)
    return figure, figure.add_subplot()


def _save(figure, path: Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(figure)
    figure.tight_layout()
    figure.savefig(path, format="png", metadata=PNG_METADATA)
    return path


def _series(frame: pd.DataFrame, x: str):
    grouped = frame.groupby(x)["value"]
    means, spread = grouped.mean(), grouped.std(ddof=1).fillna(0.0)
    return list(means.index), list(means.values), list(spread.values)


def fraction_curves(frame: pd.DataFrame, title: str, metric: str, path: Path) -> Path | None:
    """Mean ± std over seeds of ``metric`` against the train fraction, one line per method (≥ 2 fractions)."""
    if frame["fraction"].nunique() < 2:
        return None
    figure, axes = _figure()
    for method in sorted(frame["method"].unique(), key=lambda m: (m != "baseline", m)):
        xs, ys, errors = _series(frame[frame.method == method], "fraction")
        axes.errorbar([100 * x for x in xs], ys, yerr=errors, marker="o", capsize=3, label=method)
    axes.set_xscale("log")
    ticks = sorted(100 * x for x in frame["fraction"].unique())
    axes.set_xticks(ticks, [f"{tick:g}" for tick in ticks])
    axes.minorticks_off()
    axes.set_xlabel("train fraction (%)")
    axes.set_ylabel(metric)
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=8)
    return _save(figure, path)


def variant_series(variants) -> tuple[str, dict[str, float]]:
    """The largest family of variants named by one prefix and a number (noise0 … noise50 → 0 … 50): its prefix
    and variant → number; other variants (controls such as shuffled, a variant such as t20k-zeroed) are left out."""
    families: dict[str, dict[str, float]] = {}
    for variant in variants:
        match = re.fullmatch(r"([A-Za-z_-]*?)(\d+(?:\.\d+)?)", variant)
        if match:
            families.setdefault(match.group(1), {})[variant] = float(match.group(2))
    return max(families.items(), key=lambda family: len(family[1]), default=("", {}))


def variant_curves(
    frame: pd.DataFrame, title: str, metric: str, path: Path, baseline: pd.DataFrame | None = None
) -> Path | None:
    """``metric`` against the number in each variant's name (noise10 → 10), one line per method and fraction,
    over the largest family of numbered variants (``variant_series``); the baseline's mean at the same fraction
    as a dashed line. None without two such variants."""
    prefix, numbers = variant_series(frame["variant"].unique())
    if len(numbers) < 2:
        return None
    frame = frame[frame["variant"].isin(list(numbers))]
    frame = frame.assign(x=frame["variant"].map(numbers))
    figure, axes = _figure()
    for (method, fraction), group in frame.groupby(["method", "fraction"]):
        xs, ys, errors = _series(group, "x")
        axes.errorbar(xs, ys, yerr=errors, marker="o", capsize=3, label=f"{method} ({100 * fraction:g}%)")
        if baseline is not None:
            base = baseline[(baseline.fraction == fraction)]["value"]
            if len(base):
                axes.axhline(base.mean(), linestyle="--", linewidth=1, color="grey")
    if baseline is not None and len(baseline):
        axes.plot([], [], linestyle="--", color="grey", label="baseline")
    axes.set_xlabel(prefix or "variant")
    axes.set_ylabel(metric)
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=8)
    return _save(figure, path)


def spectrum_curves(spectra: dict[str, list[list[float]]], title: str, path: Path) -> Path | None:
    """Singular values of the head's features on the reported split, largest first, one line per method (the
    elementwise mean over its seeds); methods with SR dotted, as the SI+SR paper's Fig. 5b. None for fewer than 2
    methods."""
    import numpy as np

    if len(spectra) < 2:
        return None
    figure, axes = _figure()
    for method in sorted(spectra, key=lambda m: (m != "baseline", m)):
        runs = spectra[method]
        length = min(len(run) for run in runs)
        mean = np.mean([run[:length] for run in runs], axis=0)
        axes.plot(
            range(1, length + 1),
            mean,
            linestyle=":" if "sr" in method.split("+") else "-",
            label=f"{method} (n={len(runs)})",
        )
    axes.set_yscale("log")
    axes.set_xlabel("index (descending)")
    axes.set_ylabel("singular value")
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=8)
    return _save(figure, path)


def bucket_bars(
    values: dict[str, list[float | None]], buckets: list[str], title: str, metric: str, path: Path
) -> Path | None:
    """Grouped bars: ``metric`` per entity-frequency bucket, one bar per method (the SI+SR paper's Fig. 1a/5a)."""
    if len(values) < 2:
        return None
    figure, axes = _figure()
    methods = sorted(values, key=lambda m: (m != "baseline", m))
    width = 0.8 / len(methods)
    for offset, method in enumerate(methods):
        xs = [index + (offset - (len(methods) - 1) / 2) * width for index in range(len(buckets))]
        axes.bar(xs, [value if value is not None else 0.0 for value in values[method]], width=width, label=method)
    axes.set_xticks(range(len(buckets)), buckets, fontsize=7)
    axes.set_xlabel("highest train-split document frequency among the example's linked entities")
    axes.set_ylabel(metric)
    axes.set_title(title, fontsize=10)
    axes.legend(fontsize=7)
    return _save(figure, path)


def forest_plot(rows: list[tuple[str, str, float, list[float] | None]], title: str, path: Path) -> Path | None:
    """Each ``(dataset, method, Δ, 95 % interval)`` as a point with its interval on one row, rows grouped by dataset
    (one colour each), a line at 0: each method's Δ against the baseline at a glance. None without rows."""
    if not rows:
        return None
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 1.0 + 0.2 * len(rows)), dpi=110)
    axes = figure.add_subplot()
    datasets = list(dict.fromkeys(dataset for dataset, *_ in rows))
    colours = {dataset: f"C{index % 10}" for index, dataset in enumerate(datasets)}
    for y, (dataset, method, delta, interval) in enumerate(reversed(rows)):
        low, high = interval if interval is not None else (delta, delta)
        axes.plot([low, high], [y, y], color=colours[dataset], linewidth=1.5)
        axes.plot([delta], [y], marker="o", markersize=4, color=colours[dataset])
    axes.axvline(0.0, color="grey", linewidth=0.8, linestyle="--")
    axes.set_yticks(range(len(rows)), [f"{method} · {dataset}" for dataset, method, *_ in reversed(rows)], fontsize=7)
    axes.set_ylim(-0.7, len(rows) - 0.3)
    axes.set_xlabel("Δ against the baseline (points), 95 % interval over seeds")
    axes.set_title(title, fontsize=10)
    return _save(figure, path)
