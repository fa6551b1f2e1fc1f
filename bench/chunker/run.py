"""What cutting long audio costs (`python -m bench.chunker [--minutes 60] [--formats ...]`).

Per source format, a synthetic speech-like clip (noise bursts with pauses, 16 kHz mono) of
`--minutes` is split by `Chunker.split` with the default `[chunking]` settings (quiet cuts,
30 s pieces), through the real pipeline (path policy, audio store, the file's descriptor), in a
FRESH process each (VmHWM cannot be reset):
- CPU: the process's utime+stime over the split (decode, energies, cuts, WAV writing; all
  threads), per minute of audio;
- peak RSS growth: VmHWM after the split minus VmRSS before it; the result itself holds the
  pieces (their WAV bytes, reported), so the working memory is the growth minus those bytes.

Then why pieces are WAV: soundfile's decode time (what vLLM does with each piece) and the size
of one 30 s piece written as WAV and as FLAC.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile

from bench.shared.long_clips import FORMATS, RATE_HZ, speech_like, write_long_clip
from bench.shared.procstat import MIB, status_bytes
from gateway.audio.encoder import StreamedAudio
from gateway.chunking import Chunker, ClipPieces
from gateway.clips.loaded import PathClip
from gateway.config import Config
from gateway.metrics import GatewayMetrics
from gateway.naming.sidechannel import DEFAULT_KEYS
from gateway.request.build import build_pipeline

DECODE_RUNS = 30


async def split_once(path: Path) -> dict[str, Any]:
    """Split `path` once, in this process; the figures of that one split."""
    config = Config.model_validate(
        {
            "audio": {
                "root": str(path.parent),
                "max_file_bytes": "2GiB",
                "max_duration_seconds": 7200,
                "max_decode_bytes": "4GiB",
            },
            "chunking": {"enabled": True},
        }
    )
    pipeline = await build_pipeline(config, GatewayMetrics())
    chunker = Chunker(config.chunking, pipeline.store, config.audio)
    sidechannel = DEFAULT_KEYS.read({"metadata": {"audio_path": path.name}}, 1, 2**40)
    assert sidechannel is not None
    source = (await pipeline.sources(sidechannel.clips, presigned=False))[0]  # type: ignore[arg-type]
    audio = await pipeline.store.get(source)
    rss_before = status_bytes(os.getpid(), "VmRSS")
    cpu_before, wall_before = _cpu_seconds(), time.perf_counter()
    pieces = await chunker.split(PathClip(source, audio))
    assert pieces is not None
    # Every piece produced as the fan-out produces them (on demand: read from the clip now).
    piece_bytes = sum(await _piece_sizes(pieces))
    cpu, wall = _cpu_seconds() - cpu_before, time.perf_counter() - wall_before
    peak = status_bytes(os.getpid(), "VmHWM")
    held = 0 if pieces.close is not None else piece_bytes  # what the result itself holds
    if pieces.close is not None:
        pieces.close()
    if isinstance(audio, StreamedAudio):
        await audio.aclose()
    chunker.close()
    pipeline.resolver.close()
    return {
        "audio_seconds": round(pieces.duration_seconds, 3),
        "pieces": len(pieces.pieces),
        "on_demand": pieces.close is not None,
        "file_mib": round(path.stat().st_size / MIB, 1),
        "cpu_seconds": round(cpu, 3),
        "wall_seconds": round(wall, 3),
        "cpu_ms_per_audio_minute": round(cpu * 1000 / (pieces.duration_seconds / 60), 2),
        "peak_rss_growth_mib": round((peak - rss_before) / MIB, 1),
        "pieces_mib": round(piece_bytes / MIB, 1),
        "pieces_held_mib": round(held / MIB, 1),
        "working_rss_mib": round((peak - rss_before - held) / MIB, 1),
    }


async def _piece_sizes(pieces: ClipPieces, in_flight: int = 4) -> list[int]:
    """Each piece's WAV made, `in_flight` at a time in threads as the fan-out builds bodies;
    only the sizes are kept (the fan-out drops a piece once it is sent)."""
    sizes: list[int] = []
    items = list(pieces.pieces)
    for start in range(0, len(items), in_flight):
        batch = items[start : start + in_flight]
        sizes += await asyncio.gather(*(asyncio.to_thread(_size_of, piece) for piece in batch))
    return sizes


def _size_of(piece: Any) -> int:
    return len(piece.data)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure_in_fresh_process(path: Path) -> dict[str, Any]:
    import subprocess
    import sys

    output = subprocess.run(
        [sys.executable, "-m", "bench.chunker", "--measure-file", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    figures: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return figures


def piece_decode_costs() -> list[dict[str, Any]]:
    """One 30 s speech-like piece as WAV and as FLAC: bytes, and soundfile's float32 decode."""
    samples = speech_like(30 * RATE_HZ, np.random.default_rng(3))
    rows = []
    for container in ("WAV", "FLAC"):
        buffer = io.BytesIO()
        soundfile.write(buffer, samples, RATE_HZ, subtype="PCM_16", format=container)
        data = buffer.getvalue()
        times = []
        for _ in range(DECODE_RUNS):
            started = time.perf_counter()
            soundfile.read(io.BytesIO(data), dtype="float32")
            times.append(time.perf_counter() - started)
        rows.append(
            {
                "piece": container,
                "bytes": len(data),
                "decode_ms_best": round(min(times) * 1e3, 3),
                "decode_ms_median": round(statistics.median(times) * 1e3, 3),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.chunker", description=__doc__)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--formats", nargs="+", choices=sorted(FORMATS), default=list(FORMATS))
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--measure-file", type=Path, help=argparse.SUPPRESS)  # the fresh process
    parser.add_argument(
        "--measure",
        action="store_true",
        help="write one clip (--formats' first) and print its figures as JSON (for the tests)",
    )
    args = parser.parse_args(argv)
    if args.measure_file:
        print(json.dumps(asyncio.run(split_once(args.measure_file))))
        return
    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        results = []
        for name in args.formats[:1] if args.measure else args.formats:
            path = Path(workdir) / f"long{FORMATS[name][2]}"
            write_long_clip(path, args.minutes, name)
            results.append({"format": name, **measure_in_fresh_process(path)})
            path.unlink()
    if args.measure:
        print(json.dumps(results[0]))
        return
    print(
        f"| source ({args.minutes:g} min, 16 kHz mono) | file MiB | pieces | CPU ms / audio min "
        "| wall s | on demand | peak RSS growth MiB | pieces MiB (held) | working MiB |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in results:
        print(
            f"| {row['format']} | {row['file_mib']} | {row['pieces']} "
            f"| {row['cpu_ms_per_audio_minute']} | {row['wall_seconds']} "
            f"| {'yes' if row['on_demand'] else 'no'} | {row['peak_rss_growth_mib']} "
            f"| {row['pieces_mib']} ({row['pieces_held_mib']}) | {row['working_rss_mib']} |"
        )
    print()
    print("| 30 s piece as | bytes | soundfile decode ms, best / median |")
    print("| --- | --- | --- |")
    for row in piece_decode_costs():
        print(
            f"| {row['piece']} | {row['bytes']} | {row['decode_ms_best']} / "
            f"{row['decode_ms_median']} |"
        )
