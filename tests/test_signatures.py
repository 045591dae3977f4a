"""A function of the methods, report, tools or cli packages that takes more than five parameters takes the later
ones by keyword (``*,``): a call then says what each value is."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "knowledge_lm"
LAYERS = ("methods", "report", "tools", "cli")
MAX_POSITIONAL = 5


def long_positional_signatures(package: Path = PACKAGE) -> list[str]:
    """``path name`` of every function (``self``/``cls`` not counted) with more than ``MAX_POSITIONAL`` parameters
    and none keyword-only."""
    found = []
    for layer in LAYERS:
        for path in sorted((package / layer).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    positional = [a for a in node.args.posonlyargs + node.args.args if a.arg not in ("self", "cls")]
                    if len(positional) > MAX_POSITIONAL and not node.args.kwonlyargs:
                        found.append(f"{path.relative_to(package)} {node.name}")
    return found


def test_long_signatures_are_keyword_only():
    found = long_positional_signatures()
    assert not found, "more than five parameters, none keyword-only:\n" + "\n".join(sorted(found))
