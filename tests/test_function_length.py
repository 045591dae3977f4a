"""No function of the package is over ``MAX_FUNCTION_LINES`` lines, counted from ``def`` to its last line,
docstring included: a long function is split into named steps."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "knowledge_lm"
MAX_FUNCTION_LINES = 80
# KAM's map building is being reworked for speed in another branch; it is split into steps once that lands.
LONG_FUNCTIONS_PENDING = {"knowledge_lm/methods/kam.py map_entries"}


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
    too_long = [found for found in long_functions(PACKAGE) if pending_name(found) not in LONG_FUNCTIONS_PENDING]
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(too_long)


def test_pending_functions_are_still_long():
    """An entry of ``LONG_FUNCTIONS_PENDING`` goes once its function is short (or gone)."""
    assert LONG_FUNCTIONS_PENDING <= {pending_name(found) for found in long_functions(PACKAGE)}


def pending_name(found: str) -> str:
    """``path:line name (N lines)`` → ``path name``."""
    location, name = found.split(" ")[:2]
    return f"{location.split(':')[0]} {name}"
