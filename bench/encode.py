"""Cold-encode throughput in MB/s of audio (1 MB = 10^6 bytes), warm page cache, best of N.

- gateway: the gateway's own `encode_clip` (chunked reads, pybase64), read + encode of a
  whole uncached file, exactly what a cache miss does;
- stdlib: `base64.b64encode(path.read_bytes())`, what the seed reference does;
- GNU `base64 -w0 FILE > /dev/null`, as a subprocess.
"""

from __future__ import annotations

import asyncio
import base64
import shutil
import subprocess
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


def gateway_encode_seconds(path: Path) -> float:
    from gateway.audio import PathPolicy
    from gateway.encoder import encode_clip
    from gateway.sidechannel import PathAudio

    policy = PathPolicy(str(path.parent), [str(path.parent.resolve())], path.stat().st_size)
    ref = PathAudio(given=path.name, param="bench", label="bench", claimed_mime="audio/wav")
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
        "gateway": lambda: gateway_encode_seconds(path),
        "stdlib": lambda: stdlib_encode_seconds(path),
    }
    if shutil.which("base64"):
        runs["base64_w0"] = lambda: gnu_base64_seconds(path)
    else:
        result["notes"].append("GNU base64 not found: its figure is missing")
    for name, action in runs.items():
        try:
            seconds = best_seconds(repeats, action)
        except Exception as exc:  # the gateway's API may move under the lead's edits
            result["notes"].append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        result[f"{name}_seconds"] = seconds
        result[f"{name}_mb_s"] = size / MEGABYTE / seconds
    return result
