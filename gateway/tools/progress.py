"""A progress bar on stderr (rows/s and ETA) when stderr is a terminal; silent otherwise."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

POSTFIX_EVERY_SECONDS = 0.5  # the rows/s text; tqdm itself redraws at most ~10 times a second


class Progress:
    """Progress through `total_bytes` of input (so the ETA is right without counting rows
    first), showing rows and rows/s beside it."""

    def __init__(self, total_bytes: int, description: str, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.rows = 0
        self._started = self._shown = time.monotonic()
        self._bar = tqdm(
            total=total_bytes,
            desc=description,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            file=sys.stderr,
            disable=not self.enabled,
            bar_format="{desc}: {percentage:3.0f}%|{bar}| {postfix} [{elapsed}<{remaining}]",
        )

    def advance(self, nbytes: int) -> None:
        """One more row of `nbytes` bytes done."""
        self.rows += 1
        if not self.enabled:
            return
        self._bar.update(nbytes)
        now = time.monotonic()
        if now - self._shown >= POSTFIX_EVERY_SECONDS:
            self._shown = now
            rate = self.rows / max(now - self._started, 1e-9)
            self._bar.set_postfix_str(f"{self.rows:,} rows, {rate:,.0f} rows/s", refresh=False)

    def close(self) -> None:
        """Finish the bar (use with `contextlib.closing`)."""
        self._bar.close()
