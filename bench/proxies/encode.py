"""Cold-encode throughput in MB/s of audio (1 MB = 10^6 bytes), warm page cache, best of N.

- gateway: the gateway's own `encode_clip` (chunked reads, pybase64), read + encode of a
  whole uncached file, exactly what a cache miss does;
- stdlib: `base64.b64encode(path.read_bytes())`, what the seed reference does;
- GNU `base64 -w0 FILE > /dev/null`, as a subprocess.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MEGABYTE = 1_000_000


def best_seconds(repeats: int, action: Callable[[], float | None]) -> float:
    """The fastest of `repeats` runs; `action` may return its own timing (else it is timed)."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        own = action()
        best = min(best, own if own is not None else time.perf_counter() - started)
    return best


def gateway_encode_seconds(path: Path, repeats: int) -> list[float]:
    """`repeats` cold `encode_clip` calls (each a cache miss: the file read and encoded anew)
    in one process started the way `audio-gateway serve` starts (malloc tunables
    included), so the figures are the gateway's as it runs. The first call also pays for the
    process's first touch of its memory; later ones reuse it, as a long-running gateway does."""
    from gateway.serving.tuning import malloc_tuning_env

    done = subprocess.run(
        [sys.executable, "-m", "bench.proxies.encode", str(path), str(repeats)],
        env=malloc_tuning_env(os.environ),
        capture_output=True,
        text=True,
        check=True,
    )
    return [float(line) for line in done.stdout.split()]


def _encode_in_this_process(path: Path) -> float:
    from gateway.audio.encoder import encode_clip
    from gateway.audio.policy import PathPolicy
    from gateway.naming.sidechannel import PathAudio

    policy = PathPolicy(str(path.parent), [str(path.parent.resolve())], path.stat().st_size)
    ref = PathAudio(given=path.name, param="bench", label="bench")
    clip = policy.resolve(ref)

    async def timed() -> float:
        started = time.perf_counter()
        encoded = await encode_clip(clip, encode=True, digest=False)
        elapsed = time.perf_counter() - started
        if sum(len(piece) for piece in encoded.pieces) != 4 * ((clip.size + 2) // 3):
            raise AssertionError("the gateway encoder produced the wrong number of bytes")
        return elapsed

    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(timed())


def stdlib_encode_seconds(path: Path) -> None:
    base64.b64encode(path.read_bytes())


def gnu_base64_seconds(path: Path) -> None:
    with open("/dev/null", "wb") as sink:
        subprocess.run(["base64", "-w0", str(path)], stdout=sink, check=True)


def measure_encode(path: Path, repeats: int) -> dict[str, Any]:
    size = path.stat().st_size
    path.read_bytes()  # warm the page cache
    result: dict[str, Any] = {
        "file_bytes": size,
        "repeats": repeats,
        "command": f"base64 -w0 {path.name} > /dev/null",
        "notes": [],
    }
    runs: dict[str, Callable[[], float | None]] = {
        "stdlib": lambda: stdlib_encode_seconds(path),
    }
    if shutil.which("base64"):
        runs["base64_w0"] = lambda: gnu_base64_seconds(path)
    else:
        result["notes"].append("GNU base64 not found: its figure is missing")
    for name, action in runs.items():
        seconds = best_seconds(repeats, action)
        result[f"{name}_seconds"] = seconds
        result[f"{name}_mb_s"] = size / MEGABYTE / seconds
    gateway_runs = gateway_encode_seconds(path, max(repeats, 5))
    result["gateway_seconds"] = min(gateway_runs)
    result["gateway_mb_s"] = size / MEGABYTE / min(gateway_runs)
    result["gateway_first_mb_s"] = size / MEGABYTE / gateway_runs[0]
    return result


def main(argv: list[str] | None = None) -> None:
    """The worker `gateway_encode_seconds` starts: the seconds of each encode, a line each."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.proxies.encode",
        description="Encode FILE with the gateway's encode_clip REPEATS times in this process, "
        "printing each encode's seconds (the worker of `python -m bench --workloads encode`).",
    )
    parser.add_argument("file", type=Path, metavar="FILE")
    parser.add_argument("repeats", type=int, metavar="REPEATS")
    args = parser.parse_args(argv)
    for _ in range(args.repeats):
        print(_encode_in_this_process(args.file))


if __name__ == "__main__":
    main()
