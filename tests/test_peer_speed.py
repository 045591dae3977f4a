"""benchmarks/peer_speed.py: klm against Hugging Face's Trainer on the same cells; its record on the speed page."""

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from knowledge_lm.report.leaderboard import write_leaderboards
from knowledge_lm.report.speed import render_speed, speed_record_path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "peer_speed.py"
RTE_HEADER = "index\tsentence1\tsentence2\tlabel\n"


def side(wall: float, cell_s: float, dev: float, test: float) -> tuple[dict, dict]:
    return {"process_wall_s": wall}, {"cell_s": cell_s, "dev": dev, "test": test}


def peer_record(cells: int = 1) -> dict:
    rows = [
        {
            "task": "rte",
            "fraction": 1.0,
            "seed": seed,
            "metric": "accuracy",
            "steps": 237,
            "same_rows": True,
            "klm": {"cell_s": 10.0, "dev": 60.0, "test": 58.0},
            "hf": {"cell_s": 12.5, "dev": 59.0, "test": 57.0, "weights_dtype": "float32"},
        }
        for seed in range(1, cells + 1)
    ]
    measured = {"tasks": ["rte"], "fractions": [1.0], "seeds": list(range(1, cells + 1)), "cells": rows}
    return {
        "schema": 1,
        "kind": "peer",
        "device": "NVIDIA H100 80GB HBM3",
        "backbone": "minilm",
        "precision": "bf16-mixed",
        "jobs": 1,
        "max_steps": None,
        "cell": {**measured, "klm": {"process_wall_s": 20.0}, "hf": {"process_wall_s": 31.0}},
        "git": {"commit": "0123456789abcdef", "dirty": False},
        "versions": {},
        "measured_at": "2026-11-27T01:00:00+00:00",
    }


def test_peer_record_renders_ratios_and_targets(tmp_path):
    record = peer_record()
    path = speed_record_path(tmp_path / "results", record)
    assert path.name == "NVIDIA-H100-80GB-HBM3-minilm-peer-20261127T010000.json"
    page = render_speed([record])
    assert "## Against Hugging Face Trainer" in page
    assert "| rte 100% seed 1 | process wall | 20.0 s | 31.0 s | 0.65 | ≤ 0.5× NOT met: 1.29× the target |" in page
    assert "| rte 100% seed 1 | cell time | 10.0 s | 12.5 s | 0.80 | ≤ 0.7× NOT met: 1.14× the target |" in page
    assert "| rte 100% seed 1 | dev | 60.0 | 59.0 | +1.0 (difference) |  |" in page
    assert "Command:" not in page  # a record from before the command was kept
    command = "python benchmarks/peer_speed.py --jobs 8"
    assert f"Command: `{command}`." in render_speed([{**record, "command": command}])
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    write_leaderboards(tmp_path / "results", tmp_path / "boards")
    assert (tmp_path / "boards" / "speed.md").read_text().startswith(page)  # then benchmarks/notes/speed.md


def test_a_trainer_that_did_not_train_float32_weights_is_judged_no_peer():
    record = peer_record()
    del record["cell"]["cells"][0]["hf"]["weights_dtype"]  # records before the peer cast its weights
    page = render_speed([record])
    assert "| rte 100% seed 1 | cell time | 10.0 s | 12.5 s | 0.80 | not judged: Trainer's weights |" in page
    assert "Trainer's weights not float32 (klm trains float32 weights) | not recorded in 1 of 1:" in page


def test_the_trainer_peer_trains_float32_weights_from_a_float16_backbone(tmp_path):
    from transformers import BertConfig, BertModel

    script = load_script("peer_hf_cell")
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    BertModel(config).half().save_pretrained(tmp_path)  # as pack.sh stores the GPU runs' backbone
    model = script.load_model(str(tmp_path), num_labels=2, regression=False, dropout=0.1)
    assert {parameter.dtype for parameter in model.parameters()} == {torch.float32}


def load_script(name: str = "peer_speed"):
    spec = importlib.util.spec_from_file_location(name, SCRIPT.with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_missing_trainer_package_is_one_line(monkeypatch, capsys):
    script = load_script()

    def needs_accelerate(**_):
        raise ImportError("Using the `Trainer` with `PyTorch` requires `accelerate>=1.1.0`: pip install accelerate")

    monkeypatch.setattr(script, "TrainingArguments", needs_accelerate)
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--backbone", "tiny", "--no-grid"])
    assert exit_info.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: Hugging Face's Trainer cannot run here") and "knowledge-lm[peer]" in line


def test_a_work_dir_with_an_earlier_run_is_refused_before_any_work(tmp_path, capsys):
    """klm bench would find the earlier run's cells finished there and time nothing."""
    (tmp_path / "cell" / "klm-results").mkdir(parents=True)
    with pytest.raises(SystemExit) as exit_info:
        load_script().main(["--backbone", "tiny", "--no-grid", "--work-dir", str(tmp_path)])
    assert exit_info.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "holds an earlier run's outputs" in line and str(tmp_path / "cell") in line


@pytest.mark.slow
def test_peer_benchmark_smoke_run_on_cpu(tmp_path):
    """One tiny RTE cell through both sides, three steps: the record holds both sides' figures on the same rows."""
    pytest.importorskip("accelerate")
    folder = tmp_path / "data" / "glue_rte"
    folder.mkdir(parents=True)
    labels = ("entailment", "not_entailment")
    rows = [f"{i}\tA man number {i} sleeps.\tSomeone sleeps {i % 3}.\t{labels[i % 2]}\n" for i in range(60)]
    (folder / "train.tsv").write_text(RTE_HEADER + "".join(rows))
    (folder / "dev.tsv").write_text(RTE_HEADER + "".join(rows[:12]))
    results = tmp_path / "results"
    command = [sys.executable, str(SCRIPT), "--backbone", "tiny", "--max-steps", "3", "--no-grid"]
    command += ["--data-dir", str(tmp_path / "data"), "--results-dir", str(results)]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=tmp_path)
    assert process.returncode == 0, process.stderr[-2000:]
    assert "| rte 100% seed 1 | process wall |" in process.stdout
    [path] = (results / "speed").glob("*-peer-*.json")
    assert json.loads(path.read_text())["command"] == "python benchmarks/peer_speed.py " + " ".join(command[2:])
    [cell] = json.loads(path.read_text())["cell"]["cells"]
    assert cell["same_rows"] and cell["steps"] == 3
    for name in ("klm", "hf"):
        assert cell[name]["cell_s"] > 0 and 0 <= cell[name]["test"] <= 100


def test_a_grid_through_klm_alone_renders_without_trainer_figures(tmp_path):
    record = peer_record()
    rows = [{key: value for key, value in row.items() if key != "hf"} for row in record["cell"]["cells"]]
    record["grid"] = {**record["cell"], "cells": rows, "klm": {"process_wall_s": 42.0}}
    del record["grid"]["hf"]
    record["klm_settings"] = {"compile": "true"}
    record["klm_served"] = True
    record["grid"]["cells"][0]["klm"]["cuda_graphs"] = True
    record["grid"]["cells"][0]["klm"]["mps"] = True
    page = render_speed([record])
    assert "| klm cells under an MPS daemon | 1 of 1 |" in page
    assert "klm with compile=true; klm handed to a warm `klm serve`" in page
    assert "| klm cells with CUDA graphs (compile_mode: cells) | 1 of 1 (reduce-overhead 1) |" in page
    assert "| 1: rte × 100% × seeds 1 | process wall | 42.0 s | — | — |  |" in page
    assert "| longest klm cell (a floor for its process wall) | rte 100% seed 1: 10.0 s, 237 steps (42.2 ms" in page


def test_a_cell_whose_metric_one_side_left_undefined_leaves_both_means():
    record = peer_record(cells=2)
    record["cell"]["cells"][1]["hf"]["dev"] = math.nan  # a Pearson over constant predictions
    record["cell"]["cells"][1]["klm"]["dev"] = 0.0
    record["grid"] = record.pop("cell")
    page = render_speed([record])
    assert "| 2: rte × 100% × seeds 1, 2 | dev | 60.0 | 59.0 | +1.0 (difference) |  |" in page
    assert "leave out | 1 cell(s) whose metric one side left undefined: rte 100% seed 2 |" in page


def test_cell_phases_split_a_cell_at_its_landmarks():
    """Set-up until the first step, the first step, the other steps less the evaluations, and the end."""
    phases = load_script("cell_phases").Clock()
    phases.marks = {"first_step": 2.0, "second_step": 3.0, "train_end": 9.0}
    phases.evaluating = 1.0
    got = phases.phases(started=0.0, ended=9.5, steps=101)
    expected = {"set-up": 2.0, "first step": 1.0, "other steps": 5.0, "evaluations": 1.0, "end": 0.5, "ms a step": 50.0}
    assert got == pytest.approx(expected)


def test_repeats_the_long_cell_and_start_up_render_against_issue_48s_targets():
    record = peer_record()
    repeats = []
    for klm_s, hf_s, startup in ((7.0, 10.0, 4.0), (8.0, 9.0, 6.0), (6.0, 11.0, 3.5)):
        measured = json.loads(json.dumps(record["cell"]))
        measured["cells"][0]["klm"]["cell_s"], measured["cells"][0]["hf"]["cell_s"] = klm_s, hf_s
        measured["klm"]["startup_s"] = startup
        repeats.append(measured)
    record["cell"], record["cell_repeats"] = repeats[0], repeats
    long_cell = {"klm": 44.0, "dev": 94.5, "test": 89.3, "cuda_graphs": True, "compile_mode": "cuda-graphs"}
    record["long_cell"] = {
        "tasks": ["sst2"],
        "fractions": [1.0],
        "seeds": [1],
        "klm": {"process_wall_s": 60.0, "startup_s": 5.5},
        "cells": [{"task": "sst2", "fraction": 1.0, "seed": 1, "steps": 4150, "klm": {**long_cell, "cell_s": 44.0}}],
        "reference": {
            "dev": 94.1,
            "test": 90.0,
            "cell_s": 156.3,
            "compile_mode": "eager",
            "commit": "abc",
            "device": "H",
        },
    }
    page = render_speed([record])
    name = "rte 100% seed 1, 3 repeats"
    times = "7.0 s [6.0, 8.0] | 10.0 s [9.0, 11.0] | 0.70 | ≤ 0.8× met |"
    assert f"| {name} | cell time (train and evaluations), median [range] | {times}" in page
    assert "| sst2 100% seed 1 alone | cell time | 44.0 s | — | | ≤ 45 s met |" in page
    assert "| sst2 100% seed 1 alone | a step, evaluations included | 10.6 ms (4150 steps, cuda-graphs) |" in page
    assert "same cell in the results (eager, 156.3 s on H, commit abc) | 94.1 / 90.0 |" in page
    runs = "4.8 s (cell 4.0 s, cell 6.0 s, cell 3.5 s, long_cell 5.5 s) | — | | ≤ 5 s met |"
    cold = "start-up, cold (a fresh process, imports included): from its start until its worker began the first cell"
    assert f"| every klm run | {cold}, median of 4 | {runs}" in page
    assert "warm `klm serve`" not in page  # no served start-up measured


def served_startup_record(runs: list[dict], error: str | None = None) -> dict:
    record = peer_record()
    record["cell"]["klm"]["startup_s"] = 14.5
    command = "python -m knowledge_lm.cli serve --idle-minutes 2 & …; then 3× python -m knowledge_lm.cli bench …"
    record["served_startup"] = {"command": command, "runs": runs, **({"error": error} if error else {})}
    return record


def served(startup: float, imports: float, served: bool = True) -> dict:
    parts = [["start-up", 0.6], ["checks", 0.2], ["imports", imports], ["waiting for its worker", 0.1]]
    return {"startup_s": startup, "parts": parts, "process_wall_s": startup + 3.0, "served": served}


def test_the_start_up_with_a_warm_server_renders_beside_the_cold_one():
    runs = [served(1.2, 0.0), served(1.0, 0.1), served(1.6, 0.0), served(14.0, 11.0, served=False)]
    page = render_speed([served_startup_record(runs)])
    assert "| every klm run | start-up, cold (a fresh process, imports included): " in page
    row = next(line for line in page.splitlines() if "warm `klm serve`" in line)
    assert row.startswith("| one-cell klm bench | start-up with a warm `klm serve` (opt-in), median of 3: `python -m")
    medians = "start-up 0.6 s, checks 0.2 s, imports 0.0 s, waiting for its worker 0.1 s"
    assert f"| 1.2 s [1.0, 1.6]; medians: {medians}; 1 of 4 runs not handed to the server, left out |" in row
    assert row.endswith("| — | | ≤ 5 s met |")


def test_a_served_start_up_that_stopped_early_says_why():
    page = render_speed([served_startup_record([], error="klm serve did not listen at /tmp/x.sock within 300 s")])
    assert "| none measured (stopped: klm serve did not listen at /tmp/x.sock within 300 s) | — | | |" in page
    page = render_speed([served_startup_record([served(7.5, 0.0)], error="klm bench for klm serve exited 1: boom")])
    assert "| 7.5 s [7.5, 7.5]; medians: " in page and "; stopped: klm bench for klm serve exited 1: boom |" in page
    assert "≤ 5 s NOT met: 1.50× the target |" in page


def test_a_negative_served_start_up_or_a_server_up_already_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    script = load_script()
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--backbone", "tiny", "--served-startup", "-1", "--work-dir", str(tmp_path / "w")])
    assert exit_info.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "--served-startup ≥ 0" in line and not (tmp_path / "w").exists()
    (tmp_path / "x.sock").touch()  # a klm serve of this code listens: every klm run would go to it
    monkeypatch.setattr(script, "klm_socket_path", lambda environment: tmp_path / "x.sock")
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--backbone", "tiny", "--served-startup", "1", "--work-dir", str(tmp_path / "w")])
    assert exit_info.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "a klm serve of this code and environment listens already" in line and not (tmp_path / "w").exists()


class StartedServer:
    """A ``subprocess.Popen`` of a ``klm serve`` still importing (``returncode`` None) or ended."""

    def __init__(self, returncode=None):
        self.returncode, self.signals = returncode, []

    def poll(self):
        return self.returncode

    def terminate(self):
        self.signals.append("SIGTERM")

    def wait(self, timeout=None):
        return self.returncode


def test_a_server_that_does_not_listen_is_one_line(tmp_path):
    script = load_script()
    log = tmp_path / "serve.log"
    log.write_text("Traceback (most recent call last):\nkeyerror: no\nerror: klm serve: a server already listens\n")
    with pytest.raises(script.KlmError, match=r"^klm serve exited 2 before it listened: error: klm serve: a server"):
        script.wait_listening(StartedServer(returncode=2), tmp_path / "x.sock", log, timeout_s=5)
    with pytest.raises(script.KlmError, match=r"^klm serve did not listen at .*x.sock within 0.3 s \(its output: "):
        script.wait_listening(StartedServer(), tmp_path / "x.sock", log, timeout_s=0.3)
    (tmp_path / "x.sock").touch()
    script.wait_listening(StartedServer(), tmp_path / "x.sock", log, timeout_s=0.3)


def test_the_served_start_up_runs_the_single_cell_for_a_server_of_the_same_environment(tmp_path, monkeypatch):
    """The server and every run get one environment (one server key), the runs two steps each in folders of their
    own; the server is stopped however the runs end."""
    script = load_script()
    started = []

    def popen(command, **options):
        started.append((command, options["env"]))
        return StartedServer()

    def no_listener(server, path, log, timeout_s):
        raise script.KlmError("klm serve did not listen")

    monkeypatch.setattr(script.subprocess, "Popen", popen)
    monkeypatch.setattr(script, "klm_socket_path", lambda environment: tmp_path / "x.sock")
    monkeypatch.setattr(script, "wait_listening", no_listener)
    args = script.argparse.Namespace(backbone="tiny", jobs=1, max_steps=0, klm_set=["compile=true"],
                                     klm_no_mps=True, data_dir=None)  # fmt: skip
    measured = script.served_startup(args, 3, tmp_path / "served")
    [(serve, environment)] = started
    assert serve[-4:] == ["knowledge_lm.cli", "serve", "--idle-minutes", str(script.SERVER_IDLE_MINUTES)]
    assert environment["KLM_CACHE_DIR"] == str(tmp_path / "served" / "klm-cache")
    assert measured["runs"] == [] and measured["error"] == "klm serve did not listen"
    command = measured["command"]
    assert command.startswith(f"export KLM_SERVE=0 KLM_CACHE_DIR={tmp_path / 'served' / 'klm-cache'}; ")
    assert "serve --idle-minutes 2 & (until it listens); then 3× (run-1, run-2, …): " in command
    bench = "bench --config {} --tasks rte --fractions 1.0 --seeds 1 --backbone tiny --results-dir {}".format(
        script.GLUE_CONFIG, tmp_path / "served" / "run-1" / "klm-results"
    )
    assert bench in command
    assert command.endswith(
        "--set compile=true --no-mps --set max_steps=2 --set evaluations=1; then SIGTERM to the server"
    )


def test_a_served_run_counts_only_where_the_server_forked_it_and_its_worker(tmp_path):
    """The server's output names each child it forked and the pid it forked it for."""
    script = load_script()
    log = tmp_path / "serve.log"
    line = "klm bench: 9.0 s wall; outside its cells 1.5 s (1.2 s before the first started: start-up 0.7 s, " \
        "imports 0.0 s, waiting for its worker 0.5 s; 0.3 s after the last ended)"  # fmt: skip
    server_says = [
        "klm serve: forked pid 7 for pid {pid}: knowledge_lm.cli bench",
        "klm serve: forked pid 8 for pid 7: knowledge_lm.sweep.worker 7",
    ]
    for name, said in (("served", server_says), ("cold", server_says[1:])):
        program = f"import os; open({str(log)!r}, 'w').write({chr(10).join(said)!r}.format(pid=os.getpid()))"
        program += f"; print({line!r})"
        run = script.served_run([sys.executable, "-c", program], dict(os.environ), tmp_path / name, log)
        parts = [("start-up", 0.7), ("imports", 0.0), ("waiting for its worker", 0.5)]
        assert run["startup_s"] == 1.2 and run["parts"] == parts and run["served"] == (name == "served")
    with pytest.raises(script.KlmError, match=r"^klm bench for klm serve exited 3: boom$"):
        script.served_run([sys.executable, "-c", "print('boom'); exit(3)"], dict(os.environ), tmp_path / "f", log)


def test_the_long_cells_reference_is_the_stored_baseline_cell(tmp_path):
    stored = {
        "metrics": {"dev": {"accuracy": 94.1}, "test": {"accuracy": 90.0}},
        "report_split": "test",
        "wall_time_s": 156.3,
        "config": {"train": {"compile": False, "compile_mode": "default"}},
        "git": {"commit": "abc"},
        "device": {"name": "NVIDIA H200"},
    }
    path = tmp_path / "glue" / "sst2" / "baseline" / "minilm" / "f1-s1.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(stored))
    script = load_script()
    reference = script.stored_reference(tmp_path, "/root/carried/minilm", ("sst2", 1.0, 1))
    assert reference == {
        "dev": 94.1,
        "test": 90.0,
        "cell_s": 156.3,
        "compile_mode": "eager",
        "commit": "abc",
        "device": "NVIDIA H200",
    }
    assert script.stored_reference(tmp_path, "minilm", ("sst2", 1.0, 2)) is None
