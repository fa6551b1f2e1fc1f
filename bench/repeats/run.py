"""Workload (repeats): the same clips sent again and again, `[splice] repeats = "data"` against
`"reference"` (issue 17).

- `waves`: 200 clips x 16 seeds, the seeds of a clip sent together (a wave), 4 waves in flight;
- `waves-streamed`: the same with `stream: true`;
- `turns`: 200 4-turn conversations, 16 in flight, each turn re-sending its clip.

Each (phase, mode) gets a fresh stub and gateway: the stub keeps vLLM 0.33's processor cache with
a preprocessing delay (a clip is held only once its data was decoded) and records every chat body
it receives, so the figures are of the bodies the gateway actually sent (retries included).
Reported per mode: upstream bytes per request, gateway CPU per request, retries per 1000
requests, the stub's decodes, and vLLM's frontend audio CPU per wave: `bench/vllm_frontend_cpu/`
(vLLM 0.33's own parse + decode + data parser) run on the recorded bodies in the vllm venv, when
that venv exists. The driver runs in the bench process, so its CPU is never the gateway's.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.repeats.driver import Tally, drive
from bench.repeats.frontend import frontend_cpu
from bench.shared import procstat, servers
from bench.shared.points import BenchRun, summarise_latencies
from bench.shared.samples import parse_metrics
from bench.shared.workloads import STEREO_SECONDS, ClipSet, make_stereo_clips

REPEATS_WORKLOAD_KEY = "repeats"
REPEATS_MODES = ("data", "reference")
PHASES = ("waves", "waves-streamed", "turns")
PREPROCESS_DELAY_MS = 20.0  # the stub's: vLLM decodes a data-carrying request before it holds it
ROUNDS = 2  # per (phase, mode): data, reference, reference, data
PACE_REQUESTS_PER_SECOND = 250.0  # below what data mode sustains here, so both run alike


def run_repeats(
    bench: BenchRun,
    clipset: ClipSet,
    rounds: int = ROUNDS,
    rate: float = PACE_REQUESTS_PER_SECOND,
) -> list[dict[str, Any]]:
    """Every phase in both modes, `rounds` times each in ABBA order (data, reference,
    reference, data, ...: a drifting machine load falls on both alike), pooled into one row
    per (phase, mode)."""
    rows = []
    for phase in PHASES:
        runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in REPEATS_MODES}
        for index in range(rounds):
            order = REPEATS_MODES if index % 2 == 0 else REPEATS_MODES[::-1]
            for mode in order:
                runs[mode].append(run_phase(bench, clipset, phase, mode, rate=rate))
                bench.step(f"repeats: {phase} {mode} round {index + 1}")
        rows += [pool_runs(runs[mode]) for mode in REPEATS_MODES]
    return rows


def pool_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from several runs of a (phase, mode): totals summed, per-request figures
    weighted by requests, latencies and the other per-run figures from the first run."""
    if len(runs) == 1:
        return runs[0]
    pooled = dict(runs[0])
    requests = sum(r["requests"] for r in runs)
    pooled["rounds"] = len(runs)
    for key in ("requests", "errors", "mismatched", "wall_seconds", "upstream_requests"):
        pooled[key] = sum(r[key] for r in runs)
    for key in ("upstream_bytes_per_request", "gateway_cpu_ms_per_request", "retries_per_1k"):
        pooled[key] = sum(r[key] * r["requests"] for r in runs) / max(requests, 1)
    for key in (
        "decodes_per_wave",
        "frontend_audio_cpu_ms_per_wave",
        "frontend_body_cpu_ms_per_wave",
    ):
        values = [r[key] for r in runs]
        pooled[key] = None if None in values else sum(values) / len(values)
    pooled["rps"] = requests / pooled["wall_seconds"] if pooled["wall_seconds"] else 0.0
    pooled["gateway_cpu_ms_per_request_runs"] = [r["gateway_cpu_ms_per_request"] for r in runs]
    pooled["runs"] = runs
    return pooled


def run_phase(
    bench: BenchRun,
    clipset: ClipSet,
    phase: str,
    mode: str,
    wait_ms: int | None = None,
    rate: float = PACE_REQUESTS_PER_SECOND,
    measure_vllm: bool = True,
) -> dict[str, Any]:
    """One fresh stub and gateway, one phase in one mode; `measure_vllm = False` skips vLLM's
    frontend CPU (the smoke test)."""
    name = f"repeats-{phase}-{mode}"
    bodies = bench.workdir / f"{name}-bodies.jsonl"
    stub = start_recording_stub(bench.workdir, bench.audio_root, bodies, name)
    try:
        gateway = start_repeats_gateway(
            bench.workdir, name, stub.url, bench.audio_root, mode, wait_ms
        )
        try:
            before = procstat.total_cpu_seconds(gateway.pids())
            started = time.perf_counter()
            url = gateway.url + "/v1/chat/completions"
            tally = asyncio.run(drive(phase, url, clipset, rate))
            wall = time.perf_counter() - started
            gateway_cpu = procstat.total_cpu_seconds(gateway.pids()) - before
            metrics = read_metrics(gateway.url)
        finally:
            gateway.stop()
        state = read_json(stub.url + "/stub/state")
    finally:
        stub.stop()
    waves = len(clipset.clips)
    frontend = frontend_cpu(bodies) if measure_vllm else None
    row = summarise_phase(phase, mode, tally, wall, gateway_cpu, metrics, state, bodies, waves)
    row["frontend"] = frontend
    row["frontend_audio_cpu_ms_per_wave"] = _per_wave(frontend, "audio_cpu_seconds", waves)
    row["frontend_body_cpu_ms_per_wave"] = _per_wave(frontend, "body_cpu_seconds", waves)
    row["clip_bytes"] = sum(clip.size for clip in clipset.clips) / waves
    return row


def summarise_phase(
    phase: str,
    mode: str,
    tally: Tally,
    wall: float,
    gateway_cpu: float,
    metrics: dict[str, float],
    state: dict[str, Any],
    bodies: Path,
    waves: int,
) -> dict[str, Any]:
    done = max(tally.requests, 1)
    upstream_requests, upstream_bytes = body_log_size(bodies)
    retries = {
        reason: metrics.get(f'audio_gateway_reference_retries_total{{reason="{reason}"}}', 0.0)
        for reason in ("cache_miss", "upstream_error", "stream_error")
    }
    row: dict[str, Any] = {
        "phase": phase,
        "mode": mode,
        "waves": waves,
        "requests": tally.requests,
        "errors": tally.errors,
        "mismatched": tally.mismatched,
        "error_samples": tally.error_samples,
        "wall_seconds": wall,
        "rps": tally.requests / wall if wall else 0.0,
        **summarise_latencies(tally.latencies_us),
        "upstream_requests": upstream_requests,
        "upstream_bytes_per_request": upstream_bytes / done,
        "gateway_cpu_ms_per_request": 1000 * gateway_cpu / done,
        "retries": retries,
        "retries_per_1k": 1000 * sum(retries.values()) / done,
        "parts": {
            form: metrics.get(f'audio_gateway_audio_parts_total{{form="{form}"}}', 0.0)
            for form in ("data", "reference")
        },
        "bytes_saved": metrics.get("audio_gateway_reference_bytes_saved_total", 0.0),
        "stub_decodes": state.get("decodes"),
        "decodes_per_wave": (state.get("decodes") or 0) / waves,
    }
    return row


# --- servers -----------------------------------------------------------------------------------


def start_recording_stub(
    workdir: Path, audio_root: Path, bodies: Path, name: str
) -> servers.ServerProcess:
    port = servers.free_port()
    argv = [sys.executable, "-m", "gateway.stub_upstream", "--port", str(port)]
    argv += ["--allowed-local-media-path", str(audio_root)]
    argv += ["--mm-preprocess-delay-ms", str(PREPROCESS_DELAY_MS), "--record-bodies", str(bodies)]
    return servers.start(servers.ServerProcess(f"{name}-stub", argv, port, workdir))


def start_repeats_gateway(
    workdir: Path, name: str, upstream: str, audio_root: Path, mode: str, wait_ms: int | None
) -> servers.ServerProcess:
    config = servers.gateway_config(workdir, name, 1024**3)
    splice = f'\n[splice]\nrepeats = "{mode}"\n'
    if wait_ms is not None:
        splice += f"reference_wait_ms = {wait_ms}\n"
    config.write_text(config.read_text() + splice)
    port = servers.free_port()
    argv = servers.gateway_argv(config, port, upstream, audio_root)
    return servers.start(servers.ServerProcess(name, argv, port, workdir))


def read_metrics(origin: str) -> dict[str, float]:
    with urllib.request.urlopen(origin + "/gateway/metrics", timeout=10) as reply:
        return parse_metrics(reply.read().decode())


def read_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as reply:
        result: dict[str, Any] = json.loads(reply.read())
    return result


def _per_wave(frontend: dict[str, Any] | None, key: str, waves: int) -> float | None:
    value = None if frontend is None else frontend.get(key)
    return None if value is None else 1000 * value / waves


def body_log_size(bodies: Path) -> tuple[int, int]:
    """(bodies, bytes) of the stub's body log; each line is one body plus its newline."""
    count = size = 0
    with open(bodies, "rb") as handle:
        for line in handle:
            count += 1
            size += len(line) - 1
    return count, size


# --- standalone: `python -m bench.repeats` -----------------------------------------------------


def sweep_wait(
    bench: BenchRun, clipset: ClipSet, waits: list[int], rate: float = PACE_REQUESTS_PER_SECOND
) -> list[dict[str, Any]]:
    """The `waves` phase in reference mode at each `reference_wait_ms`: what a wait shorter
    than the upstream's preprocessing costs (misses, retried with data) and what a longer one
    costs (the followers of a new clip wait)."""
    rows = []
    for wait_ms in waits:
        row = run_phase(bench, clipset, "waves", "reference", wait_ms, rate)
        rows.append({**row, "reference_wait_ms": wait_ms})
        bench.step(f"repeats: wait {wait_ms} ms")
    return rows


def sweep_section(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["", f"## reference_wait_ms against a {PREPROCESS_DELAY_MS:g} ms preprocessing delay "
             f"(waves, not streamed)", "",
             "| reference_wait_ms | retries /1k | upstream KB/req | stub decodes /wave | "
             "p50 ms | p99 ms |", "|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(
            f"| {r['reference_wait_ms']} | {r['retries_per_1k']:.1f} | "
            f"{r['upstream_bytes_per_request'] / 1000:.1f} | {r['decodes_per_wave']:.2f} | "
            f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} |"
        )
    return lines


class _StandaloneBench:
    """The parts of the runner's Bench this workload uses, for `python -m bench.repeats`."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.audio_root = workdir / "audio"
        self.audio_root.mkdir()
        self.stub: servers.ServerProcess | None = None
        self.servers: dict[str, servers.ServerProcess | None] = {}
        self.loadgens: list[Any] = []

    def step(self, label: str) -> None:
        print(f"  done: {label}", file=sys.stderr, flush=True)

    def load(self, key: str, clips: list[Any], order: list[int]) -> None:
        raise NotImplementedError

    def prepare(self, key: str, form: str) -> None:
        raise NotImplementedError

    def sample(
        self, mode: str, key: str, concurrency: int, requests: int, offset: int = 0
    ) -> dict[str, Any]:
        raise NotImplementedError


def main(argv: list[str] | None = None) -> int:
    import argparse
    import dataclasses
    import tempfile

    from bench.repeats.report import repeats_section
    from bench.shared.workloads import WORKLOAD_REPEATS, make_clips

    parser = argparse.ArgumentParser(prog="python -m bench.repeats", description=__doc__)
    parser.add_argument("--clips", type=int, default=WORKLOAD_REPEATS.clips)
    parser.add_argument("--stereo", action="store_true",
                        help=f"{STEREO_SECONDS:g} s 44.1 kHz stereo clips instead of ~56 KB "
                        "16 kHz mono ones")  # fmt: skip
    parser.add_argument("--wait-sweep", type=int, nargs="*", metavar="MS", default=None,
                        help="only sweep reference_wait_ms over these values")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="runs per (phase, mode)")
    parser.add_argument("--rate", type=float, default=PACE_REQUESTS_PER_SECOND,
                        help="requests/s the driver paces itself to (0: no pace)")  # fmt: skip
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    workload = dataclasses.replace(WORKLOAD_REPEATS, clips=args.clips)
    with tempfile.TemporaryDirectory(prefix="audio-gateway-repeats-") as tmp:
        bench = _StandaloneBench(Path(tmp))
        if args.stereo:
            clipset = make_stereo_clips(args.clips, bench.audio_root, workload.seeds)
        else:
            clipset = make_clips(workload, bench.audio_root)
        if args.wait_sweep:
            rows = sweep_wait(bench, clipset, args.wait_sweep, args.rate)
            lines = sweep_section(rows)
        else:
            rows = run_repeats(bench, clipset, args.rounds, args.rate)
            lines = repeats_section(rows)
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 1 if any(r["errors"] or r["mismatched"] for r in rows) else 0
