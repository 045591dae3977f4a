"""The pretraining page (``leaderboards/pretraining.md``): every `klm pretrain` run in the store's records
(``results/pretraining/``), its settings, losses and relation-discrimination positives, and whether runs of the same
settings and code gave the same checkpoint."""

import json
from collections import defaultdict
from pathlib import Path

from knowledge_lm.core.results import PRETRAINING_DIR

MISSING = "—"


def run_identity(record: dict) -> str:
    """What pairs a pretraining run with its control run (ERICA with its MLM-only checkpoint): the corpus (its hash),
    the steps, the batch size and the commit (its first 7 hex digits: records name it short or whole)."""
    commit = str((record.get("git") or {}).get("commit") or "")[:7]
    corpus = str(record.get("corpus_hash", ""))[:12]
    return f"corpus {corpus}, {record.get('steps')} × {record.get('batch_size')}, commit {commit}"


def runs_by_checksum(records: list[dict]) -> dict[str, tuple[str, ...]]:
    """Checkpoint weights checksum → the ``run_identity`` of every record naming it (a run repeated at another commit
    that gave the same weights has two)."""
    found = defaultdict(set)
    for record in records:
        if record.get("checkpoint_checksum"):
            found[record["checkpoint_checksum"]].add(run_identity(record))
    return {checksum: tuple(sorted(identities)) for checksum, identities in found.items()}


def store_runs(results_dir) -> dict[str, tuple[str, ...]]:
    """``runs_by_checksum`` of the records under ``results_dir`` (none where it is None or has none)."""
    if results_dir is None:
        return {}
    records = [json.loads(path.read_text()) for path in sorted((Path(results_dir) / PRETRAINING_DIR).glob("*.json"))]
    return runs_by_checksum(records)


def distinct_runs(records: list[dict]) -> list[dict]:
    """``records`` without the copies: ``<checkpoint>.json`` repeats one timestamped run's record (the run its
    checkpoint's cells name), so a run is its checksum and time."""
    runs = {(record.get("checkpoint_checksum"), record.get("recorded_at")): record for record in records}
    return sorted(runs.values(), key=lambda record: (record.get("checkpoint", ""), record.get("recorded_at", "")))


def losses_text(losses: dict | None) -> str:
    return ", ".join(f"{name} {value:.3f}" for name, value in sorted((losses or {}).items())) or MISSING


def positives_text(positives: dict | None) -> str:
    """Per RD term, the mean positive pairs per micro-batch and the share of micro-batches with none."""
    terms = {term: value for term, value in (positives or {}).items() if isinstance(value, dict)}
    return (
        "; ".join(
            f"{term} {value['mean_per_batch']:.0f} ({100 * value['zero_batches_share']:.0f} % none)"
            for term, value in sorted(terms.items())
        )
        or MISSING
    )


def settings_key(record: dict) -> tuple:
    """What decides a run's checkpoint: the objectives, seed, corpus, schedule and batch, and the code."""
    return (
        record.get("method"),
        record.get("seed"),
        str(record.get("corpus_hash", ""))[:12],
        record.get("steps"),
        record.get("batch_size"),
        record.get("micro_batch_size"),
        record.get("max_length"),
        record.get("lr"),
        record.get("deterministic"),
        (record.get("git") or {}).get("commit"),
    )


def repeat_lines(runs: list[dict]) -> list[str]:
    """One line per group of runs with the same settings and commit: how many checksums they gave and, where
    several, how far apart their mean losses are."""
    groups = defaultdict(list)
    for run in runs:
        groups[settings_key(run)].append(run)
    lines = []
    for key, group in sorted(groups.items(), key=lambda item: tuple(map(str, item[0]))):
        if len(group) < 2:
            continue
        method, seed, corpus, steps, batch, _, _, _, deterministic, commit = key
        checksums = sorted({str(run.get("checkpoint_checksum"))[:8] for run in group})
        where = f"{method}, seed {seed}, corpus {corpus}, {steps} steps × {batch}, commit {commit}"
        if len(checksums) == 1:
            lines.append(f"- {where}: {len(group)} runs, one checkpoint ({checksums[0]}).")
            continue
        names = sorted({name for run in group for name in (run.get("mean_losses") or {})})
        spread = max(
            (
                (max(values) - min(values)) / abs(sum(values) / len(values))
                for name in names
                if len(values := [run["mean_losses"][name] for run in group if name in (run.get("mean_losses") or {})])
                > 1
            ),
            default=None,
        )
        apart = f"; mean losses apart by up to {spread:.1e} relative" if spread is not None else ""
        mode = "deterministic kernels asked" if deterministic else "non-deterministic kernels"
        lines.append(
            f"- {where}: {len(group)} runs, {len(checksums)} checkpoints ({', '.join(checksums)}; {mode}){apart}."
        )
    return lines


def render_pretraining(records: list[dict], current: set[tuple]) -> str:
    """The page: a table of every run (``current``: the ``(checksum, recorded_at)`` of the runs the checkpoint names'
    records point at, whose cells the pages show), then the repeated runs."""
    runs = distinct_runs(records)
    lines = [
        "# Pretraining runs",
        "",
        "Generated by `klm leaderboard` from `results/pretraining/` (one record per `klm pretrain` run); do not edit "
        "by hand. ● marks the run a checkpoint's name points at now (`results/pretraining/<checkpoint>.json`): ERICA "
        "cells name its checksum in their backbone label. RD positives: per relation-discrimination term, the mean "
        "positive pairs per micro-batch and the share of micro-batches with none.",
        "",
        "| checkpoint | run | checksum | seed | steps × batch | corpus | final losses | RD positives | device | "
        "commit | wall |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        mark = " ●" if (run.get("checkpoint_checksum"), run.get("recorded_at")) in current else ""
        wall = run.get("wall_time_s")
        lines.append(
            f"| {run.get('checkpoint', MISSING)}{mark} | {str(run.get('recorded_at', MISSING))[:16]} | "
            f"{str(run.get('checkpoint_checksum'))[:8]} | {run.get('seed', MISSING)} | "
            f"{run.get('steps', MISSING)} × {run.get('batch_size', MISSING)} | {str(run.get('corpus_hash', ''))[:8]} | "
            f"{losses_text(run.get('final_losses'))} | {positives_text(run.get('rd_positives'))} | "
            f"{run.get('device', MISSING)} | {(run.get('git') or {}).get('commit', MISSING)} | "
            f"{f'{wall:.0f} s' if wall else MISSING} |"
        )
    repeats = repeat_lines(runs)
    lines += [
        "",
        "## Repeated runs",
        "",
        "Runs of the same objectives, seed, corpus, schedule, batch and commit, and whether they gave one checkpoint "
        "(weights sha256).",
        "",
    ]
    lines += repeats or ["No run was repeated."]
    return "\n".join(lines) + "\n"


def own_run_label(frame, cell_method: str, ours) -> str | None:
    """The label (``method`` ⟨checkpoint⟩) of ``cell_method``'s cells in ``frame`` pretrained in the same run as
    ``ours`` (cells of one checkpoint): a ``pretraining`` run of theirs (``run_identity``) is one of ``ours``'; the
    first by name where several checkpoints are. None where none is, or where ``ours`` has no record: never
    another run's checkpoint."""
    wanted = {run for runs in ours["pretraining"] for run in runs}
    candidates = frame[frame.cell_method == cell_method]
    labels = sorted(
        {label for label, runs in zip(candidates["method"], candidates["pretraining"]) if wanted & set(runs)}
    )
    return labels[0] if labels else None
