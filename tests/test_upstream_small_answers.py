"""Buffered answers whose head and body arrive apart, and the upstream read timeout (silence, not
the exchange's length), against a raw-socket upstream that times its pieces."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.upstream.relay import BUFFERED_RESPONSE_MAX_BYTES
from tests.conftest import GatewayFactory, chat_body, gateway_error
from tests.test_upstream_framing import CHAT, raw_client

Gateway = TestClient[web.Request, web.Application]
Piece = tuple[float, bytes]  # seconds to wait, then the bytes to write
Upstream = Callable[..., Awaitable[str]]


def head(length: int, content_type: str = "application/json") -> bytes:
    return (
        f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


@pytest.fixture
async def timed_upstream() -> AsyncIterator[Upstream]:
    """`url = await timed_upstream([(pause, bytes), ...], close=False)`: answers every request
    with the pieces, each after its pause (with `close`, then closes the connection)."""
    servers: list[asyncio.Server] = []

    async def start(pieces: list[Piece], close: bool = False) -> str:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while (request := await reader.readuntil(b"\r\n\r\n")) is not None:
                    length = [
                        int(line.split(b":")[1])
                        for line in request.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ]
                    await reader.readexactly(length[0] if length else 0)
                    for pause, data in pieces:
                        await asyncio.sleep(pause)
                        writer.write(data)
                        await writer.drain()
                    if close:
                        break
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for server in servers:
        server.close()


async def gateway_before(
    make_gateway: GatewayFactory, upstream: Upstream, pieces: list[Piece], timeout: float = 5.0
) -> Gateway:
    url = await upstream(pieces)
    return await make_gateway(upstream={"url": url, "read_timeout_seconds": timeout})


ANSWER = json.dumps({"choices": [{"message": {"content": "x" * 500}}]}).encode()


async def test_head_and_body_apart_relayed_whole(
    make_gateway: GatewayFactory, timed_upstream: Upstream
) -> None:
    pieces = [(0, head(len(ANSWER))), (0.05, ANSWER[:100]), (0.05, ANSWER[100:])]
    gateway = await gateway_before(make_gateway, timed_upstream, pieces)
    for _ in range(2):  # and again over the kept-alive connection
        response = await gateway.post(CHAT, json=chat_body())
        assert response.status == 200
        assert await response.read() == ANSWER


async def test_a_body_that_keeps_coming_outlasts_the_timeout(
    make_gateway: GatewayFactory, timed_upstream: Upstream
) -> None:
    """Silence is what times out, not the exchange's length: six pieces 0.25 s apart take
    longer than the 1 s timeout, and each comes well within it."""
    cut = [ANSWER[i : i + 100] for i in range(0, len(ANSWER), 100)]
    pieces = [(0, head(len(ANSWER)))] + [(0.25, piece) for piece in cut]
    assert len(pieces) >= 6
    gateway = await gateway_before(make_gateway, timed_upstream, pieces, timeout=1.0)
    response = await gateway.post(CHAT, json=chat_body())
    assert response.status == 200
    assert await response.read() == ANSWER


async def test_a_late_head_is_504(make_gateway: GatewayFactory, timed_upstream: Upstream) -> None:
    pieces = [(5.0, head(len(ANSWER)) + ANSWER)]
    gateway = await gateway_before(make_gateway, timed_upstream, pieces, timeout=0.3)
    response = await gateway.post(CHAT, json=chat_body())
    error = await gateway_error(response, 504, None)
    assert error["code"] == "upstream_timeout"
    assert "no data from the upstream for 0.3 s" in error["message"]


async def test_a_small_body_that_stalls_keeps_its_status_and_is_cut(
    make_gateway: GatewayFactory, timed_upstream: Upstream
) -> None:
    pieces = [(0, head(len(ANSWER)) + ANSWER[:50]), (5.0, ANSWER[50:])]
    gateway = await gateway_before(make_gateway, timed_upstream, pieces, timeout=0.3)
    body = json.dumps(chat_body()).encode()
    request = (
        f"POST {CHAT} HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    view = await raw_client(gateway, request)
    assert (view.status, view.body, view.complete) == (200, ANSWER[:50], False)


async def test_a_small_body_cut_by_the_upstream(
    make_gateway: GatewayFactory, timed_upstream: Upstream
) -> None:
    """The upstream closes after part of the body: its status stands, the client's transfer is
    cut short (never a clean end)."""
    url = await timed_upstream([(0, head(len(ANSWER))), (0.02, ANSWER[:50])], close=True)
    gateway = await make_gateway(upstream={"url": url})
    view = await raw_client(gateway, b"GET /v1/models HTTP/1.1\r\nHost: gateway\r\n\r\n")
    assert (view.status, view.body, view.complete) == (200, ANSWER[:50], False)


@pytest.mark.parametrize("length", [BUFFERED_RESPONSE_MAX_BYTES, BUFFERED_RESPONSE_MAX_BYTES + 1])
async def test_either_side_of_the_small_limit(
    make_gateway: GatewayFactory, timed_upstream: Upstream, length: int
) -> None:
    body = b"a" * length
    pieces = [(0, head(length, "application/octet-stream")), (0.02, body)]
    gateway = await gateway_before(make_gateway, timed_upstream, pieces)
    response = await gateway.get("/v1/files/x/content")
    assert response.status == 200
    assert await response.read() == body


async def test_a_sized_event_stream_flows_before_its_end(
    make_gateway: GatewayFactory, timed_upstream: Upstream
) -> None:
    """An event stream is streamed even when it is sized: the client has the first event while
    the upstream still holds the rest back."""
    first, rest = b'data: {"n":1}\n\n', b"data: [DONE]\n\n"  # the rest never comes
    pieces = [(0, head(len(first + rest), "text/event-stream") + first)]
    url = await timed_upstream(pieces)
    gateway = await make_gateway(upstream={"url": url})
    response = await gateway.get("/v1/files/x/content")
    assert response.status == 200
    assert await response.content.readexactly(len(first)) == first
