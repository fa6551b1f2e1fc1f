"""`python -m bench.workers [--workers 1 2] [--rounds 3] [--requests 2000] [--concurrency 32]`

Requests per second of one gateway at `[server] workers` = 1 and = 2 (and any other counts
given), in front of one stub upstream, on 32 ~56 KB clips by path (workload (a)'s shape, every
worker's cache warm). Every gateway is started once and warmed; then each round drives every one
in turn (interleaved, the order alternating round by round), so the ratios hold on a noisy
machine.
Reported per worker count: req/s of each round and their median, the ratio to the first count,
and the gateway's CPU per request (the supervisor and every worker, from /proc). The load
generator (`bench/shared/loadgen.py`) is a process of its own; on a small machine it, the stub
and the gateway share the cores, which is what the "other CPU" column shows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.shared import procstat
from bench.shared.loadgen import LoadGeneratorProcess
from bench.shared.servers import (
    ServerProcess,
    free_port,
    gateway_argv,
    gateway_config,
    start,
    start_stub,
)
from bench.shared.workloads import WORKLOAD_A, ClipSet, make_clips

# Few enough clips that every worker's cache holds them all after the warm-up: each worker has
# its own cache, and SO_REUSEPORT deals connections at random.
WORKLOAD = replace(WORKLOAD_A, title="32 x ~56 KB, 8 seeds", clips=32)
WARMUP_PASSES = 16  # per clip and gateway: a worker misses one clip with odds 2^-16

READY_SECONDS = 60.0
FORM = "path"


def start_gateway(workers: int, workdir: Path, stub: ServerProcess) -> ServerProcess:
    port = free_port()
    config = gateway_config(workdir, f"workers-{workers}", 1024**3)
    config.write_text(config.read_text().replace("[server]\n", f"[server]\nworkers = {workers}\n"))
    argv = gateway_argv(config, port, stub.url, workdir / "audio")
    server = start(ServerProcess(f"gateway-{workers}w", argv, port, workdir))
    wait_ready(server)
    return server


def wait_ready(server: ServerProcess) -> None:
    """Until `/gateway/ready` says 200: every worker serves."""
    deadline = time.monotonic() + READY_SECONDS
    while True:
        try:
            with urllib.request.urlopen(f"{server.url}/gateway/ready", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{server.name} never got ready:\n{server.log_tail()}")
        time.sleep(0.1)


def drive(loadgen: LoadGeneratorProcess, url: str, concurrency: int, requests: int) -> Any:
    command: dict[str, Any] = {"op": "run", "key": "a", "form": FORM}
    command["url"] = url + "/v1/chat/completions"
    command |= {"concurrency": concurrency, "requests": requests, "check_every": 16}
    return loadgen.call(command)


def measure(
    server: ServerProcess, loadgen: LoadGeneratorProcess, concurrency: int, requests: int
) -> dict[str, float]:
    """One timed point: req/s, and CPU seconds of the gateway's processes and of the machine."""
    tree = procstat.process_tree(server.popen.pid)
    cpu_before = procstat.total_cpu_seconds(tree)
    busy_before = procstat.system_busy_seconds()
    run = drive(loadgen, server.url, concurrency, requests)
    gateway_cpu = procstat.total_cpu_seconds(tree) - cpu_before
    busy = procstat.system_busy_seconds() - busy_before
    if run["errors"]:
        raise RuntimeError(f"{server.name}: {run['errors']} errors: {run['error_samples']}")
    done = run["requests"]
    return {
        "rps": done / run["wall_seconds"],
        "gateway_cpu_ms": 1000 * gateway_cpu / done,
        "machine_busy_cores": busy / run["wall_seconds"],
    }


def run(args: argparse.Namespace, workdir: Path) -> dict[int, list[dict[str, float]]]:
    clipset: ClipSet = make_clips(WORKLOAD, workdir / "audio")
    stub = start_stub(workdir, workdir / "audio")
    loadgen = LoadGeneratorProcess(workdir / "loadgen.log")
    servers: dict[int, ServerProcess] = {}
    try:
        loadgen.call({"op": "load", "key": "a", **clipset.to_json()})
        loadgen.call({"op": "prepare", "key": "a", "form": FORM})
        for count in args.workers:
            servers[count] = start_gateway(count, workdir, stub)
            warmup = len(clipset.order) * WARMUP_PASSES // WORKLOAD.seeds
            drive(loadgen, servers[count].url, args.concurrency, warmup)
        results: dict[int, list[dict[str, float]]] = {count: [] for count in args.workers}
        for round_index in range(args.rounds):
            order = args.workers if round_index % 2 == 0 else list(reversed(args.workers))
            for count in order:
                point = measure(servers[count], loadgen, args.concurrency, args.requests)
                results[count].append(point)
                print(f"round {round_index + 1} workers={count}: {point['rps']:.0f} req/s")
        return results
    finally:
        loadgen.close()
        for server in servers.values():
            server.stop()
        stub.stop()


def report(results: dict[int, list[dict[str, float]]], args: argparse.Namespace) -> str:
    base = results[args.workers[0]]
    first = statistics.median(p["rps"] for p in base)
    lines = [
        f"concurrency {args.concurrency}, {args.requests} requests a point, {args.rounds} rounds, "
        f"{WORKLOAD.title} by path (warm caches), {os.cpu_count()} cores",
        "",
        "| workers | req/s per round | median req/s | vs first | median of round ratios | "
        "gateway CPU ms/req | machine busy (cores) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for count, points in results.items():
        median = statistics.median(p["rps"] for p in points)
        rounds = ", ".join(f"{p['rps']:.0f}" for p in points)
        cpu = statistics.median(p["gateway_cpu_ms"] for p in points)
        busy = statistics.median(p["machine_busy_cores"] for p in points)
        paired = statistics.median(p["rps"] / b["rps"] for p, b in zip(points, base, strict=True))
        lines.append(
            f"| {count} | {rounds} | {median:.0f} | {median / first:.2f}x | {paired:.2f}x | "
            f"{cpu:.2f} | {busy:.2f} |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.workers",
        description="Gateway req/s at several [server] workers counts, interleaved rounds.",
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], metavar="N")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=2000, help="per point")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--json", type=Path, help="also write the raw points here")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-workers-") as tmp:
        results = run(args, Path(tmp))
    print(report(results, args))
    if args.json:
        args.json.write_text(json.dumps({str(k): v for k, v in results.items()}, indent=1))
