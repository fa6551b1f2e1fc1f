"""`python -m bench.system --replicas 2`: two real engines (the tiny Qwen2-Audio on vLLM 0.32's
CPU build) behind a real vllm-router, 16-seed waves over 10 new clips a wave, with and without
the gateway's clip key (`[routing] affinity_headers = ["X-Session-ID"]`).

    direct-round_robin         the client's data URIs through vllm-router, round_robin
    direct-consistent_hash     the same, consistent_hash with no header
    reference-round_robin      the gateway by reference without the key, round_robin
    reference-consistent_hash  the same, consistent_hash (no header: one replica takes all)
    reference-key              the gateway by reference with the key, consistent_hash
    reference-single           the gateway by reference in front of the first replica alone

Modes are interleaved wave by wave. Per mode and wave: processings (vLLM's own
`vllm:mm_cache_*` counters: queries less hits, summed over the replicas) per clip, the gateway's
reference misses retried, API-server CPU per request summed over the replicas, requests per
replica and the wave's wall time. The hot-clips case (one clip in flight, fewer than replicas)
runs its own waves through each router policy named in `--hot-policies`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import aiohttp

from bench.replicas.counts import Reading, gateway_counts, replica_counts
from bench.shared import procstat
from bench.shared.real_engine import ENGINE_FLAGS, MODEL, SEEDS, chat_body
from bench.shared.results import RESULTS_DIR
from bench.shared.servers import ServerProcess, free_port, start
from bench.shared.speech_clips import FORMS, write_clip
from engine.router import RECOVERY_FLAGS, RouterServer, router_venv
from engine.server import EngineServer, EngineSpec, build_models, engine_venv

REQUEST_TIMEOUT_S = 600
KEY = '[routing]\naffinity_headers = ["X-Session-ID"]\n'


@dataclass(frozen=True)
class Mode:
    name: str
    router: str | None  # the router policy in front of both replicas; None: the first alone
    gateway: bool  # by reference through the gateway (else the client's data URIs)
    key: bool = False


MODES = {
    mode.name: mode
    for mode in (
        Mode("direct-round_robin", "round_robin", gateway=False),
        Mode("direct-consistent_hash", "consistent_hash", gateway=False),
        Mode("reference-round_robin", "round_robin", gateway=True),
        Mode("reference-consistent_hash", "consistent_hash", gateway=True),
        Mode("reference-key", "consistent_hash", gateway=True, key=True),
        Mode("reference-single", None, gateway=True),
    )
}
HOT_POLICIES = ("consistent_hash", "round_robin", "power_of_two", "sticky_least_loaded")


class Rig:
    """The replicas, one router per policy and one gateway per (upstream, key)."""

    def __init__(self, replicas: list[EngineServer], workdir: Path, clips: Path, wait_ms: int):
        self.replicas, self.workdir, self.clips, self.wait_ms = replicas, workdir, clips, wait_ms
        self.routers: dict[str, RouterServer] = {}
        self.gateways: dict[tuple[str, bool], ServerProcess] = {}

    def router(self, policy: str) -> RouterServer:
        if policy not in self.routers:
            urls = [replica.url for replica in self.replicas]
            router = RouterServer(router_venv(), urls, policy, self.workdir, RECOVERY_FLAGS)
            self.routers[policy] = router.start()
        return self.routers[policy]

    def upstream(self, policy: str | None) -> str:
        return self.router(policy).url if policy else self.replicas[0].url

    def gateway(self, policy: str | None, key: bool) -> ServerProcess:
        name = f"gateway-{policy or 'single'}{'-key' if key else ''}"
        if (name, key) not in self.gateways:
            port = free_port()
            config = self.workdir / f"{name}.toml"
            config.write_text(
                f'[server]\nport = {port}\nmax_body_bytes = "64MiB"\n'
                f'[upstream]\nurl = "{self.upstream(policy)}"\n[audio]\nroot = "{self.clips}"\n'
                f'[splice]\nrepeats = "reference"\nreference_wait_ms = {self.wait_ms}\n'
                + (KEY if key else "")
            )
            argv = [sys.executable, "-m", "gateway", "serve", "--config", str(config)]
            self.gateways[(name, key)] = start(ServerProcess(name, argv, port, self.workdir))
        return self.gateways[(name, key)]

    def stop(self) -> None:
        for gateway in self.gateways.values():
            gateway.stop()
        for router in self.routers.values():
            router.stop()


async def post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> int:
    async with session.post(f"{url}/v1/chat/completions", json=body) as response:
        await response.read()
        return response.status


class Bench:
    def __init__(self, rig: Rig, session: aiohttp.ClientSession, seconds: float) -> None:
        self.rig, self.session, self.seconds = rig, session, seconds
        self.seed = 10_000  # clips of their own, never those of bench.system
        self.rows: list[dict[str, Any]] = []

    async def reading(self, gateway: ServerProcess | None) -> Reading:
        replicas = await asyncio.gather(
            *(replica_counts(self.session, replica.url) for replica in self.rig.replicas)
        )
        cpu = [procstat.cpu_seconds(replica.process.pid) for replica in self.rig.replicas]  # type: ignore[union-attr]
        ours = await gateway_counts(self.session, gateway.url) if gateway else {}
        return Reading(list(replicas), cpu, ours, time.perf_counter())

    async def wave(self, case: str, mode: Mode, wave: int, clips: int) -> None:
        """`clips` new clips, SEEDS concurrent seeds each, through `mode`; one row."""
        paths = []
        for _ in range(clips):
            self.seed += 1
            paths.append(write_clip(self.rig.clips, FORMS["wav16"], self.seconds, self.seed))
        proxy = self.rig.gateway(mode.router, mode.key) if mode.gateway else None
        url = proxy.url if proxy else self.rig.upstream(mode.router)
        form = "gateway" if mode.gateway else "vllm-direct"
        bodies = [{**chat_body(p, form, []), "seed": s} for p in paths for s in range(SEEDS)]
        before = await self.reading(proxy)
        statuses = await asyncio.gather(*(post(self.session, url, body) for body in bodies))
        after = await self.reading(proxy)
        row = {"case": case, "mode": mode.name, "wave": wave, "clips": clips}
        errors = sum(status != 200 for status in statuses)
        self.rows.append({**row, **after.since(before, len(bodies)), "errors": errors})
        for path in paths:
            path.unlink()


def hot_mode(policy: str) -> Mode:
    """One clip a wave by reference through `policy`; with the key except for round_robin
    (the way to spread a clip's seeds, which the key would defeat)."""
    key = policy != "round_robin"
    return Mode(f"hot-{policy}{'-key' if key else ''}", policy, gateway=True, key=key)


async def run(args: argparse.Namespace, bench: Bench) -> None:
    modes = [MODES[name] for name in args.modes]
    await bench.wave("warm-up", MODES["direct-round_robin"], 0, 2)
    for wave in range(1, args.waves + 1):
        turn = (wave - 1) % len(modes)
        for mode in modes[turn:] + modes[:turn]:
            await bench.wave("waves", mode, wave, args.clips)
        for policy in args.hot_policies:
            await bench.wave("hot", hot_mode(policy), wave, 1)
        print(f"wave {wave}/{args.waves} done", file=sys.stderr)


async def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    venv = args.engine_venv or engine_venv()
    models = build_models(venv, workdir / "models")
    spec = EngineSpec(MODEL, models["qwen2-audio"], ENGINE_FLAGS)
    replicas = [EngineServer(spec, venv, workdir / f"replica{i}") for i in range(2)]
    clips = workdir / "clips"
    clips.mkdir()
    rig = Rig(replicas, workdir, clips, args.reference_wait_ms)
    try:
        for replica in replicas:
            replica.start()
        for replica in replicas:
            replica.wait_healthy()
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            bench = Bench(rig, session, args.seconds)
            await run(args, bench)
        return {
            "date": date.today().isoformat(),
            "command": "python -m bench.system " + " ".join(args.argv),
            "engine": {
                "startup_s": [r.healthy_after_s for r in replicas],
                "rss_bytes": [r.rss_bytes() for r in replicas],
            },
            "seeds": SEEDS,
            "seconds": args.seconds,
            "reference_wait_ms": args.reference_wait_ms,
            "rows": [row for row in bench.rows if row["case"] != "warm-up"],
        }
    finally:
        rig.stop()
        for replica in replicas:
            replica.stop()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.system --replicas 2",
        description="Two real engines behind a real vllm-router, with and without the clip key.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--replicas", type=int, choices=[2], default=2)
    parser.add_argument("--waves", type=int, default=3, help="waves of each mode")
    parser.add_argument("--clips", type=int, default=10, help="new clips a wave")
    parser.add_argument("--seconds", type=float, default=3.0, help="each clip's length")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument(
        "--hot-policies", nargs="*", default=list(HOT_POLICIES), choices=list(HOT_POLICIES),
        help="router policies for the hot-clips waves (one clip a wave)",
    )  # fmt: skip
    parser.add_argument("--reference-wait-ms", type=int, default=30_000)
    parser.add_argument("--engine-venv", type=Path, default=None)
    parser.add_argument("--name", default="replicas")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    args.argv = argv
    return args


def main(argv: list[str]) -> int:
    from bench.replicas.report import write_results

    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp:
        results = asyncio.run(measure(args, Path(tmp)))
    write_results(results, args.results_dir, args.name)
    return 1 if any(row["errors"] for row in results["rows"]) else 0
