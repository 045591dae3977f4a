"""The worked examples of docs/adding-a-method.md and docs/adding-a-dataset.md (tests/examples/): each added to
its registry from outside the package, its entry checked against its class, and trained two steps on the tiny
backbone."""

import pytest
from test_registry import check_dataset_entry, check_method_entry

from knowledge_lm.core.catalog import COMMON, DatasetEntry, MethodEntry
from knowledge_lm.core.registry import DATASETS, METHODS

SIZES = {"train_size": 40, "dev_size": 10, "test_size": 10}  # the generated task, small
TWO_STEPS = {"batch_size": 8, "max_steps": 2, "evaluations": 1, "max_length": 32}

SOFT_PREFIX = MethodEntry(
    "examples.soft_prefix:SoftPrefix",
    "Knowledge as a prefix of soft tokens: a learned vector per linked entity before the text.",
    (*COMMON, "prefix_tokens", "buckets"),
    needs_knowledge=True,
)
CAPITALS = DatasetEntry(
    "examples.capitals:CapitalsDataModule", "Whether a statement about a capital city is true.", ("main",)
)
STATEMENTS = [
    ("Paris is the capital of France.", "true"),
    ("Lyon is the capital of France.", "false"),
    ("Rome is the capital of Italy.", "true"),
    ("Milan is the capital of Italy.", "false"),
]


@pytest.fixture
def registries(monkeypatch):
    """The registries as they are, restored after the test: an example's entry stays out of other tests."""
    for registry in (METHODS, DATASETS):
        monkeypatch.setattr(registry, "entries", dict(registry.entries))


def trained_cell(method: str, dataset: str, task: str, tmp_path, **options) -> dict:
    from knowledge_lm.core.results import Cell
    from knowledge_lm.run.cell import run_cell
    from knowledge_lm.run.config import TrainConfig

    return run_cell(
        Cell(method, dataset, task, 1.0, 1, "tiny"),
        TrainConfig(**TWO_STEPS),
        results_dir=tmp_path / "results",
        runs_dir=tmp_path / "runs",
        progress=False,
        **options,
    )


def test_the_soft_prefix_method_trains_two_steps_on_the_generated_task(registries, tokenizer, tmp_path):
    from knowledge_lm.data.generated import GeneratedDataModule
    from knowledge_lm.knowledge.prepare import KnowledgeConfig, prepare

    METHODS.add("soft-prefix", SOFT_PREFIX)
    check_method_entry("soft-prefix", SOFT_PREFIX)
    cache = tmp_path / "cache"  # klm prepare's features, which a knowledge method reads
    data = GeneratedDataModule(tokenizer=tokenizer, cache_dir=cache, max_length=32, **SIZES)
    prepare(data, tokenizer, KnowledgeConfig(), cache, progress=False)
    options = {**SIZES, "cache_dir": str(cache), "knowledge": {}}
    result = trained_cell("soft-prefix", "generated", "facts", tmp_path, dataset_options=options)
    assert result["cell"]["method"] == "soft-prefix" and "accuracy" in result["metrics"]["test"]


def test_the_soft_prefix_holds_each_example_s_linked_entities():
    from examples.soft_prefix import entity_rows

    rows = [{"links": [{"candidates": [["Q1", 0.9], ["Q2", 0.1]]}, {"candidates": []}]}, {"links": []}]
    ids = entity_rows(rows, 16, prefix_tokens=3, buckets=8, zeroed=False)
    assert ids.shape == (2, 3) and 1 <= ids[0, 0] < 8 and ids[0, 1:].tolist() == [0, 0] and not ids[1].any()
    assert not entity_rows(rows, 16, prefix_tokens=3, buckets=8, zeroed=True).any()  # zero_knowledge: no prefix


def test_the_capitals_dataset_trains_two_steps(registries, tmp_path):
    DATASETS.add("capitals", CAPITALS)
    check_dataset_entry("capitals", CAPITALS)
    for split in ("train", "dev", "test"):
        folder = tmp_path / "data" / "capitals"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{split}.tsv").write_text("".join(f"{text}\t{label}\n" for text, label in STATEMENTS * 4))
    result = trained_cell("baseline", "capitals", "main", tmp_path, data_dir=tmp_path / "data")
    assert result["cell"]["dataset"] == "capitals" and "accuracy" in result["metrics"]["test"]
