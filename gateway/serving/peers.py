"""A worker's view of its gateway's workers (`[server] workers` > 1), for readiness.

The supervisor tells each worker how many workers are serving whenever that changes
(gateway/workers); a gateway is ready only while all of them are: one still starting, or lost
and being started again, leaves the gateway at part of its capacity, and a probe must not say
otherwise whichever worker it reached.
"""

from __future__ import annotations

from .readiness import Verdict


class Peers:
    """How many workers the gateway has, and how many serve now (0 until the supervisor says)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.serving = 0

    def verdict(self) -> Verdict | None:
        """None while every worker serves, else the not-ready verdict saying how many do."""
        if self.serving >= self.workers:
            return None
        message = (
            f"{self.serving} of {self.workers} workers are serving: the others are starting, "
            "or one died and is being started again"
        )
        return Verdict(False, "workers_not_serving", message)
