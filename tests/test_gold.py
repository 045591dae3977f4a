"""Predictions files keep their gold's sha256 only; the gold is recomputed from the data directory through the
code path training evaluates with, and a file counts only where the two agree."""

import gzip
import json
from pathlib import Path

import pytest

from knowledge_lm.core.results import gold_sha256, predictions_path, read_predictions, strip_gold

SIZES = {"train_size": 40, "dev_size": 10, "test_size": 12}


def generated_result(dataset_options=None, backbone="tiny", **train) -> dict:
    """What a cell records that its gold depends on: a generated/facts cell on the tiny backbone."""
    return {
        "cell": {
            "method": "baseline",
            "dataset": "generated",
            "task": "facts",
            "fraction": 1.0,
            "seed": 1,
            "backbone": backbone,
            "variant": "",
        },
        "config": {
            "dataset_options": dict(SIZES) if dataset_options is None else dataset_options,
            "train": {"max_length": 32, "eval_batch_size": 8, **train},
        },
        "backbone": {"name": backbone},
        "report_split": "test",
    }


def test_gold_is_the_evaluation_loaders_gold_without_the_train_split_or_knowledge(tmp_path, monkeypatch):
    """The same answers as a set-up module's evaluation loader gives the model (batch size aside), from the report
    split's tokenization alone, cached; knowledge options change nothing."""
    from knowledge_lm.core.backbones import load_tokenizer
    from knowledge_lm.data.generated import GeneratedDataModule
    from knowledge_lm.report.gold import report_gold, split_gold

    monkeypatch.setenv("KLM_CACHE_DIR", str(tmp_path / "cache"))
    split_gold.cache_clear()
    gold = report_gold(generated_result())
    assert [
        path.name.split("-")[0] for path in (tmp_path / "cache" / "tokenized" / "generated" / "facts").iterdir()
    ] == ["test"]
    [cached] = (tmp_path / "cache" / "gold" / "generated" / "facts").iterdir()
    assert json.loads(cached.read_text())["gold"] == gold

    data = GeneratedDataModule(
        tokenizer=load_tokenizer("tiny"), max_length=32, eval_batch_size=5, cache_dir=tmp_path / "set-up", **SIZES
    )
    data.setup()
    assert gold == [
        answer
        for batch in data.val_dataloader()[data.eval_split_names.index("test")]
        for answer in data.task_kind.gold(batch)
    ]
    assert len(gold) == SIZES["test_size"] and set(gold) <= {0, 1}
    split_gold.cache_clear()
    assert report_gold(generated_result({**SIZES, "knowledge": {"link_noise": 0.3}}, eval_batch_size=3)) == gold


@pytest.mark.parametrize(
    "dataset, task, split",
    [
        ("openentity", "main", "test"),
        ("semeval2010", "main", "test"),
        ("glue", "stsb", "test"),
        ("redocred", "revised", "test"),
        ("fewrel", "main", "test"),
    ],
)
def test_gold_of_shared_datasets_matches_a_set_up_module(shared_data, tmp_path, dataset, task, split):
    """Typing (multi-hot), relation, regression and document-level gold, from the data directory."""
    from knowledge_lm.core.backbones import load_tokenizer
    from knowledge_lm.core.registry import DATASETS
    from knowledge_lm.report.gold import report_gold

    result = {
        "cell": {"dataset": dataset, "task": task, "backbone": "tiny"},
        "backbone": {"name": "tiny"},
        "config": {"dataset_options": {"knowledge": {}}, "train": {"max_length": 48, "eval_batch_size": 64}},
        "report_split": split,
    }
    gold = report_gold(result, shared_data)
    data = DATASETS.get(dataset)(
        task=task, tokenizer=load_tokenizer("tiny"), data_dir=shared_data, max_length=48, cache_dir=tmp_path
    )
    data.setup()
    assert data.report_split == split
    assert gold == [answer for batch in data.evaluation_loader(split) for answer in data.task_kind.gold(batch)]


def test_missing_data_is_an_error_naming_it(tmp_path, monkeypatch):
    from knowledge_lm.report.gold import MissingGold, report_gold

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = {
        "cell": {"dataset": "glue", "task": "rte", "backbone": "tiny"},
        "backbone": {"name": "tiny"},
        "config": {"dataset_options": {}, "train": {"max_length": 32, "eval_batch_size": 8}},
        "report_split": "dev",
    }
    with pytest.raises(MissingGold) as missing:
        report_gold(result, tmp_path)
    assert str(missing.value).startswith("no gold for glue/rte") and "no GLUE rte data" in str(missing.value)


def test_older_predictions_files_are_read_as_their_golds_hash_and_stripped(tmp_path):
    path = predictions_path(tmp_path / "f1-s1.json")
    with gzip.open(path, "wt") as out:
        json.dump({"split": "test", "predicted": [1, 0], "gold": [1, 1], "singular_values": [2.0, 1.0]}, out)
    expected = {"split": "test", "predicted": [1, 0], "gold_sha256": gold_sha256([1, 1]), "singular_values": [2.0, 1.0]}
    assert read_predictions(path) == expected
    assert strip_gold(path) and not strip_gold(path)
    with gzip.open(path, "rt") as stored:
        assert json.load(stored) == expected
    assert gold_sha256([{"in_train": [True], "facts": [[0, 1, 2]]}]) == gold_sha256(
        [{"facts": [[0, 1, 2]], "in_train": [True]}]
    )


def test_strip_gold_command_rewrites_every_older_file(tmp_path, capsys):
    from knowledge_lm.core.results import main

    for name in ("a/f1-s1", "b/c/f1-s2"):
        path = predictions_path(tmp_path / f"{name}.json")
        path.parent.mkdir(parents=True)
        with gzip.open(path, "wt") as out:
            json.dump({"split": "dev", "predicted": [0], "gold": [0]}, out)
    assert main(["strip-gold", str(tmp_path)]) == 0 and "2 of 2" in capsys.readouterr().out
    assert all("gold" not in read_predictions(path) for path in tmp_path.rglob("*.predictions.json.gz"))


def test_no_committed_predictions_file_holds_gold():
    """Gold belongs in the data directory: committed predictions files keep its sha256 only."""
    results = Path(__file__).resolve().parents[1] / "results"
    for path in sorted(results.rglob("*.predictions.json.gz")):
        with gzip.open(path, "rt") as handle:
            assert "gold" not in json.load(handle), path
