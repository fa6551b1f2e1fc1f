"""Every `python -m bench...` command answers `--help` with its usage and exits 0 at once,
running nothing (no benchmark, no server, no vLLM import).

The commands are found where users and contributors read them: every `python -m bench...` in
README.md, docs/, bench/ (its README and its modules' docstrings; not the results, which record
past runs), .ci/ and deploy/. A command newly documented there is held to this at once, and a
command renamed without its docs fails here. Entry points in the code (a package's
`__main__.py`, a module's `if __name__ == "__main__":` block) are held to it too.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
HELP_TIMEOUT_SECONDS = 60  # an import on a busy machine; a benchmark takes minutes
COMMAND = re.compile(r"python -m (bench(?:\.[A-Za-z_]\w*)*)")
DOCUMENTS = ("README.md", "docs", "bench", ".ci", "deploy")
TEXT_SUFFIXES = {".md", ".py", ".sh", ".toml", ".yaml", ".yml", ".in", ""}


def documents() -> list[Path]:
    found: list[Path] = []
    for name in DOCUMENTS:
        root = REPO / name
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        found += [
            path
            for path in paths
            if path.suffix in TEXT_SUFFIXES and "results" not in path.relative_to(REPO).parts
        ]
    return found


def documented_commands() -> set[str]:
    commands: set[str] = set()
    for path in documents():
        commands |= set(COMMAND.findall(path.read_text(errors="replace")))
    return commands


def module_of(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] in ("__main__", "__init__") else parts)


def entry_points() -> set[str]:
    found = {module_of(path) for path in BENCH.rglob("__main__.py")}
    for path in BENCH.rglob("*.py"):
        if 'if __name__ == "__main__":' in path.read_text():
            found.add(module_of(path))
    return found


def run(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=HELP_TIMEOUT_SECONDS,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_the_commands_are_found_in_the_docs_and_the_code() -> None:
    documented = documented_commands()
    assert {"bench", "bench.system", "bench.repeats", "bench.chunker"} <= documented
    assert {"bench.normalize.memory", "bench.proxies.report"} <= documented
    assert {"bench", "bench.system", "bench.shared.loadgen", "bench.proxies.encode"} <= (
        entry_points()
    )


def test_every_documented_command_is_an_entry_point() -> None:
    assert documented_commands() - entry_points() == set()


@pytest.mark.parametrize("module", sorted(documented_commands() | entry_points()))
def test_help_shows_usage_and_runs_nothing(module: str, tmp_path: Path) -> None:
    done = run(module, "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: python -m {module} "), done.stdout[:200]
    assert not done.stderr
