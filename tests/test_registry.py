"""The registries know every name, and a dataset's tasks, from the source alone; ``get`` imports one module."""

import importlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from helpers import write

from knowledge_lm.core.errors import KlmError
from knowledge_lm.core.registry import DATASETS, METHODS

REPO = Path(__file__).resolve().parents[1]


def test_the_source_tables_match_what_importing_registers():
    from knowledge_lm.tasks.base import TASK_KINDS

    for registry in (METHODS, DATASETS, TASK_KINDS):
        read = {name: f"{found.module}:{found.name}" for name, found in registry.static_table().items()}
        registered = {
            name: f"{cls.__module__}:{cls.__qualname__}"
            for name, cls in registry.import_all().items()
            if cls.__module__.startswith(f"{registry.package}.")
        }
        assert read == registered
        assert len(read) >= 9
    for name, found in DATASETS.static_table().items():
        for attribute in ("tasks", "default_tasks"):
            assert DATASETS.static_attribute(found, attribute) == getattr(DATASETS.get(name), attribute), (
                name,
                attribute,
            )


def test_reading_the_registries_imports_no_method_or_dataset_module():
    script = """
import json, sys
from knowledge_lm.core.registry import DATASETS, METHODS
located = [METHODS.locate(name) for name in METHODS.names()] + [DATASETS.locate(name) for name in DATASETS.names()]
tasks = {name: [DATASETS.class_attribute(name, "tasks"), DATASETS.class_attribute(name, "default_tasks")]
         for name in DATASETS.names()}
loaded = [m for m in sys.modules if m.split(".")[0] in ("torch", "transformers", "pytorch_lightning")
          or m.startswith(("knowledge_lm.methods.", "knowledge_lm.data."))]
print(json.dumps([located, tasks, loaded]))
"""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    located, tasks, loaded = json.loads(done.stdout)
    assert loaded == []
    assert "knowledge_lm.methods.kam:Kam" in located and "knowledge_lm.data.glue:GlueDataModule" in located
    assert tasks["fewrel"] == [["main", "mean_pool"], ["main"]]  # inherited from a mixin in knowledge_lm.tasks


@pytest.fixture
def things(tmp_path, monkeypatch):
    """A package of its own: a registry of kind ``thing`` over ``<package>.things``, whose modules register
    classes with literal attributes (``plain``), inherited or built from a constant ones (``keys``), computed
    ones (``computed``) and a name that is no literal (``dynamic``)."""
    package = f"klm_fake_{uuid.uuid4().hex[:12]}"
    write(
        tmp_path / package / "__init__.py",
        "from knowledge_lm.core.registry import Registry\n\n"
        "THINGS = Registry('thing', __name__ + '.things')\nregister_thing = THINGS.register\n",
    )
    write(tmp_path / package / "bases.py", "class Base:\n    tasks = ('inherited',)\n    default_tasks = ()\n")
    write(tmp_path / package / "things" / "__init__.py", "")
    write(
        tmp_path / package / "things" / "plain.py",
        f"""from {package} import register_thing
from {package}.bases import Base

KINDS = {{"x": 1, "y": 2}}


@register_thing("plain", "alias")
class Plain(Base):
    default_tasks = ("a",)


@register_thing("keys")
class Keys(Base):
    tasks = tuple(KINDS)
""",
    )
    write(
        tmp_path / package / "things" / "computed.py",
        f"""from {package} import register_thing


@register_thing("computed")
class Computed:
    tasks = tuple(sorted({{"b", "a"}}))
""",
    )
    write(
        tmp_path / package / "things" / "dynamic.py",
        f"""from {package} import register_thing

NAME = "dyn" + "amic"


@register_thing(NAME)
class Dynamic:
    tasks = ("d",)
""",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module(package).THINGS
    for module in [m for m in sys.modules if m.split(".")[0] == package]:
        del sys.modules[module]


def imported(registry, module: str) -> bool:
    return f"{registry.package}.{module}" in sys.modules


def test_names_and_attributes_come_from_the_source(things):
    assert things.names() == ["alias", "computed", "dynamic", "keys", "plain"]
    assert things.locate("alias") == f"{things.package}.plain:Plain"
    assert things.class_attribute("plain", "tasks") == ("inherited",)
    assert things.class_attribute("plain", "default_tasks") == ("a",)
    assert things.class_attribute("keys", "tasks") == ("x", "y")
    assert not imported(things, "plain") and not imported(things, "computed")
    assert imported(things, "dynamic")  # its registered name is known only by running the module


def test_an_attribute_that_is_no_literal_is_read_from_the_imported_class(things):
    assert things.class_attribute("computed", "tasks") == ("a", "b")
    assert imported(things, "computed") and not imported(things, "plain")


def test_get_imports_only_the_module_asked_for(things):
    plain = things.get("alias")
    assert plain.__name__ == "Plain" and things.get("plain") is plain
    assert imported(things, "plain") and not imported(things, "computed")


def test_an_unknown_name_is_one_line_listing_the_known(things):
    for lookup in (things.get, things.check, things.locate, lambda name: things.class_attribute(name, "tasks")):
        with pytest.raises(KlmError) as raised:
            lookup("nope")
        assert str(raised.value) == "unknown thing 'nope'; known: alias, computed, dynamic, keys, plain"


def test_a_class_registered_outside_the_package_is_found(things):
    @things.register("outside")
    class Outside:
        tasks = ("o",)

    assert "outside" in things.names()
    assert things.get("outside") is Outside and things.class_attribute("outside", "tasks") == ("o",)
    assert things.locate("outside") == f"{__name__}:{Outside.__qualname__}"
    with pytest.raises(ValueError, match="registered twice"):
        things.register("plain")(Outside)
