"""The load generator: a closed-loop aiohttp client in its own process, driven over stdin.

It runs in a separate process so its CPU is never charged to the proxy under test. Request
bodies are built once per (workload, body form) before any timing, as bytes; a measured point
is N workers sharing one connection pool, each sending its next request as soon as its last
answer is read; the pool keeps its connections alive unless the run says `"connections":
"per-request"` (bench/shared/clients.py), and the answer counts the connections it opened. Every
answer must be 200; on a sample (every Nth request, and every request of a big clip) the
stub's decoded sha256 is compared with the clip's. Latencies go back raw (in
microseconds) so several loadgen processes can be merged.

Protocol: one JSON object per line on stdin, one JSON answer per line on stdout.
  {"op": "load", "key": "a", "clips": [...], "order": [...]}
  {"op": "prepare", "key": "a", "form": "inline"}        # build the bodies now (untimed)
  {"op": "run", "key": "a", "form": "inline", "url": ..., "concurrency": 32, "requests": 1600,
   "offset": 0, "check_every": 8, "timeout": 300, "connections": "keep-alive"}
  {"op": "drop", "key": "a"} / {"op": "quit"}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

MODEL = "stub-audio-model"
PROMPT = "Transcribe the audio."
HEADERS = {"Content-Type": "application/json"}
FORMS = ("inline", "path", "audio_data")


def build_body(form: str, clip: dict[str, Any]) -> bytes:
    """One chat-completions body: the clip inlined client-side, as a path, or as audio_data."""
    if form == "path":
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 16,
            "metadata": {"audio_path": clip["rel"]},
        }
        return json.dumps(body, separators=(",", ":")).encode()
    import pybase64

    uri = b"data:audio/wav;base64," + pybase64.b64encode(Path(clip["path"]).read_bytes())
    marker = "@@AUDIO@@"
    if form == "inline":
        content: Any = [
            {"type": "audio_url", "audio_url": {"url": marker}},
            {"type": "text", "text": PROMPT},
        ]
        body = {"model": MODEL, "messages": [{"role": "user", "content": content}]}
    elif form == "audio_data":
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": PROMPT}],
            "metadata": {"audio_data": marker},
        }
    else:
        raise ValueError(f"unknown body form {form!r}")
    body["max_tokens"] = 16
    head, tail = json.dumps(body, separators=(",", ":")).encode().split(marker.encode())
    return head + uri + tail


@dataclass
class PointResult:
    requests: int = 0
    errors: int = 0
    checked: int = 0
    mismatched: int = 0
    wall_seconds: float = 0.0
    latencies_us: list[int] = field(default_factory=list)
    error_samples: list[str] = field(default_factory=list)
    connections_opened: int = 0

    def error(self, message: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 3:
            self.error_samples.append(message[:300])


class LoadGenerator:
    def __init__(self, runner: asyncio.Runner) -> None:
        self.runner = runner
        self.workloads: dict[str, dict[str, Any]] = {}
        self.bodies: dict[tuple[str, str], list[bytes]] = {}

    def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command["op"]
        if op == "load":
            self.workloads[command["key"]] = {"clips": command["clips"], "order": command["order"]}
        elif op == "prepare":
            self.prepare(command["key"], command["form"])
        elif op == "drop":
            self.workloads.pop(command["key"], None)
            for key in [k for k in self.bodies if k[0] == command["key"]]:
                del self.bodies[key]
        elif op == "run":
            return self.runner.run(self.run(command))
        else:
            raise ValueError(f"unknown op {op!r}")
        return {"ok": True}

    def prepare(self, key: str, form: str) -> list[bytes]:
        if (key, form) not in self.bodies:
            clips = self.workloads[key]["clips"]
            self.bodies[key, form] = [build_body(form, clip) for clip in clips]
        return self.bodies[key, form]

    async def run(self, command: dict[str, Any]) -> dict[str, Any]:
        import aiohttp

        from bench.shared.clients import KEEP_ALIVE, client_session

        key, form = command["key"], command["form"]
        bodies = self.prepare(key, form)
        clips, order = self.workloads[key]["clips"], self.workloads[key]["order"]
        total, offset = command["requests"], command.get("offset", 0)
        check_every = max(1, command.get("check_every", 8))
        result = PointResult()
        next_index = 0
        url = command["url"]
        session, connections = client_session(
            command.get("connections", KEEP_ALIVE),
            limit=command["concurrency"],
            timeout_s=command.get("timeout", 300),
            skip_auto_headers=("User-Agent",),
        )
        async with session:

            async def worker() -> None:
                nonlocal next_index
                while next_index < total:
                    index = offset + next_index
                    next_index += 1
                    clip = order[index % len(order)]
                    started = time.perf_counter()
                    try:
                        async with session.post(url, data=bodies[clip], headers=HEADERS) as reply:
                            answer = await reply.read()
                            status = reply.status
                    except (aiohttp.ClientError, TimeoutError) as exc:
                        result.error(f"{type(exc).__name__}: {exc}")
                        continue
                    result.latencies_us.append(int((time.perf_counter() - started) * 1e6))
                    result.requests += 1
                    if status != 200:
                        result.error(f"HTTP {status}: {answer[:200]!r}")
                    elif index % check_every == 0:
                        result.checked += 1
                        if _decoded_sha(answer) != clips[clip]["sha256"]:
                            result.mismatched += 1
                            result.error(f"sha mismatch for {clips[clip]['rel']}")

            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(command["concurrency"])))
            result.wall_seconds = time.perf_counter() - started
        result.connections_opened = connections.opened
        return result.__dict__


def _decoded_sha(answer: bytes) -> str | None:
    try:
        clips = json.loads(answer)["stub"]["clips"]
        return str(clips[0]["sha256"]) if len(clips) == 1 else None
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def _loop_factory() -> Any:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a gateway dependency
        return None
    return uvloop.new_event_loop


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(
        prog="python -m bench.shared.loadgen",
        description="The benchmark's load generator worker: JSON commands on stdin, one answer "
        "a line on stdout (started by `python -m bench`; see this module's docstring).",
    ).parse_args(argv)
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        generator = LoadGenerator(runner)
        for line in sys.stdin:
            command = json.loads(line)
            if command["op"] == "quit":
                break
            try:
                answer = generator.handle(command)
            except Exception as exc:
                answer = {"fatal": f"{type(exc).__name__}: {exc}"}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()


class LoadGeneratorProcess:
    """The orchestrator's handle on one loadgen subprocess."""

    def __init__(self, log_path: Path) -> None:
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in close()
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "bench.shared.loadgen"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=Path(__file__).resolve().parents[2],
            text=True,
            start_new_session=True,
        )
        self.pid = self.popen.pid

    def send(self, command: dict[str, Any]) -> None:
        stdin: IO[str] = self.popen.stdin  # type: ignore[assignment]
        stdin.write(json.dumps(command) + "\n")
        stdin.flush()

    def receive(self) -> dict[str, Any]:
        stdout: IO[str] = self.popen.stdout  # type: ignore[assignment]
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"the load generator exited (code {self.popen.poll()})")
        answer: dict[str, Any] = json.loads(line)
        if "fatal" in answer:
            raise RuntimeError(f"the load generator failed: {answer['fatal']}")
        return answer

    def call(self, command: dict[str, Any]) -> dict[str, Any]:
        self.send(command)
        return self.receive()

    def close(self) -> None:
        try:
            if self.popen.poll() is None:
                self.send({"op": "quit"})
                self.popen.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.popen.kill()
            self.popen.wait()
        finally:
            for stream in (self.popen.stdin, self.popen.stdout):
                if stream is not None:
                    stream.close()
            self._log.close()


if __name__ == "__main__":
    main()
