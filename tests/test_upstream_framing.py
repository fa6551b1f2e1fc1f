"""Message framing on the upstream side (RFC 9112), against a raw-socket upstream.

The upstream here is a few lines of asyncio that read each request and write scripted bytes,
so nothing normalises the answers. The client side is whichever observes a case exactly:
aiohttp's client, a raw socket whose bytes an independent parser (httptools) reads, or curl.
"A broken transfer" means the client's parser never reached the end of the message.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import json
import os
import shutil
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httptools
import pytest
import uvloop
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st

from gateway.app import create_app
from gateway.config import UpstreamConfig
from gateway.errors import InvalidRequest, PayloadTooLarge, UnsupportedMediaType
from gateway.stub_upstream import StubState
from gateway.upstream.content_coding import decode_content
from gateway.upstream.relay import create_upstream_pool
from tests.conftest import (
    GatewayFactory,
    chat_body,
    forwarded_json,
    gateway_config,
    gateway_error,
    sha256_of,
)

BOUND_SECONDS = 5.0
PAUSE_SECONDS = 0.02  # between scripted pieces, so the gateway reads them separately
OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
CHAT = "/v1/chat/completions"

Gateway = TestClient[web.Request, web.Application]


# --- the raw-socket upstream ---------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """What the upstream writes for one request: `pieces` in order with a short pause between
    them, then it closes the connection when `close` is set."""

    pieces: tuple[bytes, ...]
    close: bool = False


def reply(*pieces: bytes, close: bool = False) -> Reply:
    return Reply(pieces, close)


@dataclass
class Received:
    """One request as the upstream read it off the wire."""

    connection: int  # 1 for the upstream's first accepted connection, 2 for the next, ...
    head: bytes
    body: bytes  # the body bytes, with the chunked framing (if any) taken off
    chunked: bool

    def header(self, name: str) -> str | None:
        for line in self.head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == name.lower().encode():
                return value.strip().decode()
        return None


@dataclass
class RawUpstream:
    """Answers each request with the next scripted `Reply` (`OK` once the script runs out)."""

    replies: list[Reply]
    received: list[Received] = field(default_factory=list)
    connections: int = 0
    closed: int = 0  # connections this side has closed
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        number = self.connections
        try:
            while (request := await read_request(reader, number)) is not None:
                self.received.append(request)
                answer = self.replies.pop(0) if self.replies else reply(OK)
                for index, piece in enumerate(answer.pieces):
                    if index:
                        await asyncio.sleep(PAUSE_SECONDS)
                    writer.write(piece)
                    await writer.drain()
                if answer.close:
                    break
        except ConnectionError:
            pass
        finally:
            writer.close()
            self.closed += 1
            self._tasks.discard(task)

    def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()


async def read_request(reader: asyncio.StreamReader, connection: int) -> Received | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    fields = [line.partition(b":") for line in head[:-4].split(b"\r\n")[1:]]
    headers = {key.strip().lower(): value.strip() for key, _, value in fields}
    chunked = headers.get(b"transfer-encoding", b"").lower() == b"chunked"
    if chunked:
        body = await read_chunked(reader)
    else:
        body = await reader.readexactly(int(headers.get(b"content-length", b"0")))
    return Received(connection, head, body, chunked)


async def read_chunked(reader: asyncio.StreamReader) -> bytes:
    pieces = []
    while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
        pieces.append(await reader.readexactly(size))
        await reader.readexactly(2)
    while await reader.readuntil(b"\r\n") != b"\r\n":  # trailer fields, then the blank line
        pass
    return b"".join(pieces)


@pytest.fixture
async def raw_upstream() -> AsyncIterator[Callable[..., Awaitable[tuple[RawUpstream, str]]]]:
    """`upstream, url = await raw_upstream(reply(...), ...)`: a scripted upstream on 127.0.0.1."""
    started: list[tuple[asyncio.Server, RawUpstream]] = []

    async def start(*replies: Reply) -> tuple[RawUpstream, str]:
        upstream = RawUpstream(list(replies))
        server = await asyncio.start_server(upstream.serve, "127.0.0.1", 0)
        started.append((server, upstream))
        return upstream, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for server, upstream in started:
        server.close()
        upstream.cancel()
        await server.wait_closed()


@pytest.fixture
async def scripted(
    raw_upstream: Callable[..., Awaitable[tuple[RawUpstream, str]]], make_gateway: GatewayFactory
) -> Callable[..., Awaitable[tuple[Gateway, RawUpstream]]]:
    """`gateway, upstream = await scripted(reply(...), ...)`: a gateway in front of the script."""

    async def start(*replies: Reply, **upstream_config: Any) -> tuple[Gateway, RawUpstream]:
        upstream, url = await raw_upstream(*replies)
        gateway = await make_gateway(upstream={"url": url, **upstream_config})
        return gateway, upstream

    return start


# --- the client side: raw sockets read by an independent parser, and curl ------------------------


@dataclass
class ClientView:
    """What a raw-socket client received: `complete` only when the message's own framing ended
    it (Content-Length reached, or the last chunk), never because the connection closed."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    complete: bool = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode().lower()] = value.decode()

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


async def raw_client(gateway: Gateway, request: bytes) -> ClientView:
    """Send `request` as bytes, read until the answer is complete or the gateway closes."""
    assert gateway.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
    view = ClientView()
    parser = httptools.HttpResponseParser(view)
    try:
        writer.write(request)
        async with asyncio.timeout(BOUND_SECONDS):
            while not view.complete and (data := await reader.read(65536)):
                parser.feed_data(data)
        view.status = parser.get_status_code()
    finally:
        writer.close()
    return view


def get(path: str = "/v1/files/x/content") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: gateway\r\n\r\n".encode()


needs_curl = pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
CURL_OK = 0
CURL_PARTIAL_FILE = 18  # "transfer closed with outstanding read data remaining"


async def curl(gateway: Gateway, path: str, *options: str) -> tuple[int, bytes]:
    """curl's exit status and the body it wrote."""
    process = await asyncio.create_subprocess_exec(
        "curl", "-sS", "--max-time", str(BOUND_SECONDS), *options,
        str(gateway.make_url(path)),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    body, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, body


# --- response framing -----------------------------------------------------------------------------

BODY = b"every byte of a body whose end is the connection's end\n" * 3
CLOSE_DELIMITED = {
    "http/1.1-connection-close": reply(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n",
        BODY[:40],
        BODY[40:],
        close=True,
    ),
    "http/1.0": reply(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + BODY, close=True),
    "http/1.0-event-stream": reply(
        b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
        BODY[:40],
        BODY[40:],
        close=True,
    ),
}


class TestCloseDelimitedBodies:
    """No Content-Length, no chunked: the body ends when the upstream closes (RFC 9112 6.3)."""

    @pytest.mark.parametrize("script", CLOSE_DELIMITED.values(), ids=CLOSE_DELIMITED.keys())
    async def test_relayed_whole_and_ended_cleanly(self, scripted, script: Reply) -> None:
        gateway, _ = await scripted(script)
        view = await raw_client(gateway, get())
        assert (view.status, view.body, view.complete) == (200, BODY, True)
        assert view.headers["transfer-encoding"] == "chunked"  # with its last chunk
        assert view.headers["content-type"].split(";")[0] in ("text/plain", "text/event-stream")

    async def test_aiohttp_client_reads_it_whole(self, scripted) -> None:
        gateway, _ = await scripted(CLOSE_DELIMITED["http/1.0"])
        response = await gateway.get("/v1/files/x/content")
        assert (response.status, await response.read()) == (200, BODY)

    async def test_large_body_streams_through(self, scripted) -> None:
        blob = os.urandom(3 * 1024 * 1024 + 3)
        pieces = [blob[i : i + 256 * 1024] for i in range(0, len(blob), 256 * 1024)]
        gateway, _ = await scripted(reply(b"HTTP/1.0 200 OK\r\n\r\n", *pieces, close=True))
        response = await gateway.get("/v1/files/x/content")
        body = await response.read()
        assert hashlib.sha256(body).digest() == hashlib.sha256(blob).digest()

    @needs_curl
    @pytest.mark.parametrize("http", ["--http1.1", "--http1.0"])
    async def test_curl_sees_a_complete_transfer(self, scripted, http: str) -> None:
        # The issue's reproduction: curl used to exit 18, "transfer closed with outstanding
        # read data remaining", although every byte had arrived.
        gateway, _ = await scripted(CLOSE_DELIMITED["http/1.0"])
        assert await curl(gateway, "/v1/files/x/content", http) == (CURL_OK, BODY)

    async def test_the_next_request_opens_a_new_connection(self, scripted) -> None:
        gateway, upstream = await scripted(CLOSE_DELIMITED["http/1.1-connection-close"])
        assert await (await gateway.get("/a")).read() == BODY
        assert await (await gateway.get("/b")).read() == b"ok"
        assert [r.connection for r in upstream.received] == [1, 2]


BODILESS = {
    "204-with-content-length": (
        "GET",
        reply(b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\nX-Kept: yes\r\n\r\n"),
    ),
    "304-with-content-length": (
        "GET",
        reply(b'HTTP/1.1 304 Not Modified\r\nContent-Length: 1234\r\nETag: "e1"\r\n\r\n'),
    ),
    "head-with-content-length": (
        "HEAD",
        reply(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\nContent-Type: audio/wav\r\n\r\n"),
    ),
    "head-with-chunked": (
        "HEAD",
        reply(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: audio/wav\r\n\r\n"),
    ),
}


class TestBodilessAnswers:
    """HEAD, 204 and 304 answers have no body whatever their headers say (RFC 9112 6.3)."""

    @pytest.mark.parametrize(("method", "script"), BODILESS.values(), ids=BODILESS.keys())
    async def test_no_body_and_the_connection_is_reused(
        self, scripted, method: str, script: Reply
    ) -> None:
        gateway, upstream = await scripted(script)
        status = int(script.pieces[0].split()[1])
        async with asyncio.timeout(BOUND_SECONDS):
            response = await gateway.request(method, "/v1/files/x/content")
            assert (response.status, await response.read()) == (status, b"")
            followup = await gateway.get("/v1/models")
            assert (followup.status, await followup.read()) == (200, b"ok")
        assert [r.connection for r in upstream.received] == [1, 1]
        assert upstream.received[0].head.startswith(method.encode() + b" ")

    async def test_head_keeps_the_upstream_content_length(self, scripted) -> None:
        # nginx relays it: a HEAD answer describes the GET answer it stands for.
        gateway, _ = await scripted(BODILESS["head-with-content-length"][1])
        response = await gateway.head("/v1/files/x/content")
        assert response.headers["Content-Length"] == "1234"
        assert response.headers["Content-Type"] == "audio/wav"


class TestInterimAndTrailers:
    FINAL = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Final: yes\r\n\r\nfinal"
    INTERIM = (
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n",
    )

    @pytest.mark.parametrize("together", [True, False], ids=["one-write", "separate-writes"])
    async def test_1xx_answers_are_skipped(self, scripted, together: bool) -> None:
        pieces = (
            (b"".join((*self.INTERIM, self.FINAL)),) if together else (*self.INTERIM, self.FINAL)
        )
        gateway, upstream = await scripted(Reply(pieces))
        response = await gateway.post("/v1/files", data=b"x")
        assert (response.status, await response.read()) == (200, b"final")
        assert response.headers["X-Final"] == "yes"
        assert "Link" not in response.headers
        assert (await gateway.get("/v1/models")).status == 200
        assert [r.connection for r in upstream.received] == [1, 1]

    async def test_chunked_body_with_trailers(self, scripted) -> None:
        # Trailers are dropped, as nginx does: aiohttp's server cannot send them on.
        gateway, upstream = await scripted(
            reply(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n",
                b"5\r\nhello\r\n6;ext=1\r\n world\r\n",
                b"0\r\nX-Checksum: abc\r\nX-Other: 1\r\n\r\n",
            )
        )
        view = await raw_client(gateway, get())
        assert (view.status, view.body, view.complete) == (200, b"hello world", True)
        assert "x-checksum" not in view.headers
        followup = await gateway.get("/v1/models")
        assert (followup.status, await followup.read()) == (200, b"ok")
        assert "X-Checksum" not in followup.headers and "X-Other" not in followup.headers
        assert [r.connection for r in upstream.received] == [1, 1]

    async def test_trailers_never_join_the_response_headers(self, raw_upstream) -> None:
        # At the pool's interface: `.headers` is the head only, even once the body is read.
        _, url = await raw_upstream(
            reply(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n"
                b"0\r\nX-Checksum: abc\r\n\r\n"
            )
        )
        pool = create_upstream_pool(UpstreamConfig(url=url), None)
        try:
            response = await pool.request("GET", "/", [], None)
            assert await response.read() == b"ok"
            assert response.headers == [(b"Transfer-Encoding", b"chunked")]
            response.close()
        finally:
            pool.close()


BIG_LENGTH = 2 * 1024 * 1024  # over the relay's buffering limit: streamed as it arrives
TRUNCATED = {
    "short-body": reply(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b", close=True),
    "short-body-streamed": reply(
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % BIG_LENGTH,
        b"x" * (BIG_LENGTH // 2),
        close=True,
    ),
    "cut-mid-chunk": reply(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
        b"10\r\nonly",
        close=True,
    ),
    "no-last-chunk": reply(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", close=True
    ),
    "malformed-chunk": reply(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"e\r\n15 bytes, not 14\r\n",  # the chunk's size line is wrong
        close=True,
    ),
    "event-stream-cut": reply(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
        b'f\r\ndata: {"a":1}\n\n\r\n',
        close=True,
    ),
}


class TestTruncatedBodies:
    """A body that ends before its framing says: the client's transfer is broken too, never a
    clean end (nginx: "upstream prematurely closed connection")."""

    @pytest.mark.parametrize("script", TRUNCATED.values(), ids=TRUNCATED.keys())
    async def test_raw_client_never_sees_a_complete_message(self, scripted, script) -> None:
        gateway, _ = await scripted(script)
        view = await raw_client(gateway, get())
        assert view.status == 200
        assert not view.complete
        assert len(view.body) < int(view.headers.get("content-length", "1000000000"))

    @pytest.mark.parametrize("script", TRUNCATED.values(), ids=TRUNCATED.keys())
    async def test_aiohttp_client_gets_a_payload_error(self, scripted, script) -> None:
        gateway, _ = await scripted(script)
        response = await gateway.get("/v1/files/x/content")
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.read()

    @needs_curl
    @pytest.mark.parametrize("name", ["short-body", "cut-mid-chunk", "no-last-chunk"])
    async def test_curl_reports_a_partial_transfer(self, scripted, name: str) -> None:
        gateway, _ = await scripted(TRUNCATED[name])
        status, _ = await curl(gateway, "/v1/files/x/content")
        assert status == CURL_PARTIAL_FILE

    async def test_a_stalled_body_is_cut_after_the_read_timeout(self, scripted) -> None:
        stall = reply(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nten bytes.")
        gateway, _ = await scripted(stall, read_timeout_seconds=0.3)
        view = await raw_client(gateway, get())
        assert (view.status, view.body, view.complete) == (200, b"ten bytes.", False)

    async def test_the_gateway_is_fine_afterwards(self, scripted) -> None:
        gateway, upstream = await scripted(TRUNCATED["short-body"])
        assert not (await raw_client(gateway, get())).complete
        assert await (await gateway.get("/v1/models")).read() == b"ok"
        assert [r.connection for r in upstream.received] == [1, 2]


NOT_HTTP = {
    "ssh-banner": reply(b"SSH-2.0-OpenSSH_9.6\r\n", close=True),
    "plain-text": reply(b"hello, this is not http\r\n\r\n", close=True),
    "bad-header-line": reply(b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", close=True),
    "length-and-chunked": reply(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    ),
    "two-lengths": reply(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok"),
    "unrequested-upgrade": reply(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n"
    ),
    "unknown-transfer-coding": reply(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxx", close=True
    ),
}


class TestNotHttp:
    """An answer that cannot be parsed as HTTP/1.x is a 502, like nginx's "upstream sent
    invalid header"; a Transfer-Encoding other than chunked is one too (nginx refuses it)."""

    @pytest.mark.parametrize("script", NOT_HTTP.values(), ids=NOT_HTTP.keys())
    @pytest.mark.parametrize("route", ["passthrough", "chat"])
    async def test_502_openai_json(self, scripted, script: Reply, route: str) -> None:
        gateway, _ = await scripted(script)
        if route == "chat":
            response = await gateway.post(CHAT, json=chat_body({"audio_path": "a.wav"}))
        else:
            response = await gateway.get("/v1/models")
        error = await gateway_error(response, 502, None)
        assert error["code"] == "upstream_unreachable"
        assert "127.0.0.1:" in error["message"] and "not HTTP" in error["message"]
        assert (await gateway.get("/v1/models")).status == 200

    async def test_closed_without_a_byte_is_502(self, scripted) -> None:
        gateway, _ = await scripted(reply(close=True))
        error = await gateway_error(await gateway.get("/v1/models"), 502, None)
        assert "closed the connection" in error["message"]

    async def test_an_upstream_that_speaks_first(self, make_gateway: GatewayFactory) -> None:
        async def banner(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"SSH-2.0-OpenSSH_9.6\r\n")  # before any request, as SSH and SMTP do
            await writer.drain()
            await reader.read()  # open until the gateway hangs up: no reset eats the banner
            writer.close()

        server = await asyncio.start_server(banner, "127.0.0.1", 0)
        try:
            port = server.sockets[0].getsockname()[1]
            gateway = await make_gateway(upstream={"url": f"http://127.0.0.1:{port}"})
            error = await gateway_error(await gateway.get("/v1/models"), 502, None)
            assert "not HTTP" in error["message"]
        finally:
            server.close()
            await server.wait_closed()


class TestIdleConnections:
    """Pooled keep-alive connections the upstream closed, or wrote on, while they were idle."""

    @pytest.mark.parametrize("route", ["get", "post-streamed-body", "chat"])
    async def test_closed_while_idle_then_the_next_request_succeeds(
        self, scripted, route: str
    ) -> None:
        gateway, upstream = await scripted(reply(OK, close=True))
        assert (await gateway.get("/v1/models")).status == 200
        await poll(lambda: upstream.closed == 1)
        await asyncio.sleep(0.1)  # the gateway's loop sees the FIN while the connection idles
        if route == "chat":
            response = await gateway.post(CHAT, json=chat_body({"audio_path": "a.wav"}))
        elif route == "post-streamed-body":
            response = await gateway.post("/v1/files", data=body_pieces(b"abc", b"def"))
        else:
            response = await gateway.get("/v1/models")
        assert (response.status, await response.read()) == (200, b"ok")
        assert [r.connection for r in upstream.received] == [1, 2]

    async def test_closed_as_the_request_arrives_is_retried_once(self, scripted) -> None:
        # The keep-alive race: the upstream closes an idle connection just as a request goes
        # out on it. A request that can be sent again is, on a fresh connection.
        gateway, upstream = await scripted(reply(OK), reply(close=True))
        assert (await gateway.get("/v1/models")).status == 200
        response = await gateway.get("/v1/models")
        assert (response.status, await response.read()) == (200, b"ok")
        assert [r.connection for r in upstream.received] == [1, 1, 2]

    @pytest.mark.parametrize("same_write", [False, True], ids=["while-idle", "after-the-answer"])
    async def test_bytes_sent_out_of_turn_are_never_an_answer(
        self, scripted, same_write: bool
    ) -> None:
        stale = b"HTTP/1.1 500 Oops\r\nContent-Length: 5\r\nX-Stale: 1\r\n\r\nstale"
        fresh = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh"
        first = reply(OK + stale) if same_write else reply(OK, stale)
        gateway, upstream = await scripted(first, reply(fresh))
        response = await gateway.get("/v1/models")
        assert response.status == 200  # the stray answer's status never replaces the real one
        assert await response.read() == b"ok"
        assert "X-Stale" not in response.headers
        await asyncio.sleep(0.1 + PAUSE_SECONDS)  # the stale answer arrives while idle
        assert await (await gateway.get("/v1/models")).read() == b"fresh"
        assert [r.connection for r in upstream.received] == [1, 2]


async def poll(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(BOUND_SECONDS):
        while not condition():
            await asyncio.sleep(0.01)


async def body_pieces(*pieces: bytes) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece


# --- request side ---------------------------------------------------------------------------------


class TestRequestBodiesOnPassthrough:
    """Passthrough bodies reach the upstream as the client framed and encoded them (nginx too
    passes Content-Encoding and the encoded bytes on untouched)."""

    async def test_chunked_body_streams_through(self, scripted) -> None:
        gateway, upstream = await scripted()
        request = (
            b"POST /v1/files HTTP/1.1\r\nHost: gateway\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: application/octet-stream\r\n\r\n"
            b"3\r\nabc\r\n4;ext=x\r\ndefg\r\n0\r\n\r\n"
        )
        view = await raw_client(gateway, request)
        assert (view.status, view.body, view.complete) == (200, b"ok", True)
        received = upstream.received[-1]
        assert (received.body, received.chunked) == (b"abcdefg", True)
        assert received.header("content-length") is None
        assert received.header("content-type") == "application/octet-stream"

    @pytest.mark.parametrize("coding", ["gzip", "br", "zstd, gzip"])
    async def test_content_encoding_passes_through_untouched(self, scripted, coding: str) -> None:
        gateway, upstream = await scripted()
        encoded = gzip.compress(b'{"prompt": "compressed"}') + b"opaque to the gateway"
        response = await gateway.post(
            "/v1/files", data=encoded, headers={"Content-Encoding": coding}
        )
        assert response.status == 200
        received = upstream.received[-1]
        assert received.body == encoded
        assert received.header("content-encoding") == coding
        assert received.header("content-length") == str(len(encoded))

    async def test_chunked_and_encoded_body(self, scripted) -> None:
        gateway, upstream = await scripted()
        encoded = gzip.compress(os.urandom(100_000))
        response = await gateway.post(
            "/v1/files",
            data=body_pieces(encoded[:30_000], encoded[30_000:]),
            headers={"Content-Encoding": "gzip"},
        )
        assert response.status == 200
        received = upstream.received[-1]
        assert (received.body, received.chunked) == (encoded, True)
        assert received.header("content-encoding") == "gzip"


def compress(coding: str, data: bytes) -> bytes:
    return gzip.compress(data) if coding in ("gzip", "x-gzip") else zlib.compress(data)


class TestEncodedBodiesOnRewrittenRoutes:
    """A rewritten route must read the JSON: its body is decoded (gzip, deflate), rewritten and
    sent without Content-Encoding. Other codings are refused with 415, as RFC 9110 8.4.1 allows;
    nothing is sent upstream."""

    @pytest.mark.parametrize("coding", ["gzip", "x-gzip", "deflate"])
    async def test_decoded_rewritten_and_sent_plain(
        self, gateway: Gateway, stub: StubState, audio_dir, coding: str
    ) -> None:
        body = json.dumps(chat_body({"audio_path": "a.wav"})).encode()
        response = await gateway.post(
            CHAT,
            data=compress(coding, body),
            headers={"Content-Encoding": coding, "Content-Type": "application/json"},
        )
        assert response.status == 200, await response.text()
        clip = (await response.json())["stub"]["clips"][0]
        assert clip["sha256"] == sha256_of(audio_dir / "a.wav")
        sent = {key.lower(): value for key, value in stub.requests[-1].headers.items()}
        assert "content-encoding" not in sent
        assert sent["content-length"] == str(len(stub.requests[-1].body))
        assert "metadata" not in forwarded_json(stub)

    async def test_without_sidechannel_the_decoded_body_is_sent(self, gateway, stub) -> None:
        body = json.dumps(chat_body()).encode()
        response = await gateway.post(
            CHAT,
            data=gzip.compress(body),
            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
        )
        assert response.status == 200, await response.text()
        assert stub.requests[-1].body == body
        assert "content-encoding" not in {k.lower() for k in stub.requests[-1].headers}

    async def test_stacked_codings_are_undone_in_reverse(self, gateway, stub) -> None:
        body = json.dumps({"model": "m", "input": "hi"}).encode()
        response = await gateway.post(
            "/v1/responses",
            data=gzip.compress(zlib.compress(body)),
            headers={"Content-Encoding": "deflate, gzip", "Content-Type": "application/json"},
        )
        assert response.status == 200, await response.text()
        assert stub.requests[-1].body == body

    async def test_the_responses_bridge_decodes_too(self, gateway, stub, audio_dir) -> None:
        body = {"model": "m", "input": "Q", "metadata": {"audio_path": "a.wav"}}
        response = await gateway.post(
            "/v1/responses",
            data=gzip.compress(json.dumps(body).encode()),
            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
        )
        assert response.status == 200, await response.text()
        received = stub.requests[-1]
        assert received.path == CHAT  # bridged
        assert "content-encoding" not in {k.lower() for k in received.headers}
        assert stub.last_report is not None
        assert stub.last_report["clips"][0]["sha256"] == sha256_of(audio_dir / "a.wav")

    async def test_speech_json_is_decoded_and_an_encoded_upload_passes(
        self, gateway, stub, audio_dir
    ) -> None:
        body = {"model": "m", "metadata": {"audio_path": "a.wav"}}
        response = await gateway.post(
            "/v1/audio/transcriptions",
            data=gzip.compress(json.dumps(body).encode()),
            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
        )
        assert response.status == 200, await response.text()
        assert (await response.json())["stub"]["clip"]["sha256"] == sha256_of(audio_dir / "a.wav")
        assert "content-encoding" not in {k.lower() for k in stub.requests[-1].headers}
        upload = gzip.compress(
            b"--b\r\nContent-Disposition: form-data; name=model\r\n\r\nm\r\n--b--"
        )
        await gateway.post(
            "/v1/audio/transcriptions",
            data=upload,
            headers={
                "Content-Encoding": "gzip",
                "Content-Type": "multipart/form-data; boundary=b",
            },
        )
        received = stub.requests[-1]  # relayed untouched: the gateway cannot scan it
        assert received.headers["Content-Encoding"] == "gzip"
        assert received.headers["Content-Length"] == str(len(upload))
        assert received.body == gzip.decompress(upload)  # the stub's server decodes it

    async def test_unsupported_coding_is_415(self, gateway, stub) -> None:
        response = await gateway.post(
            CHAT, data=b"\x1b\x00brotli?", headers={"Content-Encoding": "br"}
        )
        error = await gateway_error(response, 415, None)
        assert error["code"] == "unsupported_content_encoding"
        assert "'br'" in error["message"] and "gzip" in error["message"]
        assert stub.request_count == 0

    async def test_corrupt_gzip_is_400(self, gateway, stub) -> None:
        response = await gateway.post(
            CHAT, data=b"\x1f\x8b\x08\x00broken", headers={"Content-Encoding": "gzip"}
        )
        error = await gateway_error(response, 400, None)
        assert error["code"] == "invalid_content_encoding"
        assert stub.request_count == 0

    async def test_decoded_size_is_bounded_by_max_body_bytes(self, make_gateway, stub) -> None:
        gateway = await make_gateway(server={"max_body_bytes": 100_000})
        bomb = gzip.compress(b"[" + b" " * 1_000_000 + b"]")  # ~1 KB that decodes to 1 MB
        response = await gateway.post(CHAT, data=bomb, headers={"Content-Encoding": "gzip"})
        error = await gateway_error(response, 413, None)
        assert error["code"] == "request_too_large"
        assert stub.request_count == 0


class TestDecodeContent:
    """The pure decoder behind the rewritten routes."""

    @given(
        data=st.binary(max_size=4096),
        codings=st.lists(st.sampled_from(["gzip", "x-gzip", "deflate", "identity"]), max_size=3),
    )
    def test_undoes_any_stack_of_codings(self, data: bytes, codings: list[str]) -> None:
        stages = [data]
        for coding in codings:
            stages.append(stages[-1] if coding == "identity" else compress(coding, stages[-1]))
        header = ", ".join(codings)
        largest_decoded = max(len(stage) for stage in stages[:-1]) if codings else 0
        assert decode_content(stages[-1], header, limit=largest_decoded) == data

    @given(data=st.binary(min_size=1, max_size=4096), coding=st.sampled_from(["gzip", "deflate"]))
    def test_never_returns_more_than_the_limit(self, data: bytes, coding: str) -> None:
        with pytest.raises(PayloadTooLarge):
            decode_content(compress(coding, data), coding, limit=len(data) - 1)

    @given(junk=st.binary(max_size=64), coding=st.sampled_from(["gzip", "deflate"]))
    def test_junk_is_a_clean_400(self, junk: bytes, coding: str) -> None:
        try:
            decode_content(junk, coding, limit=1 << 20)
        except InvalidRequest as exc:
            assert exc.code == "invalid_content_encoding"

    @pytest.mark.parametrize("header", ["br", "zstd", "gzip, compress", "x-unknown"])
    def test_other_codings_are_unsupported(self, header: str) -> None:
        with pytest.raises(UnsupportedMediaType):
            decode_content(b"", header, limit=10)


class TestOnUvloop:
    """`audio-gateway serve` runs on uvloop, whose transports differ from asyncio's in what a
    protocol sees first and in refusing writes on a closed connection: the cases that differ."""

    def test_an_upstream_that_speaks_first(self, audio_dir) -> None:
        async def scenario() -> None:
            async def banner(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                writer.write(b"SSH-2.0-OpenSSH_9.6\r\n")
                await writer.drain()
                await reader.read()
                writer.close()

            server = await asyncio.start_server(banner, "127.0.0.1", 0)
            url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
            try:
                async with gateway_in_front_of(url, audio_dir) as gateway:
                    error = await gateway_error(await gateway.get("/v1/models"), 502, None)
                    assert "not HTTP" in error["message"]
            finally:
                server.close()

        uvloop.run(scenario())

    def test_close_delimited_and_truncated_bodies(self, audio_dir) -> None:
        async def scenario() -> None:
            upstream = RawUpstream(
                [CLOSE_DELIMITED["http/1.0"], TRUNCATED["short-body"], TRUNCATED["cut-mid-chunk"]]
            )
            server = await asyncio.start_server(upstream.serve, "127.0.0.1", 0)
            url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
            try:
                async with gateway_in_front_of(url, audio_dir) as gateway:
                    whole = await raw_client(gateway, get())
                    assert (whole.body, whole.complete) == (BODY, True)
                    for _ in range(2):
                        assert not (await raw_client(gateway, get())).complete
            finally:
                server.close()
                upstream.cancel()

        uvloop.run(scenario())


@contextlib.asynccontextmanager
async def gateway_in_front_of(url: str, audio_dir: Path) -> AsyncIterator[Gateway]:
    """A gateway client on whatever loop runs (the `make_gateway` fixture is asyncio's)."""
    client = TestClient(TestServer(create_app(gateway_config(url, audio_dir))))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()
