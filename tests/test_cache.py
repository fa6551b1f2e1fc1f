"""The encoded-audio cache, single-flight and the gateway's own endpoints, over real HTTP.

Audio is checked by the sha256 of the bytes the stub decoded; the cache is checked by what
GET /gateway/metrics says, as an operator would see it.

Races are staged, not hoped for: `serial_executor` gives the event loop a one-thread default
executor that a test can park. The gateway reads files through aiofiles, which runs every file
operation there, so a parked executor holds a load in flight for as long as a test needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from blockbuster import BlockingError, blockbuster_ctx

from gateway.audio.encoder import READ_CHUNK_BYTES
from gateway.audio.samples import write_tone, write_wav
from gateway.stub_upstream import StubState
from tests.conftest import (
    GatewayFactory,
    audio_part,
    cache_stats,
    chat_body,
    forwarded_json,
    gateway_metrics,
    no_blocking_calls,
    parse_metrics,
    sha256_of,
)

Client = TestClient[web.Request, web.Application]

CLIP_BASE64_BYTES = 10_728  # every 0.25 s clip here (a.wav too) is 8044 bytes, 10728 in base64
ENTRY_OVERHEAD_MAX_BYTES = 1024  # what the cache may count on top of an encoding, per entry
TWO_CLIP_BUDGET = 26_820  # two 0.25 s clips fit (with their overhead); three never do
STREAM_ABOVE_BYTES = 100_000  # cache.max_item_bytes for the streamed-clip tests


async def transcribe(client: Client, metadata: dict[str, Any]) -> list[str]:
    """POST a chat request with `metadata`; the sha256 of each clip the stub decoded."""
    response = await client.post("/v1/chat/completions", json=chat_body(metadata))
    assert response.status == 200, await response.text()
    answer = await response.json()
    return [clip["sha256"] for clip in answer["stub"]["clips"]]


def write_big_clip(directory: Path) -> Path:
    """A WAV of three encoder read chunks, a size that is no multiple of 3."""
    seconds = (2.5 * READ_CHUNK_BYTES) / (2 * 16_000)
    path = write_tone(directory / "big.wav", seconds, 330.0)
    if path.stat().st_size % 3 == 0:
        path = write_tone(directory / "big.wav", seconds + 1 / 16_000, 330.0)
    size = path.stat().st_size
    assert size > 2 * READ_CHUNK_BYTES and size % 3 != 0
    return path


async def eventually(condition: Callable[[], Awaitable[bool]], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not await condition():
            await asyncio.sleep(0.002)


async def hits_reach(client: Client, hits: int) -> bool:
    return (await cache_stats(client))["hits"] >= hits


async def chat_requests_answered(client: Client, count: int) -> bool:
    """Whether `count` chat requests were counted, whatever their status (a cancelled one too)."""
    samples = await gateway_metrics(client)
    route = 'audio_gateway_requests_total{route="chat_completions"'
    return sum(value for name, value in samples.items() if name.startswith(route)) >= count


class SerialExecutor(ThreadPoolExecutor):
    """One worker, jobs in submission order; `park()` holds the worker until the gate opens.

    `jobs` counts what the gateway submitted (its aiofiles reads, its hashing)."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="serial-executor")
        self.jobs = 0
        self.gates: list[threading.Event] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.jobs += 1
        return super().submit(fn, *args, **kwargs)

    def park(self) -> threading.Event:
        gate = threading.Event()
        self.gates.append(gate)
        super().submit(gate.wait)  # not counted: `jobs` counts the gateway's work only
        return gate

    async def until_jobs(self, count: int) -> None:
        async def submitted() -> bool:
            return self.jobs >= count

        await eventually(submitted)


@pytest.fixture
async def serial_executor() -> AsyncIterator[SerialExecutor]:
    """The loop's default executor, made serial and parkable (the test's environment, not the
    gateway's code: the gateway runs unchanged, its file operations merely wait their turn)."""
    loop = asyncio.get_running_loop()
    previous = getattr(loop, "_default_executor", None)
    executor = SerialExecutor()
    loop.set_default_executor(executor)
    yield executor
    for gate in executor.gates:
        gate.set()
    if previous is not None:
        loop.set_default_executor(previous)
        executor.shutdown(wait=False)


# --- hits ------------------------------------------------------------------------------------


async def test_a_cache_hit_sends_byte_identical_audio(
    gateway: Client, stub: StubState, audio_dir: Path
) -> None:
    clip = audio_dir / "a.wav"
    shas = [await transcribe(gateway, {"audio_path": "a.wav"}) for _ in range(3)]
    assert shas == [[sha256_of(clip)]] * 3
    assert stub.requests[0].body == stub.requests[1].body == stub.requests[2].body
    assert forwarded_json(stub)["messages"][0]["content"][0] == audio_part(clip)
    stats = await cache_stats(gateway)
    assert (stats["misses"], stats["hits"], stats["entries"]) == (1, 2, 1)
    assert CLIP_BASE64_BYTES <= stats["bytes"] <= CLIP_BASE64_BYTES + ENTRY_OVERHEAD_MAX_BYTES
    assert stats["encoded"] == clip.stat().st_size  # read and encoded once


async def test_each_clip_of_a_request_is_one_lookup(gateway: Client, audio_dir: Path) -> None:
    names = ["a.wav", "b.wav", "a.wav", "c.wav"]
    expected = [sha256_of(audio_dir / name) for name in names]
    assert await transcribe(gateway, {"audio_paths": names}) == expected
    assert await transcribe(gateway, {"audio_paths": names}) == expected
    stats = await cache_stats(gateway)
    assert stats["misses"] + stats["hits"] == 8
    assert stats["entries"] == 3
    assert stats["misses"] == 3  # the repeated a.wav of the first request shares its load


# --- changed files ---------------------------------------------------------------------------


async def test_touching_a_file_is_a_new_miss(gateway: Client, audio_dir: Path) -> None:
    clip = audio_dir / "a.wav"
    await transcribe(gateway, {"audio_path": "a.wav"})
    info = clip.stat()
    os.utime(clip, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000_000))
    assert await transcribe(gateway, {"audio_path": "a.wav"}) == [sha256_of(clip)]
    stats = await cache_stats(gateway)
    assert (stats["misses"], stats["hits"], stats["entries"]) == (2, 0, 1)
    await transcribe(gateway, {"audio_path": "a.wav"})
    assert (await cache_stats(gateway))["hits"] == 1


@pytest.mark.parametrize("seconds", [0.25, 0.6], ids=["same-size", "new-size"])
async def test_rewriting_a_file_sends_the_new_bytes(
    gateway: Client, audio_dir: Path, seconds: float
) -> None:
    clip = audio_dir / "a.wav"
    old_sha = sha256_of(clip)
    old_mtime_ns = clip.stat().st_mtime_ns
    assert await transcribe(gateway, {"audio_path": "a.wav"}) == [old_sha]

    write_tone(clip, seconds, 1234.0)
    info = clip.stat()
    if info.st_mtime_ns == old_mtime_ns:  # a coarse file system clock: make the rewrite visible
        os.utime(clip, ns=(info.st_atime_ns, old_mtime_ns + 1_000_000_000))
    new_sha = sha256_of(clip)
    assert new_sha != old_sha

    assert await transcribe(gateway, {"audio_path": "a.wav"}) == [new_sha]
    stats = await cache_stats(gateway)
    assert (stats["misses"], stats["hits"]) == (2, 0)
    assert stats["entries"] == 1  # the old encoding was dropped, not left to age out


# --- the byte budget -------------------------------------------------------------------------


async def test_eviction_keeps_the_byte_budget(
    make_gateway: GatewayFactory, audio_dir: Path
) -> None:
    budget = TWO_CLIP_BUDGET
    gateway = await make_gateway(cache={"max_bytes": budget})
    clips = [write_tone(audio_dir / f"clip{i}.wav", 0.25, 300.0 + 97 * i) for i in range(6)]
    for _ in range(2):
        for clip in clips:
            assert await transcribe(gateway, {"audio_path": clip.name}) == [sha256_of(clip)]
            stats = await cache_stats(gateway)
            assert 0 < stats["bytes"] <= budget
            assert stats["entries"] <= 2
    everything = await transcribe(gateway, {"audio_paths": [clip.name for clip in clips]})
    assert everything == [sha256_of(clip) for clip in clips]
    stats = await cache_stats(gateway)
    assert stats["bytes"] <= budget
    assert stats["entries"] == 2


async def test_eviction_drops_the_least_recently_used(
    make_gateway: GatewayFactory, audio_dir: Path
) -> None:
    gateway = await make_gateway(cache={"max_bytes": TWO_CLIP_BUDGET})
    for name in ("x", "y", "z"):
        write_tone(audio_dir / f"{name}.wav", 0.25, 500.0 + len(name))

    outcomes = []
    for name in ("x", "y", "x", "z", "x", "y"):
        before = await cache_stats(gateway)
        await transcribe(gateway, {"audio_path": f"{name}.wav"})
        after = await cache_stats(gateway)
        outcomes.append("hit" if after["hits"] > before["hits"] else "miss")
    # z evicts y (least recently used), not x (used just before)
    assert outcomes == ["miss", "miss", "hit", "miss", "hit", "miss"]


async def test_a_clip_bigger_than_the_whole_budget_is_served_uncached(
    make_gateway: GatewayFactory, audio_dir: Path
) -> None:
    gateway = await make_gateway(cache={"max_bytes": CLIP_BASE64_BYTES // 2})
    clip = audio_dir / "a.wav"
    for _ in range(2):
        assert await transcribe(gateway, {"audio_path": "a.wav"}) == [sha256_of(clip)]
    stats = await cache_stats(gateway)
    assert (stats["misses"], stats["hits"], stats["entries"], stats["bytes"]) == (2, 0, 0, 0)


async def test_a_zero_byte_cache_encodes_on_every_request(
    make_gateway: GatewayFactory, audio_dir: Path
) -> None:
    gateway = await make_gateway(cache={"max_bytes": 0})
    clip = audio_dir / "b.wav"
    for _ in range(3):
        assert await transcribe(gateway, {"audio_path": "b.wav"}) == [sha256_of(clip)]
    results = await asyncio.gather(
        *(transcribe(gateway, {"audio_path": "b.wav"}) for _ in range(5))
    )
    assert results == [[sha256_of(clip)]] * 5
    stats = await cache_stats(gateway)
    assert (stats["misses"], stats["hits"], stats["entries"], stats["bytes"]) == (8, 0, 0, 0)
    assert stats["encoded"] == 8 * clip.stat().st_size


# --- clips over cache.max_item_bytes ---------------------------------------------------------


async def test_a_clip_over_max_item_bytes_is_streamed_and_not_cached(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(cache={"max_item_bytes": STREAM_ABOVE_BYTES})
    big = write_big_clip(audio_dir)
    for _ in range(2):
        assert await transcribe(gateway, {"audio_path": "big.wav"}) == [sha256_of(big)]
    assert forwarded_json(stub)["messages"][0]["content"][0] == audio_part(big)
    stats = await cache_stats(gateway)
    assert (stats["misses"], stats["hits"], stats["entries"], stats["bytes"]) == (2, 0, 0, 0)
    assert stats["encoded"] == 2 * big.stat().st_size


async def test_streamed_and_cached_clips_mix_in_one_request(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(cache={"max_item_bytes": STREAM_ABOVE_BYTES})
    big = write_big_clip(audio_dir)
    names = ["a.wav", "big.wav", "b.wav", "big.wav"]
    expected = [sha256_of(audio_dir / name) for name in names]
    assert await transcribe(gateway, {"audio_paths": names}) == expected
    content = forwarded_json(stub)["messages"][0]["content"]
    assert content[:4] == [audio_part(audio_dir / name) for name in names]
    assert content[1] == audio_part(big)
    stats = await cache_stats(gateway)
    assert stats["entries"] == 2  # a.wav and b.wav; big.wav never
    assert stats["bytes"] < STREAM_ABOVE_BYTES


async def test_a_streamed_clip_is_closed_when_its_request_fails(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    # input_audio mode: its splice fails after the clip is open (the bridge checks `input` first)
    gateway = await make_gateway(
        cache={"max_item_bytes": STREAM_ABOVE_BYTES}, responses={"audio": "input_audio"}
    )
    big = write_big_clip(audio_dir)
    (audio_dir / "fake.wav").write_text("plain text wearing a .wav name")

    next_to_a_bad_clip = await gateway.post(
        "/v1/chat/completions", json=chat_body({"audio_paths": ["big.wav", "fake.wav"]})
    )
    assert next_to_a_bad_clip.status == 400
    bad_splice = await gateway.post(
        "/v1/responses", json={"model": "m", "input": {}, "metadata": {"audio_path": "big.wav"}}
    )
    assert bad_splice.status == 400
    assert stub.request_count == 0
    assert open_descriptors_of(big) == []
    gc.collect()  # an unclosed file would now raise ResourceWarning, an error under pytest


def open_descriptors_of(path: Path) -> list[str]:
    """This process's file descriptors open on `path` (Linux /proc)."""
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        pytest.skip("needs /proc/self/fd")
    found = []
    for fd in os.listdir(fds):
        with contextlib.suppress(OSError):
            if os.readlink(fds / fd) == str(path):
                found.append(fd)
    return found


# --- single-flight ---------------------------------------------------------------------------


async def test_64_concurrent_requests_for_one_uncached_clip_cause_one_miss(
    gateway: Client, stub: StubState, audio_dir: Path
) -> None:
    clip = audio_dir / "c.wav"
    results = await asyncio.gather(
        *(transcribe(gateway, {"audio_path": "c.wav"}) for _ in range(64))
    )
    assert results == [[sha256_of(clip)]] * 64
    assert len({request.body for request in stub.requests}) == 1
    stats = await cache_stats(gateway)
    assert (stats["misses"], stats["hits"]) == (1, 63)
    assert stats["encoded"] == clip.stat().st_size


async def test_concurrent_requests_share_one_in_flight_load(
    serial_executor: SerialExecutor, make_gateway: GatewayFactory, audio_dir: Path
) -> None:
    # The clip cannot be cached, so every hit below is a request that joined the one load.
    gateway = await make_gateway(cache={"max_bytes": CLIP_BASE64_BYTES // 2})
    clip = audio_dir / "c.wav"
    jobs = serial_executor.jobs
    gate = serial_executor.park()  # the load's first file operation waits here
    requests = [
        asyncio.create_task(transcribe(gateway, {"audio_path": "c.wav"})) for _ in range(64)
    ]
    await eventually(lambda: hits_reach(gateway, 63))
    stats = await cache_stats(gateway)
    assert (stats["misses"], stats["entries"]) == (1, 0)
    assert serial_executor.jobs == jobs + 1  # one open() of the file, parked
    gate.set()
    assert await asyncio.gather(*requests) == [[sha256_of(clip)]] * 64
    stats = await cache_stats(gateway)
    assert (stats["misses"], stats["hits"], stats["entries"]) == (1, 63, 0)
    assert stats["encoded"] == clip.stat().st_size


async def test_cancelling_the_first_requester_does_not_break_the_others(
    serial_executor: SerialExecutor,
    make_gateway: GatewayFactory,
    stub: StubState,
    audio_dir: Path,
) -> None:
    gateway = await make_gateway()
    clip = audio_dir / "c.wav"
    jobs = serial_executor.jobs
    gate = serial_executor.park()  # the load's first file operation waits here

    first = asyncio.create_task(transcribe(gateway, {"audio_path": "c.wav"}))
    await serial_executor.until_jobs(jobs + 1)  # its load has started
    others = [asyncio.create_task(transcribe(gateway, {"audio_path": "c.wav"})) for _ in range(63)]
    await eventually(lambda: hits_reach(gateway, 63))  # all 63 wait on that load

    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await eventually(lambda: chat_requests_answered(gateway, 1))  # its handler was cancelled
    stats = await cache_stats(gateway)
    assert (stats["misses"], stats["entries"]) == (1, 0)  # the load is still in flight

    gate.set()
    assert await asyncio.gather(*others) == [[sha256_of(clip)]] * 63
    stats = await cache_stats(gateway)
    assert (stats["misses"], stats["hits"], stats["entries"]) == (1, 63, 1)
    assert stub.request_count == 63


async def test_a_failed_load_is_not_cached_and_does_not_hang(
    gateway: Client, audio_dir: Path
) -> None:
    bad = audio_dir / "bad.wav"
    bad.write_bytes(b"this is no RIFF/WAVE header, just text" * 10)
    metadata = {"audio_path": "bad.wav"}
    responses = await asyncio.gather(
        *(gateway.post("/v1/chat/completions", json=chat_body(metadata)) for _ in range(8))
    )
    for response in responses:
        assert response.status == 400
        assert (await response.json())["error"]["code"] == "not_audio"
    misses = (await cache_stats(gateway))["misses"]

    response = await gateway.post("/v1/chat/completions", json=chat_body(metadata))
    assert response.status == 400
    assert (await cache_stats(gateway))["misses"] == misses + 1  # retried, not a cached error

    write_tone(bad, 0.3, 770.0)
    assert await transcribe(gateway, metadata) == [sha256_of(bad)]


# --- never block the loop --------------------------------------------------------------------


async def test_the_request_path_never_blocks_the_event_loop(
    make_gateway: GatewayFactory, audio_dir: Path
) -> None:
    """Miss, hit, streamed, multi-clip, concurrent, file:// and uncached requests with every
    blocking call on the loop thread armed to raise. A blocking call inside the gateway's
    handler surfaces as its 500 answer (the BlockingError is in the captured log). The one
    exception allowed: the single `stat` with which a path checked moments ago is re-checked
    on a local file system (gateway/audio/recent.py)."""
    data_uri = await make_gateway(
        cache={"max_item_bytes": STREAM_ABOVE_BYTES}, splice={"part_uuid": True}
    )
    file_url = await make_gateway(splice={"mode": "file_url", "part_uuid": True})
    uncached = await make_gateway(cache={"max_bytes": 0})
    big = write_big_clip(audio_dir)
    write_wav(audio_dir / "d.wav", bytes(range(256)) * 40)
    names = ["a.wav", "big.wav", "b.wav", "d.wav"]
    expected = {name: sha256_of(audio_dir / name) for name in names}
    assert big.name in expected

    with no_blocking_calls():
        miss = await transcribe(data_uri, {"audio_path": "a.wav"})
        hit = await transcribe(data_uri, {"audio_path": "a.wav"})
        streamed = await transcribe(data_uri, {"audio_path": "big.wav"})
        multi = await transcribe(data_uri, {"audio_paths": names})
        concurrent = await asyncio.gather(
            *(transcribe(data_uri, {"audio_path": "d.wav"}) for _ in range(8))
        )
        responses = await data_uri.post(
            "/v1/responses",
            json={"model": "m", "input": "hi", "metadata": {"audio_paths": ["b.wav", "big.wav"]}},
        )
        responses_status = responses.status
        missing = await data_uri.post(
            "/v1/chat/completions", json=chat_body({"audio_path": "missing.wav"})
        )
        missing_status = missing.status
        by_file_url = await transcribe(file_url, {"audio_paths": ["a.wav", "b.wav"]})
        by_file_url_again = await transcribe(file_url, {"audio_paths": ["a.wav", "b.wav"]})
        without_cache = await transcribe(uncached, {"audio_path": "c.wav"})
        metrics = await data_uri.get("/gateway/metrics")
        health = await data_uri.get("/gateway/health")

    assert miss == hit == [expected["a.wav"]]
    assert streamed == [expected["big.wav"]]
    assert multi == [expected[name] for name in names]
    assert concurrent == [[expected["d.wav"]]] * 8
    assert responses_status == 200
    assert missing_status == 404
    assert by_file_url == by_file_url_again == [expected["a.wav"], expected["b.wav"]]
    assert without_cache == [sha256_of(audio_dir / "c.wav")]
    assert (metrics.status, health.status) == (200, 200)


async def test_the_blocking_detector_is_armed(audio_dir: Path) -> None:
    """The detector above would see a blocking read made on the loop: it is not a no-op."""
    with blockbuster_ctx(), pytest.raises(BlockingError):
        (audio_dir / "a.wav").read_bytes()


# --- the gateway's own endpoints, and vLLM's passed through -----------------------------------


async def test_gateway_health_answers_a_small_json_status(gateway: Client) -> None:
    await transcribe(gateway, {"audio_path": "a.wav"})
    response = await gateway.get("/gateway/health")
    assert response.status == 200
    assert response.content_type == "application/json"
    status = await response.json()
    assert status["status"] == "ok"
    assert status["cache"]["entries"] == 1
    assert (
        CLIP_BASE64_BYTES
        <= status["cache"]["bytes"]
        <= CLIP_BASE64_BYTES + ENTRY_OVERHEAD_MAX_BYTES
    )


async def test_gateway_metrics_name_every_required_series(gateway: Client) -> None:
    await transcribe(gateway, {"audio_path": "a.wav"})
    response = await gateway.post(
        "/v1/responses", json={"model": "m", "input": "x", "metadata": {"audio_path": "b.wav"}}
    )
    assert response.status == 200
    samples = await gateway_metrics(gateway)
    assert samples['audio_gateway_added_latency_seconds_count{route="chat_completions"}'] == 1
    assert samples['audio_gateway_added_latency_seconds_count{route="responses"}'] == 1
    assert (
        samples['audio_gateway_added_latency_seconds_bucket{le="+Inf",route="chat_completions"}']
        == 1
    )
    assert samples['audio_gateway_added_latency_seconds_sum{route="chat_completions"}'] > 0

    missing = await gateway.post(
        "/v1/chat/completions", json=chat_body({"audio_path": "missing.wav"})
    )
    assert missing.status == 404
    response = await gateway.get("/gateway/metrics")
    assert response.content_type == "text/plain"
    samples = await gateway_metrics(gateway)
    for name in (
        "audio_gateway_cache_hits_total",
        "audio_gateway_cache_misses_total",
        "audio_gateway_cache_bytes",
        "audio_gateway_cache_entries",
        "audio_gateway_encoded_bytes_total",
    ):
        assert name in samples, name
    encodings = CLIP_BASE64_BYTES + 21_392  # a.wav and b.wav (16044 bytes)
    assert encodings <= samples["audio_gateway_cache_bytes"] <= encodings + 2 * 1024
    assert samples["audio_gateway_cache_entries"] == 2
    requests = 'audio_gateway_requests_total{route="%s",status="%s"}'
    assert samples[requests % ("chat_completions", "200")] == 1
    assert samples[requests % ("chat_completions", "404")] == 1
    assert samples[requests % ("responses", "200")] == 1
    assert samples[requests % ("gateway_metrics", "200")] >= 1


async def test_vllm_metrics_and_health_pass_through(gateway: Client, stub: StubState) -> None:
    health = await gateway.get("/health")
    assert health.status == 200
    metrics = await gateway.get("/metrics")
    assert metrics.status == 200
    labels = 'engine="0",finished_reason="stop",model_name="stub-audio-model"'
    success = f"vllm:request_success_total{{{labels}}}"
    assert parse_metrics(await metrics.text())[success] == 2
    assert [request.path for request in stub.requests] == ["/health", "/metrics"]
