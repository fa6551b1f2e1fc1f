"""Runs a scenario: clips, servers, load generators, every measured point, and the results.

All modes sit behind one stub upstream and are measured concurrency-major, mode-minor, so
each point's modes run within seconds of each other and their ratios survive a noisy machine.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bench.objects.run import OBJECT_MODES, OBJECT_WORKLOAD_KEY, run_objects
from bench.proxies import modes
from bench.proxies.encode import measure_encode
from bench.proxies.live import Bench
from bench.repeats.run import PHASES, REPEATS_MODES, REPEATS_WORKLOAD_KEY, ROUNDS, run_repeats
from bench.shared import clients, procstat, servers
from bench.shared.points import summarise
from bench.shared.workloads import (
    Clip,
    ClipSet,
    Scenario,
    Workload,
    make_clips,
    make_huge_clip,
    write_random_wav,
)

# --- the phases of a run ------------------------------------------------------------------


def run_workload(bench: Bench, clipset: ClipSet) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    workload = clipset.workload
    order = list(clipset.order)
    bench.load(workload.key, list(clipset.clips), order)
    for form in sorted({modes.MODES[mode].form for mode in bench.modes}):
        bench.prepare(workload.key, form)
    points: list[dict[str, Any]] = []
    misses_start = {mode: bench.cache_misses(mode) for mode in bench.modes}
    cold_concurrency = 32 if 32 in workload.concurrency else max(workload.concurrency)
    for mode in bench.modes:
        if mode == "gateway":  # its cold first pass is its warm-up, reported on its own
            points.append(bench.measure(mode, clipset, cold_concurrency, len(order), "cold"))
        else:
            warmup = min(workload.warmup_requests, len(order))
            if mode == "gateway-keyed":  # warm like `gateway`: every clip cached before timing
                warmup = len(order)
            bench.measure(mode, clipset, min(8, cold_concurrency), warmup, "warmup")
        bench.step(f"{workload.key}: warm-up {mode}")
    rounds = max(1, bench.scenario.rounds)
    per_round = max(1, workload.requests_per_point // rounds)
    for concurrency in workload.concurrency:
        runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in bench.modes}
        for round_index in range(rounds):
            # Every mode once per round, the order rotated: background noise hits all alike.
            turn = round_index % len(bench.modes)
            for mode in bench.modes[turn:] + bench.modes[:turn]:
                offset = round_index * per_round
                runs[mode].append(bench.sample(mode, workload.key, concurrency, per_round, offset))
                bench.step(f"{workload.key}: {mode} c={concurrency} round {round_index + 1}")
        for mode in bench.modes:
            points.append(summarise(mode, clipset, concurrency, "warm", runs[mode]))
    check: dict[str, Any] = {"workload": workload.key, "distinct_clips": len(clipset.clips)}
    if "gateway" in bench.modes:
        misses = (bench.cache_misses("gateway") or 0) - (misses_start["gateway"] or 0)
        check.update(mode="gateway", misses=misses, ok=misses == len(clipset.clips))
    for loadgen in bench.loadgens:
        loadgen.call({"op": "drop", "key": workload.key})
    return points, check


def run_huge_clip(bench: Bench, clip: Clip, warm: Clip, mode: str) -> dict[str, Any]:
    """A fresh proxy, one small request, then the huge clip: VmHWM minus the RSS before it."""
    assert bench.stub is not None
    server = modes.start_mode(mode, bench.workdir, bench.stub, bench.audio_root, bench.nginx)
    assert server is not None
    previous, bench.servers[mode] = bench.servers.get(mode), server
    try:
        warm_set = ClipSet(_huge_workload("c-warm"), (warm,), (0,))
        huge_set = ClipSet(_huge_workload("c"), (clip,), (0,))
        bench.measure(mode, warm_set, 1, 1, "warmup")
        time.sleep(0.2)
        pids = server.pids()
        rss_before = procstat.rss_bytes(pids)
        point = bench.measure(mode, huge_set, 1, 1, "huge")
        peak = procstat.peak_rss_bytes(pids)
    finally:
        bench.servers[mode] = previous
        server.stop()
    return {
        "mode": mode,
        "clip_bytes": clip.size,
        "rss_before_mib": rss_before / procstat.MIB,
        "peak_rss_mib": peak / procstat.MIB,
        "growth_mib": max(0, peak - rss_before) / procstat.MIB,
        "seconds": point["wall_seconds"],
        "errors": point["errors"],
        "error_samples": point["error_samples"],
        "sha_checked": point["checked"],
        "cache_misses": point["cache_misses"],
    }


def _huge_workload(key: str) -> Workload:
    return Workload(key, "huge clip", 1, 0, 1, (1,))


def machine_info(bench: Bench) -> dict[str, Any]:
    import aiohttp

    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "aiohttp": aiohttp.__version__,
        "nginx": modes.nginx_version(bench.nginx) if bench.nginx else None,
        "git": git_revision(),
    }


def git_revision() -> str:
    try:
        head = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            cwd=servers.REPO_ROOT,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head


def total_steps(scenario: Scenario, mode_count: int) -> int:
    steps = 2 + len(scenario.workloads)  # clip files, start-up, one per workload's clips
    for workload in scenario.workloads:
        if workload.key == OBJECT_WORKLOAD_KEY:  # its own modes, cold and warm
            steps += 2 * len(OBJECT_MODES)
            continue
        if workload.key == REPEATS_WORKLOAD_KEY:
            steps += len(PHASES) * len(REPEATS_MODES) * ROUNDS
            continue
        steps += mode_count * (1 + len(workload.concurrency) * max(1, scenario.rounds))
    if scenario.huge_clip_bytes:
        steps += 1 + len(scenario.huge_clip_modes)
    return steps + (1 if scenario.encode_file_bytes else 0)


@contextmanager
def running_bench(scenario: Scenario, progress: bool) -> Iterator[Bench]:
    with tempfile.TemporaryDirectory(prefix="audio-gateway-bench-") as tmp:
        bar: tqdm[Any] = tqdm(total=1, desc=f"bench {scenario.name}", disable=not progress)
        bench = Bench(scenario, Path(tmp), bar)
        bar.total = total_steps(scenario, len(bench.modes))
        try:
            yield bench
        finally:
            try:
                bench.stop()
            finally:
                bar.close()


def run_benchmark(scenario: Scenario, progress: bool = True) -> dict[str, Any]:
    """Run every phase of `scenario` and return the results (see report.py for the files)."""
    started, started_clock = time.time(), time.perf_counter()
    with running_bench(scenario, progress) as bench:
        clipsets = []
        for workload in scenario.workloads:
            clipsets.append(make_clips(workload, bench.audio_root))
            bench.step(f"clips {workload.key}")
        warm = Clip("c/warm.wav", bench.audio_root / "c" / "warm.wav", 0, "")
        (bench.audio_root / "c").mkdir(exist_ok=True)
        warm_sha = write_random_wav(warm.path, 56_000, "warm")
        warm = Clip(warm.rel, warm.path, warm.path.stat().st_size, warm_sha)
        bench.step("clips ready")
        bench.start()
        bench.step("servers up")
        seconds = {"set-up": time.perf_counter() - started_clock}
        points, checks, objects, repeats = [], [], [], []
        for clipset in clipsets:
            began = time.perf_counter()
            if clipset.workload.key == OBJECT_WORKLOAD_KEY:
                objects += run_objects(bench, clipset)
            elif clipset.workload.key == REPEATS_WORKLOAD_KEY:
                repeats += run_repeats(bench, clipset)
            else:
                workload_points, check = run_workload(bench, clipset)
                points += workload_points
                checks.append(check)
            seconds[clipset.workload.key] = time.perf_counter() - began
        began = time.perf_counter()
        huge = run_huge_clips(bench, warm)
        seconds["c"] = time.perf_counter() - began
        encode = None
        if scenario.encode_file_bytes:
            began = time.perf_counter()
            encode_path = bench.workdir / "encode.wav"
            write_random_wav(encode_path, scenario.encode_file_bytes, "encode")
            encode = measure_encode(encode_path, scenario.encode_repeats)
            bench.step("cold encode")
            seconds["encode"] = time.perf_counter() - began
        info = machine_info(bench)
        notes = bench.notes
        ran_modes = bench.modes
    return {
        "name": scenario.name,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "started_at": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
        "duration_seconds": round(time.time() - started, 1),
        # wall seconds of each part (set-up: clip files and servers; c: the huge clip)
        "part_seconds": {part: round(value, 1) for part, value in seconds.items()},
        "quick": scenario.quick,
        "argv": sys.argv[1:],
        "machine": info,
        "scenario": asdict(scenario),
        "modes": ran_modes,
        "mode_descriptions": {mode: modes.MODES[mode].description for mode in ran_modes},
        "client": clients.describe(
            scenario.connections,
            sum(p.get("connections_opened", 0) for p in points),
            sum(p["requests"] for p in points),
        ),
        "stub": scenario.stub_timing.to_json(),
        "points": points,
        "cache_checks": checks,
        "huge_clip": huge,
        "objects": objects,
        "repeats": repeats,
        "encode": encode,
        "notes": notes,
    }


def run_huge_clips(bench: Bench, warm: Clip) -> list[dict[str, Any]]:
    scenario = bench.scenario
    chosen = [mode for mode in scenario.huge_clip_modes if mode in modes.MODES]
    if not scenario.huge_clip_bytes or not chosen:
        return []
    clip = make_huge_clip(bench.audio_root, scenario.huge_clip_bytes)
    bench.step("huge clip written")
    bench.load("c-warm", [warm], [0])
    bench.load("c", [clip], [0])
    results = []
    for mode in chosen:
        results.append(run_huge_clip(bench, clip, warm, mode))
        bench.step(f"c: {mode}")
    clip.path.unlink()
    return results


def dump(results: dict[str, Any]) -> str:
    return json.dumps(results, indent=1, sort_keys=False)
