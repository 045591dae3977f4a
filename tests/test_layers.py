"""The packages form layers: each imports only the packages the README lists before it (function-level imports
counted), and every module says what it is in a short docstring."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "knowledge_lm"
MAX_DOCSTRING_LINES = 14


def readme_layers(readme: Path = ROOT / "README.md") -> list[str]:
    """The layers in the README's order: the line of backquoted names joined by arrows."""
    chain = re.search(r"`\w+`(?: → `\w+`)+", readme.read_text(encoding="utf-8"))
    if chain:
        return re.findall(r"`(\w+)`", chain.group())
    raise AssertionError("README.md states no layer order (`a` → `b` → ...)")


def layer_of(module: str) -> str | None:
    """``knowledge_lm.run.cell`` → ``run``; ``knowledge_lm.cli`` → ``cli``; the package itself → None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, name: str) -> list[tuple[str, int]]:
    """Every module ``path`` imports anywhere in the file (absolute, relative resolved), with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, one folder up per further dot
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            # ``from knowledge_lm import cli``: the name may be a module of the package.
            found += [(f"{module}.{alias.name}", node.lineno) for alias in node.names] if module else []
    return found


def upward_imports(package: Path, order: list[str]) -> list[str]:
    """``module:line imports target`` for every import of a layer at or after the importer's own in ``order``
    (a layer's modules may import each other)."""
    rank = {layer: position for position, layer in enumerate(order)}
    wrong = []
    for path in sorted(package.rglob("*.py")):
        name = module_name(path, package)
        source = layer_of(name)
        for target, line in imported_modules(path, name):
            if not target.startswith(package.name + "."):
                continue
            layer = layer_of(target)
            if layer is None or source is None or layer == source:
                continue
            if layer not in rank:  # a name imported from the package itself, or a layer the README does not list
                if (package / layer).is_dir() or (package / f"{layer}.py").is_file():
                    wrong.append(f"{name}:{line} imports {target}, of a layer the README does not list")
                continue
            if source in rank and rank[layer] > rank[source]:
                wrong.append(f"{name}:{line} imports {target} ({source} → {layer} goes up)")
    return wrong


def test_the_readme_lists_every_package_once():
    order = readme_layers()
    assert len(order) == len(set(order))
    present = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    present |= {path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    assert set(order) == present


def test_packages_import_only_downward():
    assert upward_imports(PACKAGE, readme_layers()) == []


def test_an_upward_import_in_a_function_is_found(tmp_path):
    package = tmp_path / "pkg"
    for layer in ("low", "high"):
        (package / layer).mkdir(parents=True)
        (package / layer / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "high" / "a.py").write_text("from pkg.low import b\n")
    (package / "low" / "b.py").write_text("def helper():\n    from pkg.high.a import b\n    return b\n")
    (package / "low" / "c.py").write_text("from . import b\nfrom ..high import a\n")
    assert upward_imports(package, ["low", "high"]) == [
        "pkg.low.b:2 imports pkg.high.a.b (low → high goes up)",
        "pkg.low.c:2 imports pkg.high.a (low → high goes up)",
    ]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda path: str(path.relative_to(PACKAGE)))
def test_a_module_docstring_says_what_it_is_briefly(path):
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
    assert docstring, f"{path.relative_to(ROOT)} has no module docstring"
    assert len(docstring.splitlines()) <= MAX_DOCSTRING_LINES, f"{path.relative_to(ROOT)}: over 14 lines"
