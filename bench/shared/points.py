"""What every workload reports: one measured point from its timed runs, and the live bench
the workload modules drive (`BenchRun`), below the runner so they need not import it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from bench.shared import procstat, servers
from bench.shared.loadgen import LoadGeneratorProcess
from bench.shared.workloads import ClipSet


class BenchRun(Protocol):
    """What a workload module uses of the runner's `Bench`."""

    workdir: Path
    audio_root: Path
    stub: servers.ServerProcess | None
    servers: dict[str, servers.ServerProcess | None]
    loadgens: list[LoadGeneratorProcess]

    def step(self, label: str) -> None: ...

    def load(self, key: str, clips: list[Any], order: list[int]) -> None: ...

    def prepare(self, key: str, form: str) -> None: ...

    def sample(
        self, mode: str, key: str, concurrency: int, requests: int, offset: int = 0
    ) -> dict[str, Any]: ...


def merge_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {
        "requests": sum(r["requests"] for r in runs),
        "errors": sum(r["errors"] for r in runs),
        "checked": sum(r["checked"] for r in runs),
        "mismatched": sum(r["mismatched"] for r in runs),
        "wall_seconds": max(r["wall_seconds"] for r in runs),  # parallel load generators
        "latencies_us": [value for r in runs for value in r["latencies_us"]],
        "error_samples": [sample for r in runs for sample in r["error_samples"]][:3],
        "connections_opened": sum(r.get("connections_opened", 0) for r in runs),
    }
    return merged


def summarise(
    mode: str, clipset: ClipSet, concurrency: int, phase: str, runs: list[dict[str, Any]]
) -> dict[str, Any]:
    """One reported point from its timed runs (several rounds are pooled)."""
    has_proxy = runs[0]["proxy_peak_rss_bytes"] is not None
    merged = merge_runs(runs)
    wall = sum(run["wall_seconds"] for run in runs)
    done = max(merged["requests"], 1)
    cpu = {name: sum(run["cpu"][name] for run in runs) for name in runs[0]["cpu"]}
    misses = [run["cache_misses"] for run in runs]
    return {
        "workload": clipset.workload.key,
        "mode": mode,
        "phase": phase,
        "concurrency": concurrency,
        "distinct_clips": len(clipset.clips),
        "rounds": len(runs),
        **summarise_latencies(merged.pop("latencies_us")),
        **merged,
        "wall_seconds": wall,
        "rps": merged["requests"] / wall if wall else 0.0,
        "round_rps": [run["requests"] / run["wall_seconds"] for run in runs if run["wall_seconds"]],
        "proxy_cpu_s_per_1k": 1000 * cpu["proxy"] / done if has_proxy else None,
        "proxy_cpu_util": cpu["proxy"] / wall if has_proxy and wall else None,
        "proxy_peak_rss_mib": runs[-1]["proxy_peak_rss_bytes"] / procstat.MIB
        if has_proxy
        else None,
        "stub_cpu_s_per_1k": 1000 * cpu["stub"] / done,
        "stub_cpu_util": cpu["stub"] / wall if wall else None,
        "loadgen_cpu_util": cpu["loadgen"] / wall if wall else None,
        "other_cpu_util": cpu["other"] / wall if wall else None,
        "cache_misses": None if None in misses else sum(misses),
    }


def summarise_latencies(latencies_us: list[int]) -> dict[str, float | None]:
    if not latencies_us:
        return {key: None for key in ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "max_ms")}
    ordered = sorted(latencies_us)

    def rank(fraction: float) -> float:  # nearest-rank percentile
        return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))] / 1000

    return {
        "p50_ms": rank(0.50),
        "p90_ms": rank(0.90),
        "p99_ms": rank(0.99),
        "mean_ms": sum(ordered) / len(ordered) / 1000,
        "max_ms": ordered[-1] / 1000,
    }
