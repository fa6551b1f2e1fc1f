"""`python -m bench.smg [--waves 12] [--clips 8] [--seconds 3] [--modes ...]`: the gateway by
reference with the clip key (`[routing] affinity_headers = ["X-Session-ID"]`) in front of SMG
1.13.0 and two stub replicas (paced like vLLM), the same `--clips` clips in every wave, 16
concurrent seeds each (an epoch a wave, as a dataset repeated for RL or evaluation).

    recommended   SMG as the "Many replicas" guide starts it: consistent_hashing keyed on
                  X-Session-ID, --max-buffered-request-bytes 0 (bodies byte for byte), ...
    defaults      consistent_hashing keyed on X-Session-ID, every other flag SMG's default:
                  bodies up to 1 MiB re-serialised, the uuid of parts with data dropped
    bare          `smg launch --worker-urls ...` alone (policy cache_aware, key ignored)

Each mode gets fresh stubs, SMG and gateway, so its first wave meets empty caches. Per wave:
client requests and their statuses, upstream requests (SMG's `smg_worker_requests_total`
summed over the replicas), the gateway's data and reference parts and misses retried, and the
stubs' processings (their `vllm:mm_cache_*` counters: queries less hits). The goals: with the
defaults, upstream requests per client request <= 1.1 over the run; with the recommended flags,
no miss after the first wave.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import aiohttp

from bench.shared.results import RESULTS_DIR
from bench.shared.samples import GATEWAY_SAMPLES, Samples, read_samples
from bench.shared.servers import ServerProcess, free_port, start, start_stub
from bench.shared.speech_clips import FORMS, write_clip
from bench.shared.stub_timing import VLLM_LIKE
from bench.smg.report import goals, summary, write_results
from engine.smg import RECOMMENDED_FLAGS, RECOMMENDED_POLICY, SmgServer, smg_venv

SEEDS = 16
MODEL = "stub-audio-model"
KEY_FLAGS = ("--routing-key-headers", "x-session-id")  # the gateway's key header


STUB_SAMPLES: Samples = (
    ("queries", "vllm:mm_cache_queries_total", {}),
    ("hits", "vllm:mm_cache_hits_total", {}),
    ("refused", "http_requests_total", {"handler": "/v1/chat/completions", "status": "4xx"}),
)


@dataclass(frozen=True)
class Mode:
    name: str
    policy: str
    flags: tuple[str, ...]


MODES = {
    mode.name: mode
    for mode in (
        Mode("recommended", RECOMMENDED_POLICY, (*KEY_FLAGS, *RECOMMENDED_FLAGS)),
        Mode("defaults", "consistent_hashing", KEY_FLAGS),
        Mode("bare", "cache_aware", ()),
    )
}


def gateway_toml(workdir: Path, port: int, upstream: str, clips: Path, wait_ms: int) -> Path:
    path = workdir / f"gateway-{port}.toml"
    path.write_text(
        f'[server]\nport = {port}\n[upstream]\nurl = "{upstream}"\n[audio]\nroot = "{clips}"\n'
        f'[splice]\nrepeats = "reference"\nreference_wait_ms = {wait_ms}\n'
        '[routing]\naffinity_headers = ["X-Session-ID"]\n'
    )
    return path


def body(clip: str, seed: int) -> dict[str, Any]:
    text = {"type": "text", "text": "What is said in this clip?"}
    return {
        "model": MODEL,
        "max_tokens": 4,
        "seed": seed,
        "metadata": {"audio_path": clip},
        "messages": [{"role": "user", "content": [text]}],
    }


async def post(session: aiohttp.ClientSession, url: str, payload: dict[str, Any]) -> int:
    async with session.post(f"{url}/v1/chat/completions", json=payload) as response:
        await response.read()
        return response.status


async def reading(
    session: aiohttp.ClientSession, stubs: list[ServerProcess], smg: SmgServer, gateway: str
) -> dict[str, float]:
    """Everything counted so far: the stubs' (summed), SMG's and the gateway's."""
    found = dict.fromkeys((short for short, _, _ in STUB_SAMPLES), 0.0)
    for stub in stubs:
        counted = await read_samples(session, f"{stub.url}/metrics", STUB_SAMPLES)
        for short, value in counted.items():
            found[short] += value
    found["upstream"] = sum(smg.worker_samples("worker_requests_total").values())
    ours = await read_samples(session, f"{gateway}/gateway/metrics", GATEWAY_SAMPLES)
    return {**found, **ours}


async def run_mode(
    mode: Mode, args: argparse.Namespace, workdir: Path, clips: list[str]
) -> dict[str, Any]:
    root = workdir / "clips"
    stubs = [start_stub(workdir, root, VLLM_LIKE) for _ in range(2)]
    smg = SmgServer(args.smg_venv, [s.url for s in stubs], mode.policy, workdir, mode.flags)
    gateway: ServerProcess | None = None
    try:
        smg.start()
        port = free_port()
        config = gateway_toml(workdir, port, smg.url, root, args.reference_wait_ms)
        argv = [
            sys.executable,
            "-m",
            "gateway",
            "serve",
            "--config",
            str(config),
            "--log-level",
            "WARNING",
        ]
        gateway = start(ServerProcess(f"gateway-{mode.name}", argv, port, workdir))
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            waves = [
                await wave(session, stubs, smg, gateway.url, clips, n)
                for n in range(1, args.waves + 1)
            ]
            async with session.get(f"{gateway.url}/gateway/health") as response:
                health = await response.json()
        return {
            "mode": mode.name,
            "policy": mode.policy,
            "flags": list(mode.flags),
            "waves": waves,
            "references": health.get("references"),
        }
    finally:
        if gateway is not None:
            gateway.stop()
        smg.stop()
        for stub in stubs:
            stub.stop()


async def wave(
    session: aiohttp.ClientSession,
    stubs: list[ServerProcess],
    smg: SmgServer,
    gateway: str,
    clips: list[str],
    number: int,
) -> dict[str, Any]:
    """One wave: SEEDS concurrent seeds of every clip; what it cost, from the counters."""
    before = await reading(session, stubs, smg, gateway)
    payloads = [body(clip, seed) for clip in clips for seed in range(SEEDS)]
    statuses = await asyncio.gather(*(post(session, gateway, p) for p in payloads))
    after = await reading(session, stubs, smg, gateway)
    grown = {k: after[k] - before[k] for k in after}
    return {
        "wave": number,
        "requests": len(payloads),
        "errors": sum(status != 200 for status in statuses),
        "upstream": grown["upstream"],
        "data_parts": grown["data_parts"],
        "reference_parts": grown["reference_parts"],
        "misses": grown["misses"],
        "retries": grown["retries"],
        "processings": grown["queries"] - grown["hits"],
        "refused": grown["refused"],
    }


async def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    root = workdir / "clips"
    root.mkdir()
    clips = [
        write_clip(root, FORMS["wav16"], args.seconds, 20_000 + i).name for i in range(args.clips)
    ]
    results: dict[str, Any] = {
        "date": date.today().isoformat(),
        "command": "python -m bench.smg " + " ".join(args.argv),
        "clips": args.clips,
        "seconds": args.seconds,
        "waves": args.waves,
        "stub": VLLM_LIKE.describe(),
        "modes": [],
    }
    for name in args.modes:
        result = await run_mode(MODES[name], args, workdir, clips)
        result["clips"] = args.clips
        result["summary"] = summary(result)
        results["modes"].append(result)
        print(f"{name}: {result['summary']}", file=sys.stderr)
    results["goals"] = goals(results)
    return results


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.smg",
        description="The gateway by reference with the key in front of SMG and two stubs.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--waves", type=int, default=12, help="waves of the same clips")
    parser.add_argument("--clips", type=int, default=8, help="clips a wave")
    parser.add_argument("--seconds", type=float, default=3.0, help="each clip's length")
    parser.add_argument(
        "--modes", nargs="+", default=["recommended", "defaults"], choices=list(MODES)
    )
    parser.add_argument("--reference-wait-ms", type=int, default=2000)
    parser.add_argument("--smg-venv", type=Path, default=None, help="default: engine/smg.py's")
    parser.add_argument("--name", default="smg")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    args.smg_venv = args.smg_venv or smg_venv()
    args.argv = argv
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-smg-") as tmp:
        results = asyncio.run(measure(args, Path(tmp)))
    write_results(results, args.results_dir, args.name)
    return 1 if any(r["summary"]["errors"] for r in results["modes"]) else 0
