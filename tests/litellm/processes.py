"""Servers the LiteLLM suite runs as real processes: each in its own process group, its output
in a log file, ready when an HTTP probe answers, stopped by its group id.

Every wait is bounded. A server that exits or does not become ready in time fails the test with
the tail of its log; stopping sends SIGTERM to the group, then SIGKILL to whatever is left. A
test process that exits, or is sent SIGTERM, first stops the servers still running (`_LIVE`),
so none outlives it in its own session."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

PROBE_TIMEOUT_SECONDS = 2.0
POLL_SECONDS = 0.2
STOP_SECONDS = 15.0  # SIGTERM, then this long for the group to exit before SIGKILL
LOG_TAIL_LINES = 40


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    """A started server: its process (the leader of its own group) and its log file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def failure(self, what: str) -> AssertionError:
        return AssertionError(f"{self.name} {what}; the tail of {self.log}:\n{self.log_tail()}")

    def wait_ready(self, url: str, timeout_seconds: float) -> None:
        """Until GET `url` answers 200; raises with the log tail if the process exits first or
        the time runs out."""
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise self.failure(f"exited with status {self.process.returncode} before ready")
            if _answers(url):
                return
            time.sleep(POLL_SECONDS)
        raise self.failure(f"not ready at {url} after {timeout_seconds:.0f} s")

    def stop(self) -> None:
        """SIGTERM to the whole group, SIGKILL to what is left after STOP_SECONDS."""
        group = self.process.pid  # start_new_session: the leader's pid is the group id
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(STOP_SECONDS)
        # Children that outlive the leader still carry the group id.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        self.process.wait(STOP_SECONDS)


# The servers started and not yet stopped: what the exit and SIGTERM hooks stop.
_LIVE: list[Server] = []


def _stop_live() -> None:
    for server in list(_LIVE):
        server.stop()
        _LIVE.remove(server)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _stop_live()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


@functools.cache
def _install_hooks() -> None:
    """Once per process: stop live servers at exit and on SIGTERM (whose default action skips
    both `finally` blocks and atexit), unless something else already handles SIGTERM."""
    atexit.register(_stop_live)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_SECONDS) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


@contextlib.contextmanager
def running(
    name: str,
    argv: Sequence[str],
    *,
    log: Path,
    ready_url: str,
    ready_seconds: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Iterator[Server]:
    """`argv` started in a new session (so a group of its own), stdout and stderr to `log`,
    yielded once `ready_url` answers, stopped by its group on exit, whatever happened."""
    _install_hooks()
    with log.open("wb") as out:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    server = Server(name, process, log)
    _LIVE.append(server)
    try:
        server.wait_ready(ready_url, ready_seconds)
        yield server
    finally:
        server.stop()
        _LIVE.remove(server)
