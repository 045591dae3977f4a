"""Bad input: one clear error line, a non-zero exit code, and no result file."""

import gzip

import pytest

from knowledge_lm.cli import main

RTE_HEADER = "index\tsentence1\tsentence2\tlabel\n"
RTE_ROW = "0\tA man sleeps.\tSomeone sleeps.\tentailment\n"


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def run(capsys, tmp_path, *args):
    code = main(["bench", "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs"),
                 "--backbone", "tiny", "--no-leaderboard", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("*.json"))
    return code, err


@pytest.mark.parametrize("args, message", [
    (["--dataset", "glue", "--method", "nope"], "unknown method 'nope'"),
    (["--dataset", "nope"], "unknown dataset 'nope'"),
    (["--dataset", "glue", "--tasks", "nope"], "unknown task 'nope'"),
    (["--dataset", "glue", "--fractions", "0"], "outside (0, 1]"),
    (["--dataset", "glue", "--fractions", "1.5"], "outside (0, 1]"),
    (["--dataset", "glue", "--fractions", "ten"], "expected numbers"),
    (["--dataset", "glue", "--seeds", "a"], "expected integers"),
    (["--dataset", "glue", "--data-dir", "/does/not/exist"], "does not exist"),
    (["--dataset", "glue", "--set", "lr"], "expected key=value"),
    (["--dataset", "glue", "--set", "learning_rate=1"], "unknown training setting"),
    (["--dataset", "glue", "--set", "compile=maybe"], "compile='maybe' is not a boolean"),
    (["--dataset", "glue", "--set", "compile_mode=fast"], "compile_mode='fast' is not one of default, reduce-overhead"),
    (["--config", "/does/not/exist.yaml"], "does not exist"),
])
def test_bad_arguments(capsys, tmp_path, args, message):
    code, err = run(capsys, tmp_path, *args)
    assert code == 2
    assert len(err) == 1 and message in err[0] and err[0].startswith("error: ")


def test_malformed_sweep_yaml(capsys, tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("dataset: glue\nmethods: [baseline\n")
    code, err = run(capsys, tmp_path, "--config", str(config))
    assert code == 2 and "malformed YAML" in err[0]


@pytest.mark.parametrize("train, dev, message", [
    ("index\tsentence1\tsentence2\n0\ta\tb\n", RTE_HEADER + RTE_ROW, "missing column 'label'"),
    (RTE_HEADER + "0\ta\tb\tmaybe\n", RTE_HEADER + RTE_ROW, "bad label 'maybe'"),
    (RTE_HEADER + "0\ta\n", RTE_HEADER + RTE_ROW, "columns"),
    (RTE_HEADER + RTE_ROW, RTE_HEADER, "empty"),
])
def test_malformed_data(capsys, tmp_path, train, dev, message):
    data = tmp_path / "data"
    write(data / "glue_rte" / "train.tsv", train)
    write(data / "glue_rte" / "dev.tsv", dev)
    code, err = run(capsys, tmp_path, "--dataset", "glue", "--tasks", "rte", "--fractions", "1", "--seeds", "1",
                    "--data-dir", str(data))
    assert code == 2
    assert len(err) == 1 and message in err[0] and "glue" in err[0]


def test_malformed_json(capsys, tmp_path):
    data = tmp_path / "data" / "glue_qqp"
    data.mkdir(parents=True)
    with gzip.open(data / "train_subset_powerfulpromptft_train.json.gz", "wt") as handle:
        handle.write('{"0": {"text_a": "a", "text_b": "b", "label": "1"},')
    with gzip.open(data / "train_subset_powerfulpromptft_dev.json.gz", "wt") as handle:
        handle.write('{"0": {"text_a": "a", "text_b": "b", "label": "1"}}')
    code, err = run(capsys, tmp_path, "--dataset", "glue", "--tasks", "qqp", "--fractions", "1", "--seeds", "1",
                    "--data-dir", str(tmp_path / "data"))
    assert code == 2 and "malformed JSON" in err[0] and "train_subset_powerfulpromptft_train" in err[0]


def test_missing_glue_data_offline(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    (tmp_path / "empty").mkdir()
    code, err = run(capsys, tmp_path, "--dataset", "glue", "--tasks", "rte", "--data-dir", str(tmp_path / "empty"))
    assert code == 2 and "no GLUE rte data" in err[0]
