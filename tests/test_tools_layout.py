"""The dataset tools' modules import one another one way: no import circle."""

from __future__ import annotations

import ast
from pathlib import Path

import gateway.tools

TOOLS = Path(gateway.tools.__file__).parent


def local_imports() -> dict[str, set[str]]:
    """Each tools module and the tools modules it imports (relative imports of the package)."""
    graph: dict[str, set[str]] = {}
    for path in TOOLS.glob("*.py"):
        tree = ast.parse(path.read_text())
        graph[path.stem] = {
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        }
    return graph


def test_the_tools_have_no_import_circle() -> None:
    graph = local_imports()
    assert {"check", "rows", "summary", "results"} <= set(graph)
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import circle: {' -> '.join((*path, module))}"
        if module in done:
            return
        for imported in graph.get(module, set()):
            visit(imported, (*path, module))
        done.add(module)

    for module in graph:
        visit(module, ())
