"""`python -m bench.workers` runs end to end on a small load (so it cannot rot): a gateway at
1 and at 2 workers in front of the stub, every answer a 200, one table row per count. No timing
is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.test_config import REPO_ROOT

RUN_TIMEOUT_SECONDS = 300


def test_a_small_run_reports_each_worker_count(tmp_path: Path) -> None:
    raw = tmp_path / "points.json"
    args = ["--rounds", "2", "--requests", "64", "--concurrency", "4", "--json", str(raw)]
    done = subprocess.run(
        [sys.executable, "-m", "bench.workers", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "x |" in line]
    assert [row.split(" | ")[0] for row in rows] == ["| 1", "| 2"]
    points = json.loads(raw.read_text())
    assert sorted(points) == ["1", "2"] and all(len(p) == 2 for p in points.values())
    assert all(point["rps"] > 0 for runs in points.values() for point in runs)
