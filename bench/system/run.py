"""`python -m bench.system`: what the gateway + vLLM pair costs against vLLM alone, on the real
engine (vLLM 0.32's CPU build serving the tiny Qwen2-Audio of engine/models.py).

One vLLM server and one gateway process per gateway mode run for the whole bench; the modes are
interleaved wave by wave (each wave a new clip, then the same clip again), so every mode meets
the same machine. Per request it reports the CPU (each thread's time on the CPU, from
/proc/<pid>/task/*/schedstat: bench/shared/procstat.py) of vLLM's API-server process, of all vLLM's
processes (API server, EngineCore, worker) and of the gateway's process, wall p50 and p95, and
the bytes vLLM's API server received (its own `http_request_size_bytes` summary). The client
keeps its connections alive (`--connection-per-request`: one per request; bench/shared/clients.py);
the gateway's CPU per uuid-only request and per request carrying the clip come from the two
waves of a clip (bench/system/split.py).

    vllm-direct                  the client sends data URIs straight to vLLM (NeMo Gym, Skills)
    gateway-data                 metadata.audio_path through the gateway, `repeats = "data"`
    gateway-reference            the same, `repeats = "reference"`
    gateway-reference-normalize  the same, with `[normalize]` on (16 kHz mono PCM_16)
    gateway-inline-reference     the client's data URIs (as vllm-direct) through the gateway,
                                 `repeats = "reference"`: later copies go uuid-only

Workloads: waves of 16 concurrent seeds of one new clip (3 s and 30 s; 16 kHz mono WAV and
FLAC, 44.1 kHz stereo WAV and MP3), 4-turn conversations re-sending their clip, first copies
(one request per new clip), and text only. vLLM-direct on 44.1 kHz clips needs a vLLM that can
resample (`--engine-venv`, see docs); without one those rows are left out and say so.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
from collections.abc import Awaitable
from datetime import date
from pathlib import Path
from typing import Any

import aiohttp

from bench.shared import procstat
from bench.shared.clients import (
    AIOHTTP_IDLE_S,
    KEEP_ALIVE,
    PER_REQUEST,
    VLLM_IDLE_S,
    ClientPools,
    describe,
)
from bench.shared.real_engine import ENGINE_FLAGS, INLINE_MODES, MODEL, SEEDS, chat_body
from bench.shared.results import RESULTS_DIR
from bench.shared.servers import ServerProcess, free_port, start
from bench.shared.speech_clips import FORMS, write_clip
from bench.system.cells import Cell, Workload, conversation, post, workloads
from bench.system.split import again_name
from engine.server import EngineServer, EngineSpec, build_models, engine_venv

CONVERSATIONS = 4
FIRST_COPIES = 8
REQUEST_TIMEOUT_S = 300
MODES = (
    "vllm-direct",
    "gateway-data",
    "gateway-reference",
    "gateway-reference-normalize",
    "gateway-inline-reference",
)
GATEWAY_CONFIG = {
    "gateway-data": '[splice]\nrepeats = "data"\n',
    "gateway-reference": '[splice]\nrepeats = "reference"\n',
    "gateway-reference-normalize": '[splice]\nrepeats = "reference"\n[normalize]\nenabled = true\n',
    "gateway-inline-reference": '[splice]\nrepeats = "reference"\n',
}
SIZE_METRIC = re.compile(
    r'^http_request_size_bytes_sum\{[^}]*handler="/v1/chat/completions"[^}]*\} (\S+)$', re.M
)


class Processes:
    """The engine and the gateways; CPU readings of each side."""

    def __init__(self, engine: EngineServer, gateways: dict[str, ServerProcess]) -> None:
        self.engine = engine
        self.gateways = gateways
        assert engine.process is not None
        self.api_pid = engine.process.pid

    def reading(self, mode: str) -> tuple[float, float, float]:
        vllm = procstat.process_tree(self.api_pid)
        gateway = self.gateways[mode].pids() if mode in self.gateways else []
        return (
            procstat.cpu_seconds(self.api_pid),
            procstat.total_cpu_seconds(vllm),
            procstat.total_cpu_seconds(gateway),
        )

    async def received_bytes(self, session: aiohttp.ClientSession) -> float:
        async with session.get(f"{self.engine.url}/metrics") as response:
            text = await response.text()
        return sum(float(value) for value in SIZE_METRIC.findall(text))


class Bench:
    def __init__(
        self,
        processes: Processes,
        clips_dir: Path,
        pools: ClientPools,
        metrics_session: aiohttp.ClientSession,
    ) -> None:
        self.processes = processes
        self.clips_dir = clips_dir
        self.pools = pools  # the requests' clients, one per mode
        self.metrics_session = metrics_session  # vLLM's /metrics, not counted
        self.seed = 0
        self.cells: dict[tuple[str, str], Cell] = {}

    def new_clip(self, workload: Workload) -> Path | None:
        if workload.form is None:
            return None
        self.seed += 1
        return write_clip(self.clips_dir, workload.form, workload.seconds, self.seed)

    def url(self, mode: str) -> str:
        return (
            self.processes.engine.url
            if mode == "vllm-direct"
            else self.processes.gateways[mode].url
        )

    async def run(self, workload: Workload, mode: str) -> None:
        clips = [self.new_clip(workload) for _ in range(self.clip_count(workload))]
        cell = self.cells.setdefault((workload.name, mode), Cell())
        await self.measured(cell, mode, self.send(workload, mode, clips, cell))
        if workload.kind == "wave":  # the same clip again: uuid-only by reference
            again = self.cells.setdefault((again_name(workload.name), mode), Cell())
            await self.measured(again, mode, self.send(workload, mode, clips, again))
        for clip in clips:
            if clip is not None:
                clip.unlink()

    async def measured(self, cell: Cell, mode: str, sending: Awaitable[None]) -> None:
        """Await `sending`, charging `cell` with the CPU and bytes it cost each side."""
        before_bytes = await self.processes.received_bytes(self.metrics_session)
        before = self.processes.reading(mode)
        await sending
        after = self.processes.reading(mode)
        cell.upstream_bytes += await self.processes.received_bytes(self.metrics_session)
        cell.upstream_bytes -= before_bytes
        cell.api_s += after[0] - before[0]
        cell.vllm_s += after[1] - before[1]
        cell.gateway_s += after[2] - before[2]

    async def send(
        self, workload: Workload, mode: str, clips: list[Path | None], cell: Cell
    ) -> None:
        url = self.url(mode)
        session = self.pools.session(mode, VLLM_IDLE_S if mode == "vllm-direct" else AIOHTTP_IDLE_S)
        if workload.kind == "wave":
            assert clips[0] is not None
            body = chat_body(clips[0], mode, [])
            await asyncio.gather(*(post(session, url, body, cell) for _ in range(SEEDS)))
        elif workload.kind == "turns":
            await asyncio.gather(*(conversation(session, url, c, mode, cell) for c in clips))
        elif workload.kind == "first":
            for clip in clips:
                assert clip is not None
                await post(session, url, chat_body(clip, mode, []), cell)
        else:
            body = chat_body(None, mode, [])
            await asyncio.gather(*(post(session, url, body, cell) for _ in range(SEEDS)))

    @staticmethod
    def clip_count(workload: Workload) -> int:
        return {"wave": 1, "turns": CONVERSATIONS, "first": FIRST_COPIES, "text": 0}[workload.kind]


def gateway_config(workdir: Path, mode: str, upstream: str, clips_dir: Path) -> Path:
    path = workdir / f"{mode}.toml"
    port = free_port()
    path.write_text(
        f'[server]\nport = {port}\nevent_loop = "auto"\nmax_body_bytes = "64MiB"\n'
        f'[upstream]\nurl = "{upstream}"\n'
        f'[audio]\nroot = "{clips_dir}"\n' + GATEWAY_CONFIG[mode]
    )
    return path


def start_gateway(workdir: Path, mode: str, upstream: str, clips_dir: Path) -> ServerProcess:
    config = gateway_config(workdir, mode, upstream, clips_dir)
    port = int(re.search(r"port = (\d+)", config.read_text()).group(1))  # type: ignore[union-attr]
    argv = [sys.executable, "-m", "gateway", "serve", "--config", str(config)]
    return start(ServerProcess(mode, argv, port, workdir))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.system",
        description="The gateway + vLLM pair against vLLM alone, on the real CPU engine.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--waves", type=int, default=4, help="waves of each workload per mode")
    parser.add_argument("--seconds", type=float, nargs="+", default=[3.0, 30.0])
    parser.add_argument("--forms", nargs="+", default=list(FORMS), choices=list(FORMS))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument(
        "--engine-venv",
        type=Path,
        default=None,
        help="the vLLM venv (default: $ENGINE_VENV or .engine-venv, built by engine/install); "
        "one with torchaudio resamples, so vllm-direct can take 44.1 kHz clips",
    )
    parser.add_argument("--quick", action="store_true", help="1 wave, 3 s clips, 16 kHz WAV")
    parser.add_argument(
        "--connection-per-request", dest="connections", action="store_const",
        const=PER_REQUEST, default=KEEP_ALIVE,
        help="the client opens a connection per request (default: a keep-alive pool)",
    )  # fmt: skip
    parser.add_argument("--name", default="system")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument(
        "--replicas",
        type=int,
        choices=[2],
        help="two engines behind vllm-router, with and without the clip key: another bench "
        "with flags of its own (`--replicas 2 --help`, bench/replicas/)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.waves, args.seconds, args.forms = 1, [3.0], ["wav16"]
    return args


def can_resample(venv: Path) -> bool:
    return any(venv.glob("lib/python*/site-packages/torchaudio/__init__.py"))


async def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    venv = args.engine_venv or engine_venv()
    models = build_models(venv, workdir / "models")
    engine = EngineServer(
        EngineSpec(MODEL, models["qwen2-audio"], ENGINE_FLAGS), venv, workdir / "engine"
    )
    clips_dir = workdir / "clips"
    clips_dir.mkdir()
    engine.start()
    gateways: dict[str, ServerProcess] = {}
    try:
        startup_s = engine.wait_healthy()
        for mode in args.modes:
            if mode != "vllm-direct":
                gateways[mode] = start_gateway(workdir, mode, engine.url, clips_dir)
        resampling = can_resample(venv)
        plan = workloads(args.seconds, args.forms)
        pools = ClientPools(args.connections, REQUEST_TIMEOUT_S)
        idle = aiohttp.TCPConnector(keepalive_timeout=VLLM_IDLE_S)
        async with aiohttp.ClientSession(connector=idle) as metrics_session:
            bench = Bench(Processes(engine, gateways), clips_dir, pools, metrics_session)
            try:
                skipped = await run_plan(bench, plan, args, resampling)
            finally:
                await pools.close()
            engine_rss = engine.rss_bytes()
        requests = sum(cell.requests for cell in bench.cells.values())
        return {
            "date": date.today().isoformat(),
            "engine": {"startup_s": startup_s, "rss_bytes": engine_rss, "can_resample": resampling},
            "waves": args.waves,
            "seeds": SEEDS,
            "skipped": skipped,
            "workloads": [w.name for w in plan],
            "modes": args.modes,
            "client": describe(args.connections, pools.opened, requests),
            "uuid_only_waves": [again_name(w.name) for w in plan if w.kind == "wave"],
            "cells": {f"{w}|{m}": cell.row() for (w, m), cell in bench.cells.items()},
        }
    finally:
        for gateway in gateways.values():
            gateway.stop()
        engine.stop()


async def run_plan(
    bench: Bench, plan: list[Workload], args: argparse.Namespace, resampling: bool
) -> list[str]:
    """Every workload's waves, the modes rotated wave by wave; warm-up requests first."""
    skipped: list[str] = []
    for mode in args.modes:  # a warm-up wave per mode, not counted
        await bench.run(Workload("warm-up", "wave", FORMS["wav16"], 1.0), mode)
    bench.cells = {key: cell for key, cell in bench.cells.items() if "warm-up" not in key[0]}
    bench.pools.restart_count()
    for round_ in range(args.waves):
        for workload in plan:
            modes = args.modes[round_ % len(args.modes) :] + args.modes[: round_ % len(args.modes)]
            for mode in modes:
                if workload.form is None and mode != "vllm-direct":
                    continue
                form = workload.form
                if mode in INLINE_MODES and form and form.needs_resampling and not resampling:
                    note = f"{workload.name} | {mode}: this vLLM cannot resample"
                    skipped += [] if note in skipped else [note]
                    continue
                await bench.run(workload, mode)
        print(f"round {round_ + 1}/{args.waves} done", file=sys.stderr)
    return skipped


def main(argv: list[str] | None = None) -> int:
    from bench.system.report import write_results

    argv = sys.argv[1:] if argv is None else argv
    if any(arg.startswith("--replicas") for arg in argv):  # its own flags: bench/replicas/
        from bench.replicas import run as replicas

        return replicas.main(argv)
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-system-") as tmp:
        results = asyncio.run(measure(args, Path(tmp)))
    results["argv"] = sys.argv[1:] if argv is None else argv
    write_results(results, args.results_dir, args.name, plot_png=not args.no_plot)
    failed = sum(cell["errors"] for cell in results["cells"].values())
    return 1 if failed else 0
