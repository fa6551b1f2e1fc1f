"""Waves of 16 seeds by reference through a gateway in front of a stub that forgets clips.

Layouts (the stub's flags): `api-servers-2` (`--api-server-count 2`: two caches, each new
connection to the next), `api-servers-2-per-request` (each request to the next cache: a proxy
balancing requests), `cache-off` (`--mm-processor-cache-gb 0`: every uuid-only part is refused
with a 400 that is not a cache miss). Each layout gets a fresh stub and gateway; every wave sends
16 concurrent seeds of each of `--clips` clips (the same clips every wave, default 100 ms wait).
Per wave: upstream requests per client request, cache misses and refusals retried, and whether
the model is on data (`/gateway/health`). The goal: after the switch, no more than one miss per
clip (misses after the wave that switched / clips).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

from bench.shared import servers
from bench.shared.samples import parse_metrics
from gateway.audio.samples import write_tone

LAYOUTS = {
    "api-servers-2": ["--api-server-count", "2"],
    "api-servers-2-per-request": ["--api-server-count", "2", "--api-server-per-request"],
    "cache-off": ["--mm-processor-cache-gb", "0"],
}
SEEDS = 16
MODEL = "stub-audio-model"


async def wave(session: aiohttp.ClientSession, url: str, clips: list[str]) -> list[int]:
    async def one(name: str) -> int:
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Transcribe."}],
            "metadata": {"audio_path": name},
        }
        async with session.post(f"{url}/v1/chat/completions", json=body) as response:
            await response.read()
            return response.status

    return await asyncio.gather(*(one(name) for name in clips for _ in range(SEEDS)))


async def counters(session: aiohttp.ClientSession, gateway: str, stub: str) -> dict[str, Any]:
    async with session.get(f"{gateway}/gateway/metrics") as response:
        samples = parse_metrics(await response.text())
    async with session.get(f"{stub}/stub/state") as response:
        upstream = (await response.json())["request_count"]
    async with session.get(f"{gateway}/gateway/health") as response:
        models = (await response.json())["references"]["models"]
    retries = "audio_gateway_reference_retries_total"
    return {
        "upstream": upstream,
        "misses": samples.get(f'{retries}{{reason="cache_miss"}}', 0.0),
        "refused": samples.get(f'{retries}{{reason="refused"}}', 0.0),
        "mode": models.get(MODEL, {}).get("mode", "reference"),
    }


async def run_layout(name: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    root = workdir / name
    root.mkdir()
    clips = [f"clip{i}.wav" for i in range(args.clips)]
    for i, clip in enumerate(clips):
        write_tone(root / clip, args.seconds, 220.0 + 37 * i)
    port = servers.free_port()
    argv = [sys.executable, "-m", "gateway.stub_upstream", "--port", str(port), *LAYOUTS[name]]
    stub = servers.start(servers.ServerProcess(f"{name}-stub", argv, port, workdir))
    config = servers.gateway_config(workdir, name, 1024**3)
    config.write_text(config.read_text() + '\n[splice]\nrepeats = "reference"\n')
    gport = servers.free_port()
    gateway = servers.start(
        servers.ServerProcess(
            name, servers.gateway_argv(config, gport, stub.url, root), gport, workdir
        )
    )
    rows = []
    try:
        async with aiohttp.ClientSession() as session:
            before = await counters(session, gateway.url, stub.url)
            for _ in range(args.waves):
                statuses = await wave(session, gateway.url, clips)
                after = await counters(session, gateway.url, stub.url)
                rows.append(
                    {
                        "ok": statuses.count(200),
                        "requests": len(statuses),
                        "upstream": after["upstream"] - before["upstream"],
                        "misses": after["misses"] - before["misses"],
                        "refused": after["refused"] - before["refused"],
                        "mode": after["mode"],
                    }
                )
                before = after
    finally:
        gateway.stop()
        stub.stop()
    return {"layout": name, "clips": args.clips, "waves": rows, **summary(rows, args.clips)}


def summary(rows: list[dict[str, Any]], clips: int) -> dict[str, Any]:
    switched = next((i for i, row in enumerate(rows) if row["mode"] == "data"), None)
    after = rows[switched + 1 :] if switched is not None else []
    client = sum(row["requests"] for row in rows)
    return {
        "switched_in_wave": None if switched is None else switched + 1,
        "misses_after_switch_per_clip": sum(r["misses"] + r["refused"] for r in after) / clips,
        "upstream_per_client_request": sum(row["upstream"] for row in rows) / client,
        "all_200": all(row["ok"] == row["requests"] for row in rows),
    }


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "| layout | waves | switched in wave | misses after the switch, per clip | "
        "upstream requests per client request | all 200 |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in results:
        lines.append(
            f"| {r['layout']} | {len(r['waves'])} | {r['switched_in_wave']} | "
            f"{r['misses_after_switch_per_clip']:.2f} | {r['upstream_per_client_request']:.3f} | "
            f"{r['all_200']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.forgetting", description=__doc__)
    parser.add_argument("--waves", type=int, default=12)
    parser.add_argument("--clips", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-forgetting-") as tmp:
        results = [asyncio.run(run_layout(name, args, Path(tmp))) for name in args.layouts]
    print(json.dumps(results, indent=1), file=sys.stderr)
    print(markdown(results))
    ok = all(r["all_200"] and r["misses_after_switch_per_clip"] <= 1 for r in results)
    return 0 if ok else 1
