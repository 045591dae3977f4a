"""GLUE: reading every task's files (shared and official layouts), errors on bad input, and the metrics."""

import gzip
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import SHARED
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import DATASETS
from knowledge_lm.data.glue import GlueDataModule
from knowledge_lm.tasks.metrics import compute

# task -> split -> (rows, label counts by label name or None), as the SOURCE.md files give them; the small
# tasks' "train" is the whole train file (before its dev split is held out) and their "test" is GLUE dev.
EXPECTED = {
    "rte": {"train": (2490, {"entailment": 1249, "not_entailment": 1241}), "test": (277, None)},
    "cola": {"train": (8551, {"1": 6023, "0": 2528}), "test": (1043, {"1": 721, "0": 322})},
    "sst2": {"train": (67349, {"1": 37569, "0": 29780}), "test": (872, {"1": 444, "0": 428})},
    "mrpc": {"train": (3668, {"1": 2474, "0": 1194}), "test": (408, {"1": 279, "0": 129})},
    "stsb": {"train": (5749, None), "test": (1500, None)},
    "qnli": {"train": (8999, None), "dev": (1000, None), "test": (5463, {"entailment": 2702, "not_entailment": 2761})},
    "mnli": {
        "train": (8999, None),
        "dev": (1000, None),
        "test": (9815, {"entailment": 3479, "neutral": 3123, "contradiction": 3213}),
        "test_mismatched": (9832, {"entailment": 3463, "neutral": 3129, "contradiction": 3240}),
    },
    "qqp": {"train": (8999, {"0": 5747, "1": 3252}), "dev": (1000, {"0": 623, "1": 377})},
    "wnli": {"train": (635, None), "test": (71, None)},
}
SMALL_TASKS = ("rte", "cola", "sst2", "mrpc", "stsb", "wnli")


def write(path: Path, text: str, compress: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if compress:
        with gzip.open(path.with_name(path.name + ".gz"), "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def read(task: str, data_dir) -> dict[str, list[dict]]:
    return GlueDataModule(task=task, data_dir=data_dir).labelled_splits()


def train_file(splits: dict[str, list[dict]]) -> list[dict]:
    """A small task's train file in file order: its train split with the dev rows held out of it."""
    return sorted(splits["train"] + splits["dev"], key=lambda record: int(record["id"].rsplit("-", 1)[1]))


def test_registered_with_specs():
    assert DATASETS.get("glue") is GlueDataModule
    assert set(DATASETS.entry("glue").default_tasks) <= set(GlueDataModule.tasks)
    assert GlueDataModule.spec("cola").main_metric == "matthews"
    assert GlueDataModule.spec("stsb").kind == "regression" and GlueDataModule.spec("stsb").num_labels == 1
    assert GlueDataModule.spec("mnli").num_labels == 3
    with pytest.raises(KlmError, match="unknown task"):
        GlueDataModule(task="squad", data_dir=SHARED if SHARED.is_dir() else None)


# -- the shared data ---------------------------------------------------------------------------
@pytest.mark.skipif(not SHARED.is_dir(), reason="no shared data folder")
@pytest.mark.parametrize("task", GlueDataModule.tasks)
def test_shared_data_counts(task):
    splits = read(task, SHARED)
    spec = GlueDataModule.spec(task)
    if task in SMALL_TASKS:  # dev is held out of the train file: count them together
        assert set(splits) == {"train", "dev", "test"}
        assert abs(len(splits["dev"]) - min(1000, EXPECTED[task]["train"][0] // 10)) <= 2  # rounded per label
        splits = {"train": train_file(splits), "test": splits["test"]}
    assert set(splits) == set(EXPECTED[task])
    all_ids = [record["id"] for records in splits.values() for record in records]
    assert len(all_ids) == len(set(all_ids))
    for split, (rows, label_counts) in EXPECTED[task].items():
        records = splits[split]
        assert len(records) == rows, split
        assert all(isinstance(record["text_a"], str) and record["text_a"] for record in records)
        pair = task not in ("cola", "sst2")
        assert all((record["text_b"] is not None) == pair for record in records)
        if spec.kind == "regression":
            assert all(0.0 <= record["label"] <= 5.0 for record in records)
        else:
            counts = Counter(spec.labels[record["label"]] for record in records)
            assert set(counts) <= set(spec.labels)
            if label_counts:
                assert counts == label_counts, split


@pytest.mark.skipif(not SHARED.is_dir(), reason="no shared data folder")
def test_shared_data_first_rows():
    rte = read("rte", SHARED)
    assert rte["train"][0]["text_a"] == "No Weapons of Mass Destruction Found in Iraq Yet."
    assert rte["train"][0]["label"] == 1  # not_entailment
    sst2 = read("sst2", SHARED)
    assert sst2["train"][0]["text_a"].strip() == "hide new secretions from the parental units"
    stsb = read("stsb", SHARED)
    assert stsb["test"][0]["label"] == 5.0 and stsb["test"][1]["label"] == 4.75
    mnli = read("mnli", SHARED)
    assert mnli["test"][0]["label"] == 1  # neutral, hub label 1
    # ids and the held-out dev split are stable: a second read gives the same ones
    assert [r["id"] for r in read("rte", SHARED)["dev"]] == [r["id"] for r in rte["dev"]]


@pytest.mark.skipif(not SHARED.is_dir(), reason="no shared data folder")
@pytest.mark.parametrize("task", ["mrpc", "cola"])
def test_small_tasks_select_on_a_stratified_part_of_train(task):
    splits = read(task, SHARED)
    train_ids = {record["id"] for record in splits["train"]}
    assert train_ids.isdisjoint(record["id"] for record in splits["dev"])
    assert all(record["id"].startswith(f"{task}-dev-") for record in splits["test"])
    whole = Counter(record["label"] for record in splits["train"] + splits["dev"])
    held = Counter(record["label"] for record in splits["dev"])
    for label, count in whole.items():  # every label's share of dev is its share of train, to a row
        assert abs(held[label] - count * len(splits["dev"]) / sum(whole.values())) <= 1
    assert GlueDataModule(task=task, data_dir=SHARED).split_version == "2"
    assert GlueDataModule(task="mnli", data_dir=SHARED).split_version == "1"
    assert GlueDataModule.split_origin(task, "dev", "2") == "a part of GLUE train held out, seeded"
    assert GlueDataModule.split_origin(task, "dev", "1") == "GLUE's labelled dev set"  # selected on what it reported


# -- the official GLUE layout --------------------------------------------------------------------
RTE_TSV = (
    "index\tsentence1\tsentence2\tlabel\n"
    "0\tA man sleeps.\tA person sleeps.\tentailment\n"
    "1\tA cat runs.\tA dog sits.\tnot_entailment\n"
)


def mnli_tsv(rows: list[tuple[str, str, str]]) -> str:
    columns = [
        "index",
        "promptID",
        "pairID",
        "genre",
        "sentence1_binary_parse",
        "sentence2_binary_parse",
        "sentence1_parse",
        "sentence2_parse",
        "sentence1",
        "sentence2",
        "label1",
        "gold_label",
    ]
    lines = ["\t".join(columns)]
    for index, (premise, hypothesis, label) in enumerate(rows):
        lines.append(
            "\t".join([str(index), "1", f"{index}e", "fiction", "(", "(", "(", "(", premise, hypothesis, label, label])
        )
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("prefix", ["", "glue_data"])
def test_official_layout_rte(tmp_path, prefix):
    write(tmp_path / prefix / "RTE" / "train.tsv", RTE_TSV)
    write(tmp_path / prefix / "RTE" / "dev.tsv", RTE_TSV, compress=True)
    splits = read("rte", tmp_path)
    assert set(splits) == {"train", "dev", "test"} and len(splits["dev"]) == 1
    assert [r["label"] for r in train_file(splits)] == [0, 1]
    assert splits["test"][1] == {"id": "rte-dev-3", "text_a": "A cat runs.", "text_b": "A dog sits.", "label": 1}


def test_official_layout_cola_sst2_mrpc_stsb_qqp_qnli(tmp_path):
    write(tmp_path / "CoLA" / "train.tsv", "gj04\t1\t\tGood sentence.\ngj04\t0\t*\tSentence bad.\n")
    write(tmp_path / "CoLA" / "dev.tsv", "gj04\t1\t\tFine.")  # no trailing newline, as the real dev.tsv
    cola = read("cola", tmp_path)
    assert [r["label"] for r in train_file(cola)] == [1, 0] and cola["test"][0]["text_a"] == "Fine."

    write(tmp_path / "SST-2" / "train.tsv", "sentence\tlabel\ngreat film \t1\ndull \t0\n")
    write(tmp_path / "SST-2" / "dev.tsv", "sentence\tlabel\nok \t1\n")
    assert [r["label"] for r in train_file(read("sst2", tmp_path))] == [1, 0]

    mrpc = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tA said .\tA says .\n0\t3\t4\tB .\tC .\n"
    write(tmp_path / "MRPC" / "train.tsv", mrpc)
    write(tmp_path / "MRPC" / "dev.tsv", mrpc.lstrip("\ufeff"))
    splits = read("mrpc", tmp_path)
    assert [r["label"] for r in train_file(splits)] == [1, 0] and splits["test"][0]["text_b"] == "A says ."

    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    stsb_rows = "0\tg\tf\t2012\t1\tnone\tnone\tA.\tB.\t3.800\n1\tg\tf\t2012\t2\tnone\tnone\tC.\tD.\t1\n"
    write(tmp_path / "STS-B" / "train.tsv", header + stsb_rows)
    write(tmp_path / "STS-B" / "dev.tsv", header + "0\tg\tf\t2012\t1\tnone\tnone\tA.\tB.\t0\n")
    assert train_file(read("stsb", tmp_path))[0]["label"] == pytest.approx(3.8)

    # QQP/QNLI official: the full train, 1 row in 10 (at most 1,000; rounded per label) held out as dev; GLUE
    # dev is test.
    qqp = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n" + "".join(
        f"{i}\t{2 * i}\t{2 * i + 1}\tQ{i}?\tR{i}?\t{i % 2}\n" for i in range(30)
    )
    write(tmp_path / "QQP" / "train.tsv", qqp)
    write(tmp_path / "QQP" / "dev.tsv", qqp)
    splits = read("qqp", tmp_path)
    assert {split: len(records) for split, records in splits.items()} == {"train": 26, "dev": 4, "test": 30}
    assert {r["id"] for r in splits["train"]}.isdisjoint(r["id"] for r in splits["dev"])
    assert [r["id"] for r in read("qqp", tmp_path)["dev"]] == [r["id"] for r in splits["dev"]]

    qnli = "index\tquestion\tsentence\tlabel\n0\tWho?\tHim.\tentailment\n1\tWhat?\tNo.\tnot_entailment\n"
    write(tmp_path / "QNLI" / "train.tsv", qnli)
    write(tmp_path / "QNLI" / "dev.tsv", qnli)
    splits = read("qnli", tmp_path)
    assert len(splits["train"]) == 1 and len(splits["dev"]) == 1 and [r["label"] for r in splits["test"]] == [0, 1]


def test_official_layout_mnli(tmp_path):
    rows = [
        ("P one.", "H one.", "entailment"),
        ("P two.", "H two.", "neutral"),
        ("P three.", "H three.", "contradiction"),
    ]
    write(tmp_path / "MNLI" / "train.tsv", mnli_tsv(rows * 4))
    write(tmp_path / "MNLI" / "dev_matched.tsv", mnli_tsv(rows))
    write(tmp_path / "MNLI" / "dev_mismatched.tsv", mnli_tsv(rows[:2]), compress=True)
    splits = read("mnli", tmp_path)
    assert {split: len(records) for split, records in splits.items()} == {
        "train": 11,
        "dev": 1,
        "test": 3,
        "test_mismatched": 2,
    }
    assert [r["label"] for r in splits["test"]] == [0, 1, 2]
    assert splits["test"][0]["text_a"] == "P one." and splits["test"][0]["text_b"] == "H one."


def test_shared_layout_wins_over_official(tmp_path):
    write(tmp_path / "glue_rte" / "train.tsv", RTE_TSV, compress=True)
    write(tmp_path / "glue_rte" / "dev.tsv", RTE_TSV, compress=True)
    write(tmp_path / "RTE" / "train.tsv", "broken")
    assert len(train_file(read("rte", tmp_path))) == 2


# -- bad input ----------------------------------------------------------------------------------
def rte_dir(tmp_path, train: str) -> Path:
    write(tmp_path / "RTE" / "train.tsv", train)
    write(tmp_path / "RTE" / "dev.tsv", RTE_TSV)
    return tmp_path / "RTE" / "train.tsv"


def test_missing_column(tmp_path):
    path = rte_dir(tmp_path, "index\tsentence1\tsentence2\tgold\n0\ta\tb\tentailment\n")
    with pytest.raises(KlmError, match="missing column 'label'") as error:
        read("rte", tmp_path)
    assert str(path) in str(error.value)


def test_bad_label(tmp_path):
    path = rte_dir(tmp_path, RTE_TSV + "2\tA.\tB.\tmaybe\n")
    with pytest.raises(KlmError, match="bad label 'maybe'") as error:
        read("rte", tmp_path)
    assert f"{path}:4" in str(error.value)


def test_bad_score(tmp_path):
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    write(tmp_path / "STS-B" / "train.tsv", header + "0\tg\tf\t2012\t1\tnone\tnone\tA.\tB.\thigh\n")
    write(tmp_path / "STS-B" / "dev.tsv", header)
    with pytest.raises(KlmError, match=r"train\.tsv:2: bad label 'high'"):
        read("stsb", tmp_path)


def test_too_few_columns(tmp_path):
    path = rte_dir(tmp_path, RTE_TSV + "2\tonly one sentence\n")
    with pytest.raises(KlmError, match="expected at least 4 tab-separated columns, got 2") as error:
        read("rte", tmp_path)
    assert f"{path}:4" in str(error.value)


def test_too_few_columns_cola(tmp_path):
    write(tmp_path / "CoLA" / "train.tsv", "gj04\t1\t\tFine.\ngj04\t1\n")
    write(tmp_path / "CoLA" / "dev.tsv", "gj04\t1\t\tFine.\n")
    with pytest.raises(KlmError, match=r"CoLA/train\.tsv:2: expected at least 4"):
        read("cola", tmp_path)


def test_malformed_json(tmp_path):
    folder = tmp_path / "glue_qqp"
    write(folder / "train_subset_powerfulpromptft_train.json", '{"0": {"text_a": "a", "text_b": "b", "label": "0"},\n')
    write(folder / "train_subset_powerfulpromptft_dev.json", '{"0": {"text_a": "a", "text_b": "b", "label": "1"}}')
    with pytest.raises(KlmError, match="malformed JSON") as error:
        read("qqp", tmp_path)
    assert "train_subset_powerfulpromptft_train.json" in str(error.value)


def test_json_bad_record_and_label(tmp_path):
    folder = tmp_path / "glue_qqp"
    write(folder / "train_subset_powerfulpromptft_dev.json", '{"0": {"text_a": "a", "text_b": "b", "label": "1"}}')
    write(folder / "train_subset_powerfulpromptft_train.json", '{"0": {"text_a": "a", "label": "0"}}')
    with pytest.raises(KlmError, match=r"train\.json: record 0: expected an object with text_a"):
        read("qqp", tmp_path)
    write(folder / "train_subset_powerfulpromptft_train.json", '{"0": {"text_a": "a", "text_b": "b", "label": "2"}}')
    with pytest.raises(KlmError, match=r"train\.json: record 0: bad label '2'"):
        read("qqp", tmp_path)


def test_malformed_jsonl(tmp_path):
    folder = tmp_path / "glue_mnli"
    sample = '{"0": {"text_a": "a", "text_b": "b", "label": "neutral"}}'
    write(folder / "train_subset_powerfulpromptft_train.json", sample)
    write(folder / "train_subset_powerfulpromptft_dev.json", sample)
    good = '{"premise": "p", "hypothesis": "h", "label": 0, "idx": 0}\n'
    write(folder / "validation_mismatched.jsonl", good, compress=True)
    write(folder / "validation_matched.jsonl", good + '{"premise": "p", "hypo\n', compress=True)
    with pytest.raises(KlmError, match=r"validation_matched\.jsonl\.gz:2: malformed JSON"):
        read("mnli", tmp_path)
    write(
        folder / "validation_matched.jsonl", good + '{"premise": "p", "hypothesis": "h", "label": -1}\n', compress=True
    )
    with pytest.raises(KlmError, match=r"validation_matched\.jsonl\.gz:2: bad label -1"):
        read("mnli", tmp_path)


def test_missing_data_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for task in GlueDataModule.tasks:
        with pytest.raises(KlmError, match=re.escape(f"no GLUE {task} data under {tmp_path}: expected glue_{task}/")):
            read(task, tmp_path)


def test_partial_layout_names_missing_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    write(tmp_path / "RTE" / "train.tsv", RTE_TSV)
    with pytest.raises(KlmError, match=r"RTE: missing GLUE rte file\(s\) dev\.tsv"):
        read("rte", tmp_path)


# -- metrics --------------------------------------------------------------------------------------
def reference(name: str, predictions: np.ndarray, labels: np.ndarray) -> float:
    if name == "accuracy":
        value = accuracy_score(labels, predictions)
    elif name == "f1":
        value = f1_score(labels, predictions, zero_division=0)
    elif name == "matthews":
        value = matthews_corrcoef(labels, predictions)
    elif name == "pearson":
        value = pearsonr(predictions, labels)[0]
    else:
        value = spearmanr(predictions, labels)[0]
    return 100.0 * value


def check_metrics(spec, predictions: np.ndarray, labels: np.ndarray):
    dtype = torch.float64 if spec.kind == "regression" else torch.long
    values = compute(spec, torch.tensor(predictions, dtype=dtype), torch.tensor(labels, dtype=dtype))
    assert set(values) == set(spec.metrics)
    for name, value in values.items():
        assert value == pytest.approx(reference(name, predictions, labels), abs=1e-3), name
    return values


@pytest.mark.parametrize("task", GlueDataModule.tasks)
def test_metrics_random(task):
    spec = GlueDataModule.spec(task)
    generator = np.random.default_rng(sum(map(ord, task)))
    for _ in range(5):
        if spec.kind == "regression":
            labels = generator.uniform(0, 5, 300)
            predictions = labels + generator.normal(0, 1.5, 300)
        else:
            labels = generator.integers(0, spec.num_labels, 300)
            predictions = np.where(generator.random(300) < 0.6, labels, generator.integers(0, spec.num_labels, 300))
        check_metrics(spec, predictions, labels)


def test_spearman_with_ties():
    spec = GlueDataModule.spec("stsb")
    generator = np.random.default_rng(1)
    labels = generator.integers(0, 6, 200).astype(float)  # STS-B style: many equal gold scores
    predictions = np.round(labels + generator.normal(0, 1, 200))  # and many equal predictions
    values = check_metrics(spec, predictions, labels)
    assert 0 < values["spearman"] < 100


def test_f1_all_negative_predictions():
    spec = GlueDataModule.spec("mrpc")
    labels = np.array([1, 0, 1, 1, 0, 0, 1])
    values = check_metrics(spec, np.zeros(7, dtype=int), labels)
    assert values["f1"] == 0.0 and values["accuracy"] == pytest.approx(300 / 7)


def test_matthews_constant_prediction():
    spec = GlueDataModule.spec("cola")
    labels = np.array([1, 0, 1, 1, 0, 1])
    for constant in (0, 1):
        values = check_metrics(spec, np.full(6, constant), labels)
        assert values["matthews"] == 0.0


# -- the hub fallback, with load_dataset replaced (no network) -------------------------------------
def test_hub_fallback_maps_columns_and_splits(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr("knowledge_lm.data.glue.offline", lambda: False)  # as if the hub were reachable
    part = datasets.Dataset.from_dict(
        {
            "premise": [f"p{i}" for i in range(20)],
            "hypothesis": [f"h{i}" for i in range(20)],
            "label": [i % 3 for i in range(20)],
        }
    )
    calls = []
    monkeypatch.setattr(
        datasets,
        "load_dataset",
        lambda *args: (
            calls.append(args)
            or {"train": part, "validation_matched": part, "validation_mismatched": part.select(range(5))}
        ),
    )
    splits = read("mnli", tmp_path)
    assert calls == [("nyu-mll/glue", "mnli")]
    assert {split: len(records) for split, records in splits.items()} == {
        "train": 18,
        "dev": 2,
        "test": 20,
        "test_mismatched": 5,
    }
    assert splits["test"][2] == {"id": "mnli-test-2", "text_a": "p2", "text_b": "h2", "label": 2}

    def fail(*args):
        raise ConnectionError("no route\nto host")

    monkeypatch.setattr(datasets, "load_dataset", fail)
    with pytest.raises(
        KlmError, match="no GLUE rte data under .*the hub \\(nyu-mll/glue\\) failed too: no route to host$"
    ):
        read("rte", tmp_path)
