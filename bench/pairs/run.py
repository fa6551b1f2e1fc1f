"""`python -m bench.pairs --base DIR`: two versions of the gateway, interleaved wave by wave.

A before/after comparison of the gateway's own CPU per request that holds on a shared machine:
two gateway processes (`base`: the checkout in DIR, e.g. `git worktree add DIR main`; `head`:
this one, or `--head DIR2`) in front of one upstream, both with `repeats = "reference"`, and the
same waves sent to each in turn (the order flipped every round: ABBA). A round sends each
gateway a wave of 16 concurrent seeds of a new clip (one carries the clip, the others wait for
it, then go by reference: the "first" wave) and then the same 16 again (every one uuid-only: the
"again" wave). The client keeps its connections alive (one pool per gateway), as NeMo Gym and
the openai SDK do.
CPU is read from /proc schedstat around every wave.

The upstream is the stub, paced and split as vLLM answers (`bench.shared.stub_timing.VLLM_LIKE`), or
with `--engine` the real vLLM of `bench.system` (run it under the engine lock: `flock
/work/engine.lock python -m bench.pairs --engine ...`), whose API server's CPU per request is
reported too. Reported per (wave, gateway): mean ms of gateway CPU per request with its standard
error, the mean and median of the per-round differences head - base (the figures to quote: both
sides of a difference met the same machine), and every round's figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

from bench.shared import procstat
from bench.shared.servers import REPO_ROOT, ServerProcess, free_port, start
from bench.shared.speech_clips import FORMS, write_clip
from bench.shared.stub_timing import VLLM_LIKE

SEEDS = 16
WAVES = ("first", "again")


def gateway_config(workdir: Path, name: str, upstream: str, clips: Path) -> tuple[Path, int]:
    port = free_port()
    path = workdir / f"{name}.toml"
    path.write_text(
        f'[server]\nport = {port}\nmax_body_bytes = "64MiB"\n[upstream]\nurl = "{upstream}"\n'
        f'[audio]\nroot = "{clips}"\n[splice]\nrepeats = "reference"\n'
    )
    return path, port


def start_gateway(
    workdir: Path, name: str, tree: Path, upstream: str, clips: Path
) -> ServerProcess:
    config, port = gateway_config(workdir, name, upstream, clips)
    argv = [sys.executable, "-m", "gateway", "serve", "--config", str(config)]
    return start(ServerProcess(name, argv, port, workdir, cwd=tree))


def start_stub(workdir: Path, clips: Path) -> ServerProcess:
    port = free_port()
    argv = [sys.executable, "-m", "gateway.stub_upstream", "--port", str(port), *VLLM_LIKE.argv()]
    argv += ["--allowed-local-media-path", str(clips)]
    return start(ServerProcess("stub", argv, port, workdir))


def chat_body(model: str, clip: Path) -> dict[str, Any]:
    text = {"type": "text", "text": "What is said in this clip?"}
    return {
        "model": model,
        "max_tokens": 4,
        "temperature": 0.0,
        "messages": [{"role": "user", "content": [text]}],
        "metadata": {"audio_path": clip.name},
    }


async def wave(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> int:
    """16 concurrent seeds; how many failed."""

    async def one() -> bool:
        async with session.post(f"{url}/v1/chat/completions", json=body) as response:
            await response.read()
            return response.status == 200

    return sum(not ok for ok in await asyncio.gather(*(one() for _ in range(SEEDS))))


class Pairs:
    def __init__(self, gateways: dict[str, ServerProcess], api_pid: int | None) -> None:
        self.gateways = gateways
        self.api_pid = api_pid
        self.gateway_ms: dict[tuple[str, str], list[float]] = {}
        self.api_ms: dict[tuple[str, str], list[float]] = {}
        self.errors = 0

    async def round(
        self, order: list[str], sessions: dict[str, aiohttp.ClientSession], body_for: Any
    ) -> None:
        for name in order:
            body = body_for()
            for kind in WAVES:
                pids = self.gateways[name].pids()
                before = procstat.total_cpu_seconds(pids)
                api_before = procstat.cpu_seconds(self.api_pid) if self.api_pid else 0.0
                self.errors += await wave(sessions[name], self.gateways[name].url, body)
                per_request = 1000 * (procstat.total_cpu_seconds(pids) - before) / SEEDS
                self.gateway_ms.setdefault((kind, name), []).append(per_request)
                if self.api_pid:
                    api = 1000 * (procstat.cpu_seconds(self.api_pid) - api_before) / SEEDS
                    self.api_ms.setdefault((kind, name), []).append(api)

    def summary(self) -> dict[str, Any]:
        rows: dict[str, Any] = {}
        for kind in WAVES:
            base, head = self.gateway_ms[(kind, "base")], self.gateway_ms[(kind, "head")]
            diffs = [h - b for b, h in zip(base, head, strict=True)]
            rows[kind] = {
                "base_ms": _mean_se(base),
                "head_ms": _mean_se(head),
                "head_minus_base_ms": _mean_se(diffs),
                "median_head_minus_base_ms": round(statistics.median(diffs), 4),
                "rounds": {"base": _rounded(base), "head": _rounded(head)},
                "api_server_ms": {n: _mean_se(self.api_ms[(kind, n)]) for n in ("base", "head")}
                if self.api_ms
                else None,
            }
        return {
            "waves_per_cell": len(self.gateway_ms[("first", "base")]),
            "errors": self.errors,
            **rows,
        }


def _rounded(values: list[float]) -> list[float]:
    return [round(value, 4) for value in values]


def _mean_se(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0
    return round(mean, 4), round(se, 4)


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    clips = workdir / "clips"
    clips.mkdir()
    engine = None
    started: list[ServerProcess] = []
    try:
        if args.engine:
            from bench.shared.real_engine import ENGINE_FLAGS, MODEL
            from engine.server import EngineServer, EngineSpec, build_models, engine_venv

            venv = engine_venv()
            models = build_models(venv, workdir / "models")
            spec = EngineSpec(MODEL, models["qwen2-audio"], ENGINE_FLAGS)
            engine = EngineServer(spec, venv, workdir / "engine")
            engine.start()
            engine.wait_healthy()
            upstream, model = engine.url, MODEL
        else:
            stub = start_stub(workdir, clips)
            started.append(stub)
            upstream, model = stub.url, "stub-audio-model"
        trees = {"base": args.base.resolve(), "head": args.head.resolve()}
        gateways = {n: start_gateway(workdir, n, t, upstream, clips) for n, t in trees.items()}
        started += gateways.values()
        api_pid = engine.process.pid if engine is not None and engine.process else None
        pairs = Pairs(gateways, api_pid)
        seed = iter(range(1, 1_000_000))

        def body_for() -> dict[str, Any]:
            return chat_body(model, write_clip(clips, FORMS["wav16"], args.seconds, next(seed)))

        timeout = aiohttp.ClientTimeout(total=300)
        sessions = {n: aiohttp.ClientSession(timeout=timeout) for n in gateways}
        try:
            await pairs.round(["base", "head"], sessions, body_for)  # warm-up, not counted
            pairs.gateway_ms.clear()
            pairs.api_ms.clear()
            for number in range(args.rounds):
                order = ["base", "head"] if number % 2 == 0 else ["head", "base"]
                await pairs.round(order, sessions, body_for)
                print(f"round {number + 1}/{args.rounds}", file=sys.stderr)
        finally:
            for session in sessions.values():
                await session.close()
        return {"upstream": "engine" if args.engine else "paced stub", **pairs.summary()}
    finally:
        for server in started:
            server.stop()
        if engine is not None:
            engine.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.pairs", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--base", type=Path, required=True, help="the other gateway checkout")
    parser.add_argument("--head", type=Path, default=REPO_ROOT, help="default: this checkout")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=30.0, help="clip length")
    parser.add_argument("--engine", action="store_true", help="the real vLLM, not the stub")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-pairs-") as workdir:
        result = asyncio.run(run(args, Path(workdir)))
    print(json.dumps(result, indent=1))
    return 1 if result["errors"] else 0
