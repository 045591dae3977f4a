"""The registries are plain data (knowledge_lm.core.catalog): every entry names a class that exists and says what
that class does; reading them (and ``klm list``) imports no method, no dataset, no torch; ``get`` imports one module."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write

from knowledge_lm.core.catalog import DESCRIPTION_CHARS, MethodEntry
from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import DATASETS, METHODS, TASK_KINDS, Registry

REPO = Path(__file__).resolve().parents[1]


def check_method_entry(name: str, entry) -> None:
    """The class ``entry`` names is a method whose options and use of knowledge are those the entry gives."""
    from knowledge_lm.methods.task_model import TaskModel

    method = METHODS.get(name)
    assert issubclass(method, TaskModel), name
    assert entry.options == tuple(f.name for f in dataclasses.fields(method.options_class) if f.init), name
    # A method that reads knowledge features turns a batch's rows into its tensors.
    assert entry.needs_knowledge == (method.knowledge_collate is not TaskModel.knowledge_collate), name
    assert entry.description and "\n" not in entry.description and len(entry.description) <= DESCRIPTION_CHARS


def check_dataset_entry(name: str, entry) -> None:
    """The class ``entry`` names is the data module of dataset ``name``, with the tasks and facts the entry gives."""
    from knowledge_lm.data.base import TaskDataModule

    dataset = DATASETS.get(name)
    assert issubclass(dataset, TaskDataModule) and dataset.name == name, name
    assert entry.tasks == tuple(dataset.tasks) and set(entry.default_tasks) <= set(entry.tasks), name
    assert entry.labels_are_kg_facts == (dataset.answer_facts is not TaskDataModule.answer_facts), name
    kinds = {dataset.spec(task).kind for task in entry.tasks}
    assert kinds <= set(TASK_KINDS.names()), name
    assert bool(entry.no_knowledge) == ("multiple_choice" in kinds), name
    assert entry.description and "\n" not in entry.description and len(entry.description) <= DESCRIPTION_CHARS


def test_every_method_entry_names_its_class_and_its_options():
    for name, entry in METHODS.items():
        check_method_entry(name, entry)


def test_every_dataset_entry_names_its_class_and_its_tasks():
    for name, entry in DATASETS.items():
        check_dataset_entry(name, entry)


def test_every_task_kind_entry_names_a_task_kind():
    from knowledge_lm.tasks.base import TaskKind

    for name, _ in TASK_KINDS.items():
        assert issubclass(TASK_KINDS.get(name), TaskKind), name


def test_reading_the_registries_and_klm_list_import_no_method_dataset_or_torch():
    script = """
import contextlib, io, json, sys
from knowledge_lm.cli import main
from knowledge_lm.core.registry import DATASETS, METHODS, cannot_run
with contextlib.redirect_stdout(io.StringIO()):
    main(["list"])
located = [METHODS.locate(name) for name in METHODS.names()] + [DATASETS.locate(name) for name in DATASETS.names()]
reason = cannot_run("kam", "cosmosqa")
loaded = [m for m in sys.modules if m.split(".")[0] in ("torch", "transformers", "pytorch_lightning")
          or m.startswith(("knowledge_lm.methods.", "knowledge_lm.data.", "knowledge_lm.tasks."))]
print(json.dumps([located, reason, loaded]))
"""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    located, reason, loaded = json.loads(done.stdout)
    assert loaded == []
    assert "knowledge_lm.methods.kam:Kam" in located and "knowledge_lm.data.glue:GlueDataModule" in located
    assert reason.startswith("multiple choice: no knowledge features")


@pytest.fixture
def things(tmp_path, monkeypatch):
    """A registry of kind ``thing`` over two modules of a package of its own, neither imported yet."""
    write(tmp_path / "klm_fake_things" / "__init__.py", "")
    write(tmp_path / "klm_fake_things" / "plain.py", "class Plain:\n    class Inner:\n        pass\n")
    write(tmp_path / "klm_fake_things" / "other.py", "class Other:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = {
        "plain": MethodEntry("klm_fake_things.plain:Plain", "a plain thing"),
        "inner": MethodEntry("klm_fake_things.plain:Plain.Inner", "a nested class"),
        "other": MethodEntry("klm_fake_things.other:Other", "another"),
    }
    yield Registry("thing", entry)
    for module in [m for m in sys.modules if m.split(".")[0] == "klm_fake_things"]:
        del sys.modules[module]


def test_get_imports_only_the_module_asked_for(things):
    assert things.locate("plain") == "klm_fake_things.plain:Plain" and "klm_fake_things.plain" not in sys.modules
    plain = things.get("plain")
    assert plain.__name__ == "Plain" and things.get("inner") is plain.Inner
    assert "klm_fake_things.plain" in sys.modules and "klm_fake_things.other" not in sys.modules


def test_an_unknown_name_is_one_line_listing_the_known(things):
    for lookup in (things.get, things.check, things.locate, things.entry):
        with pytest.raises(KlmError) as raised:
            lookup("nope")
        assert str(raised.value) == "unknown thing 'nope'; known: inner, other, plain"


def test_a_class_outside_the_package_is_added_as_an_entry(things):
    outside = MethodEntry(f"{__name__}:Outside", "defined in a test")
    things.add("outside", outside)
    things.add("outside", outside)  # the same entry again: no change
    assert things.get("outside") is Outside and "outside" in things.names()
    with pytest.raises(ValueError, match="registered twice"):
        things.add("plain", outside)


class Outside:
    pass
