"""No function of the package is over ``MAX_FUNCTION_LINES`` lines, counted from ``def`` to its last line,
docstring included: a long function is split into named steps."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "knowledge_lm"
MAX_FUNCTION_LINES = 80


def long_functions(package: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``path:line name (N lines)`` for every function or method in ``package`` over ``limit`` lines."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_long_functions_are_found(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    steps = "".join(f"        x{i} = {i}\n" for i in range(8))
    (package / "mod.py").write_text(f"def short():\n    return 1\n\n\nclass A:\n    def long(self):\n{steps}")
    assert long_functions(package, limit=5) == ["pkg/mod.py:6 long (9 lines)"]


def test_no_function_is_over_the_limit():
    too_long = long_functions(PACKAGE)
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(too_long)
