"""Servers the LiteLLM suite runs as real processes: each in its own process group, its output
in a log file, ready when an HTTP probe answers, stopped by its group id.

Every wait is bounded. A server that exits or does not become ready in time fails the test with
the tail of its log; stopping sends SIGTERM to the group, then SIGKILL to whatever is left. A
test process that exits, or is sent SIGTERM, first stops the servers still running (`_LIVE`),
so none outlives it in its own session (then runs the SIGTERM handler it found: the engine's).

`gateway` and `litellm_proxy` start the page's two servers as docs/guides/litellm.md starts them
(tests/litellm/recipe.py): this suite's chain and the real-engine suite's (tests/engine)."""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import yaml

from tests.litellm import recipe

PROBE_TIMEOUT_SECONDS = 2.0
POLL_SECONDS = 0.2
STOP_SECONDS = 15.0  # SIGTERM, then this long for the group to exit before SIGKILL
LOG_TAIL_LINES = 40
GATEWAY_READY_SECONDS = 60.0  # guards against hangs on a loaded machine, never assertions
LITELLM_READY_SECONDS = 180.0  # about 10 s on an idle 2-core machine


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


def _on_sigterm(previous: Callable[[int, FrameType | None], Any] | None, signum: int,
                frame: FrameType | None) -> None:  # fmt: skip
    """Stop the live servers, then whatever SIGTERM did before: the handler found (the engine
    suite's, which stops its vLLM servers) or the default action, dying of the signal."""
    _stop_live()
    if previous is not None:
        previous(signum, frame)
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


@functools.cache
def _install_hooks() -> None:
    """Once per process: stop live servers at exit and on SIGTERM (whose default action skips
    both `finally` blocks and atexit), before the SIGTERM handler already there, if any. A
    SIGTERM that is ignored stays ignored; signals are only set from the main thread."""
    atexit.register(_stop_live)
    current = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread():
        return
    if current is signal.SIG_DFL or callable(current):
        previous = current if callable(current) else None
        signal.signal(signal.SIGTERM, functools.partial(_on_sigterm, previous))


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


def python_env() -> dict[str, str]:
    """This interpreter's environment, with the repository importable by its children."""
    path = os.environ.get("PYTHONPATH")
    root = str(recipe.REPO_ROOT)
    return {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{path}" if path else root}


@contextlib.contextmanager
def gateway(home: Path, name: str, upstream: str, root: Path, key: str) -> Iterator[str]:
    """`python -m gateway serve` with the page's gateway.toml, its port, upstream and root
    replaced, its API key given as the page says (AUDIO_GATEWAY_API_KEYS); yields its URL.
    Its config and log are `home`/`name`.toml and .log."""
    config = recipe.gateway_config()
    port = free_port()
    config["server"]["port"] = port
    config["upstream"]["url"] = upstream
    config["audio"]["root"] = str(root)
    path = home / f"{name}.toml"
    path.write_text(_toml(config))
    argv = [sys.executable, "-m", "gateway", "serve", "--config", str(path)]
    url = f"http://127.0.0.1:{port}"
    env = {**python_env(), "AUDIO_GATEWAY_API_KEYS": key}
    with running(name, argv, log=home / f"{name}.log", ready_url=f"{url}/gateway/health",
                 ready_seconds=GATEWAY_READY_SECONDS, env=env):  # fmt: skip
        yield url


def _toml(config: dict[str, Any]) -> str:
    """A flat two-level TOML document (tables of scalars and lists), as the page's config is."""
    return "".join(
        f"[{table}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items())
        for table, values in config.items()
    )


@contextlib.contextmanager
def litellm_proxy(
    executable: Path, home: Path, config: dict[str, Any], *, gateway_url: str, gateway_key: str,
    master_key: str,
) -> Iterator[tuple[str, Server]]:  # fmt: skip
    """LiteLLM started by the page's start block with `config` (the page's litellm.yaml, which
    a caller may have extended), the gateway at `gateway_url` as GATEWAY_API_BASE; yields its
    URL and its Server once it is live. Its config and log (litellm.log) are written to `home`,
    its working directory."""
    config_path = home / recipe.LITELLM_CONFIG_TITLE
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    env = recipe.litellm_environment(
        {
            "LITELLM_MASTER_KEY": master_key,
            "GATEWAY_API_BASE": f"{gateway_url}/v1",
            "GATEWAY_API_KEY": gateway_key,
        }
    )
    argv = recipe.litellm_argv(str(executable), config_path, port)
    url = f"http://127.0.0.1:{port}"
    with running("LiteLLM", argv, log=home / "litellm.log",
                 ready_url=f"{url}/health/liveliness", ready_seconds=LITELLM_READY_SECONDS,
                 env={**_litellm_base_env(), **env}, cwd=home) as proxy:  # fmt: skip
        yield url, proxy


def _litellm_base_env() -> dict[str, str]:
    """What LiteLLM inherits: PATH, HOME, locale; nothing of this venv's Python settings."""
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SSL_CERT_FILE")
    return {k: v for k, v in os.environ.items() if k in keep}
