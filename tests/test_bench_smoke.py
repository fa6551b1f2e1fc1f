"""bench/ cannot rot: the `--quick` code path on a tiny workload, end to end, in a few seconds.

Real subprocesses (stub, gateway, load generator) on free local ports; no nginx, no huge clip.
Nothing here asserts a timing: the benchmark is not a test.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from bench.report import write_results
from bench.runner import run_benchmark
from bench.workloads import Scenario, quick_scenario


def tiny_scenario() -> Scenario:
    quick = quick_scenario("smoke")
    tiny_a = replace(quick.workloads[0], clips=3, seeds=2, concurrency=(1, 2), warmup_requests=2)
    return replace(
        quick,
        modes=("direct", "gateway"),
        workloads=(tiny_a,),
        huge_clip_bytes=0,
        encode_file_bytes=300_000,
        encode_repeats=1,
        sha_check_every=1,
    )


def test_quick_path_on_a_tiny_workload(tmp_path: Path) -> None:
    results = run_benchmark(tiny_scenario(), progress=False)
    paths = write_results(results, tmp_path)

    saved = json.loads(paths["json"].read_text())
    assert saved["modes"] == ["direct", "gateway"]
    warm = [p for p in saved["points"] if p["phase"] == "warm"]
    assert {(p["mode"], p["concurrency"]) for p in warm} == {
        (mode, c) for mode in ("direct", "gateway") for c in (1, 2)
    }
    for point in saved["points"]:
        assert point["errors"] == 0, point["error_samples"]
        assert point["requests"] == 6
        assert point["checked"] > 0 and point["mismatched"] == 0
    assert saved["cache_checks"] == [
        {"workload": "a", "distinct_clips": 3, "mode": "gateway", "misses": 3, "ok": True}
    ]
    assert [p["cache_misses"] for p in saved["points"] if p["mode"] == "gateway"] == [3, 0, 0]
    assert saved["encode"]["gateway_mb_s"] > 0
    assert {g["goal"] for g in saved["goals"]}  # evaluated, mostly n/a without nginx
    assert "| gateway | 2 |" in paths["md"].read_text()
    assert paths["png"].stat().st_size > 0
