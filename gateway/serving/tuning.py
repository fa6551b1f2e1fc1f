"""Process-level tuning for `audio-gateway serve`, each piece measured in bench/.

- The garbage collector: each request allocates a few hundred short-lived objects, and the
  default young-generation threshold of 700 ran a collection every few requests.
- glibc's malloc, told to keep freed memory for reuse: a cache miss keeps its base64 output,
  and with the defaults every multi-megabyte piece was a fresh mmap, first-touched 4 KiB page
  by page (~32,500 minor faults per 100 MB) and unmapped again when freed. Page faults, not
  base64, were the cost of a cold encode. Served from the heap and never trimmed, memory freed
  by evictions and streamed clips is reused: misses encode ~3x faster once the process has
  warmed up (measured against transparent huge pages too, which stalled on compaction). The
  tunables must be in the environment when the process starts, so `serve` re-executes itself
  once with them.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
from collections.abc import Callable, Mapping

from ..config import ConfigError

GC_YOUNG_THRESHOLD = 20_000  # allocations between young-generation collections
MALLOC_TUNABLES = (
    "glibc.malloc.mmap_threshold=33554432",  # blocks under 32 MiB come from the heap...
    "glibc.malloc.trim_threshold=4294967295",  # ...which is not given back, so it is reused
)
TUNED_MARKER = "AUDIO_GATEWAY_MALLOC_TUNED"


def tune_garbage_collector() -> None:
    """Fewer young collections; objects alive at start-up are frozen out of later ones."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 20)


def malloc_tuning_env(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with the malloc tunables added (and marked, so they are added once)."""
    env = dict(environ)
    present = env.get("GLIBC_TUNABLES", "")
    missing = [tunable for tunable in MALLOC_TUNABLES if tunable.split("=")[0] not in present]
    env["GLIBC_TUNABLES"] = ":".join(filter(None, [present, *missing]))
    env[TUNED_MARKER] = "1"
    return env


def reexec_with_malloc_tuning(argv: list[str]) -> None:
    """Replace this process by `python -m gateway ARGV` with the tunables set; once, on Linux."""
    if sys.platform != "linux" or os.environ.get(TUNED_MARKER):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(
        sys.executable, [sys.executable, "-m", "gateway", *argv], malloc_tuning_env(os.environ)
    )


def event_loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop when asked for, or on "auto" when it is installed; None means asyncio's own."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ConfigError("server.event_loop = 'uvloop' but uvloop is not installed") from None
        return None
    return uvloop.new_event_loop
