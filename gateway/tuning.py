"""Process-level tuning for `audio-gateway serve`, each piece measured in bench/.

- The garbage collector: each request allocates a few hundred short-lived objects, and the
  default young-generation threshold of 700 ran a collection every few requests.
- glibc's malloc asked for transparent huge pages: a cache miss keeps its base64 output, and
  first-touching that fresh memory 4 KiB page by page (~32,500 minor faults per 100 MB) made
  page faults, not base64, the cost of a cold encode. With huge pages a miss encodes ~2.5x
  faster. The tunable must be in the environment when the process starts, so `serve`
  re-executes itself once with it.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Mapping

GC_YOUNG_THRESHOLD = 20_000  # allocations between young-generation collections
HUGE_PAGE_TUNABLE = "glibc.malloc.hugetlb=1"  # glibc >= 2.35; older ones ignore it
TUNED_MARKER = "AUDIO_GATEWAY_MALLOC_TUNED"


def tune_garbage_collector() -> None:
    """Fewer young collections; objects alive at start-up are frozen out of later ones."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 20, 20)


def huge_page_malloc_env(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with the huge-page malloc tunable added (and marked, so it is added once)."""
    env = dict(environ)
    tunables = env.get("GLIBC_TUNABLES")
    if HUGE_PAGE_TUNABLE not in (tunables or ""):
        env["GLIBC_TUNABLES"] = f"{tunables}:{HUGE_PAGE_TUNABLE}" if tunables else HUGE_PAGE_TUNABLE
    env[TUNED_MARKER] = "1"
    return env


def reexec_with_huge_page_malloc(argv: list[str]) -> None:
    """Replace this process by `python -m gateway ARGV` with the tunable set; once, on Linux."""
    if sys.platform != "linux" or os.environ.get(TUNED_MARKER):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(
        sys.executable,
        [sys.executable, "-m", "gateway", *argv],
        huge_page_malloc_env(os.environ),
    )
