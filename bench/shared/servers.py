"""The servers a benchmark starts, all on 127.0.0.1 and free ports: any server process, the
stub, and a gateway's config and command line (bench/proxies/modes.py adds nginx, the seed
reference and the modes of `python -m bench`).

Every server is a subprocess in its own session (process group), so `stop()` ends it and
anything it spawned (nginx's worker) with one signal; callers stop servers in `finally`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from bench.shared import procstat
from bench.shared.stub_timing import PLAIN, StubTiming

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_SECONDS = 30.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# The stub applies vLLM's decode limits from these variables, as vLLM does; workload (c)'s
# 256 MiB clip is past the defaults, so every server of a run gets raised ones.
DECODE_LIMITS_ENV = {
    "VLLM_MAX_AUDIO_DECODE_DURATION_S": "100000",
    "VLLM_MAX_AUDIO_DECODE_BYTES": str(4 * 1024**3),
}


class ServerProcess:
    """One started server; `url` is its origin, `pids()` its process tree for /proc."""

    def __init__(
        self, name: str, argv: list[str], port: int, workdir: Path, cwd: Path = REPO_ROOT
    ) -> None:
        """`cwd`: where `python -m ...` finds its package (another checkout of the gateway)."""
        self.name = name
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = workdir / f"{name}.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, **DECODE_LIMITS_ENV},  # os.environ as it is at start
            start_new_session=True,
        )
        self._tree: list[int] = [self.popen.pid]

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited early:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    self._tree = procstat.process_tree(self.popen.pid)
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not listen on {self.port}:\n{self.log_tail()}")

    def pids(self) -> list[int]:
        return self._tree

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        try:
            if self.popen.poll() is None:
                os.killpg(self.popen.pid, signal.SIGTERM)
                try:
                    self.popen.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    os.killpg(self.popen.pid, signal.SIGKILL)
                    self.popen.wait()
        except ProcessLookupError:
            self.popen.wait()
        finally:
            self._log.close()


def start(server: ServerProcess) -> ServerProcess:
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


def start_stub(workdir: Path, audio_root: Path, timing: StubTiming = PLAIN) -> ServerProcess:
    port = free_port()
    argv = [sys.executable, "-m", "gateway.stub_upstream", "--port", str(port)]
    argv += ["--allowed-local-media-path", str(audio_root), *timing.argv()]
    return start(ServerProcess("stub", argv, port, workdir))


def gateway_config(workdir: Path, name: str, cache_bytes: int) -> Path:
    """`<name>.toml`: limits raised past the largest clip a benchmark sends; callers append."""
    path = workdir / f"{name}.toml"
    path.write_text(
        "[server]\n"
        'event_loop = "auto"\n'
        'max_body_bytes = "64MiB"\n'
        "[audio]\n"
        'max_file_bytes = "512MiB"  # the 256 MiB clip of workload (c): 8389 s of 16 kHz audio,\n'
        "max_duration_seconds = 100000.0  # past vLLM's default decode limits, raised here\n"
        'max_decode_bytes = "4GiB"  # and in the stub (DECODE_LIMITS_ENV) for the memory workload\n'
        "[cache]\n"
        f"max_bytes = {cache_bytes}\n"
        'max_item_bytes = "64MiB"\n'
    )
    return path


def gateway_argv(config: Path, port: int, upstream: str, audio_root: Path) -> list[str]:
    argv = [sys.executable, "-m", "gateway", "serve", "--config", str(config)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--upstream", upstream]
    return [*argv, "--audio-root", str(audio_root), "--log-level", "WARNING"]
