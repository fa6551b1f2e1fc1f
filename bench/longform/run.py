"""Long audio against a 30 s model: `python -m bench.longform [--quick] [--clips N] ...`

A long-form workload (default: 20 synthetic speech-like clips of 2-20 minutes, 16 kHz mono
WAV, noise bursts with pauses) is transcribed by a stub acting as a 30 s model that takes
`--delay-per-audio-second` per second of audio it hears (a model's time grows with its input;
the stub sleeps, so it batches for free, as an unloaded vLLM roughly does), three ways:

- `chunked-N`: audio-gateway with `[chunking]` on (quiet cuts, 30 s pieces,
  `max_concurrent_chunks = N`, one gateway per N of `--max-concurrent-chunks`), the row sent as
  `metadata.audio_path`;
- `sequential` (BASELINE): NeMo Skills' client-side chunking: fixed 30 s windows cut by the
  client, sent as inline data URIs straight to the model one after another, texts joined;
- `unsplit`: audio-gateway with chunking off: the whole clip goes, the model keeps its first
  30 s (fast, and wrong: the `audio heard` column says how much was lost).

Rows go one at a time (`--concurrency 1`, the latency a client waits per row) unless asked.
Every answer is checked: the stub says the frames it heard per clip, which must add up to the
clip (chunked, sequential) with no piece over 30 s. Writes bench/results/<date>-longform.json
and .md (also printed).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import soundfile

from bench.shared.long_clips import write_long_clip
from bench.shared.results import RESULTS_DIR
from bench.shared.servers import ServerProcess, free_port, start
from gateway.stub_upstream.window import parse_word

RATE_HZ = 16_000
WINDOW_SECONDS = 30
PROMPT = [{"role": "user", "content": "Transcribe the audio."}]


def make_clips(folder: Path, count: int, low: float, high: float) -> list[tuple[str, int]]:
    """`count` clips of `low`-`high` minutes (evenly spread, shuffled by a fixed seed)."""
    rng = np.random.default_rng(11)
    minutes = np.linspace(low, high, count)
    rng.shuffle(minutes)
    clips = []
    for index, length in enumerate(minutes):
        path = folder / f"long_{index:02d}.wav"
        write_long_clip(path, float(length), "WAV")
        clips.append((path.name, soundfile.info(str(path)).frames))
    return clips


def gateway_config(workdir: Path, name: str, chunking: dict[str, Any] | None) -> Path:
    path = workdir / f"{name}.toml"
    lines = [
        "[audio]",
        'max_file_bytes = "256MiB"',
        "max_duration_seconds = 7200.0",
        'max_decode_bytes = "4GiB"',
        "[cache]",
        'max_bytes = "2GiB"',
        'max_item_bytes = "256MiB"',
    ]
    if chunking is not None:
        lines.append("[chunking]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in chunking.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def start_stub(workdir: Path, audio_root: Path, delay: float) -> ServerProcess:
    port = free_port()
    argv = ["python", "-m", "gateway.stub_upstream", "--port", str(port)]
    argv += ["--allowed-local-media-path", str(audio_root), "--window-seconds", str(WINDOW_SECONDS)]
    argv += ["--delay-per-audio-second", str(delay)]
    return start(ServerProcess("stub", _python(argv), port, workdir))


def start_gateway(
    workdir: Path, name: str, upstream: str, audio_root: Path, chunking: dict[str, Any] | None
) -> ServerProcess:
    port = free_port()
    config = gateway_config(workdir, name, chunking)
    argv = ["python", "-m", "gateway", "serve", "--config", str(config), "--port", str(port)]
    argv += ["--host", "127.0.0.1", "--upstream", upstream, "--audio-root", str(audio_root)]
    argv += ["--log-level", "WARNING"]
    return start(ServerProcess(name, _python(argv), port, workdir))


def _python(argv: list[str]) -> list[str]:
    import sys

    return [sys.executable, *argv[1:]]


async def chat(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> str:
    data = io.BytesIO(json.dumps(body).encode())  # a large body: aiohttp wants a file-like
    headers = {"Content-Type": "application/json"}
    async with session.post(f"{url}/v1/chat/completions", data=data, headers=headers) as response:
        answer = await response.json()
        if response.status != 200:
            raise RuntimeError(f"{response.status}: {answer}")
        content: str = answer["choices"][0]["message"]["content"]
        return content


async def through_gateway(session: aiohttp.ClientSession, url: str, name: str) -> str:
    body = {"model": "m", "messages": PROMPT, "metadata": {"audio_path": name}}
    return await chat(session, url, body)


async def skills_sequential(session: aiohttp.ClientSession, url: str, path: Path) -> str:
    """NeMo Skills' chunking: fixed 30 s windows, each sent inline after the previous answer."""
    texts = []
    for window in await asyncio.to_thread(_fixed_windows, path):
        uri = "data:audio/wav;base64," + base64.b64encode(window).decode()
        audio = {"type": "audio_url", "audio_url": {"url": uri}}
        messages = [{"role": "user", "content": [audio, {"type": "text", "text": "Transcribe."}]}]
        texts.append(await chat(session, url, {"model": "m", "messages": messages}))
    return " ".join(texts)


def _fixed_windows(path: Path) -> list[bytes]:
    windows = []
    with soundfile.SoundFile(str(path)) as clip:
        for block in clip.blocks(blocksize=WINDOW_SECONDS * clip.samplerate, dtype="int16"):
            buffer = io.BytesIO()
            soundfile.write(buffer, block, clip.samplerate, subtype="PCM_16", format="WAV")
            windows.append(buffer.getvalue())
    return windows


def heard_frames(text: str) -> tuple[int, int]:
    """(frames heard, the longest piece heard) from the stub's answer words."""
    words = [parse_word(word) for word in text.split(" ")]
    return sum(int(w["frames"]) for w in words), max(int(w["frames"]) for w in words)


async def run_mode(
    mode: str,
    urls: dict[str, str],
    audio_root: Path,
    clips: list[tuple[str, int]],
    concurrency: int,
) -> dict[str, Any]:
    limit = asyncio.Semaphore(concurrency)
    timeout = aiohttp.ClientTimeout(total=3600)

    async def row(session: aiohttp.ClientSession, name: str) -> str:
        async with limit:
            if mode == "sequential":
                return await skills_sequential(session, urls["stub"], audio_root / name)
            return await through_gateway(session, urls[mode], name)

    async with aiohttp.ClientSession(timeout=timeout) as session:
        started = time.perf_counter()
        texts = await asyncio.gather(*(row(session, name) for name, _ in clips))
        wall = time.perf_counter() - started
    heard = [heard_frames(text) for text in texts]
    total = sum(frames for _, frames in clips)
    longest = max(piece for _, piece in heard)
    if mode != "unsplit":  # every frame heard once, no piece over the window
        assert [h for h, _ in heard] == [f for _, f in clips], (mode, heard, clips)
        assert longest <= WINDOW_SECONDS * RATE_HZ, (mode, longest)
    return {
        "mode": mode,
        "wall_seconds": round(wall, 2),
        "audio_heard": round(sum(h for h, _ in heard) / total, 4),
        "longest_piece_seconds": round(longest / RATE_HZ, 2),
    }


def render(result: dict[str, Any]) -> str:
    base = next(r for r in result["rows"] if r["mode"] == "sequential")["wall_seconds"]
    lines = [
        f"# Long audio: {result['clips']} clips, {result['audio_minutes']:.0f} min of audio, "
        f"a 30 s model at {result['delay_per_audio_second']} s per audio second, "
        f"rows {result['concurrency']} at a time",
        "",
        "| mode | wall s | vs sequential | audio heard | longest piece s |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for row in result["rows"]:
        speedup = base / row["wall_seconds"]
        lines.append(
            f"| {row['mode']} | {row['wall_seconds']:.1f} | {speedup:.2f}x | "
            f"{row['audio_heard']:.1%} | {row['longest_piece_seconds']:.1f} |"
        )
    lines += ["", f"command: `{result['command']}`", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    import sys

    parser = argparse.ArgumentParser(prog="python -m bench.longform", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="4 clips of 2-4 minutes")
    parser.add_argument("--clips", type=int, default=20)
    parser.add_argument("--min-minutes", type=float, default=2.0)
    parser.add_argument("--max-minutes", type=float, default=20.0)
    parser.add_argument("--delay-per-audio-second", type=float, default=0.01)
    parser.add_argument(
        "--max-concurrent-chunks", type=int, nargs="+", default=[4], help="one chunked mode each"
    )
    parser.add_argument("--concurrency", type=int, default=1, help="rows in flight")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    if args.quick:
        args.clips, args.min_minutes, args.max_minutes = 4, 2.0, 4.0
    result = asyncio.run(run(args))
    given = sys.argv[1:] if argv is None else argv
    result["command"] = " ".join(["python -m bench.longform", *given])
    text = render(result)
    print(text)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    stem = (
        args.results_dir / f"{datetime.now(UTC):%Y-%m-%d}-longform{'-quick' if args.quick else ''}"
    )
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    stem.with_suffix(".md").write_text(text)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-longform-") as tmp:
        workdir = Path(tmp)
        audio_root = workdir / "audio"
        audio_root.mkdir()
        clips = await asyncio.to_thread(
            make_clips, audio_root, args.clips, args.min_minutes, args.max_minutes
        )
        gateways: dict[str, dict[str, Any] | None] = {
            f"chunked-{limit}": {"enabled": True, "max_concurrent_chunks": limit}
            for limit in args.max_concurrent_chunks
        }
        gateways["unsplit"] = None
        servers: list[ServerProcess] = []
        try:
            stub = start_stub(workdir, audio_root, args.delay_per_audio_second)
            servers.append(stub)
            for name, settings in gateways.items():
                servers.append(start_gateway(workdir, name, stub.url, audio_root, settings))
            urls = {server.name: server.url for server in servers}
            rows = [
                await run_mode(mode, urls, audio_root, clips, args.concurrency)
                for mode in ["sequential", *gateways]
            ]
        finally:
            for server in servers:
                server.stop()
    return {
        "clips": len(clips),
        "audio_minutes": sum(frames for _, frames in clips) / RATE_HZ / 60,
        "delay_per_audio_second": args.delay_per_audio_second,
        "concurrency": args.concurrency,
        "rows": rows,
    }
