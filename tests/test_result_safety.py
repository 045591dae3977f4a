"""A result is credited to its own cell only, a bad result file is seen and set aside (never deleted), and no file a
cell or a tool loads runs code: labels unique per backbone, checked names, corrupt and misfiled results, planted
pickle payloads."""

import gzip
import json
import os
import pathlib
import shutil
import stat
from pathlib import Path

import pytest
import torch
from helpers import stored_result

from knowledge_lm.cli import main
from knowledge_lm.core.backbones import backbone_label
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.results import Cell, predictions_path, result_files, write_json_atomic, write_json_gz
from knowledge_lm.run.config import validate_sweep
from knowledge_lm.sweep.plan import cell_status, sweep_cells
from knowledge_lm.sweep.runner import run_sweep

ROOT = Path(__file__).resolve().parents[1]


def weights_dir(path: Path, content: bytes) -> Path:
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(content)
    return path


def test_a_local_directory_never_shares_a_built_in_or_namesakes_label(tmp_path):
    tiny, minilm = weights_dir(tmp_path / "a" / "tiny", b"one"), weights_dir(tmp_path / "b" / "minilm", b"two")
    other = weights_dir(tmp_path / "c" / "minilm", b"three")
    labels = {backbone_label(str(path)) for path in (tiny, minilm, other)}
    assert len(labels) == 3 and not labels & {"tiny", "minilm"}
    assert backbone_label(str(tiny)).startswith("tiny-") and backbone_label("tiny") == "tiny"
    assert backbone_label("org/model") == "org--model"
    assert Cell("baseline", "generated", "facts", 1.0, 1, str(minilm)).key.split("/")[3] == backbone_label(str(minilm))


@pytest.mark.parametrize("name", ["minilm", "mpnet-base"])
def test_a_directory_of_a_packaged_backbones_own_weights_is_that_backbone(name, tmp_path, monkeypatch):
    """The float16 copy of a packaged backbone (carried to GPU runs) files its results with the packaged one's."""
    import hashlib

    from knowledge_lm.core import backbones

    copy = weights_dir(tmp_path / "device" / name, b"float16 weights")
    monkeypatch.setitem(backbones.KNOWN_WEIGHTS, hashlib.sha256(b"float16 weights").hexdigest(), name)
    assert backbone_label(str(copy)) == name
    assert backbone_label(str(weights_dir(tmp_path / "other" / "minilm", b"other weights"))).startswith("minilm-")


def test_a_result_filed_under_a_directorys_bare_name_counts_only_for_its_weights(tmp_path):
    """The ERICA checkpoints' results are filed under the checkpoint's folder name, from before labels held the
    weights' checksum: they are this cell's where their recorded checksum is the directory's."""
    from knowledge_lm.core.backbones import weights_checksum

    checkpoint = weights_dir(tmp_path / "checkpoints" / "erica-minilm", b"weights")
    cell = Cell("erica", "generated", "facts", 1.0, 1, str(checkpoint))
    results = tmp_path / "results"
    older = results / "generated/facts/erica/erica-minilm/f1-s1.json"
    older.parent.mkdir(parents=True)
    record = stored_result(cell)
    record["cell"]["backbone"] = "erica-minilm"
    older.write_text(json.dumps({**record, "backbone": {"checksum": weights_checksum(checkpoint)}}))
    assert cell.stored_result_path(results) == older and cell_status(cell, results, tmp_path / "runs")[0] == "done"
    older.write_text(json.dumps({**record, "backbone": {"checksum": "0" * 64}}))  # other weights of that name
    assert cell.stored_result_path(results) == cell.result_path(results) != older


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"variants": {".": {}}}, "variant '.'"),
        ({"variants": {"..": {}}}, "variant '..'"),
        ({"variants": {"a b": {}}}, "variant 'a b'"),
        ({"backbone": "org/a model"}, "backbone 'org--a model'"),
    ],
)
def test_variant_and_backbone_names_are_checked(raw, message):
    with pytest.raises(KlmError, match=message):
        validate_sweep({"dataset": "generated", "methods": ["baseline"], **raw}, "test")


def test_backbone_dot_dot_puts_no_dot_dot_in_a_result_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inner").mkdir()
    monkeypatch.chdir(tmp_path / "inner")
    label = Cell("baseline", "generated", "facts", 1.0, 1, "..").backbone_label
    assert label.startswith(f"{tmp_path.name}-") and ".." not in label


def small_sweep():
    return validate_sweep(
        {
            "dataset": "generated",
            "methods": ["baseline"],
            "fractions": [1.0],
            "seeds": [1, 2],
            "backbone": "tiny",
            "dataset_options": {"train_size": 16, "dev_size": 8, "test_size": 8},
        },
        "test",
    )


def plant_bad_results(results: Path) -> list[Cell]:
    """Seed 1's result truncated, seed 2's of the wrong shape; a third file, seed 1's result copied under seed 3."""
    one, two = sweep_cells(small_sweep())
    one.result_path(results).parent.mkdir(parents=True)
    text = json.dumps(stored_result(one))
    one.result_path(results).write_text(text[: len(text) // 2])
    two.result_path(results).write_text("{}")
    three = Cell(**{**one.__dict__, "seed": 3})
    three.result_path(results).write_text(json.dumps(stored_result(one)))
    return [one, two, three]


def test_status_says_corrupt_or_misfiled(tmp_path, capsys):
    one, two, three = plant_bad_results(tmp_path / "results")
    states = [cell_status(cell, tmp_path / "results", tmp_path / "runs") for cell in (one, two, three)]
    assert [state for state, _ in states] == ["corrupt", "corrupt", "misfiled"]
    assert "does not parse" in states[0][1] and "missing " in states[1][1] and one.key in states[2][1]
    main(["status", "--dataset", "generated", "--tasks", "facts", "--fractions", "1", "--seeds", "1,2,3"] + [
        "--backbone", "tiny", "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs")
    ])  # fmt: skip
    assert "corrupt: 2" in capsys.readouterr().out


def test_bench_sets_bad_results_aside_and_runs_their_cells_again(tmp_path, monkeypatch):
    from knowledge_lm.sweep import runner

    results = tmp_path / "results"
    one, two, _ = plant_bad_results(results)
    bad = {path: path.read_bytes() for path in (one.result_path(results), two.result_path(results))}
    launched = []

    class Process:
        returncode = 1

        def __init__(self, command, env=None, **options):
            launched.append(json.loads(command[-1])["cell"]["seed"])

        def poll(self):
            return 1

    monkeypatch.setattr(runner.subprocess, "Popen", Process)
    run_sweep(small_sweep(), results_dir=results, runs_dir=tmp_path / "runs", gpus=[], isolate_cells=True)
    assert launched == [1, 2]
    for path, content in bad.items():
        [aside] = path.parent.glob(f"{path.name}.corrupt-*")
        assert aside.read_bytes() == content and not path.exists()


def test_leaderboard_warns_per_bad_file_and_renders_the_rest(tmp_path, capsys):
    results = tmp_path / "results"
    source = ROOT / "results/superseded/generated/split-v1/facts/baseline/minilm"
    good = results / "generated/facts/baseline/minilm"
    good.mkdir(parents=True)
    for name in ("f1-s1.json", "f1-s1.predictions.json.gz", "f1-s2.json", "f1-s2.predictions.json.gz"):
        shutil.copy(source / name, good / name)
    truncated = good / "f1-s2.predictions.json.gz"
    truncated.write_bytes(truncated.read_bytes()[:200])
    plant_bad_results(results)
    from knowledge_lm.report.leaderboard import write_leaderboards

    written = write_leaderboards(results, tmp_path / "leaderboards")
    warnings = capsys.readouterr().err
    assert [path.name for path in written if path.parent.name != "papers"] == ["generated.md", "README.md", "claims.md"]
    for bad in ("tiny/f1-s1.json: corrupt", "tiny/f1-s2.json: corrupt", "tiny/f1-s3.json: misfiled"):
        assert bad in warnings
    assert f"{truncated}: corrupt predictions file" in warnings
    assert len(result_files(results)) == 2


class Payload:
    """Unpickling this calls ``Path.touch`` on the marker: code run from a file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return pathlib.Path.touch, (self.marker,)


def plant_payload(path: Path, marker: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {}, "payload": Payload(marker)}, path)
    torch.load(path, weights_only=False)  # the payload is real: unpickled, it runs
    assert marker.exists()
    marker.unlink()


def test_a_planted_kam_checkpoint_runs_no_code(tmp_path):
    from knowledge_lm.tools.attention_maps import load_encoder_weights

    marker = tmp_path / "ran"
    plant_payload(tmp_path / "kam.ckpt", marker)
    with pytest.raises(KlmError, match="pickled objects"):
        load_encoder_weights(torch.nn.Linear(1, 1), str(tmp_path / "kam.ckpt"), "KAM")
    assert not marker.exists()


def test_a_planted_last_checkpoint_runs_no_code_and_the_cell_starts_over(tmp_path):
    from knowledge_lm.run.cell import run_cell
    from knowledge_lm.run.config import TrainConfig

    cell = Cell("baseline", "generated", "facts", 1.0, 1, "tiny")
    marker = tmp_path / "ran"
    plant_payload(cell.run_dir(tmp_path / "runs") / "last.ckpt", marker)
    result = run_cell(
        cell,
        TrainConfig(batch_size=8, max_steps=2, evaluations=1, max_length=32),
        results_dir=tmp_path / "results",
        runs_dir=tmp_path / "runs",
        dataset_options={"train_size": 16, "dev_size": 8, "test_size": 8},
        progress=False,
    )
    assert not marker.exists() and result["resumed_from_checkpoint"] is False
    assert not cell.run_dir(tmp_path / "runs").exists()
    assert gzip.open(predictions_path(cell.result_path(tmp_path / "results"))).read()


def test_a_checkpoint_pretrained_elsewhere_is_labelled_by_its_pretraining_record(tmp_path, monkeypatch):
    monkeypatch.setenv("KLM_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert backbone_label("checkpoints/erica-minilm") == "checkpoints--erica-minilm"
    (tmp_path / "results" / "pretraining").mkdir(parents=True)
    record = tmp_path / "results" / "pretraining" / "erica-minilm.json"
    record.write_text(json.dumps({"checkpoint": "erica-minilm", "checkpoint_checksum": "07f47a20" + "0" * 56}))
    assert backbone_label("checkpoints/erica-minilm") == "erica-minilm-07f47a20"
    record.write_text("{not json")
    assert backbone_label("checkpoints/erica-minilm") == "checkpoints--erica-minilm"


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600)])
def test_result_files_are_as_readable_as_the_umask_allows(tmp_path, umask, mode):
    previous = os.umask(umask)
    try:
        write_json_atomic(tmp_path / "a" / "result.json", {"a": 1})
        write_json_gz(tmp_path / "a" / "result.predictions.json.gz", {"a": 1})
    finally:
        os.umask(previous)
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in (tmp_path / "a").iterdir()} == {
        "result.json": mode,
        "result.predictions.json.gz": mode,
    }


def test_a_full_disk_names_the_file_that_was_being_written(tmp_path):
    from knowledge_lm.core.errors import error_line
    from knowledge_lm.core.results import write_file_atomic

    def copy_onto_a_full_disk(staging):  # as shutil.move does: from a temporary file elsewhere onto the staging file
        raise OSError(28, "No space left on device", "/tmp/elsewhere", None, staging)

    def write_to_a_full_disk(staging):  # a write names no file
        with open("/dev/full", "w") as full:
            full.write("x")

    for write in (copy_onto_a_full_disk, write_to_a_full_disk):
        with pytest.raises(OSError) as raised:
            write_file_atomic(tmp_path / "last.ckpt", write)
        assert error_line(raised.value) == f"no space left on device: {tmp_path / 'last.ckpt'}"
    assert list(tmp_path.iterdir()) == []
