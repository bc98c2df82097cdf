"""``loadtest`` ships in the wheel and ``tests`` does not: no module of it may import ``tests``."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "loadtest"


def _imported(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):    # every import, the ones inside functions too
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_no_loadtest_module_imports_tests() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 10       # the package was found
    offenders = {str(path.relative_to(PACKAGE.parent)): name
                 for path in modules for name in _imported(ast.parse(path.read_text()))
                 if name == "tests" or name.startswith("tests.")}
    assert offenders == {}
