"""Start a real vLLM server from the test venv, wait until it is healthy, stop it by its PID.

Standard library only (the test venv has no torch): vLLM runs as `engine/launch.py serve` in the
engine's venv (`engine/install`), in a process group of its own, listening on a free port of
127.0.0.1 or on a Unix socket (`--uds`). Its output goes to a log file; a server that exits or
is not healthy within the deadline raises `EngineStartError` with the log's tail. `stop()`
ends the whole group (SIGTERM, then SIGKILL); every server still running when the Python
process exits, or is sent SIGTERM, is stopped by an `atexit` hook or a SIGTERM handler.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import http.client
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

REPO = Path(__file__).resolve().parent.parent
LOCKS = (REPO / "engine" / "requirements.lock", REPO / "engine" / "vllm.lock")
MARKER_NAME = ".engine-lock"  # engine/install writes the locks' hash here when done

# About 50 s alone on 2 cores; two servers starting side by side share the cores, and on a
# machine busy with other work a start took 270 s. $ENGINE_START_DEADLINE_S overrides it.
START_DEADLINE_S = float(os.environ.get("ENGINE_START_DEADLINE_S", "600"))
STOP_GRACE_S = 20.0
LOG_TAIL_LINES = 40

SERVER_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache (the default takes a share of all RAM)
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
# The flags every tiny model is served with: random weights, no compilation step, float32.
BASE_FLAGS = ("--load-format", "dummy", "--dtype", "float32", "--enforce-eager")


class EngineStartError(RuntimeError):
    """vLLM did not become healthy; the message carries its log's tail."""


def engine_venv() -> Path:
    """`$ENGINE_VENV` (relative to the repository unless absolute), else `.engine-venv`."""
    path = Path(os.environ.get("ENGINE_VENV", ".engine-venv"))
    return path if path.is_absolute() else REPO / path


def locks_digest() -> str:
    """The hash engine/install records: sha256 of both locks, concatenated."""
    digest = hashlib.sha256()
    for lock in LOCKS:
        digest.update(lock.read_bytes())
    return digest.hexdigest()


def venv_problem(venv: Path) -> str | None:
    """Why `venv` cannot run the engine (None when engine/install completed with these locks)."""
    marker = venv / MARKER_NAME
    if not marker.is_file():
        return f"no engine venv at {venv}"
    if marker.read_text().strip() != locks_digest():
        return f"the engine venv at {venv} was built from other locks"
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class EngineSpec:
    """One vLLM configuration: a model directory, its served name and extra flags and env."""

    served_name: str
    model_dir: Path
    flags: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    uds: bool = False


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


class Stoppable(Protocol):
    def stop(self) -> None: ...


_running: set[Stoppable] = set()  # every server and router started and not yet stopped


def track(server: Stoppable) -> None:
    """Stop `server` when this process exits or is sent SIGTERM (unless stopped before)."""
    _running.add(server)
    stop_all_on_sigterm()


class EngineServer:
    """One vLLM server process group. `start()` returns at once; `wait_healthy()` blocks."""

    def __init__(self, spec: EngineSpec, venv: Path, workdir: Path) -> None:
        self.spec = spec
        self.venv = venv
        self.workdir = workdir
        self.log_path = workdir / f"{spec.served_name}.log"
        self.port = 0 if spec.uds else free_port()
        # AF_UNIX paths are limited to ~107 bytes: a short directory of its own under /tmp.
        self.socket_path = (
            os.path.join(tempfile.mkdtemp(prefix="vllm-"), "vllm.sock") if spec.uds else ""
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0  # time.monotonic() at the last start()
        self.healthy_after_s = 0.0  # from that start() to the first /health 200

    @property
    def url(self) -> str:
        """The upstream URL a gateway config takes: http://127.0.0.1:PORT or unix://PATH."""
        if self.spec.uds:
            return f"unix://{self.socket_path}"
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        listen = (
            ["--uds", self.socket_path]
            if self.spec.uds
            else ["--host", "127.0.0.1", "--port", str(self.port)]
        )
        return [
            str(self.venv / "bin" / "python"),
            str(REPO / "engine" / "launch.py"),
            "serve",
            str(self.spec.model_dir),
            "--served-model-name",
            self.spec.served_name,
            *listen,
            *BASE_FLAGS,
            *self.spec.flags,
        ]

    def start(self) -> None:
        """Spawn vLLM in a new session (its own process group) and return at once."""
        if self.spec.uds:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)
        env = {**os.environ, **SERVER_ENV, **self.spec.env}
        env.pop("PYTHONPATH", None)  # the test venv's paths are not the engine's
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = spawn_logged(self.command(), self.log_path, env, cwd=self.workdir)
        self.started_at = time.monotonic()
        track(self)

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        """A blocking GET on the server (its status and body)."""
        connection = (
            UnixHTTPConnection(self.socket_path, timeout)
            if self.spec.uds
            else http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        )
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def healthy(self) -> bool:
        try:
            return self.get("/health", timeout=2.0)[0] == 200
        except (OSError, http.client.HTTPException):
            return False

    def wait_healthy(self, deadline_s: float = START_DEADLINE_S) -> float:
        """Block until /health answers 200 and return the seconds waited; raise
        `EngineStartError` (after stopping it) if it exits or misses the deadline."""
        if self.process is None:
            raise EngineStartError(f"{self.spec.served_name}: not started")
        started = time.monotonic()
        while not self.healthy():
            code = self.process.poll()
            if code is not None:
                _running.discard(self)
                raise EngineStartError(self.failure(f"exited with status {code}"))
            if time.monotonic() - started > deadline_s:
                self.stop()
                raise EngineStartError(self.failure(f"not healthy after {deadline_s:.0f} s"))
            time.sleep(0.5)
        self.healthy_after_s = time.monotonic() - self.started_at
        return time.monotonic() - started

    def failure(self, what: str) -> str:
        name, tail = self.spec.served_name, self.log_tail()
        return f"vLLM {name} {what}; the tail of {self.log_path}:\n{tail}"

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return log_tail(self.log_path, lines)

    def pids(self) -> list[int]:
        """The live PIDs of the server's process group (API server, EngineCore, workers)."""
        return group_pids(self.process.pid) if self.process is not None else []

    def rss_bytes(self) -> int:
        """The resident memory of the whole process group, summed."""
        total = 0
        for pid in self.pids():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        return total

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL what is left of it after a grace period."""
        process, self.process = self.process, None
        if process is None:
            _running.discard(self)
            return
        stop_group(self, process)

    def restart(self, deadline_s: float = START_DEADLINE_S) -> float:
        """Stop and start again on the same port or socket; the seconds to healthy."""
        self.stop()
        self.start()
        return self.wait_healthy(deadline_s)


def spawn_logged(
    command: list[str], log_path: Path, env: dict[str, str], cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """`command` in a session (process group) of its own, its output appended to `log_path`
    after a `$ command` line."""
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(command)}\n".encode())
        log.flush()
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a server's log."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def stop_group(server: Stoppable, process: subprocess.Popen[bytes]) -> None:
    """SIGTERM `process`'s group (it leads one), SIGKILL what is left of it after a grace
    period; `server` is no longer tracked."""
    _running.discard(server)
    group = process.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
    wait_group_gone(group, STOP_GRACE_S)  # the leader's zombie does not count
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)  # whatever of the group is left
    process.wait()
    wait_group_gone(group)


def group_pids(group: int) -> list[int]:
    """The processes of process group `group` that are not zombies."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            # /proc/PID/stat: "pid (comm) state ppid pgrp ..."; comm may hold spaces
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == group and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def wait_group_gone(group: int, timeout_s: float = 10.0) -> None:
    """Wait until no live process of `group` is left."""
    end = time.monotonic() + timeout_s
    while group_pids(group) and time.monotonic() < end:
        time.sleep(0.1)


@atexit.register
def stop_all() -> None:
    """Stop every server still running: the test run ended, or crashed, without stopping it."""
    for server in list(_running):
        server.stop()


def stop_all_on_sigterm() -> None:
    """A SIGTERM to this process (a CI job cancelled, `timeout`) skips `atexit`: stop every
    server first, then die of it as before. Only where SIGTERM still has its default action."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def on_sigterm(signum: int, frame: object) -> None:
        stop_all()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)


def build_models(venv: Path, out: Path) -> dict[str, Path]:
    """Build the tiny model directories under `out` with the engine venv's Python, once:
    a directory named after the builders' hash (engine/models.py and engine/tiny/) is reused."""
    source = REPO / "engine" / "models.py"
    digest = hashlib.sha256()
    for builder in (source, *sorted((REPO / "engine" / "tiny").glob("*.py"))):
        digest.update(builder.read_bytes())
    target = out / digest.hexdigest()[:16]
    done = target / ".built"
    if not done.exists():
        target.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [str(venv / "bin" / "python"), str(source), str(target)],
            capture_output=True,
            text=True,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
            check=False,
        )
        if result.returncode != 0:
            raise EngineStartError(f"engine/models.py failed:\n{result.stderr[-4000:]}")
        done.touch()
    names = ("qwen2-audio", "whisper", "voxtral", "audio-flamingo3", "glm-asr")
    return {name: target / f"tiny-{name}" for name in names}
