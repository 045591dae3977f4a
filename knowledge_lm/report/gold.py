"""The reported split's gold answers (and example groups) of a cell's kept predictions, without or with the data.

A predictions file keeps only the sha256 of its gold (``knowledge_lm.core.results.predictions_path``). A cell also
writes that gold, with the split's example groups (the generated task's statement families), to the results
store's gold folder (``knowledge_lm.core.results.write_gold``: ``results/gold/<sha256[:16]>.json.gz``, once per gold),
so the leaderboard needs no data directory. ``cell_gold`` and ``cell_groups`` read that first (its hash checked);
where the store lacks it they recompute it from the data directory through the code path the cell was evaluated
with (``report_gold``, ``report_groups``: the dataset's data module with the cell's options, its base backbone's
tokenizer, the reported split's evaluation loader and the task kind's ``gold``), else raise ``MissingGold``.
``python -m knowledge_lm.report.gold [RESULTS_DIR] [--data-dir DIR] [--dry-run]`` writes the store's gold for every
kept predictions file from the data directory (``write_store_gold``).
"""

import argparse
import json
import sys
from functools import lru_cache
from pathlib import Path

from knowledge_lm.core.caches import read_cached_json
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.results import (
    gold_path,
    gold_sha256,
    predictions_path,
    read_gold,
    read_predictions,
    record_key,
    result_files,
    write_gold,
)

# Dataset options that change neither a split's examples nor their encoding.
NOT_GOLD_OPTIONS = ("knowledge", "cache_dir", "num_workers")


class MissingGold(KlmError):
    """The gold of a cell's kept predictions is neither in the results store nor recomputable (no data directory,
    the dataset or its split not in it): a page would lose its bootstrap sections and figures, so it is not written
    (issue 29: pages never degrade silently)."""


def missing_gold(where: str, error: KlmError) -> MissingGold:
    return MissingGold(
        f"no gold for {where}: {error}; the leaderboard pages need it for their bootstrap sections and figures: "
        "pass --data-dir (or set DATA_DIR) to the data the cells ran on, or keep its gold in the results store "
        "(python -m knowledge_lm.report.gold)"
    )


def store_dir(result_path: Path, result: dict) -> Path:
    """The results store a cell's result file lies in: its path less the cell's key (``record_key``)."""
    return Path(result_path).parents[record_key(result["cell"]).count("/")]


@lru_cache(maxsize=None)
def stored_gold(results_dir: Path, digest: str) -> dict | None:
    """``knowledge_lm.core.results.read_gold``, once per regeneration (``write_leaderboards`` empties this cache)."""
    return read_gold(results_dir, digest)


def cell_gold(result_path: Path, result: dict, digest: str, data_dir=None) -> list:
    """The gold of the reported split of the cell of ``result_path`` whose predictions file holds ``digest``: the
    store's gold of that sha256, else recomputed from the data directory (``report_gold``, ``MissingGold`` without
    it)."""
    stored = stored_gold(store_dir(result_path, result), digest)
    return stored["gold"] if stored is not None else report_gold(result, data_dir)


def cell_groups(result_path: Path, result: dict, digest: str, data_dir=None) -> list[str] | None:
    """The example groups of the same split (``cell_gold``): those stored beside its gold, else ``report_groups``."""
    stored = stored_gold(store_dir(result_path, result), digest)
    return stored.get("groups") if stored is not None else report_groups(result, data_dir)


def report_module(result: dict, data_dir=None) -> dict:
    """The keyword arguments of ``split_gold`` (and ``split_groups``) for ``result``'s reported split; ``MissingGold``
    where no data directory is found."""
    from knowledge_lm.core.io import resolve_data_dir

    train = result["config"]["train"]
    # A pretraining checkpoint keeps its base backbone's tokenizer (and may not be on this machine).
    tokenizer = result["backbone"].get("pretrained_from") or result["cell"]["backbone"]
    try:
        resolved = resolve_data_dir(data_dir)
    except KlmError as error:
        raise missing_gold(f"{result['cell']['dataset']}/{result['cell']['task']}", error) from None
    return {
        "dataset": result["cell"]["dataset"],
        "task": result["cell"]["task"],
        "split": result["report_split"],
        "tokenizer": tokenizer,
        "max_length": train["max_length"],
        "eval_batch_size": train["eval_batch_size"],
        "options": gold_options(result),
        "data_dir": str(resolved) if resolved else None,
    }


def gold_options(result: dict) -> str:
    """The dataset options of ``result``'s cell that choose its examples and their gold (not ``NOT_GOLD_OPTIONS``),
    as JSON."""
    options = result["config"]["dataset_options"]
    return json.dumps({name: value for name, value in options.items() if name not in NOT_GOLD_OPTIONS}, sort_keys=True)


def examples_key(result: dict) -> tuple:
    """What names the examples of ``result``'s reported split whatever the tokenizer: dataset, task, split and the
    dataset options that choose them (``gold_options``; their groups are the same for every backbone)."""
    return result["cell"]["dataset"], result["cell"]["task"], result["report_split"], gold_options(result)


def report_gold(result: dict, data_dir=None) -> list:
    """The gold answers of ``result``'s reported split, in split order. ``data_dir``: as ``klm bench``'s
    ``--data-dir`` (None: ``$DATA_DIR``, else ``../shared/data`` beside the checkout). ``MissingGold`` where the
    data directory, the dataset or its split is missing or the tokenizer cannot be loaded."""
    return split_gold(**report_module(result, data_dir))


def report_groups(result: dict, data_dir=None) -> list[str] | None:
    """The group of each example of ``result``'s reported split, in split order (the data module's
    ``example_groups``: the generated task's statement families); None where the dataset has no groups or no
    data (``report_gold`` warns of that)."""
    return split_groups(**report_module(result, data_dir))


@lru_cache(maxsize=None)
def backbone_tokenizer(name: str):
    from knowledge_lm.core.backbones import load_tokenizer

    return load_tokenizer(name)


@lru_cache(maxsize=None)
def data_module(
    dataset: str,
    task: str,
    *,
    tokenizer: str,
    max_length: int,
    eval_batch_size: int,
    options: str,
    data_dir: str | None,
    cache_dir: str,
):
    """The data module of a cell's dataset options (``options``, as JSON), its labelled splits read: once per
    process and cache directory, for its gold and its groups alike (the generated task generates its data once)."""
    from knowledge_lm.core.registry import DATASETS

    data = DATASETS.get(dataset)(
        task=task,
        tokenizer=backbone_tokenizer(tokenizer),
        data_dir=data_dir,
        max_length=max_length,
        eval_batch_size=eval_batch_size,
        cache_dir=cache_dir,
        **json.loads(options),
    )
    data.read_labelled()
    return data


def labelled_split(split: str, **module):
    """The data module of ``module`` (``report_module``'s keyword arguments less ``split``) in the cache directory,
    and its ``split``'s labelled records; a ``KlmError`` where the data or that split is missing."""
    from knowledge_lm.data.base import default_cache_dir

    data = data_module(cache_dir=str(default_cache_dir()), **module)
    records = data.read_labelled().get(split)
    if records is None:
        raise KlmError(f"the data has no {split} split")
    return data, records


@lru_cache(maxsize=None)
def split_gold(*, split: str, **module) -> list:
    """``report_gold`` of one data module (``module``: ``report_module``'s keyword arguments less ``split``; its
    ``options`` the dataset options as JSON), once per process."""
    from knowledge_lm.core.results import write_json_atomic

    where = (
        f"{module['dataset']}/{module['task']} ({split} split, {module['tokenizer']} tokenizer, "
        f"max_length {module['max_length']})"
    )
    try:
        data, records = labelled_split(split, **module)
    except KlmError as error:
        raise missing_gold(where, error) from None
    cached = data.cache_dir / "gold" / module["dataset"] / module["task"] / f"{split}-{data.encoding_key(records)}.json"
    stored = read_cached_json(cached, lambda value: isinstance(value, dict) and isinstance(value.get("gold"), list))
    if stored is not None:
        return stored["gold"]
    gold = [answer for batch in data.evaluation_loader(split) for answer in data.task_kind.gold(batch)]
    write_json_atomic(cached, {"gold": gold})
    return gold


@lru_cache(maxsize=None)
def split_groups(*, split: str, **module) -> list[str] | None:
    """``report_groups`` of one data module, as ``split_gold`` builds it."""
    try:
        data, _ = labelled_split(split, **module)
    except KlmError:
        return None  # split_gold, called first, raises MissingGold
    return data.example_groups(split)


def write_store_gold(results_dir: Path, data_dir=None, dry_run: bool = False) -> dict[str, int]:
    """Write the store's gold (``knowledge_lm.core.results.write_gold``) for every kept predictions file under
    ``results_dir`` whose gold it lacks, recomputed from the data directory (``report_gold``, ``MissingGold``
    without it) and written only where it has the sha256 the file holds. Counts: ``files`` (with predictions),
    ``golds`` (their distinct gold sha256s), ``stored`` (already in the store), ``written``, ``mismatched`` (no
    file of that sha256 is of the data's gold: not written; a warning names one), ``examples`` (of the golds
    written, or to write with ``dry_run``, which writes nothing and needs no data)."""
    from knowledge_lm.core.results import warn

    by_digest: dict[str, list[tuple[Path, dict]]] = {}
    for path, result in result_files(results_dir):
        if not predictions_path(path).is_file():
            continue
        try:
            stored = read_predictions(predictions_path(path))
        except KlmError as error:
            warn(f"{error}; skipped")
            continue
        if stored.get("gold_sha256") and stored["split"] == result["report_split"]:
            by_digest.setdefault(stored["gold_sha256"], []).append((path, result, len(stored["predicted"])))
    counts = {"files": sum(map(len, by_digest.values())), "golds": len(by_digest), "stored": 0, "written": 0}
    counts.update(mismatched=0, examples=0)
    for digest, cells in sorted(by_digest.items()):
        if read_gold(results_dir, digest) is not None:
            counts["stored"] += 1
            continue
        if dry_run:
            counts["examples"] += cells[0][2]
            continue
        for path, result, _ in cells:
            gold = report_gold(result, data_dir)
            if gold_sha256(gold) == digest:
                write_gold(results_dir, gold, report_groups(result, data_dir))
                counts["written"] += 1
                counts["examples"] += len(gold)
                break
        else:
            counts["mismatched"] += 1
            warn(f"{cells[0][0]}: its kept predictions are of another gold than the data directory gives; not stored")
    return counts


def main(argv=None) -> int:
    """``python -m knowledge_lm.report.gold [RESULTS_DIR] [--data-dir DIR] [--dry-run]``: ``write_store_gold``; rc 1
    where a gold of another sha256 than its files' was left unwritten, 2 on an error."""
    parser = argparse.ArgumentParser(
        prog="python -m knowledge_lm.report.gold",
        description="keep in the results store the gold of every kept predictions file, from the data directory, "
        "so that klm leaderboard needs no data directory",
    )
    parser.add_argument("results_dir", nargs="?", type=Path, help="default: results/ of the project root")
    parser.add_argument(
        "--data-dir", type=Path, help="the data the cells ran on (default: $DATA_DIR, else ../shared/data)"
    )
    parser.add_argument("--dry-run", action="store_true", help="count the golds to write; write nothing")
    args = parser.parse_args(argv)
    if args.results_dir is None:
        from knowledge_lm.core.paths import project_path

        args.results_dir = project_path("results")
    if not args.results_dir.is_dir():
        print(f"error: results store {args.results_dir} is not a folder", file=sys.stderr)
        return 2
    try:
        counts = write_store_gold(args.results_dir, args.data_dir, args.dry_run)
    except KlmError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    folder = gold_path(args.results_dir, "0" * 16).parent
    size = sum(path.stat().st_size for path in folder.glob("*.json.gz")) if folder.is_dir() else 0
    to_write = counts["golds"] - counts["stored"]
    print(
        f"{counts['files']} predictions files, {counts['golds']} distinct golds: {counts['stored']} already stored, "
        + (
            f"{to_write} to write ({counts['examples']} examples)"
            if args.dry_run
            else f"{counts['written']} written ({counts['examples']} examples), {counts['mismatched']} of another gold"
        )
        + f"; {folder}: {size / 1024:.0f} KiB"
    )
    return 1 if counts["mismatched"] else 0


if __name__ == "__main__":
    sys.exit(main())
