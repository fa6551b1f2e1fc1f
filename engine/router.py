"""Start vllm-router in front of engine replicas, wait until it answers, stop it by its PID.

Standard library only, like engine/server.py: the router runs from a venv of its own
(`.ci/router/install`, vllm-router 0.1.17), in a process group of its own, on free ports of
127.0.0.1 (its API and its Prometheus port: the default 29000 would clash between two routers
on one host). Its output goes to a log file. Every router still running when the Python process
exits, or is sent SIGTERM, is stopped with the engines (engine/server.py's hooks).
"""

from __future__ import annotations

import http.client
import os
import re
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Self

from engine.server import (
    REPO,
    EngineStartError,
    free_port,
    log_tail,
    spawn_logged,
    stop_group,
    track,
)

VERSION = "0.1.17"  # .ci/router/requirements.in
READY_DEADLINE_S = 60.0
# A replica that comes back is in the ring again within seconds (the defaults, a health check a
# minute and a 30 s open circuit, keep it out for 20 s and more).
RECOVERY_FLAGS = ("--health-check-interval-secs", "1", "--cb-timeout-duration-secs", "2")
_SAMPLE = re.compile(r'^(\w+)\{worker="([^"]+)"[^}]*\} (\S+)$', re.MULTILINE)


def router_venv() -> Path:
    """`$ROUTER_VENV` (relative to the repository unless absolute), else `.ci-router-venv`."""
    path = Path(os.environ.get("ROUTER_VENV", ".ci-router-venv"))
    return path if path.is_absolute() else REPO / path


def router_problem(venv: Path) -> str | None:
    """Why `venv` cannot run the router (None when it holds vllm-router VERSION)."""
    if not (venv / "bin" / "vllm-router").exists():
        return f"no vllm-router venv at {venv} (run .ci/router/install)"
    if not any(venv.glob(f"lib/python*/site-packages/vllm_router-{VERSION}.dist-info")):
        return f"the venv at {venv} does not hold vllm-router {VERSION}"
    return None


class RouterServer:
    """One vllm-router process group in front of `worker_urls`, with `policy`. (engine/smg.py's
    SmgServer is this with SMG's executable, readiness and metric names.)"""

    NAME = "vllm-router"
    METRIC_PREFIX = "vllm_router_"

    def __init__(
        self,
        venv: Path,
        worker_urls: Sequence[str],
        policy: str,
        workdir: Path,
        flags: Sequence[str] = RECOVERY_FLAGS,
    ) -> None:
        self.venv = venv
        self.worker_urls = list(worker_urls)
        self.policy = policy
        self.flags = list(flags)
        self.port = free_port()
        self.prometheus_port = free_port()
        self.log_path = workdir / f"{self.NAME}-{policy}-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def executable(self) -> list[str]:
        return [str(self.venv / "bin" / "vllm-router")]

    def command(self) -> list[str]:
        return [
            *self.executable(),
            *("--host", "127.0.0.1", "--port", str(self.port)),
            *("--prometheus-port", str(self.prometheus_port)),
            *("--worker-urls", *self.worker_urls),
            *("--policy", self.policy),
            *self.flags,
        ]

    def ready(self) -> bool:
        """The router answers (vllm-router: `/liveness`)."""
        return self.get(self.port, "/liveness")[0] == 200

    def start(self, deadline_s: float = READY_DEADLINE_S) -> Self:
        """Spawn the router and block until it is `ready()`; returns self."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.process = spawn_logged(self.command(), self.log_path, {**os.environ, "NO_COLOR": "1"})
        track(self)
        started = time.monotonic()
        while not self.ready():
            code = self.process.poll()
            if code is not None or time.monotonic() - started > deadline_s:
                self.stop()
                raise EngineStartError(
                    f"{self.NAME} did not start ({code}); {self.log_path}:\n"
                    + log_tail(self.log_path, 20)
                )
            time.sleep(0.2)
        return self

    @staticmethod
    def get(port: int, path: str) -> tuple[int, str]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5.0)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read().decode(errors="replace")
        except (OSError, http.client.HTTPException):
            return 0, ""
        finally:
            connection.close()

    def worker_samples(self, name: str) -> dict[str, float]:
        """One of the router's per-worker Prometheus samples (`<METRIC_PREFIX><name>`) by worker."""
        _, text = self.get(self.prometheus_port, "/metrics")
        full = f"{self.METRIC_PREFIX}{name}"
        found: dict[str, float] = {}
        for metric, worker, value in _SAMPLE.findall(text):
            if metric == full:
                found[worker] = found.get(worker, 0.0) + float(value)
        return found

    def serving(self, worker_url: str) -> bool:
        """The worker is in the router's ring: healthy, its circuit closed (no circuit sample
        yet: no request has gone to it)."""
        health = self.worker_samples("worker_health").get(worker_url)
        circuit = self.worker_samples("cb_state").get(worker_url, 0.0)
        return health == 1.0 and circuit == 0.0

    def wait_serving(self, worker_url: str, deadline_s: float = READY_DEADLINE_S) -> float:
        """Block until `worker_url` is in the ring; the seconds waited."""
        started = time.monotonic()
        while not self.serving(worker_url):
            if time.monotonic() - started > deadline_s:
                raise EngineStartError(f"{self.NAME}: {worker_url} not back after {deadline_s} s")
            time.sleep(0.2)
        return time.monotonic() - started

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            stop_group(self, process)
