"""The package's import graph has no cycle, counting every import (function-local ones too: they hide cycles)."""

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "knowledge_lm"


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE) -> nx.DiGraph:
    """Module → the package's modules it imports anywhere in its file."""
    modules = {module_name(path, package): path for path in package.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:  # a name imported from a module, or a package
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph.add_edge(name, target)
    return graph


def test_the_package_imports_form_no_cycle():
    graph = import_graph()
    assert len(graph) > 40
    assert list(nx.simple_cycles(graph)) == []


def test_the_graph_sees_function_local_imports(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import helper\n")
    (package / "b.py").write_text("def helper():\n    from pkg import a\n    return a\n")
    assert list(nx.simple_cycles(import_graph(package))) in ([["pkg.a", "pkg.b"]], [["pkg.b", "pkg.a"]])
