"""Peak RSS of a gateway normalizing a long clip (`python -m bench.normalize.memory`).

A real `audio-gateway serve` process (so its VmHWM is its own) in front of the stub, with
`[normalize]` on: a warm-up request with a 40 s clip of the same kind first (threads, libsndfile,
soxr and numpy loaded, one piece cut), then one request for a `--minutes` 44.1 kHz stereo
16-bit WAV, written here a minute at a time. Prints, per `[chunking]` setting, the growth of the
gateway's peak RSS (VmHWM after the long request minus VmRSS after the warm-up) as JSON lines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import soundfile
from aiohttp.test_utils import TestServer

from bench.shared.procstat import MIB, status_bytes
from bench.shared.servers import free_port
from gateway.stub_upstream import create_stub_app

RATE_HZ = 44_100
BLOCK_SECONDS = 60


def write_clip(path: Path, minutes: float) -> None:
    """Stereo noise bursts with pauses (quiet cuts find them), a minute at a time."""
    rng = np.random.default_rng(7)
    with soundfile.SoundFile(path, "w", RATE_HZ, 2, subtype="PCM_16") as clip:
        for _ in range(int(minutes * 60 / BLOCK_SECONDS) or 1):
            block = rng.uniform(-0.4, 0.4, (BLOCK_SECONDS * RATE_HZ, 2)).astype(np.float32)
            for second in range(0, BLOCK_SECONDS, 3):  # 0.3 s of quiet every 3 s
                block[int((second + 2.7) * RATE_HZ) : (second + 3) * RATE_HZ] *= 0.001
            clip.write(block)


async def serve(config: Path, port: int) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--port", str(port)]
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    for _ in range(1200):  # up to 2 minutes: the cores are shared
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return process
        except OSError:
            await asyncio.sleep(0.1)
    process.kill()
    raise RuntimeError("the gateway did not start")


async def one_run(
    workdir: Path, chunking: bool, stub_url: str, normalize: bool = True
) -> dict[str, Any]:
    config = workdir / f"gateway-{chunking}-{normalize}.toml"
    config.write_text(
        f'[upstream]\nurl = "{stub_url}"\nread_timeout_seconds = 600\n'
        f'[audio]\nroot = "{workdir}"\nmax_file_bytes = "2GiB"\n'
        'max_duration_seconds = 7200.0\nmax_decode_bytes = "4GiB"\n'
        f"[normalize]\nenabled = {str(normalize).lower()}\n"
        f"[chunking]\nenabled = {str(chunking).lower()}\n"
    )
    port = free_port()
    process = await serve(config, port)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as session:
            for name in ("warm.wav", "long.wav"):
                if name == "long.wav":
                    before = status_bytes(process.pid, "VmRSS")
                body: dict[str, Any] = {"model": "m"}
                body["messages"] = [{"role": "user", "content": "Transcribe."}]
                body["metadata"] = {"audio_path": name}
                async with session.post(url, json=body) as response:
                    await response.read()
                    status = response.status
            peak = status_bytes(process.pid, "VmHWM")
            metrics_url = f"http://127.0.0.1:{port}/gateway/metrics"
            async with session.get(metrics_url) as response:
                counters = _counters(await response.text())
    finally:
        process.terminate()
        process.wait(30)
    return {
        "normalize": normalize,
        "chunking": chunking,
        "status": status,
        "rss_after_warm_up_mib": round(before / MIB, 1),
        "peak_rss_growth_mib": round((peak - before) / MIB, 1),
        "normalized_clips": counters.get("audio_gateway_normalized_clips_total", 0),
        "pieces_sent": counters.get("audio_gateway_audio_chunks_total", 0),
    }


def _counters(text: str) -> dict[str, int]:
    """The unlabelled samples of the gateway's /gateway/metrics text."""
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name and not name.startswith("#") and "{" not in name:
            found[name] = int(float(value))
    return found


async def run(
    minutes: float, workdir: Path, chunking: list[bool], baseline: bool = False
) -> list[dict[str, Any]]:
    write_clip(workdir / "long.wav", minutes)
    write_clip(workdir / "warm.wav", 40 / 60)
    stub = TestServer(create_stub_app(record=False))
    await stub.start_server()
    try:
        url = str(stub.make_url("")).rstrip("/")
        rows = [{"minutes": minutes, **await one_run(workdir, on, url)} for on in chunking]
        if baseline:  # the same requests without [normalize], in the same run
            for on in chunking:
                rows.append({"minutes": minutes, **await one_run(workdir, on, url, False)})
        return rows
    finally:
        await stub.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.normalize.memory", description=__doc__)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--chunking", choices=["on", "off", "both"], default="both")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--baseline", action="store_true", help="also each setting with [normalize] off"
    )
    args = parser.parse_args(argv)
    settings = {"on": [True], "off": [False], "both": [True, False]}[args.chunking]
    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        for row in asyncio.run(run(args.minutes, Path(workdir), settings, args.baseline)):
            print(json.dumps(row))


if __name__ == "__main__":
    # The stub holds clips to vLLM's decode limits, read from vLLM's variables: the hour passes.
    os.environ["VLLM_MAX_AUDIO_DECODE_DURATION_S"] = "7200"
    os.environ["VLLM_MAX_AUDIO_DECODE_BYTES"] = str(4 * 1024**3)
    main()
