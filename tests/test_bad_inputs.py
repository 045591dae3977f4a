"""Every bad input of a sweep, its data or the command line: one line on stderr naming the file, key or value,
exit code 2, and nothing written (no result, no run directory, no leaderboard)."""

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import tiny_bench

REPO = Path(__file__).resolve().parents[1]
RTE_HEADER = "index\tsentence1\tsentence2\tlabel\n"
RTE_ROW = "0\tA man sleeps.\tSomeone sleeps.\tentailment\n"


def bench(capsys, tmp_path, *args) -> tuple[int, list[str]]:
    """``tiny_bench``, after checking that it wrote nothing."""
    code, err = tiny_bench(capsys, tmp_path, *args)
    assert not any((tmp_path / name).exists() for name in ("results", "runs", "leaderboards"))
    return code, err


def sweep_file(tmp_path, text: str) -> str:
    """A sweep config of RTE's baseline at fraction 1 and seed 1, with the keys of the YAML ``text`` in place of
    those (a key given twice is an error of its own)."""
    path = tmp_path / "sweep.yaml"
    sweep = {"dataset": "glue", "methods": ["baseline"], "tasks": ["rte"], "fractions": [1], "seeds": [1]}
    path.write_text(yaml.safe_dump({**sweep, **yaml.safe_load(text)}, sort_keys=False))
    return str(path)


@pytest.mark.parametrize(
    "yaml_text, message",
    [
        ("fractions: 0.01\n", "fractions must be a list, e.g. fractions: [0.01, 0.1, 1]; got 0.01"),
        ("train: [1, 2]\n", "train must be a mapping (key: value lines), got [1, 2]"),
        ("methods: baseline\n", "methods must be a list, e.g. methods: [baseline, kam]; got 'baseline'"),
        ("tasks: rte\n", "tasks must be a list"),
        ("seeds: 1\n", "seeds must be a list"),
        ("dataset_options: yes\n", "dataset_options must be a mapping"),
        ("task_train: {rte: 3}\n", "task_train: rte must be a mapping"),
        ("train: {batch_size: 0}\n", "batch_size=0 must be at least 1"),
        ("methods: []\n", "methods must name at least one method"),
    ],
)
def test_bad_sweep_yaml(capsys, tmp_path, yaml_text, message):
    config = sweep_file(tmp_path, yaml_text)
    code, err = bench(capsys, tmp_path, "--config", config)
    assert code == 2
    assert len(err) == 1 and err[0].startswith(f"error: {config}") and message in err[0]


def glue_rte(tmp_path, train: bytes, compress: bool = False) -> Path:
    folder = tmp_path / "data" / "glue_rte"
    folder.mkdir(parents=True)
    (folder / ("train.tsv.gz" if compress else "train.tsv")).write_bytes(train)
    (folder / "dev.tsv").write_text(RTE_HEADER + RTE_ROW)
    return folder


@pytest.mark.parametrize(
    "train, compress, message",
    [
        ((RTE_HEADER + "0\tA caf\xe9.\tb\tentailment\n").encode("latin-1"), False, "train.tsv: not UTF-8 text"),
        (
            gzip.compress((RTE_HEADER + RTE_ROW * 200).encode(), mtime=0)[:-40],
            True,
            "train.tsv.gz: truncated or corrupt gzip",
        ),
    ],
    ids=["latin-1", "truncated-gzip"],
)
def test_unreadable_train_file(capsys, tmp_path, train, compress, message):
    folder = glue_rte(tmp_path, train, compress)
    code, err = bench(
        capsys, tmp_path, "--dataset", "glue", "--tasks", "rte", "--fractions", "1", "--seeds", "1",
        "--data-dir", str(folder.parent),
    )  # fmt: skip
    assert code == 2
    assert len(err) == 1 and err[0].startswith(f"error: {folder}/") and message in err[0]


@pytest.mark.parametrize(
    "args, environment, message",
    [
        (["--jobs", "0"], {}, "--jobs '0': expected a positive number"),
        (["--jobs", "-2"], {}, "--jobs '-2': expected a positive number"),
        (["--jobs", "two"], {}, "--jobs 'two': expected a positive number"),
        ([], {"KLM_JOBS": "abc"}, "KLM_JOBS 'abc': expected a positive number"),
        (["--backbone", "/does/not/exist"], {}, "backbone '/does/not/exist': no such model directory"),
        (["--backbone", "."], {}, "holds no config.json"),
    ],
)
def test_bad_command_line(capsys, tmp_path, monkeypatch, args, environment, message):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    folder = glue_rte(tmp_path, (RTE_HEADER + RTE_ROW).encode())
    code, err = bench(
        capsys, tmp_path, "--dataset", "glue", "--tasks", "rte", "--fractions", "1", "--seeds", "1",
        "--data-dir", str(folder.parent), *args,
    )  # fmt: skip
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_bad_klm_jobs_leaves_other_commands_alone(tmp_path):
    """``KLM_JOBS`` is read by ``klm bench`` alone: a bad value breaks no other command."""
    done = subprocess.run(
        [sys.executable, "-m", "knowledge_lm.cli", "list"],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "KLM_JOBS": "abc"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stderr == "" and "methods: baseline" in done.stdout


# Issue 29's bad inputs that once gave a traceback, were accepted silently or failed only once a cell had started:
# each is one line and exit code 2 before any work.
@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "method_options=[1,2]"], "method_options=[1, 2] is not a dict"),
        (["--fractions", ""], "fractions '': expected numbers in (0, 1]"),
        (["--devices-per-cell", "0"], "--devices-per-cell 0: expected at least 1 GPU"),
        (["--devices-per-cell", "2"], "a cell wants 2 GPUs"),
        (["--seeds", "-1"], "seeds '-1': expected integers ≥ 0"),
        (["--set", "max_steps=-1"], "max_steps=-1 must be ≥ 0"),
        (["--set", "dropout=2"], "dropout=2.0 must be in [0, 1)"),
        (["--set", "lr=-1"], "lr=-1.0 must be a finite number > 0"),
        (["--set", "precision=fp8"], "precision='fp8' is not one of"),
    ],
)
def test_bad_option_fails_before_the_plan(capsys, tmp_path, monkeypatch, args, message):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a machine without GPUs
    code, err = bench(capsys, tmp_path, "--dataset", "glue", "--tasks", "rte", "--dry-run", *args)
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_unknown_dataset_option_fails_before_any_cell(capsys, tmp_path):
    folder = glue_rte(tmp_path, (RTE_HEADER + RTE_ROW).encode())
    config = sweep_file(tmp_path, "dataset_options: {trian_size: 50}\n")
    code, err = bench(capsys, tmp_path, "--config", config, "--data-dir", str(folder.parent))
    assert code == 2
    assert len(err) == 1 and "unknown dataset option(s) trian_size of dataset 'glue'; known: " in err[0]


def test_garbage_backbone_weights_fail_before_any_cell(capsys, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"\x00garbage" * 100)
    code, err = bench(capsys, tmp_path, "--dataset", "glue", "--tasks", "rte", "--backbone", str(model), "--dry-run")
    assert code == 2
    assert len(err) == 1 and "model.safetensors is not readable safetensors weights" in err[0]


def test_results_folder_that_is_a_file(capsys, tmp_path):
    (tmp_path / "store").write_text("")
    code, err = bench(capsys, tmp_path, "--dataset", "glue", "--tasks", "rte", "--results-dir", str(tmp_path / "store"))
    assert code == 2
    assert len(err) == 1 and "is a file, not a folder" in err[0]


def klm(capsys, *args) -> tuple[int, list[str]]:
    from knowledge_lm.cli import main

    code = main([str(arg) for arg in args])
    return code, capsys.readouterr().err.strip().splitlines()


def stored_minilm_cell(results: Path) -> Path:
    (results / "glue" / "rte" / "baseline" / "minilm").mkdir(parents=True)
    return results


@pytest.mark.parametrize(
    "case, message",
    [
        ("out-file", "is a file, not a folder"),
        ("read-only", "is not writable"),
        ("no-results", "--results-dir {tmp}/nonexistent: no such folder"),
        ("no-backbone", "--backbones: no results of nosuch in {tmp}/results; stored: minilm"),
    ],
)
def test_bad_leaderboard_input(capsys, tmp_path, monkeypatch, case, message):
    results, out = stored_minilm_cell(tmp_path / "results"), tmp_path / "pages"
    args = ["leaderboard", "--results-dir", results, "--out", out]
    if case == "out-file":
        out.write_text("")
    elif case == "read-only":  # os.access, as a user other than root sees a read-only folder
        out.mkdir()
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != out and real_access(path, mode))
    elif case == "no-results":
        args[2] = tmp_path / "nonexistent"
    else:
        args += ["--backbones", "nosuch"]
    code, err = klm(capsys, *args)
    assert code == 2
    assert len(err) == 1 and message.format(tmp=tmp_path) in err[0]
    assert case in ("out-file", "read-only") or not out.exists()


def test_status_of_a_results_file(capsys, tmp_path):
    (tmp_path / "store").write_text("")
    code, err = klm(capsys, "status", "--dataset", "glue", "--tasks", "rte", "--results-dir", tmp_path / "store")
    assert code == 2 and err == [f"error: --results-dir {tmp_path / 'store'}: not a folder"]


def test_speed_of_an_unknown_method_measures_nothing(capsys, tmp_path):
    code, err = klm(capsys, "speed", "--methods", "nosuch", "--results-dir", tmp_path / "results")
    assert code == 2 and len(err) == 1 and "unknown method 'nosuch'" in err[0]
    assert not (tmp_path / "results").exists()


# Issue 42: every input checked before work, the same way by klm bench, its dry run, klm status and klm prepare.
COMMANDS = ("bench", "dry-run", "status", "prepare")


def klm_command(capsys, tmp_path, command: str, *args) -> tuple[int, list[str]]:
    """``klm COMMAND ARGS`` (``dry-run``: ``klm bench --dry-run``) on the tiny backbone, its folders and cache under
    ``tmp_path`` and, for those that read data, a one-example RTE (unless ``tmp_path`` has data): its exit code and
    stderr's lines, once checked that it wrote nothing."""
    folders = ["--results-dir", tmp_path / "results", "--runs-dir", tmp_path / "runs"]
    data = tmp_path / "data"
    if command in ("bench", "prepare") and not data.exists():
        glue_rte(tmp_path, (RTE_HEADER + RTE_ROW).encode())
    extra = {
        "bench": ["--leaderboards-dir", tmp_path / "leaderboards", "--isolate-cells", "--data-dir", data],
        "dry-run": ["--leaderboards-dir", tmp_path / "leaderboards", "--dry-run"],
        "status": [],
        "prepare": ["--cache-dir", tmp_path / "cache", "--data-dir", data],
    }[command]
    backbone = [] if "--backbone" in args else ["--backbone", "tiny"]
    code, err = klm(capsys, "bench" if command == "dry-run" else command, *folders, *extra, *backbone, *args)
    assert not any((tmp_path / name).exists() for name in ("results", "runs", "leaderboards", "cache"))
    return code, err


def one_line_error(code: int, err: list[str], message: str) -> bool:
    return code == 2 and len(err) == 1 and err[0].startswith("error: ") and message in err[0]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    "yaml_text, message",
    [
        ("dataset_options: {bogus_opt: 1}\n", "unknown dataset option(s) bogus_opt of dataset 'glue'; known: "),
        ("dataset_options: {trian_size: 50}\n", "unknown dataset option(s) trian_size"),
        ("dataset_options: {num_workers: many}\n", "dataset option num_workers='many' is not a whole number"),
        ("dataset_options: {knowledge: {link_noise: 2}}\n", "knowledge option link_noise: expected a share"),
        ("dataset_options: {knowledge: {linkin: gold}}\n", "unknown knowledge option(s) linkin"),
        ("dataset_options: {knowledge: {k_hop: -1}}\n", "knowledge option k_hop=-1: expected a whole number ≥ 0"),
        ("dataset_options: {num_workers: -1}\n", "num_workers=-1: expected a whole number ≥ 0"),
        ("variants: {noisy: {knowledge: {link_noise: 3}}}\n", "(variant noisy): knowledge option link_noise"),
        ("dataset: generated\ntasks: [facts]\ndataset_options: {train_size: -5}\n", "train_size must be at least 2"),
        ("dataset: generated\ntasks: [facts]\ndataset_options: {train_size: many}\n", "train_size must be an integer"),
        ("train: {method_options: {new_module_lr: fast}}\n", "option new_module_lr='fast' is not a number"),
        ("train: {method_options: {new_modul_lr: 0.1}}\n", "unknown option 'new_modul_lr'"),
        ("fractions: []\n", "fractions must name at least one fraction"),
        ("seeds: []\n", "seeds must name at least one seed"),
        ("tasks: []\n", "tasks must name at least one task"),
        ("seeds: [99999999999999999999999]\n", "expected integers ≤ 4294967295"),
    ],
)
def test_bad_options_and_lists_of_a_config(capsys, tmp_path, command, yaml_text, message):
    config = sweep_file(tmp_path, yaml_text)
    code, err = klm_command(capsys, tmp_path, command, "--config", config)
    assert one_line_error(code, err, message) and err[0].startswith(f"error: {config}")


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    "text, message",
    [
        (b"dataset: glue\nmethods: [baseline]\ntasks: [caf\xe9]\n", "not UTF-8 text (byte 0xe9"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00", "a binary file, not YAML text"),
        (b"dataset: glue\nbackbone: tiny\nmethods: [baseline]\nbackbone: minilm\n", "duplicate key 'backbone'"),
    ],
)
def test_config_that_is_no_yaml_text_or_names_a_key_twice(capsys, tmp_path, command, text, message):
    (tmp_path / "sweep.yaml").write_bytes(text)
    code, err = klm_command(capsys, tmp_path, command, "--config", tmp_path / "sweep.yaml")
    assert one_line_error(code, err, message) and err[0].startswith(f"error: {tmp_path / 'sweep.yaml'}: ")


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    "args, message",
    [
        (["--method", ""], "unknown method ''"),
        (["--method", "baseline,"], "unknown method ''"),
        (["--backbone", ""], "backbone '': a built-in name, a local directory or a hub name is expected"),
        (["--seeds", "99999999999999999999999"], "seeds '99999999999999999999999': expected integers ≤ 4294967295"),
        (["--set", "=3"], "--set '=3': expected key=value with a name before the '='"),
        (["--set", "method_options={new_module_lr: fast}"], "option new_module_lr='fast' is not a number"),
    ],
)
def test_bad_names_and_values_on_the_command_line(capsys, tmp_path, command, args, message):
    code, err = klm_command(capsys, tmp_path, command, "--dataset", "glue", "--tasks", "rte", *args)
    assert one_line_error(code, err, message)


@pytest.mark.parametrize("command", ("bench", "dry-run"))
@pytest.mark.parametrize(
    "case, message",
    [
        ("missing", "backbone '{tmp}/model': no such model directory"),
        ("empty", "{tmp}/model holds no config.json"),
        ("no-weights", "{tmp}/model holds no weights (model.safetensors or pytorch_model.bin)"),
        ("offline", "backbone 'someone/model' is neither a local directory nor loadable offline"),
        ("executor-option", "--executor-option slurm_partition=gpu: the local executor takes no options"),
    ],
)
def test_what_the_run_would_refuse_the_dry_run_refuses(capsys, tmp_path, monkeypatch, command, case, message):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = tmp_path / "model"
    if case in ("empty", "no-weights"):
        model.mkdir()
    if case == "no-weights":
        (model / "config.json").write_text("{}")
    args = {"offline": ["--backbone", "someone/model"], "executor-option": ["--executor-option", "slurm_partition=gpu"]}
    args = args.get(case, ["--backbone", str(model)])
    code, err = klm_command(capsys, tmp_path, command, "--dataset", "glue", "--tasks", "rte", *args)
    assert one_line_error(code, err, message.format(tmp=tmp_path))


@pytest.mark.parametrize("command", COMMANDS)
def test_a_cache_folder_that_is_a_file(capsys, tmp_path, monkeypatch, command):
    """``KLM_CACHE_DIR`` (``--cache-dir`` of klm prepare) a file: before the plan, not as a cell writes its cache;
    klm status writes no cache, and does not look."""
    path = tmp_path / "cache-file"
    path.write_text("")
    monkeypatch.setenv("KLM_CACHE_DIR", str(path))
    args, source = ["--dataset", "glue", "--tasks", "rte"], "KLM_CACHE_DIR"
    if command == "prepare":  # klm_command names a --cache-dir: the option's turn
        args, source = [*args, "--cache-dir", path], "--cache-dir"
    code, err = klm_command(capsys, tmp_path, command, *args)
    if command == "status":
        assert (code, err) == (0, [])
    else:
        assert one_line_error(code, err, f"{source} {path}: {path} is a file")


@pytest.mark.parametrize("command", ("bench", "status", "prepare", "leaderboard", "export"))
def test_a_project_home_that_does_not_exist(capsys, tmp_path, monkeypatch, command):
    """``KLM_HOME`` names the project whose results, runs and pages the commands use: never made where it is not."""
    monkeypatch.setenv("KLM_HOME", str(tmp_path / "no-home"))
    args = ["--dataset", "glue", "--tasks", "rte", "--backbone", "tiny"] if command in COMMANDS else []
    code, err = klm(capsys, command, *args)
    assert one_line_error(code, err, f"KLM_HOME {tmp_path / 'no-home'}: no such folder")
    assert not (tmp_path / "no-home").exists()


@pytest.mark.parametrize("case, message", [("out-file", "is a file, not a folder"), ("read-only", "is not writable")])
def test_bad_export_folder(capsys, tmp_path, monkeypatch, case, message):
    results, out = stored_minilm_cell(tmp_path / "results"), tmp_path / "tables"
    if case == "out-file":
        out.write_text("")
    else:  # os.access, as a user other than root sees a read-only folder
        out.mkdir()
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != out and real_access(path, mode))
    code, err = klm(capsys, "export", "--results-dir", results, "--out", out)
    assert one_line_error(code, err, message)


def test_a_method_named_twice_runs_once(capsys, tmp_path):
    from knowledge_lm.cli import main

    args = ["bench", "--dataset", "glue", "--tasks", "rte", "--fractions", "1", "--seeds", "1", "--backbone", "tiny"]
    args += ["--method", "baseline,baseline", "--results-dir", str(tmp_path / "r"), "--runs-dir", str(tmp_path / "w")]
    assert main([*args, "--dry-run"]) == 0
    assert "1 cells: 0 already done, 1 to run" in capsys.readouterr().out.splitlines()


def test_a_fraction_that_leaves_too_few_train_examples(capsys, tmp_path):
    """The train examples a fraction leaves need the data read: klm bench refuses the fraction before any cell
    starts, with the data's checks; the dry run reads no data, and plans it (the README says so)."""
    rows = "".join(f"{index}\tA man sleeps.\tSomeone sleeps.\tentailment\n" for index in range(40))  # 36 train
    glue_rte(tmp_path, (RTE_HEADER + rows).encode())
    args = ["--dataset", "glue", "--tasks", "rte", "--fractions", "0.1,1", "--seeds", "1"]
    code, err = klm_command(capsys, tmp_path, "bench", *args)
    assert one_line_error(code, err, "fraction 0.1 of glue rte leaves about 4 of its 36 train examples, fewer than 5")
    assert klm_command(capsys, tmp_path, "dry-run", *args)[0] == 0
