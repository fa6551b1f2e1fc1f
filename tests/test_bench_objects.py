"""bench's object-storage workload cannot rot: a tiny (s3) run end to end, in seconds.

Real subprocesses (stub, proxies, load generator) and moto in the bench process. It asserts
what is counted (GETs per clip at the S3 server, every answer 200), never a timing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from bench.proxies.report import write_results
from bench.proxies.runner import run_benchmark
from bench.shared.workloads import WORKLOAD_S3, quick_scenario


def test_object_workload_counts_gets_per_clip(tmp_path: Path) -> None:
    tiny = replace(WORKLOAD_S3, clips=3, seeds=4)
    scenario = replace(
        quick_scenario("smoke-s3"),
        modes=(),
        workloads=(tiny,),
        huge_clip_bytes=0,
        encode_file_bytes=0,
    )
    results = run_benchmark(scenario, progress=False)
    paths = write_results(results, tmp_path, plot=False)
    rows = json.loads(paths["json"].read_text())["objects"]
    gets = {(r["mode"], r["phase"]): r["gets_per_clip"] for r in rows}
    assert gets == {
        ("seed-reference-s3", "cold"): 4.0,  # one GET per request: the seeds
        ("seed-reference-s3", "warm"): 4.0,
        ("gateway-s3", "cold"): 1.0,  # one GET per clip
        ("gateway-s3", "warm"): 0.0,
        ("gateway-s3-immutable", "cold"): 1.0,
        ("gateway-s3-immutable", "warm"): 0.0,
    }
    heads = {r["mode"]: r["heads_per_request"] for r in rows if r["phase"] == "warm"}
    assert heads == {"seed-reference-s3": 0.0, "gateway-s3": 1.0, "gateway-s3-immutable": 0.0}
    for row in rows:
        assert row["errors"] == 0 and row["requests"] == 12, row["error_samples"]
        assert row["checked"] == 12 and row["mismatched"] == 0
    assert "## Workload (s3)" in paths["md"].read_text()


def test_the_s3_server_answers_without_a_line_on_stderr() -> None:
    """moto's werkzeug server would log every request it answers to stderr."""
    script = (
        "import urllib.request\n"
        "from bench.shared.s3server import LocalS3\n"
        "server = LocalS3()\n"
        "for _ in range(3):\n"
        "    urllib.request.urlopen(server.endpoint + '/', timeout=30).read()\n"
        "assert server.log.count('GET') == 3\n"
        "server.stop()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
