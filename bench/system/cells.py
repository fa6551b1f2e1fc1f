"""The system bench's workloads, and what its requests count: a `Cell` per (workload, mode)
summing requests, errors, CPU, bytes and latencies; one request; one conversation."""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.shared.real_engine import INLINE_MODES, chat_body
from bench.shared.speech_clips import FORMS, Form

TURNS = 4


@dataclass
class Cell:
    """One (workload, mode) cell, summed over its waves."""

    requests: int = 0
    errors: int = 0
    api_s: float = 0.0
    vllm_s: float = 0.0
    gateway_s: float = 0.0
    upstream_bytes: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    error_samples: list[str] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        n = max(self.requests, 1)
        ordered = sorted(self.latencies_s) or [0.0]
        return {
            "requests": self.requests,
            "errors": self.errors,
            "api_server_cpu_ms": 1000 * self.api_s / n,
            "vllm_cpu_ms": 1000 * self.vllm_s / n,
            "gateway_cpu_ms": 1000 * self.gateway_s / n,
            "upstream_kb": self.upstream_bytes / n / 1000,
            "p50_ms": 1000 * statistics.median(ordered),
            "p95_ms": 1000 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
            "error_samples": self.error_samples,
        }


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str  # "wave", "turns", "first", "text"
    form: Form | None = None
    seconds: float = 0.0


def workloads(seconds: list[float], forms: list[str]) -> list[Workload]:
    waves = [Workload(f"{s:g}s {f}", "wave", FORMS[f], s) for s in seconds for f in forms]
    extra = [
        Workload(f"turns {seconds[0]:g}s wav16", "turns", FORMS["wav16"], seconds[0]),
        Workload("turns text only", "turns"),
        *(Workload(f"first {seconds[-1]:g}s {f}", "first", FORMS[f], seconds[-1]) for f in forms),
        Workload("text only", "text"),
    ]
    return waves + extra


async def post(session: aiohttp.ClientSession, url: str, body: dict[str, Any], cell: Cell) -> str:
    started = time.perf_counter()
    async with session.post(f"{url}/v1/chat/completions", json=body) as response:
        answer = await response.read()
    cell.latencies_s.append(time.perf_counter() - started)
    cell.requests += 1
    if response.status != 200:
        cell.errors += 1
        if len(cell.error_samples) < 3:
            cell.error_samples.append(f"{response.status} {answer[:200]!r}")
        return ""
    message: str = json.loads(answer)["choices"][0]["message"]["content"] or ""
    return message


async def conversation(
    session: aiohttp.ClientSession, url: str, clip: Path | None, mode: str, cell: Cell
) -> None:
    """`TURNS` turns about one clip. Direct: the first user turn holds the clip's data URI and
    every later request re-sends it in the history. Through the gateway every turn names the
    clip in `metadata` and the history holds text only: either way each request carries the
    clip once."""
    history: list[dict[str, Any]] = []
    for turn in range(TURNS):
        inline = mode in INLINE_MODES
        body = chat_body(clip if turn == 0 or not inline else None, mode, history)
        if turn and inline:
            body["messages"][-1]["content"] = "And then?"
        said = await post(session, url, body, cell)
        last = body["messages"][-1]
        if not inline:
            last = {"role": "user", "content": "What is said in this clip?"}
        history = [*body["messages"][:-1], last, {"role": "assistant", "content": said or "."}]
