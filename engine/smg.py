"""Start SMG (smg 1.13.0, the SGLang model gateway) in front of engine replicas, wait until it
has registered every one of them, stop it by its PID.

Standard library only, like engine/router.py, whose RouterServer this is with SMG's executable
(`smg launch`, from a venv of its own: `.ci/smg/install`), readiness and metric names. On free
ports of 127.0.0.1 (its API and its Prometheus port: the default 29000 is vllm-router's too, and
a clash kills SMG at start-up). SMG registers a replica only after probing it (`/health`,
`/v1/models`, `/version`); until then chat answers 404 `model_not_found`, so `start()` waits
for `/readiness` to count every replica healthy.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from engine.router import RouterServer
from engine.server import REPO

VERSION = "1.13.0"  # .ci/smg/requirements.in
# The flags the "Many replicas" guide recommends (SMG's recipe there; tests/test_replicas_guide.py
# holds the page to them): bodies forwarded byte for byte (its default rewrite of bodies up to
# 1 MiB drops the `uuid` of every audio part with data), strict affinity (its default overload
# protection moves a busy replica's keys), a restarted or late replica back within seconds.
RECOMMENDED_POLICY = "consistent_hashing"
RECOMMENDED_FLAGS = (
    *("--max-buffered-request-bytes", "0"),
    "--disable-worker-overload-protection",
    *("--health-check-interval-secs", "1", "--cb-timeout-duration-secs", "2"),
    *("--worker-startup-check-interval", "5"),
)
# The run's own: SIGTERM waits up to 180 s for requests in flight by default.
SHUTDOWN_FLAGS = ("--shutdown-grace-period-secs", "1")


def smg_venv() -> Path:
    """`$SMG_VENV` (relative to the repository unless absolute), else `.ci-smg-venv`."""
    path = Path(os.environ.get("SMG_VENV", ".ci-smg-venv"))
    return path if path.is_absolute() else REPO / path


def smg_problem(venv: Path) -> str | None:
    """Why `venv` cannot run SMG (None when it holds smg VERSION)."""
    if not (venv / "bin" / "smg").exists():
        return f"no smg venv at {venv} (run .ci/smg/install)"
    if not any(venv.glob(f"lib/python*/site-packages/smg-{VERSION}.dist-info")):
        return f"the venv at {venv} does not hold smg {VERSION}"
    return None


class SmgServer(RouterServer):
    """One `smg launch` process group in front of `worker_urls`, with `policy` and `flags`
    (SMG's defaults when `flags` is empty)."""

    NAME = "smg"
    METRIC_PREFIX = "smg_"

    def executable(self) -> list[str]:
        return [str(self.venv / "bin" / "smg"), "launch"]

    def command(self) -> list[str]:
        return [*super().command(), *SHUTDOWN_FLAGS]

    def workers(self) -> list[dict[str, object]]:
        """SMG's registered workers (`GET /workers`), each with its `url` and `is_healthy`."""
        status, text = self.get(self.port, "/workers")
        if status != 200:
            return []
        found: list[dict[str, object]] = json.loads(text).get("workers", [])
        return found

    def ready(self) -> bool:
        """Every replica registered and healthy (`/readiness` counts them)."""
        status, text = self.get(self.port, "/readiness")
        if status != 200:
            return False
        return bool(json.loads(text).get("healthy_workers") == len(self.worker_urls))

    def serving(self, worker_url: str) -> bool:
        """The worker is registered and healthy."""
        return any(w.get("url") == worker_url and w.get("is_healthy") for w in self.workers())
