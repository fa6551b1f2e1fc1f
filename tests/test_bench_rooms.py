"""bench/'s rooms keep their shape: a folder per benchmark over bench/shared/, which imports no
benchmark; a handful of loose modules at the top; each folder's `__init__` says what it
measures, which results file it writes (or that it writes none) and what it may import.
(Import circles are tests/test_layout.py's.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
SHARED = BENCH / "shared"
MAX_LOOSE_MODULES = 3  # __init__, __main__ (`python -m bench`) and room for one more
FOLDERS = sorted(p.parent.name for p in BENCH.glob("*/__init__.py"))
BENCHMARKS = [name for name in FOLDERS if name != "shared"]


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return names


def test_shared_imports_no_benchmark() -> None:
    for path in SHARED.rglob("*.py"):
        for name in imported(path):
            parts = name.split(".")
            assert not (parts[0] == "bench" and len(parts) > 1 and parts[1] in BENCHMARKS), (
                f"{path.relative_to(BENCH)} imports {name}"
            )


def test_the_top_holds_a_handful_of_loose_modules() -> None:
    loose = sorted(path.name for path in BENCH.glob("*.py"))
    assert len(loose) <= MAX_LOOSE_MODULES, loose


def test_the_rooms_are_found() -> None:
    assert {"shared", "proxies", "system", "replicas", "repeats"} <= set(FOLDERS)


@pytest.mark.parametrize("folder", BENCHMARKS)
def test_a_benchmark_says_what_it_writes_and_may_import(folder: str) -> None:
    docstring = ast.get_docstring(ast.parse((BENCH / folder / "__init__.py").read_text())) or ""
    docstring = " ".join(docstring.split())
    writes = ("bench/results/", "no results file", "Writes nothing", "Neither writes")
    assert any(phrase in docstring for phrase in writes), docstring
    assert "May import:" in docstring, docstring


def test_shared_says_what_it_holds_and_may_import() -> None:
    docstring = ast.get_docstring(ast.parse((SHARED / "__init__.py").read_text())) or ""
    assert "May import:" in docstring
    listed = {line.split()[0] for line in docstring.splitlines() if line.startswith("    ")}
    modules = {path.stem for path in SHARED.glob("*.py") if path.stem != "__init__"}
    assert modules <= listed, modules - listed
