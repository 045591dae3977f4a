"""The results store: one JSON file per finished cell, written atomically, never edited afterwards."""

import gzip
import hashlib
import json
import os
import secrets
import sys
import time
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TypedDict

from knowledge_lm.core.backbones import backbone_label, unhashed_label, weights_checksum
from knowledge_lm.core.errors import KlmError

DEFAULT_RESULTS_DIR = Path("results")
DEFAULT_RUNS_DIR = Path("runs")
# A cell's run directory (``Cell.run_dir``) holds its newest checkpoint while it runs and its error if it failed.
LAST_CHECKPOINT = "last.ckpt"
FAILURE_FILE = "failed.json"


class CellRecord(TypedDict):
    """What a result names its cell by (``Cell``'s fields; ``backbone`` its label)."""

    method: str
    dataset: str
    task: str
    fraction: float
    seed: int
    backbone: str
    variant: str


class _CellResultRequired(TypedDict):
    cell: CellRecord
    config: dict  # {"train": TrainConfig's fields, "dataset_options": ..., "identity": run.identity's (newer results)}
    git: dict  # {"commit", "dirty"}: dirty where provenance.DIRTY_PATHS differ from the commit
    versions: dict  # library → version, "knowledge-lm" among them
    device: dict  # {"accelerator", "name", "count", "precision", ...}
    backbone: dict  # BackboneInfo: name, path, checksum, pretrained_from, ...
    # {"subset_seed", "subset_hash", "train_size", "eval_sizes", "split_hashes" (of the ids),
    #  "data_hashes" (split → records_sha256 of its records as read; results from before it lack it), "data_dir"}
    data: dict
    budget: dict  # TrainConfig.budget: max_steps, eval_every_steps, per_device_batch_size, ...
    report_split: str
    metrics: dict[str, dict[str, float]]  # split → metric → value, at the best dev evaluation
    wall_time_s: float


class CellResult(_CellResultRequired, total=False):
    """One finished cell's result file, as ``knowledge_lm.run.cell`` writes it and the report reads it. The keys
    below came later than the store's first results, so an older file may lack them."""

    schema: int
    selection: dict  # {"split": "dev", "metric", "step", "epoch"}: the evaluation reported
    metrics_by_group: dict[str, dict[str, float]]  # example group → {"examples", metric → value}, reported split
    dev_metrics_by_group: dict[str, dict[str, float]]  # the same on dev, the split settings are chosen on
    method_stats: dict  # what the method measured of its own run (e.g. SI's kept share)
    evaluations: list[dict]  # every evaluation: step, epoch, split → metrics (test only at a new best dev score)
    resumed_from_checkpoint: bool
    finished_at: str
    protocol: dict  # {"split_version", "scorer_version"}: of the dataset's splits and the task's scorer; absent: "1"


@dataclass(frozen=True)
class Cell:
    method: str
    dataset: str
    task: str
    fraction: float
    seed: int
    backbone: str = "minilm"
    variant: str = ""  # a named set of dataset-option overrides of the sweep (e.g. a link-noise level)

    @property
    def backbone_label(self) -> str:
        return backbone_label(self.backbone)

    @property
    def key(self) -> str:
        return record_key({**self.__dict__, "backbone": self.backbone_label})

    def result_path(self, results_dir: Path) -> Path:
        return Path(results_dir) / f"{self.key}.json"

    def stored_result_path(self, results_dir: Path) -> Path:
        """Where this cell's result is stored: its ``result_path``, or, where only that is missing, a result filed
        under a local directory's label from before labels held the weights' checksum (``unhashed_label``) whose
        recorded weights checksum is this directory's."""
        path = self.result_path(results_dir)
        unhashed = unhashed_label(self.backbone)
        if path.is_file() or unhashed is None:
            return path
        older = Path(results_dir) / f"{record_key({**self.__dict__, 'backbone': unhashed})}.json"
        try:
            recorded = json.loads(older.read_text())["backbone"]["checksum"]
        except (OSError, ValueError, KeyError, TypeError):
            return path
        checksum = weights_checksum(Path(self.backbone).expanduser().resolve())
        return older if checksum is not None and recorded == checksum else path

    def run_dir(self, runs_dir: Path) -> Path:
        return Path(runs_dir) / self.key

    def log_dir(self, results_dir: Path) -> Path:
        """Its training logs (the ``logger`` setting's), one ``version_N`` folder per attempt: written while it
        trains and kept, whether it finished, failed or was resumed."""
        return Path(results_dir) / LOGS_DIR / self.key


def record_key(cell: dict) -> str:
    """A cell's key (its result's path under the store, less ``.json``) from its fields, ``backbone`` as a label:
    ``Cell.key``, and what a result's recorded ``cell`` says its path is."""
    variant = f"{cell['variant']}/" if cell.get("variant") else ""
    return (
        f"{cell['dataset']}/{cell['task']}/{cell['method']}/{cell['backbone']}/{variant}"
        f"f{float(cell['fraction']):g}-s{int(cell['seed'])}"
    )


class BadResult(KlmError):
    """A result file that does not parse or is not of ``CellResult``'s shape (``kind`` "corrupt"), or records
    another cell than its path's ("misfiled")."""

    def __init__(self, message: str, kind: str = "corrupt"):
        super().__init__(message)
        self.kind = kind


def read_result(path: Path, results_dir: Path) -> CellResult:
    """The result stored at ``path`` under ``results_dir``, checked: it parses, holds ``CellResult``'s required keys
    (its ``cell`` those of ``CellRecord``, its ``metrics`` the reported split's), and records the cell its path
    names; else ``BadResult``, whose message says which."""
    path = Path(path)
    try:
        result = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadResult(f"{path}: corrupt, does not parse ({error})") from None
    missing = sorted(CellResult.__required_keys__ - set(result)) if isinstance(result, dict) else ["all"]
    if not missing:
        missing = [
            f"cell.{key}"
            for key in sorted(CellRecord.__required_keys__ - {"variant"})
            if key not in (result["cell"] if isinstance(result["cell"], dict) else {})
        ]
    if not missing and not isinstance(
        (result["metrics"] if isinstance(result["metrics"], dict) else {}).get(result["report_split"]), dict
    ):
        missing = [f"metrics.{result['report_split']}"]
    if missing:
        raise BadResult(f"{path}: corrupt, not a cell result (missing {', '.join(missing)})")
    try:
        recorded = record_key(result["cell"])
    except (TypeError, ValueError):
        raise BadResult(f"{path}: corrupt, its cell's fraction or seed is not a number") from None
    expected = path.relative_to(results_dir).with_suffix("").as_posix()
    if recorded != expected:
        raise BadResult(f"{path}: misfiled, it records cell {recorded}", "misfiled")
    return result


def set_aside(result_path: Path) -> list[Path]:
    """Rename a bad result file (``read_result``) and its predictions file to ``<name>.corrupt-<UTC time>``, so
    that the cell runs again; never deleted. Returns where they went."""
    suffix = f".corrupt-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
    moved = []
    for path in (Path(result_path), predictions_path(result_path)):
        if path.is_file():
            moved.append(path.rename(path.with_name(path.name + suffix)))
    return moved


def write_file_atomic(path: Path, write):
    """``write(staging path)`` beside ``path``, then renamed onto it: readers never see a half-written file. The
    file's mode is what the umask allows (0644 by default), as for any file ``open`` creates."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.parent / f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"
    os.close(os.open(staging, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))  # not mkstemp: it makes them 0600
    try:
        write(staging)
        os.replace(staging, path)
    except OSError as error:
        staging.unlink(missing_ok=True)
        written = error.filename2 or error.filename  # a copy's (filename → filename2) target is what was written
        if written is not None and Path(str(written)).name != staging.name:
            raise
        raise OSError(error.errno, error.strerror, str(path)) from error  # a failed write names no file, or staging
    except BaseException:
        staging.unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, payload: dict):
    def write(staging):
        with open(staging, "w") as out:
            json.dump(payload, out, indent=1, sort_keys=True)
            out.write("\n")

    write_file_atomic(path, write)


def write_failure(run_dir: Path, message: str, trace: str = ""):
    """A cell's ``failed.json`` in its run directory: its error in one line, the end of the traceback (where one
    was caught), when."""
    write_json_atomic(
        Path(run_dir) / FAILURE_FILE,
        {"error": message, "traceback": trace[-4000:], "at": datetime.now(timezone.utc).isoformat(timespec="seconds")},
    )


def free_output_dir(out) -> Path:
    """``out`` as a path, refused (one line) when it exists and is not an empty folder: checked before any work."""
    from knowledge_lm.core.errors import KlmError

    out = Path(out).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise KlmError(f"--out {out} already exists and is not an empty folder; remove it or choose another")
    return out


def write_dir_atomic(out: Path, write) -> Path:
    """``write(folder)`` into a sibling staging folder renamed to ``out`` (absent or empty) at the end, so a
    failed write leaves nothing at ``out``."""
    import shutil

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        write(staging)
        if out.exists():
            out.rmdir()  # empty, as free_output_dir checked
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


PROBES_DIR = "probes"
SUPERSEDED_DIR = "superseded"  # results replaced by a re-run, kept (the store keeps every result)
PRETRAINING_DIR = "pretraining"  # the manifests of `klm pretrain` runs, whose checkpoints cells fine-tune
LOGS_DIR = "logs"  # the cells' training logs (Cell.log_dir)
GOLD_DIR = "gold"  # the reported splits' gold of the kept predictions, by sha256 (write_gold)
DERIVED_DIR = "derived"  # numbers the pages derive from that gold (knowledge_lm.report.derived)
COVERAGE_DIR = "coverage"  # <dataset>.json: what of the KG reaches the methods (`klm prepare --coverage`)
# These live beside the cells.
NOT_CELLS = (PROBES_DIR, "speed", SUPERSEDED_DIR, PRETRAINING_DIR, LOGS_DIR, GOLD_DIR, DERIVED_DIR, COVERAGE_DIR)


def supersede(result_path: Path, results_dir: Path) -> dict[Path, Path]:
    """Move a finished cell's result (and any file beside it of the same cell) under ``superseded/``, named by
    when it finished, so that the cell runs again and the old result stays in the store. Returns where each
    file went (``restore`` puts them back, when the re-run fails)."""
    result_path, results_dir = Path(result_path), Path(results_dir)
    finished = json.loads(result_path.read_text()).get("finished_at", "unknown").replace(":", "")
    target = results_dir / SUPERSEDED_DIR / result_path.relative_to(results_dir).parent
    target.mkdir(parents=True, exist_ok=True)
    moved = {}
    for path in sorted(result_path.parent.glob(result_path.stem + ".*")):
        moved[path] = path.rename(target / f"{result_path.stem}.{finished}{path.name[len(result_path.stem) :]}")
    return moved


def restore(moved: dict[Path, Path]):
    """Undo ``supersede``: a re-run that failed leaves the cell's old result where it was."""
    for original, superseded in moved.items():
        superseded.rename(original)


def predictions_path(result_path: Path) -> Path:
    """Where a cell keeps its best evaluation's decoded predictions of the reported split, beside its result:
    ``split``, ``predicted``, ``gold_sha256`` (the gold itself stays in the data directory; ``knowledge_lm.report.gold``
    recomputes it) and, where the cell had them, ``singular_values`` and ``entity_frequency``."""
    return Path(result_path).with_suffix(".predictions.json.gz")


def gold_sha256(gold: list) -> str:
    """The sha256 of a split's gold answers as canonical JSON: what a predictions file keeps of them."""
    return hashlib.sha256(json.dumps(gold, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def without_gold(kept: dict) -> dict:
    """``kept`` with its ``gold``, if it has one, replaced by the ``gold_sha256`` of it."""
    kept = dict(kept)
    if "gold" in kept:
        kept["gold_sha256"] = gold_sha256(kept.pop("gold"))
    return kept


def read_json_gz(path: Path, what: str):
    """A gzipped JSON file of the store; a ``KlmError`` naming it a corrupt ``what`` where it does not parse."""
    try:
        with gzip.open(path, "rt") as handle:
            return json.load(handle)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise KlmError(f"{path}: corrupt {what} ({type(error).__name__}: {error})") from None


def write_json_gz(path: Path, payload: dict):
    """Written atomically; the same payload gives the same bytes (no time or file name in the gzip header)."""

    def write(staging):
        with open(staging, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as packed:
            packed.write(json.dumps(payload).encode())

    write_file_atomic(path, write)


def read_stored_predictions(path: Path) -> dict:
    """A predictions file as stored (one from before ``gold_sha256`` still holds its gold); a ``KlmError`` where it
    does not parse (truncated) or has no ``split`` and list of ``predicted`` answers."""
    kept = read_json_gz(path, "predictions file")
    if not isinstance(kept, dict) or not isinstance(kept.get("predicted"), list) or "split" not in kept:
        raise KlmError(f"{path}: corrupt predictions file (no split and list of predicted answers)")
    return kept


def read_predictions(path: Path) -> dict:
    """A predictions file; one from before ``gold_sha256`` has its ``gold`` replaced by that hash."""
    return without_gold(read_stored_predictions(path))


def write_predictions(path: Path, payload: dict):
    """Written atomically; a ``gold`` in ``payload`` is kept as its ``gold_sha256`` only. The same payload gives the
    same bytes (``write_json_gz``): the bootstrap seeds its replicates by them."""
    write_json_gz(path, without_gold(payload))


def strip_gold(path: Path) -> bool:
    """Rewrite a predictions file from before ``gold_sha256`` with the hash in place of its gold (the one-time
    migration of ``python -m knowledge_lm.core.results strip-gold``); False, untouched, where it has no gold."""
    kept = read_stored_predictions(path)
    if "gold" not in kept:
        return False
    write_predictions(path, kept)
    return True


def gold_path(results_dir: Path, digest: str) -> Path:
    """Where the store keeps the gold whose ``gold_sha256`` is ``digest`` (``write_gold``)."""
    return Path(results_dir) / GOLD_DIR / f"{digest[:16]}.json.gz"


def read_gold(results_dir: Path, digest: str) -> dict | None:
    """The store's gold of ``digest``: ``{"gold_sha256", "gold", "groups"}``, checked (its gold has that sha256);
    None where the store has none, or a corrupt one (a one-line warning names it; ``write_gold`` replaces it)."""
    path = gold_path(results_dir, digest)
    if not path.is_file():
        return None
    try:
        stored = read_json_gz(path, "gold file")
    except KlmError as error:
        warn(f"{error}; not used")
        return None
    if (
        not isinstance(stored, dict)
        or not isinstance(stored.get("gold"), list)
        or gold_sha256(stored["gold"]) != digest
    ):
        warn(f"{path}: corrupt gold file (its gold is not of sha256 {digest}); not used")
        return None
    return stored


def write_gold(results_dir: Path, gold: list, groups: list[str] | None = None) -> Path | None:
    """Keep a reported split's ``gold`` (and its examples' ``groups``, where the report scores them apart) in the
    store, under ``gold_path`` of its ``gold_sha256``: what lets the leaderboard check and score kept predictions
    without the data directory. Written atomically, once per gold (None where the store already has it)."""
    digest = gold_sha256(gold)
    path = gold_path(results_dir, digest)
    if path.is_file() and read_gold(results_dir, digest) is not None:
        return None
    write_json_gz(path, {"gold_sha256": digest, "gold": gold, "groups": groups})
    return path


_WARNED: set[str] = set()


def warn(message: str):
    """A one-line warning on stderr: what a report skips, and why; each message once per process (pages that read
    the same files, the glance page and a dataset's, would repeat it)."""
    if message not in _WARNED:
        _WARNED.add(message)
        print(f"warning: {message}", file=sys.stderr)


def result_files(results_dir: Path, datasets=()) -> list[tuple[Path, CellResult]]:
    """Every finished cell's result with its file (of ``datasets`` alone, where given: their folders are read, or
    deeper ones of the store's, e.g. ``glue/rte/baseline``);
    what lives under ``NOT_CELLS`` (zero-shot probes, speed records, superseded results and pretraining records)
    is not a cell; a bad one (``read_result``) is skipped with a warning naming it."""
    results = []
    folders = [Path(results_dir) / dataset for dataset in sorted(set(datasets))] or [Path(results_dir)]
    for path in sorted(path for folder in folders for path in folder.rglob("*.json")):
        if path.relative_to(results_dir).parts[0] in NOT_CELLS:
            continue
        try:
            results.append((path, read_result(path, results_dir)))
        except BadResult as error:
            warn(f"{error}; skipped")
    return results


def load_results(results_dir: Path) -> list[CellResult]:
    return [result for _, result in result_files(results_dir)]


def compact_time(iso: str) -> str:
    """An ISO time to the second as a file name part: 2026-11-26T15:35:39+00:00 → 20261126T153539."""
    return "".join(ch for ch in iso[:19] if ch.isalnum())


def main(argv=None) -> int:
    """``python -m knowledge_lm.core.results strip-gold [RESULTS_DIR]``: every predictions file under RESULTS_DIR
    (default results/) that still holds its gold keeps only its ``gold_sha256``."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] != "strip-gold" or len(argv) > 2:
        print("usage: python -m knowledge_lm.core.results strip-gold [RESULTS_DIR]", file=sys.stderr)
        return 2
    results_dir = Path(argv[1] if len(argv) > 1 else DEFAULT_RESULTS_DIR)
    files = sorted(results_dir.rglob("*.predictions.json.gz"))
    stripped = sum(strip_gold(path) for path in files)
    print(f"{stripped} of {len(files)} predictions files under {results_dir} held their gold; now they keep its sha256")
    return 0


if __name__ == "__main__":
    sys.exit(main())
