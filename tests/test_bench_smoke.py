"""bench/ cannot rot: the `--quick` code path on a tiny workload, end to end, in a few seconds.

Real subprocesses (stub, gateway, load generator) on free local ports; no nginx, no huge clip.
Nothing here asserts a timing: the benchmark is not a test.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from bench.__main__ import build_parser, scenario_from_args
from bench.proxies.goals import evaluate_goals
from bench.proxies.report import render_markdown, write_results
from bench.proxies.runner import run_benchmark
from bench.shared.stub_timing import PLAIN, VLLM_LIKE
from bench.shared.workloads import Scenario, quick_scenario


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


def test_clients_keep_alive_and_the_stub_is_paced_by_default() -> None:
    saved = run_benchmark(tiny_scenario(), progress=False)
    assert saved["client"]["connections"] == "keep-alive"
    assert saved["stub"] == VLLM_LIKE.to_json() and saved["stub"]["paced"]
    for point in saved["points"]:  # one pool a run, at most `concurrency` connections
        assert 1 <= point["connections_opened"] <= point["concurrency"] * point["rounds"]
    text = render_markdown({**saved, "goals": evaluate_goals(saved)})
    assert "Clients: keep-alive (a pool that reuses its connections" in text
    assert "Stub: stub paced like vLLM: at most 2 answers at a time, 25 ms apart" in text


def test_connection_per_request_and_the_plain_stub() -> None:
    args = build_parser().parse_args(["--quick", "--connection-per-request", "--unpaced-stub"])
    scenario = scenario_from_args(args)
    assert (scenario.connections, scenario.stub_timing) == ("per-request", PLAIN)
    tiny = replace(tiny_scenario(), connections=scenario.connections, stub_timing=PLAIN)
    saved = run_benchmark(tiny, progress=False)
    assert saved["client"]["connections"] == "per-request"
    assert saved["client"]["connections_per_request"] == 1.0
    assert not saved["stub"]["paced"] and not saved["stub"]["split_head_body"]
    for point in saved["points"]:
        assert point["connections_opened"] == point["requests"]


def test_req_s_and_latency_goals_are_not_judged_behind_a_paced_stub() -> None:
    def point(mode: str, concurrency: int, rps: float, p50: float) -> dict[str, object]:
        return {"workload": "a", "mode": mode, "phase": "warm", "concurrency": concurrency,
                "rps": rps, "p50_ms": p50, "proxy_cpu_s_per_1k": 0.5}  # fmt: skip

    points = [point(m, c, 80.0, 20.0) for m in ("gateway", "nginx") for c in (1, 32)]
    judged = {}
    for stub in (PLAIN, VLLM_LIKE):
        results = {"points": points, "huge_clip": [], "encode": None, "stub": stub.to_json()}
        judged[stub] = {g["goal"]: g for g in evaluate_goals(results)}
    nginx_goal, p50_goal = (
        "(a) gateway vs nginx req/s at c=32",
        "(a) gateway p50 - nginx p50 at c=1",
    )
    assert judged[PLAIN][nginx_goal]["met"] is True and judged[PLAIN][p50_goal]["met"] is True
    assert judged[VLLM_LIKE][nginx_goal]["met"] is None
    assert "the stub was paced" in judged[VLLM_LIKE][p50_goal]["measured"]
