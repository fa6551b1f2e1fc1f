"""The repeats workload's client: waves of one clip's seeds sent together, and multi-turn
conversations re-sending their clip, paced open-loop; every answer's clip is checked against
the file's sha256 (the stub reports what it used)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bench.shared.workloads import Clip, ClipSet

WAVES_IN_FLIGHT = 4
CONVERSATIONS_IN_FLIGHT = 16
TURNS = 4
REQUEST_TIMEOUT_SECONDS = 120


@dataclass
class Tally:
    """What the driver saw: answers, failures, latencies and clip checks."""

    requests: int = 0
    errors: int = 0
    mismatched: int = 0
    latencies_us: list[int] = field(default_factory=list)
    error_samples: list[str] = field(default_factory=list)

    def fail(self, sample: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 3:
            self.error_samples.append(sample[:300])


# --- the driver --------------------------------------------------------------------------------


async def drive(phase: str, url: str, clipset: ClipSet, rate: float = 0.0) -> Tally:
    """`rate`: requests per second the driver paces itself to (0: as fast as it goes)."""
    tally = Tally()
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        if phase == "turns":
            await bounded(
                CONVERSATIONS_IN_FLIGHT,
                [conversation(session, url, clip, tally) for clip in clipset.clips],
                TURNS / rate if rate else 0.0,
            )
        else:
            stream = phase == "waves-streamed"
            seeds = clipset.workload.seeds
            await bounded(
                WAVES_IN_FLIGHT,
                [wave(session, url, clip, seeds, stream, tally) for clip in clipset.clips],
                seeds / rate if rate else 0.0,
            )
    return tally


async def bounded(limit: int, jobs: list[Awaitable[None]], interval: float = 0.0) -> None:
    """Run `jobs`, at most `limit` at once, the n-th starting no earlier than n x `interval`
    seconds in: an open-loop pace, so both modes put the same load on the machine (a faster
    mode would otherwise run the shared cores hotter and pay more CPU per request)."""
    slots = asyncio.Semaphore(limit)
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def run(index: int, job: Awaitable[None]) -> None:
        await asyncio.sleep(max(0.0, start + index * interval - loop.time()))
        async with slots:
            await job

    await asyncio.gather(*(run(index, job) for index, job in enumerate(jobs)))


async def wave(
    session: aiohttp.ClientSession, url: str, clip: Clip, seeds: int, stream: bool, tally: Tally
) -> None:
    body = {
        "model": "bench",
        "messages": [{"role": "user", "content": "Transcribe the audio."}],
        "max_tokens": 16,
        "metadata": {"audio_path": clip.rel},
    }
    if stream:
        body["stream"] = True
    await asyncio.gather(*(ask(session, url, body, clip, tally) for _ in range(seeds)))


async def conversation(session: aiohttp.ClientSession, url: str, clip: Clip, tally: Tally) -> None:
    messages: list[dict[str, Any]] = []
    for turn in range(TURNS):
        messages.append({"role": "user", "content": f"Turn {turn + 1}: what else is said?"})
        body = {"model": "bench", "messages": list(messages), "max_tokens": 16}
        body["metadata"] = {"audio_path": clip.rel}
        answer = await ask(session, url, body, clip, tally)
        if answer is None:
            return
        messages.append({"role": "assistant", "content": answer})


async def ask(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], clip: Clip, tally: Tally
) -> str | None:
    """One request; its answer's text, None when it failed (counted). The stub's report of
    the clip it used is checked against the file's sha256."""
    started = time.perf_counter_ns()
    try:
        async with session.post(url, json=body) as reply:
            raw = await reply.read()
            status = reply.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        tally.fail(repr(exc))
        return None
    tally.requests += 1
    tally.latencies_us.append((time.perf_counter_ns() - started) // 1000)
    if status != 200:
        tally.fail(f"{status}: {raw[:200]!r}")
        return None
    report, text = _streamed_answer(raw) if body.get("stream") else _answer(raw)
    if report is None:
        tally.fail(f"no answer: {raw[:200]!r}")
        return None
    if [c["sha256"] for c in report["clips"]] != [clip.sha256]:
        tally.mismatched += 1
    return text


def _answer(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    answer = json.loads(raw)
    return answer.get("stub"), answer["choices"][0]["message"]["content"]


def _streamed_answer(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    report, text, done = None, [], False
    for line in raw.decode().splitlines():
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            done = True
            continue
        event = json.loads(line[6:])
        if "error" in event:
            return None, ""
        report = report or event.get("stub")
        for choice in event.get("choices") or []:
            text.append(choice.get("delta", {}).get("content") or "")
    return (report if done else None), "".join(text)
