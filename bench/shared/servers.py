"""The modes under test and the processes behind them, all on 127.0.0.1 and free ports.

Every server is a subprocess in its own session (process group), so `stop()` ends it and
anything it spawned (nginx's worker) with one signal; callers stop servers in `finally`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.shared import procstat
from bench.shared.stub_timing import PLAIN, StubTiming

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_SECONDS = 30.0
NGINX_CANDIDATES = ("/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx")


@dataclass(frozen=True)
class Mode:
    name: str
    form: str  # the body the client sends: "inline" data URIs, "path" or "audio_data"
    description: str
    gateway: bool = False


MODES = {
    mode.name: mode
    for mode in (
        Mode("direct", "inline", "no proxy: client-side data URIs straight to the upstream"),
        Mode("nginx", "inline", "nginx as a plain reverse proxy of the inline bodies"),
        Mode("seed-reference", "path", "BASELINE: per-request read + stdlib base64 + json"),
        Mode("gateway-nocache", "path", "audio-gateway, cache.max_bytes = 0", gateway=True),
        Mode("gateway", "path", "audio-gateway, path form, warm cache", gateway=True),
        Mode("gateway-passthrough", "audio_data", "audio-gateway relaying audio_data", True),
        Mode("gateway-keyed", "path", "gateway, with the clip key ([routing])", gateway=True),
        # workload (s3) only, see bench/objects/
        Mode("seed-reference-s3", "path", "BASELINE: per-request S3 GET + stdlib base64 + json"),
        Mode("gateway-s3", "path", "audio-gateway, clips on S3, revalidate = true", True),
        Mode("gateway-s3-immutable", "path", "the same, revalidate = false", True),
    )
}


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
    path = workdir / f"{name}.toml"
    routing = '[routing]\naffinity_headers = ["X-Session-ID"]\n' if name == "gateway-keyed" else ""
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
        'max_item_bytes = "64MiB"\n' + routing
    )
    return path


def start_gateway(name: str, workdir: Path, upstream: str, audio_root: Path) -> ServerProcess:
    port = free_port()
    cache_bytes = 0 if name == "gateway-nocache" else 1024**3
    config = gateway_config(workdir, name, cache_bytes)
    argv = gateway_argv(config, port, upstream, audio_root)
    return start(ServerProcess(name, argv, port, workdir))


def gateway_argv(config: Path, port: int, upstream: str, audio_root: Path) -> list[str]:
    argv = [sys.executable, "-m", "gateway", "serve", "--config", str(config)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--upstream", upstream]
    return [*argv, "--audio-root", str(audio_root), "--log-level", "WARNING"]


def start_seed_reference(workdir: Path, upstream: str, audio_root: Path) -> ServerProcess:
    port = free_port()
    argv = [sys.executable, "-m", "bench.shared.seed_reference", "--port", str(port)]
    argv += ["--upstream", upstream, "--audio-root", str(audio_root)]
    return start(ServerProcess("seed-reference", argv, port, workdir))


def find_nginx() -> str | None:
    found = shutil.which("nginx")
    if found:
        return found
    return next((path for path in NGINX_CANDIDATES if os.access(path, os.X_OK)), None)


def nginx_version(binary: str) -> str:
    done = subprocess.run([binary, "-v"], capture_output=True, text=True, check=False)
    return (done.stderr or done.stdout).strip().removeprefix("nginx version: ")


NGINX_CONF = """\
# Generated by bench/: a plain reverse proxy. One worker process, to be comparable with the
# single-process gateway on this 2-core machine. Request and response buffering are nginx's
# defaults (on); bodies up to client_body_buffer_size stay in memory, larger ones (workload b)
# spill to client_body_temp_path as nginx does by default. Keep-alive both sides.
daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    keepalive_requests 1000000;
    upstream stub {{
        server 127.0.0.1:{upstream_port};
        keepalive 64;
        keepalive_requests 1000000;
    }}
    server {{
        listen 127.0.0.1:{port};
        client_max_body_size 0;
        client_body_buffer_size 1m;
        location / {{
            proxy_pass http://stub;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_request_buffering on;
            proxy_buffering on;
            proxy_read_timeout 600s;
        }}
    }}
}}
"""


def start_nginx(binary: str, workdir: Path, upstream_port: int) -> ServerProcess:
    port = free_port()
    directory = workdir / "nginx"
    directory.mkdir(exist_ok=True)
    # Started as root, nginx's worker runs as an unprivileged user that must reach its temp paths.
    for path in (workdir, directory):
        path.chmod(0o755)
    conf = directory / "nginx.conf"
    conf.write_text(NGINX_CONF.format(dir=directory, port=port, upstream_port=upstream_port))
    argv = [binary, "-p", str(directory), "-e", str(directory / "error.log"), "-c", str(conf)]
    return start(ServerProcess("nginx", argv, port, workdir))


def start_mode(
    mode: str, workdir: Path, stub: ServerProcess, audio_root: Path, nginx: str | None
) -> ServerProcess | None:
    """The proxy process of `mode`; None for `direct`, which talks to the stub itself."""
    if mode == "direct":
        return None
    if mode == "nginx":
        if nginx is None:
            raise RuntimeError("nginx is not installed")
        return start_nginx(nginx, workdir, stub.port)
    if mode == "seed-reference":
        return start_seed_reference(workdir, stub.url, audio_root)
    return start_gateway(mode, workdir, stub.url, audio_root)
