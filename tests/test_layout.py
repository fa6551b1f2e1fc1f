"""The house's rooms import one another one way: no import circle at any level.

A room is a module or a package; at each level of `gateway/` (the top, and inside every package),
room A depends on its sibling B when any module inside A imports anything inside B. Imports
under `TYPE_CHECKING` and inside functions count too: a circle is a circle whenever it runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gateway

ROOT = Path(gateway.__file__).parent


def module_name(path: Path) -> tuple[str, ...]:
    parts = ("gateway", *path.relative_to(ROOT).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def imported_modules(path: Path) -> set[tuple[str, ...]]:
    """The gateway modules (or names in them) one file imports, as absolute dotted parts."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here[:-1]
    found: set[tuple[str, ...]] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = (*base, *(node.module.split(".") if node.module else ()))
            elif node.module and node.module.split(".")[0] == "gateway":
                target = tuple(node.module.split("."))
            else:
                continue
            found |= {(*target, alias.name) for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {
                tuple(alias.name.split("."))
                for alias in node.names
                if alias.name.split(".")[0] == "gateway"
            }
    return found


def package_graphs() -> dict[tuple[str, ...], dict[str, set[str]]]:
    """For each package: its rooms (child modules and packages) and which siblings each imports."""
    graphs: dict[tuple[str, ...], dict[str, set[str]]] = {}
    for init in sorted(ROOT.rglob("__init__.py")):
        package = module_name(init)
        rooms = {
            p.stem if p.suffix else p.name
            for p in init.parent.iterdir()
            if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()
        }
        graphs[package] = {room: set() for room in rooms}
    for path in ROOT.rglob("*.py"):
        source = module_name(path)
        for target in imported_modules(path):
            for depth in range(1, min(len(source), len(target))):
                package = source[:depth]
                if target[:depth] != package:
                    break
                if len(source) > depth and len(target) > depth and source[depth] != target[depth]:
                    graph = graphs[package]
                    if target[depth] in graph and source[depth] in graph:
                        graph[source[depth]].add(target[depth])
                    break
    return graphs


def circle_in(graph: dict[str, set[str]]) -> list[str] | None:
    done: set[str] = set()

    def visit(room: str, path: tuple[str, ...]) -> list[str] | None:
        if room in path:
            return [*path[path.index(room) :], room]
        if room in done:
            return None
        for imported in sorted(graph.get(room, set())):
            if circle := visit(imported, (*path, room)):
                return circle
        done.add(room)
        return None

    for room in sorted(graph):
        if circle := visit(room, ()):
            return circle
    return None


GRAPHS = package_graphs()


@pytest.mark.parametrize("package", sorted(GRAPHS), ids=".".join)
def test_no_import_circle_between_rooms(package: tuple[str, ...]) -> None:
    circle = circle_in(GRAPHS[package])
    assert circle is None, f"import circle in {'.'.join(package)}: {' -> '.join(circle or [])}"


def test_the_graph_sees_the_rooms_and_their_imports() -> None:
    top = GRAPHS[("gateway",)]
    assert {"app", "config", "audio", "upstream", "references", "bridge", "naming"} <= set(top)
    assert {"config", "naming", "upstream"} <= top["app"] | top["audio"] | top["references"]
    assert "check" in GRAPHS[("gateway", "tools")]


def test_a_circle_is_found() -> None:
    assert circle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert circle_in({"a": {"b"}, "b": set()}) is None


def test_every_room_says_what_it_holds() -> None:
    for init in ROOT.rglob("__init__.py"):
        docstring = ast.get_docstring(ast.parse(init.read_text()))
        assert docstring, f"{init.relative_to(ROOT.parent)} has no docstring"


def test_the_clip_key_room_is_pure() -> None:
    """`affinity` computes the clip key from what it is given: it may read what an audio part
    names (`naming`) and the header names the relay owns (`hop_headers`), nothing that does
    I/O or holds state."""
    assert GRAPHS[("gateway",)]["affinity"] <= {"naming", "hop_headers"}
    assert "affinity" in GRAPHS[("gateway",)]["upstream"]  # the pool sets the headers
