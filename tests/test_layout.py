"""The house's rooms import one another one way: no import circle at any level.

A room is a module or a package; at each level of a package tree (`gateway/`, `bench/`: the
top, and inside every package), room A depends on its sibling B when any module inside A imports
anything inside B. Imports under `TYPE_CHECKING` and inside functions count too: a circle is a
circle whenever it runs. Besides: gateway/'s top holds the door and the ground, no more than a
handful of loose modules, and every package says in its `__init__` docstring what it holds.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import bench
import gateway

TREES = {tree.__name__: Path(tree.__file__).parent for tree in (gateway, bench)}
MAX_LOOSE_TOP_MODULES = 10  # gateway/'s top: the process and the ground, beside its rooms

Dotted = tuple[str, ...]


def module_name(root: Path, path: Path) -> Dotted:
    parts = (root.name, *path.relative_to(root).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def imported_modules(root: Path, path: Path) -> set[Dotted]:
    """The modules (or names in them) of `root`'s tree one file imports, as absolute dotted
    parts."""
    here = module_name(root, path)
    package = here if path.name == "__init__.py" else here[:-1]
    found: set[Dotted] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = (*base, *(node.module.split(".") if node.module else ()))
            elif node.module and node.module.split(".")[0] == root.name:
                target = tuple(node.module.split("."))
            else:
                continue
            found |= {(*target, alias.name) for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {
                tuple(alias.name.split("."))
                for alias in node.names
                if alias.name.split(".")[0] == root.name
            }
    return found


def package_graphs(root: Path) -> dict[Dotted, dict[str, set[str]]]:
    """For each package of the tree at `root`: its rooms (child modules and packages) and
    which siblings each imports."""
    graphs: dict[Dotted, dict[str, set[str]]] = {}
    for init in sorted(root.rglob("__init__.py")):
        package = module_name(root, init)
        rooms = {
            p.stem if p.suffix else p.name
            for p in init.parent.iterdir()
            if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()
        }
        graphs[package] = {room: set() for room in rooms}
    for path in root.rglob("*.py"):
        source = module_name(root, path)
        for target in imported_modules(root, path):
            for depth in range(1, min(len(source), len(target))):
                package = source[:depth]
                if target[:depth] != package:
                    break
                if len(source) > depth and len(target) > depth and source[depth] != target[depth]:
                    graph = graphs.get(package, {})
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


GRAPHS = {
    package: graph for root in TREES.values() for package, graph in package_graphs(root).items()
}


@pytest.mark.parametrize("package", sorted(GRAPHS), ids=".".join)
def test_no_import_circle_between_rooms(package: Dotted) -> None:
    circle = circle_in(GRAPHS[package])
    assert circle is None, f"import circle in {'.'.join(package)}: {' -> '.join(circle or [])}"


def test_the_graph_sees_the_rooms_and_their_imports() -> None:
    top = GRAPHS[("gateway",)]
    assert {"app", "config", "audio", "upstream", "references", "bridge", "naming"} <= set(top)
    assert {"config", "naming", "upstream"} <= top["app"] | top["audio"] | top["references"]
    assert "check" in GRAPHS[("gateway", "tools")]
    assert {"shared", "system"} <= set(GRAPHS[("bench",)])  # bench's rooms, and
    assert "shared" in GRAPHS[("bench",)]["system"]  # its absolute imports, are seen


def test_a_circle_is_found(tmp_path: Path) -> None:
    assert circle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert circle_in({"a": {"b"}, "b": set()}) is None
    tree = tmp_path / "tree"
    for name, text in {
        "__init__.py": "",
        "one/__init__.py": "",
        "one/run.py": "from tree.two.run import main\n",
        "two/__init__.py": "",
        "two/run.py": "def main() -> None:\n    from ..one import run\n",
    }.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    assert circle_in(package_graphs(tree)[("tree",)]) == ["one", "two", "one"]


def test_the_gateway_never_imports_the_bench() -> None:
    for path in TREES["gateway"].rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            assert all(name.split(".")[0] != "bench" for name in names), path


def test_gateways_top_holds_a_handful_of_loose_modules() -> None:
    """The door (`app`, `lifecycle`, ...) and the ground (`config`, `errors`, ...); everything
    else lives in a room."""
    loose = sorted(
        path.stem
        for path in TREES["gateway"].glob("*.py")
        if path.stem not in ("__init__", "__main__")
    )
    assert len(loose) <= MAX_LOOSE_TOP_MODULES, loose


@pytest.mark.parametrize("tree", sorted(TREES))
def test_every_package_says_what_it_holds(tree: str) -> None:
    for init in sorted(TREES[tree].rglob("__init__.py")):
        docstring = ast.get_docstring(ast.parse(init.read_text()))
        assert docstring, f"{init.relative_to(TREES[tree].parent)} has no docstring"


def test_the_clip_key_room_is_pure() -> None:
    """`affinity` computes the clip key from what it is given: it may read what an audio part
    names (`naming`) and the header names the relay owns (`hop_headers`), nothing that does
    I/O or holds state."""
    assert GRAPHS[("gateway",)]["affinity"] <= {"naming", "hop_headers"}
    assert "affinity" in GRAPHS[("gateway",)]["upstream"]  # the pool sets the headers
