"""The reported split's gold answers of a finished cell, recomputed from the data directory.

A predictions file keeps only the sha256 of its gold (``knowledge_lm.core.results.predictions_path``): labels
belong in the data directory, not in the project. The leaderboard takes a cell's kept predictions only where
the gold recomputed here has that hash. It comes through the code path the cell was evaluated with: the
dataset's data module with the cell's options and maximum length, its (base) backbone's tokenizer, the reported
split's evaluation loader and the task kind's ``gold`` per batch. Neither a model nor knowledge features nor the
train split's tokenization are needed. Computed gold is cached under the cache directory, keyed by the split's
records, the tokenizer and the maximum length (what its encoding depends on). The same data module gives the
split's example groups (``report_groups``: the generated task's statement families) where the dataset has them.
"""

import json
from functools import lru_cache

from knowledge_lm.core.errors import KlmError

# Dataset options that change neither a split's examples nor their encoding.
NOT_GOLD_OPTIONS = ("knowledge", "cache_dir", "num_workers")


class MissingGold(KlmError):
    """The gold of a cell's kept predictions cannot be recomputed (no data directory, the dataset or its split not
    in it): a page would lose its bootstrap sections and figures, so it is not written (issue 29: pages never
    degrade silently)."""


def missing_gold(where: str, error: KlmError) -> MissingGold:
    return MissingGold(
        f"no gold for {where}: {error}; the leaderboard pages need it for their bootstrap sections and figures: "
        "pass --data-dir (or set DATA_DIR) to the data the cells ran on"
    )


def report_module(result: dict, data_dir=None) -> tuple:
    """The arguments of ``split_gold`` (and ``split_groups``) for ``result``'s reported split; ``MissingGold`` where
    no data directory is found."""
    from knowledge_lm.core.io import resolve_data_dir

    options = {
        name: value for name, value in result["config"]["dataset_options"].items() if name not in NOT_GOLD_OPTIONS
    }
    train = result["config"]["train"]
    # A pretraining checkpoint keeps its base backbone's tokenizer (and may not be on this machine).
    tokenizer = result["backbone"].get("pretrained_from") or result["cell"]["backbone"]
    try:
        resolved = resolve_data_dir(data_dir)
    except KlmError as error:
        raise missing_gold(f"{result['cell']['dataset']}/{result['cell']['task']}", error) from None
    return (
        result["cell"]["dataset"],
        result["cell"]["task"],
        result["report_split"],
        tokenizer,
        train["max_length"],
        train["eval_batch_size"],
        json.dumps(options, sort_keys=True),
        str(resolved) if resolved else None,
    )


def report_gold(result: dict, data_dir=None) -> list:
    """The gold answers of ``result``'s reported split, in split order. ``data_dir``: as ``klm bench``'s
    ``--data-dir`` (None: ``$DATA_DIR``, else ``../shared/data`` beside the checkout). ``MissingGold`` where the
    data directory, the dataset or its split is missing or the tokenizer cannot be loaded."""
    return split_gold(*report_module(result, data_dir))


def report_groups(result: dict, data_dir=None) -> list[str] | None:
    """The group of each example of ``result``'s reported split, in split order (the data module's
    ``example_groups``: the generated task's statement families); None where the dataset has no groups or no
    data (``report_gold`` warns of that)."""
    return split_groups(*report_module(result, data_dir))


@lru_cache(maxsize=None)
def backbone_tokenizer(name: str):
    from knowledge_lm.core.backbones import load_tokenizer

    return load_tokenizer(name)


@lru_cache(maxsize=None)
def data_module(
    dataset: str,
    task: str,
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


@lru_cache(maxsize=None)
def split_gold(
    dataset: str,
    task: str,
    split: str,
    tokenizer: str,
    max_length: int,
    eval_batch_size: int,
    options: str,
    data_dir: str | None,
) -> list:
    """``report_gold`` of one data module (``options``: its dataset options as JSON), once per process."""
    from knowledge_lm.core.results import write_json_atomic
    from knowledge_lm.data.base import default_cache_dir

    where = f"{dataset}/{task} ({split} split, {tokenizer} tokenizer, max_length {max_length})"
    try:
        data = data_module(
            dataset, task, tokenizer, max_length, eval_batch_size, options, data_dir, str(default_cache_dir())
        )
        records = data.read_labelled().get(split)
        if records is None:
            raise KlmError(f"the data has no {split} split")
    except KlmError as error:
        raise missing_gold(where, error) from None
    cached = data.cache_dir / "gold" / dataset / task / f"{split}-{data.encoding_key(records)}.json"
    if cached.is_file():
        return json.loads(cached.read_text())["gold"]
    gold = [answer for batch in data.evaluation_loader(split) for answer in data.task_kind.gold(batch)]
    write_json_atomic(cached, {"gold": gold})
    return gold


@lru_cache(maxsize=None)
def split_groups(
    dataset: str,
    task: str,
    split: str,
    tokenizer: str,
    max_length: int,
    eval_batch_size: int,
    options: str,
    data_dir: str | None,
) -> list[str] | None:
    """``report_groups`` of one data module, as ``split_gold`` builds it."""
    from knowledge_lm.data.base import default_cache_dir

    try:
        data = data_module(
            dataset, task, tokenizer, max_length, eval_batch_size, options, data_dir, str(default_cache_dir())
        )
        if split not in data.read_labelled():
            return None
    except KlmError:
        return None  # split_gold, called first, raises MissingGold
    return data.example_groups(split)
