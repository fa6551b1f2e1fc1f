"""A streamed answer written to its end is final: counted and logged with its status, whatever
the client does with the connection afterwards; 499 only for a client that left before the end.
Every stream the gateway writes itself says `charset=utf-8`, as vLLM's does.

Against a real `python -m gateway serve` process (its runner cancels a handler whose client
disconnects, and writes the access log), with raw-socket clients that close as soon as the
body's last event has arrived.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from hypothesis import given
from hypothesis import strategies as st

from gateway.stub_upstream.window import Action, ModelWindow, window_key
from gateway.upstream.answered import ends_event_stream
from tests.chunking_helpers import CHUNKING, windowed_stub, write_long_clips
from tests.test_drain import Gateway, fresh_session, serve, until

SEEDS = 12  # each seed closes right after the last event; before the fix, 3-9 in 10 were 499
SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
CHAT_END = b"data: [DONE]\n\n"
BRIDGE_END = b"event: response.completed\n"
BOUND_SECONDS = 30.0


@pytest.fixture
async def stub_server(audio_dir: Path) -> AsyncIterator[TestServer]:
    write_long_clips(audio_dir)
    async for server in windowed_stub(audio_dir):
        yield server


@pytest.fixture
def window(stub_server: TestServer) -> ModelWindow:
    return stub_server.app[window_key]


@pytest.fixture
async def gateway(
    stub_server: TestServer, tmp_path: Path, audio_dir: Path
) -> AsyncIterator[Gateway]:
    sections = {
        "audio": {"root": str(audio_dir)},
        "chunking": CHUNKING,
        "responses": {"audio": "chat_bridge"},
    }
    async with serve(
        stub_server, tmp_path, sections=sections, access_log=True, log_format="json"
    ) as running:
        yield running


def chat_body(clip: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": "stub-audio-model",
        "messages": [{"role": "user", "content": "Transcribe the audio."}],
        "metadata": {"audio_path": clip},
        "stream": True,
        **extra,
    }


def bridge_body(clip: str) -> dict[str, Any]:
    body = {"model": "stub-audio-model", "input": "Transcribe the audio."}
    return {**body, "metadata": {"audio_path": clip}, "stream": True}


# route name, path, body, the bytes that end the body's last event
STREAMS = {
    "chunked chat": ("chat_completions", "/v1/chat/completions", chat_body("long.wav"), CHAT_END),
    "chunked bridge": ("responses", "/v1/responses", bridge_body("long.wav"), BRIDGE_END),
    "unsplit chat": ("chat_completions", "/v1/chat/completions", chat_body("a.wav"), CHAT_END),
    "unsplit bridge": ("responses", "/v1/responses", bridge_body("a.wav"), BRIDGE_END),
}


async def post_raw(port: int, path: str, body: dict[str, Any], until_bytes: bytes) -> bytes:
    """POST over a bare socket, read until `until_bytes` has arrived (and, for an event, the
    blank line that ends it), then close at once: the head and what was read."""
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head + payload)
        received = b""
        async with asyncio.timeout(BOUND_SECONDS):
            while not _ended(received, until_bytes):
                chunk = await reader.read(65536)
                assert chunk, f"the stream ended early: {received[-300:]!r}"
                received += chunk
    finally:
        writer.close()  # right away: nothing waits for the chunked body's terminator
    return received


def _ended(received: bytes, until_bytes: bytes) -> bool:
    at = received.find(until_bytes)
    return at >= 0 and b"\n\n" in received[at:]


async def counted(gateway: Gateway, route: str) -> dict[str, float]:
    """audio_gateway_requests_total of `route`, by status."""
    async with (
        fresh_session() as session,
        session.get(f"{gateway.url}/gateway/metrics") as response,
    ):
        text = await response.text()
    prefix = f'audio_gateway_requests_total{{route="{route}",status="'
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            status, _, value = line[len(prefix) :].partition('"} ')
            found[status] = float(value)
    return found


def logged_statuses(gateway: Gateway, route: str) -> list[int]:
    lines = [json.loads(line) for line in gateway.log if line.startswith("{")]
    return [
        line["status"]
        for line in lines
        if line.get("logger") == "gateway.access" and line.get("route") == route
    ]


@pytest.mark.parametrize("name", STREAMS)
async def test_a_stream_read_to_its_end_is_counted_and_logged_200(
    gateway: Gateway, name: str
) -> None:
    route, path, body, end = STREAMS[name]
    for _ in range(SEEDS):
        received = await post_raw(gateway.port, path, body, end)
        assert received.startswith(b"HTTP/1.1 200 ")
    await until(lambda: len(logged_statuses(gateway, route)) >= SEEDS)
    assert await counted(gateway, route) == {"200": SEEDS}
    await asyncio.sleep(0.2)  # no late line (a 499 is never logged)
    assert logged_statuses(gateway, route) == [200] * SEEDS


@pytest.mark.parametrize("name", STREAMS)
async def test_every_stream_says_utf_8(make_gateway: Any, name: str) -> None:
    _, path, body, _ = STREAMS[name]
    client = await make_gateway(chunking=CHUNKING, responses={"audio": "chat_bridge"})
    response = await client.post(path, json=body)
    assert response.status == 200
    assert response.headers["Content-Type"] == SSE_CONTENT_TYPE


async def test_a_client_that_leaves_mid_stream_is_499(
    gateway: Gateway, window: ModelWindow
) -> None:
    # The last piece answers late: the client has the first pieces' chunks, never the end.
    window.rule = lambda clips, arrival: Action(delay_seconds=5 if clips[0].frames < 48000 else 0)
    body = chat_body("long.wav")
    for _ in range(3):
        await post_raw(gateway.port, "/v1/chat/completions", body, b'"content":"pcm_sha256=')
    await until(lambda: window.cancelled >= 3)
    deadline = asyncio.get_running_loop().time() + BOUND_SECONDS
    while (found := await counted(gateway, "chat_completions")) != {"499": 3}:
        assert asyncio.get_running_loop().time() < deadline, found  # counted once unwound
        await asyncio.sleep(0.05)
    assert 200 not in logged_statuses(gateway, "chat_completions")


@given(st.binary(max_size=300), st.sampled_from([b"\n\n", b"\r\n\r\n", b"\n", b""]))
def test_a_chunk_ending_in_done_ends_the_stream(before: bytes, ending: bytes) -> None:
    assert ends_event_stream(before + b"data: [DONE]" + ending)


@given(st.binary(max_size=300).filter(lambda chunk: b"[DONE]" not in chunk))
def test_no_other_chunk_does(chunk: bytes) -> None:
    assert not ends_event_stream(chunk)
    assert not ends_event_stream(b"data: [DONE]\n\n" + chunk + b"x")
