"""Every `python -m bench...` entry point answers `--help` with its usage and exits 0 at once,
running nothing (no benchmark, no server, no vLLM import). Entry points are found by their
`if __name__ == "__main__":` block, so a new one is held to this too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
HELP_TIMEOUT_SECONDS = 60  # an import on a busy machine; a benchmark takes minutes


def entry_points() -> list[str]:
    found = []
    for path in sorted(BENCH.glob("*.py")):
        if 'if __name__ == "__main__":' in path.read_text():
            found.append("bench" if path.stem == "__main__" else f"bench.{path.stem}")
    return found


def run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=HELP_TIMEOUT_SECONDS,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_the_entry_points_are_found() -> None:
    assert {"bench", "bench.speech_cache", "bench.loadgen", "bench.report"} <= set(entry_points())


@pytest.mark.parametrize("module", entry_points())
def test_help_shows_usage_and_runs_nothing(module: str) -> None:
    done = run(module, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: python -m {module} "), done.stdout[:200]
    assert not done.stderr
