"""``klm compare A B``: Δ paired by seed on the cells both ran, with the pages' test, correction and verdict."""

import json

import pytest
from helpers import stored_result

from knowledge_lm.cli import main
from knowledge_lm.core.results import Cell, write_json_atomic

FIELDS = {"data": {"subset_hash": "x", "train_size": 10}, "budget": {"max_steps": 1, "per_device_batch_size": 1}}


def store(results, method, task, accuracies, variant=""):
    for seed, accuracy in enumerate(accuracies, 1):
        cell = Cell(method, "glue", task, 1.0, seed, "minilm", variant)
        write_json_atomic(
            cell.result_path(results), stored_result(cell, metrics={"test": {"accuracy": accuracy}}, **FIELDS)
        )


def compared(capsys, *args) -> list[dict]:
    assert main(["compare", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_compare_pairs_seeds_both_ran(tmp_path, capsys):
    results = tmp_path / "results"
    store(results, "kam", "rte", [60.0, 62.0, 61.0, 63.0])
    store(results, "kam-no-entity", "rte", [55.0, 56.0, 56.0])  # seed 4 not run: left out
    store(results, "kam", "mrpc", [70.0])  # not run by the other
    [row] = compared(capsys, "kam", "kam-no-entity", "--results-dir", str(results))
    assert (row["dataset"], row["task"], row["fraction"], row["n"], row["seeds"]) == ("glue", "rte", 1.0, 3, 3)
    assert row["delta"] == pytest.approx(16 / 3) and row["first"] == pytest.approx(61.0)
    assert row["q"] == pytest.approx(row["p"]) and row["verdict"] == "better"  # one row: BH leaves p


def test_compare_a_variant_and_the_table(tmp_path, capsys):
    results = tmp_path / "results"
    store(results, "kam", "rte", [60.0, 61.0, 62.0])
    store(results, "kam", "rte", [60.0, 61.0, 62.0], variant="a0")
    [row] = compared(capsys, "kam", "kam/a0", "--results-dir", str(results), "--dataset", "glue")
    assert row["delta"] == 0 and row["verdict"] == "no difference"
    assert main(["compare", "kam", "kam/a0", "--results-dir", str(results)]) == 0
    assert "no difference" in capsys.readouterr().out


def test_compare_bad_input(tmp_path, capsys):
    results = tmp_path / "results"
    store(results, "kam", "rte", [60.0])
    assert main(["compare", "kam", "nosuch", "--results-dir", str(results)]) == 2
    assert "unknown method 'nosuch'" in capsys.readouterr().err
    assert main(["compare", "kam", "baseline", "--results-dir", str(results)]) == 2
    assert "no dataset, task and fraction where both kam and baseline ran" in capsys.readouterr().err
