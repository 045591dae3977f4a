"""Every sweep config under benchmarks/ validates, and each kind of cell the configs define (``smoke_key``: one per
method, task, knowledge variant and training settings) smoke-runs on a tiny backbone."""

import json
from dataclasses import asdict

import pytest

from knowledge_lm.core.paths import benchmarks_dir
from knowledge_lm.core.registry import DATASETS, METHODS
from knowledge_lm.core.results import Cell
from knowledge_lm.run.cell import run_cell
from knowledge_lm.run.config import load_sweep
from knowledge_lm.sweep.inputs import check_sweep


def prepare_knowledge(dataset_options, dataset, task, train, data_dir):
    """What `klm prepare` would do before a knowledge method's sweep (cached after the first call)."""
    from knowledge_lm.core.backbones import load_tokenizer
    from knowledge_lm.data.base import default_cache_dir
    from knowledge_lm.knowledge.prepare import KnowledgeConfig, prepare

    tokenizer = load_tokenizer("tiny")
    options = {k: v for k, v in dataset_options.items() if k != "knowledge"}
    data = DATASETS.get(dataset)(
        task=task, tokenizer=tokenizer, data_dir=data_dir, max_length=train.max_length, **options
    )
    prepare(
        data,
        tokenizer,
        KnowledgeConfig.from_dict(dataset_options.get("knowledge")),
        default_cache_dir(),
        progress=False,
    )


def smoke_backbone(method, tmp_path_factory) -> str:
    """``tiny``; for an ERICA method (which refuses other backbones), a tiny checkpoint pretrained with its
    objective set for 2 steps on the generated corpus, built once per session."""
    from knowledge_lm.methods.erica.model import EricaFineTuning
    from knowledge_lm.methods.erica.pretraining import erica_checkpoint as pretrain_checkpoint

    method_class = METHODS.get(method)
    if not issubclass(method_class, EricaFineTuning):
        return "tiny"
    directory = tmp_path_factory.getbasetemp() / f"{method_class.objectives}-tiny"
    if not (directory / "manifest.json").is_file():
        pretrain_checkpoint(
            "generated",
            directory,
            method=method_class.objectives,
            backbone="tiny",
            steps=2,
            batch_size=2,
            max_length=64,
            min_relations=2,
            progress=False,
        )
    return str(directory)


# The generated task's world in smoke runs: the generator's sizes only, so that `klm prepare` (spaCy over every
# split) and the evaluation take seconds; the config's other knobs (seed, negatives, noise...) stay as they are.
SMOKE_WORLD = {"train_size": 200, "dev_size": 40, "test_size": 40, "num_entities": 200}


# A real dataset's splits in smoke runs: each is read whole (its dataset's tests check every row), then cut to at most
# this many rows spread evenly over it, which the cell tokenizes, trains on and evaluates: seconds where the whole
# splits took minutes (GLUE's MNLI and QQP, FewRel, OpenEntity). The generated task's world is small already.
SMOKE_SPLIT_ROWS = 400


# RotatE's passes over the KG in smoke runs: its 64 negatives a triple made 100 passes 14 s of a smoke run even on
# the smoke world's graph; the cell reads its vectors the same way after 5.
SMOKE_ROTATE_EPOCHS = 5


@pytest.fixture
def smoke_splits(monkeypatch):
    """Every data module's splits cut to ``SMOKE_SPLIT_ROWS`` rows each, taken at an even stride; RotatE trained for
    ``SMOKE_ROTATE_EPOCHS`` passes."""
    from knowledge_lm.data.base import TaskDataModule
    from knowledge_lm.knowledge.kg_embeddings import ROTATE_HPARAMS

    monkeypatch.setitem(ROTATE_HPARAMS, "epochs", SMOKE_ROTATE_EPOCHS)

    read = TaskDataModule.labelled_splits

    def cut(module) -> dict[str, list[dict]]:
        return {split: rows[:: -(-len(rows) // SMOKE_SPLIT_ROWS)] for split, rows in read(module).items()}

    monkeypatch.setattr(TaskDataModule, "labelled_splits", cut)


def smoke_dataset_options(dataset: str, options: dict) -> dict:
    """A config's dataset options for its smoke runs: on the generated task, its world shrunk to ``SMOKE_WORLD``."""
    return {**options, **SMOKE_WORLD} if dataset == "generated" else options


@pytest.fixture(scope="session")
def smoke_results() -> dict:
    """The result of each distinct smoke cell run so far this session, by ``smoke_key``: configs that define the
    same kind of cell share one run."""
    return {}


def smoke_key(cell: Cell, train, dataset_options: dict) -> str:
    """What makes a smoke cell a kind of its own: its method, dataset, task and backbone, the dataset options (the
    knowledge variant) and the training settings. Its train fraction, its seed and the generated world's seed are
    left out: another of them runs the same code on other rows."""
    spec = {
        "cell": [cell.method, cell.dataset, cell.task, cell.backbone],
        "dataset_options": {name: value for name, value in dataset_options.items() if name != "seed"},
        "train": asdict(train),
    }
    return json.dumps(spec, sort_keys=True, default=str)


# The sweep configs: every YAML of benchmarks/ but the papers' numbers, claims and named groups of sweeps; the paper
# tables' definitions (benchmarks/tables/*.yaml) are no sweep configs either (tests/test_papers.py checks them).
CONFIGS = sorted(
    path
    for path in benchmarks_dir().glob("*.yaml")
    if path.name not in ("references.yaml", "tables.yaml", "claims.yaml")
)


def costly_smoke(path) -> bool:
    """Smoke runs marked slow (they still validate in the fast suite): those that take minutes on 2 cores, a
    knowledge method on a real dataset (a cold `klm prepare` loads spaCy and trains TransE over the Wikidata KG: 40 s
    for one cell) and several methods on Re-DocRED; and the 20k generated sweeps, which a fast one covers."""
    sweep = load_sweep(path)
    if any(int(sweep.variant_options(variant).get("train_size", 0)) > 2000 for variant in sweep.variants):
        # The 20k sweeps: in the smoke world (``SMOKE_WORLD``) their cells differ from the 2k sweeps' (which smoke-run
        # in the fast suite) only in the epochs, which max_steps caps.
        return True
    if sweep.dataset == "redocred":
        return True  # a smoke cell reads every Re-DocRED document, scores each entity pair of 250 (1 min on 2 cores)
    return sweep.dataset != "generated" and any(METHODS.entry(m).needs_knowledge for m in sweep.methods)


SMOKE = [pytest.param(path, id=path.stem, marks=[pytest.mark.slow] if costly_smoke(path) else []) for path in CONFIGS]


def test_there_are_configs():
    assert {path.stem for path in CONFIGS} >= {"glue", "generated"}


@pytest.mark.parametrize("path", CONFIGS, ids=[path.stem for path in CONFIGS])
def test_config_validates(path):
    """As ``klm bench``, its dry run, ``klm status`` and ``klm prepare`` check it: dataset, knowledge and method
    options."""
    check_sweep(load_sweep(path))


@pytest.mark.parametrize("path", SMOKE)
def test_config_smoke_runs(path, tmp_path, tmp_path_factory, shared_data, smoke_results, smoke_splits):
    sweep = load_sweep(path)
    variant = list(sweep.variants)[-1]  # the last: for a noise curve, the noisiest features
    options = smoke_dataset_options(sweep.dataset, sweep.variant_options(variant))
    for method in sweep.methods:
        for task in sweep.tasks:
            cell = Cell(
                method,
                sweep.dataset,
                task,
                min(sweep.fractions),
                sweep.seeds[0],
                smoke_backbone(method, tmp_path_factory),
                variant,
            )
            train = sweep.train_config(task, {"max_steps": 2, "evaluations": 1, "batch_size": 4}, variant)
            key = smoke_key(cell, train, options)
            if key not in smoke_results:
                if METHODS.entry(method).needs_knowledge:
                    prepare_knowledge(options, sweep.dataset, task, train, shared_data)
                smoke_results[key] = run_cell(
                    cell,
                    train,
                    data_dir=shared_data,
                    results_dir=tmp_path / "results",
                    runs_dir=tmp_path / "runs",
                    dataset_options=options,
                    progress=False,
                )
            result = smoke_results[key]
            assert result["budget"]["max_steps"] == 2
            assert set(result["metrics"]) == {"train"} ^ ({"train"} | set(result["data"]["eval_sizes"]))


def test_paper_tables_name_existing_configs_and_all_is_the_full_grid():
    from knowledge_lm.cli import table_configs
    from knowledge_lm.report.paper_tables import sweep_groups

    assert not any(path.parent.name == "tables" for path in CONFIGS)
    tables = sweep_groups()
    assert {"kam-table6", "sisr-fig5c", "matrix", "all"} <= set(tables)  # a paper table's sweeps, named groups
    for name in tables:
        assert all(path.is_file() for path in table_configs(name)), name
    assert set(table_configs("all")) == set(CONFIGS)


def test_unknown_table_is_one_error(capsys):
    from knowledge_lm.cli import main

    assert main(["bench", "--table", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown table 'nope'; known: sisr-table1")


def test_method_filters_a_tables_configs_and_adds_no_method(capsys, tmp_path):
    from knowledge_lm.cli import main

    args = ["bench", "--table", "knowledge-use-20k", "--results-dir", str(tmp_path), "--dry-run"]
    assert main([*args, "--method", "kam"]) == 0
    planned = [line.split()[1] for line in capsys.readouterr().out.splitlines() if line.startswith("  run ")]
    assert planned and all("/kam/" in cell for cell in planned)
    assert not any("relations-permuted" in cell for cell in planned)  # the relations control does not list kam
    assert main([*args, "--method", "nosuch"]) == 2
    assert "no config of table 'knowledge-use-20k' lists it" in capsys.readouterr().err


def test_status_reads_a_whole_table(capsys, tmp_path):
    from knowledge_lm.cli import main

    args = ["status", "--table", "knowledge-use-20k", "--results-dir", str(tmp_path), "--method", "kam"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "missing" in out and "relations-permuted" not in out
    assert "table knowledge-use-20k" in out  # the table's total, over its sweeps
    assert main(["status", "--table", "knowledge-use-20k", "--dataset", "glue"]) == 2
    assert "--table names its own configs" in capsys.readouterr().err


def test_method_backbones_give_each_method_its_own_backbone(tmp_path):
    from knowledge_lm.core.errors import KlmError
    from knowledge_lm.run.config import validate_sweep
    from knowledge_lm.sweep.plan import sweep_cells

    raw = {
        "dataset": "generated",
        "methods": ["baseline", "erica-ed"],
        "fractions": [0.1],
        "seeds": [1],
        "method_backbones": {"erica-ed": "checkpoints/erica-ed-minilm"},
    }
    backbones = {cell.method: cell.backbone for cell in sweep_cells(validate_sweep(raw, "test"))}
    assert backbones == {"baseline": "minilm", "erica-ed": "checkpoints/erica-ed-minilm"}
    with pytest.raises(KlmError, match="names method.s. erica-rd the sweep does not run"):
        validate_sweep({**raw, "method_backbones": {"erica-rd": "x"}}, "test")


def test_a_pair_that_cannot_run_is_refused_with_its_reason_before_anything_is_imported(capsys):
    import sys

    from knowledge_lm.core.errors import KlmError
    from knowledge_lm.core.registry import cannot_run
    from knowledge_lm.run.config import validate_sweep

    reason = cannot_run("knowbert", "cosmosqa")
    assert reason.startswith("multiple choice: no knowledge features")
    assert cannot_run("baseline", "cosmosqa") is None and cannot_run("erica", "cosmosqa") is None
    assert cannot_run("kam", "glue") is None
    with pytest.raises(KlmError) as raised:
        validate_sweep({"dataset": "cosmosqa", "methods": ["baseline", "kam+si"]}, "sweep.yaml")
    assert str(raised.value) == f"sweep.yaml: method 'kam+si' cannot run on cosmosqa: {reason}"
    assert "\n" not in str(raised.value)
    if "torch" not in sys.modules:  # run alone: the registry read the reason from source
        assert "knowledge_lm.data.cosmosqa" not in sys.modules


def test_status_times_done_cells_in_cell_and_gpu_minutes():
    from knowledge_lm.cli.status import busy_seconds, time_line

    assert busy_seconds([(0, 10), (5, 20), (30, 40)]) == 30 and busy_seconds([]) == 0

    def result(card: str, end: str, wall: float) -> dict:
        device = {"accelerator": "cuda", "name": "NVIDIA H200", "visible": card}
        return {"wall_time_s": wall, "finished_at": f"2026-11-28T03:{end}+00:00", "device": device}

    # two cells packed on card 0 for 60 and 120 s, overlapping by 60 s; one of 60 s on card 1
    results = [result("0", "01:00", 60), result("0", "02:00", 120), result("1", "02:00", 60)]
    line = time_line(results)
    assert line.startswith("time: 4.0 cell-minutes; 3.0 GPU-minutes with a cell running")
