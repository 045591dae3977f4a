"""A dataset's module (a module of ``knowledge_lm/data/`` that holds a dataset of the catalog) is imported only
by ``data/`` and ``methods/`` (a method's own folder, as ERICA's corpus): everything else reaches a dataset through
the registry (``DATASETS.get(name)``), so adding or removing a dataset touches no runner, report or tool."""

from pathlib import Path

from test_layers import imported_modules, module_name

from knowledge_lm.core.catalog import DATASET_ENTRIES

PACKAGE = Path(__file__).resolve().parents[1] / "knowledge_lm"
ALLOWED = ("data", "methods")


def dataset_modules() -> set[str]:
    """The modules of ``data/`` that hold a dataset of the catalog (not ``base`` nor a shared reader such as
    ``lama``, which holds none)."""
    return {entry.target.split(":")[0] for entry in DATASET_ENTRIES.values()}


def dataset_imports(package: Path = PACKAGE, datasets: set[str] | None = None) -> list[str]:
    """``module:line imports target`` for every import of a dataset's module outside ``ALLOWED``."""
    datasets = dataset_modules() if datasets is None else datasets
    wrong = []
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).parts[0] in ALLOWED:
            continue
        name = module_name(path, package)
        for target, line in imported_modules(path, name):
            if any(target == module or target.startswith(module + ".") for module in datasets):
                wrong.append(f"{name}:{line} imports {target}")
    return wrong


def test_only_data_and_methods_import_a_datasets_module():
    assert len(dataset_modules()) > 5
    assert dataset_imports() == []


def test_a_dataset_import_is_found_in_any_form(tmp_path):
    package = tmp_path / "pkg"
    for folder in ("data", "report", "methods"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "data" / "base.py").write_text("")
    (package / "data" / "toy.py").write_text("class Toy:\n    pass\n")
    (package / "report" / "a.py").write_text("from pkg.data import base\n\ndef f():\n    from pkg.data import toy\n")
    (package / "report" / "b.py").write_text("import pkg.data.toy\nfrom ..data.toy import Toy\n")
    (package / "methods" / "c.py").write_text("from pkg.data.toy import Toy\n")
    assert dataset_imports(package, {"pkg.data.toy"}) == [
        "pkg.report.a:4 imports pkg.data.toy",
        "pkg.report.b:1 imports pkg.data.toy",
        "pkg.report.b:2 imports pkg.data.toy.Toy",
    ]
