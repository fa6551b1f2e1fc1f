"""A lean HTTP/1.1 client for the one upstream: pooled keep-alive connections, httptools parsing.

aiohttp's ClientSession spent about a third of the gateway's CPU per request (request object,
cookie jar, tracing, header normalisation) on work a proxy to one known origin does not need.
This client writes the request head and the body segments straight to the transport and hands
the response back as status, raw headers and body chunks, with backpressure both ways.

Framing follows RFC 9112 as nginx applies it: a body without Content-Length or chunked coding
ends when the upstream closes (and is then complete); HEAD, 204 and 304 answers have no body
whatever their headers say; 1xx answers are skipped; trailers are dropped; a body cut short of
its framing is an error; a Transfer-Encoding other than chunked, or anything llhttp cannot
parse, is an answer that is not HTTP. Bytes the upstream sends out of turn (on an idle pooled
connection, or after its answer) are never taken as an answer: the connection is dropped.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import httptools

from .body import SegmentedPayload
from .origin import UpstreamOrigin

RawHeaders = list[tuple[bytes, bytes]]
MAX_BUFFERED_BODY_BYTES = 4 * 1024 * 1024  # pause reading the upstream above this


class UpstreamClosed(ConnectionError):
    """The upstream closed or broke the connection before the response was complete."""


class UpstreamInvalidResponse(UpstreamClosed):
    """The upstream answered with something that is not an HTTP/1.x response."""


class UpstreamTimedOut(TimeoutError):
    """Connecting, or waiting for the next bytes of the response, took too long."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection; serves one request at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self.idle = False  # True while pooled: bytes arriving then are out of turn
        self._parser = httptools.HttpResponseParser(self)  # llhttp parses message after message
        self._write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: RawHeaders = []
        self.complete = False
        self.head_only = False  # a HEAD request: the answer ends with its head
        self._keep_alive = False
        self._until_close = False  # neither Content-Length nor chunked: the body ends at EOF
        self.headers_done: asyncio.Future[None] = self._loop.create_future()
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._data_waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._read_paused = False

    # asyncio.Protocol -------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport
        sock = transport.get_extra_info("socket")
        if sock is not None:  # the head and the body are separate writes: never wait on Nagle
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.idle or self.complete:
            self.abort()  # a stale answer, a 408 before closing, a body after a 204: not ours
            return
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            if not self.complete:
                reason = exc.__context__ if isinstance(exc.__context__, UpstreamClosed) else exc
                self._fail(UpstreamInvalidResponse(f"{reason or exc.__class__.__name__}"))
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete and exc is None and self._until_close and self.headers_done.done():
            self.complete = True  # a close-delimited body ends here, whole (RFC 9112 6.3)
            self._wake()
        elif not self.complete:
            self._fail(UpstreamClosed("the upstream closed the connection"))
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_exception(UpstreamClosed("the upstream closed the connection"))

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)

    # httptools callbacks ----------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.headers_done.done():  # after the head they are trailers: dropped, like nginx
            self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        if 100 <= self.status < 200:
            return  # an interim answer (103 Early Hints, ...): the real one follows
        self._until_close = _body_until_close(self.headers)
        # Read now: llhttp forgets the message's keep-alive state once the message completes.
        self._keep_alive = self._parser.should_keep_alive()
        if self.head_only:
            self.complete = True  # llhttp cannot be told; the parser is replaced before reuse
        if not self.headers_done.done():  # done already when it timed out
            self.headers_done.set_result(None)

    def on_body(self, body: bytes) -> None:
        if self.complete:  # after a HEAD answer's head, or after the answer: out of turn
            self._keep_alive = False
            return
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > MAX_BUFFERED_BODY_BYTES and self.transport and not self._read_paused:
            self._read_paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if 100 <= self.status < 200:
            self.headers.clear()
            return
        self.complete = True
        self._wake()

    def start_exchange(self, head_only: bool) -> None:
        """A request goes out on this connection: from now on the upstream may answer."""
        self.head_only = head_only
        self.idle = False

    # used by UpstreamResponse -----------------------------------------------------------------

    async def next_chunk(self, timeout: float) -> bytes:
        """The next piece of body, b"" at its end."""
        while not self._chunks:
            if self.complete:
                return b""
            if self._error is not None:
                raise self._error
            self._data_waiter = self._loop.create_future()
            await _within(self._data_waiter, timeout)
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._read_paused and self._buffered < MAX_BUFFERED_BODY_BYTES // 2 and self.transport:
            self._read_paused = False
            self.transport.resume_reading()
        return chunk

    async def drain(self, timeout: float) -> None:
        if self._write_paused:
            self._drain_waiter = self._loop.create_future()
            await _within(self._drain_waiter, timeout)
        if self.closed:
            raise UpstreamClosed("the upstream closed the connection while the body was sent")

    def keep_alive(self) -> bool:
        return self.complete and not self.closed and self._keep_alive

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, error: BaseException) -> None:
        self._error = error
        if not self.headers_done.done():
            self.headers_done.set_exception(error)
            self.headers_done.exception()  # retrieved: a failure nobody awaits is not logged
        self._wake()

    def _wake(self) -> None:
        if self._data_waiter is not None and not self._data_waiter.done():
            self._data_waiter.set_result(None)

    def reset_for_reuse(self) -> None:
        if self.head_only:  # llhttp still waits for the body the HEAD answer's headers announced
            self._parser = httptools.HttpResponseParser(self)
        self.reused = True
        self.idle = True
        self._reset()


def _body_until_close(headers: RawHeaders) -> bool:
    """Whether the body is close-delimited; refuses a Transfer-Encoding other than chunked
    (nginx does too: "upstream sent unknown Transfer-Encoding")."""
    until_close = True
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"content-length":
            until_close = False
        elif lowered == b"transfer-encoding":
            if value.strip().lower() != b"chunked":
                raise UpstreamInvalidResponse(f"unsupported Transfer-Encoding {value!r}")
            until_close = False
    return until_close


async def _within(future: asyncio.Future[None], timeout: float) -> None:
    """Await `future`, failing it with UpstreamTimedOut after `timeout` seconds.

    A bare timer on the future itself: `asyncio.wait_for` wraps and re-awaits, which showed in
    profiles of this per-request path."""
    timer = asyncio.get_running_loop().call_later(timeout, _expire, future, timeout)
    try:
        await future
    finally:
        timer.cancel()


def _expire(future: asyncio.Future[None], timeout: float) -> None:
    if not future.done():
        future.set_exception(UpstreamTimedOut(f"no data from the upstream for {timeout:g} s"))


class UpstreamResponse:
    """Status, raw headers and the body of one upstream answer. Always `close()` it."""

    def __init__(self, pool: UpstreamPool, connection: _Connection, head_only: bool) -> None:
        """Holds one of the pool's connection slots until `close()`."""
        self._pool = pool
        self._connection = connection
        self._head_only = head_only
        self.status = connection.status
        self.headers = connection.headers
        self.released = False

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    @property
    def content_length(self) -> int | None:
        value = self.header(b"content-length")
        return int(value) if value is not None and value.isdigit() else None

    async def chunks(self) -> AsyncIterator[bytes]:
        """Body pieces as they arrive; nothing is held back."""
        if self._head_only:
            return
        while chunk := await self._connection.next_chunk(self._pool.read_timeout):
            yield chunk

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    def close(self) -> None:
        """Give the connection back when the exchange finished cleanly, else drop it."""
        if self.released:
            return
        self.released = True
        connection = self._connection
        if connection.keep_alive():
            self._pool.give_back(connection)
        else:
            connection.abort()
        self._pool.release_slot()


class UpstreamPool:
    """Keep-alive connections to one origin, at most `max_connections` at once (0: no limit).

    `ssl` is the client context for an https origin (built once at start-up, shareable with
    other clients of the same origin), None otherwise."""

    def __init__(
        self,
        origin: UpstreamOrigin,
        *,
        ssl_context: ssl.SSLContext | None,
        connect_timeout: float,
        read_timeout: float,
        max_connections: int,
    ) -> None:
        if origin.tls and ssl_context is None:
            raise ValueError("an https origin needs an SSL context")
        self.origin = origin
        self.ssl = ssl_context
        self.path_prefix = origin.path_prefix  # an origin like http://host/prefix
        self.host_header = origin.host_header
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(max_connections) if max_connections else None

    async def request(
        self,
        method: str,
        target: str,
        headers: Iterable[tuple[str, str]],
        body: bytes | SegmentedPayload | AsyncIterator[bytes] | None,
        content_length: int | None = None,
    ) -> UpstreamResponse:
        """Send one request and wait for the response head.

        `body` is bytes, a segmented payload (exact length), or an async iterator of bytes
        sent with `content_length` when known, chunked otherwise. A reused keep-alive
        connection that turns out to be dead is retried once on a fresh one when the body
        can be sent again.
        """
        replayable = (
            body is None
            or isinstance(body, bytes)
            or (isinstance(body, SegmentedPayload) and not any(body.streamed()))
        )
        head_only = method == "HEAD"
        if self._slots is not None:
            await self._slots.acquire()
        try:
            for attempt in (1, 2):
                connection = await self._connection()
                connection.start_exchange(head_only)
                try:
                    await self._send(connection, method, target, headers, body, content_length)
                    await _within(connection.headers_done, self.read_timeout)
                    return UpstreamResponse(self, connection, head_only)
                except UpstreamClosed:
                    connection.abort()
                    if not (connection.reused and replayable and attempt == 1):
                        raise
                except BaseException:
                    connection.abort()
                    raise
            raise AssertionError("unreachable")
        except BaseException:
            self.release_slot()
            raise

    def release_slot(self) -> None:
        if self._slots is not None:
            self._slots.release()

    async def _connection(self) -> _Connection:
        while self._idle:
            connection = self._idle.pop()
            transport = connection.transport
            if not connection.closed and transport is not None and not transport.is_closing():
                return connection
        loop = asyncio.get_running_loop()
        origin = self.origin
        if origin.socket_path is not None:
            connecting = loop.create_unix_connection(lambda: _Connection(loop), origin.socket_path)
        else:
            connecting = loop.create_connection(
                lambda: _Connection(loop), origin.host, origin.port, ssl=self.ssl
            )
        try:
            _, protocol = await asyncio.wait_for(connecting, self.connect_timeout)
        except TimeoutError:
            raise UpstreamTimedOut(
                f"connecting to the upstream took over {self.connect_timeout:g} s"
            ) from None
        return protocol

    def give_back(self, connection: _Connection) -> None:
        connection.reset_for_reuse()
        self._idle.append(connection)

    async def _send(
        self,
        connection: _Connection,
        method: str,
        target: str,
        headers: Iterable[tuple[str, str]],
        body: Any,
        content_length: int | None,
    ) -> None:
        assert connection.transport is not None
        transport = connection.transport
        # aiohttp decoded the client's header bytes as UTF-8 with surrogateescape: this restores
        # them byte for byte (and its parser refused CR/LF in them, so nothing can be injected).
        head = f"{method} {target} HTTP/1.1\r\nHost: {self.host_header}" + "".join(
            [f"\r\n{name}: {value}" for name, value in headers]
        )
        lines = [head.encode("utf-8", "surrogateescape")]
        if isinstance(body, bytes):
            lines.append(b"\r\nContent-Length: %d\r\n\r\n" % len(body))
            transport.writelines([b"".join(lines), body])
            return
        if isinstance(body, SegmentedPayload):
            lines.append(b"\r\nContent-Length: %d\r\n\r\n" % body.size)
            await body.write_to(transport, b"".join(lines), self._drainer(connection))
            return
        if body is None:
            bodiless = method in ("GET", "HEAD", "DELETE", "OPTIONS", "TRACE")
            lines.append(b"\r\n\r\n" if bodiless else b"\r\nContent-Length: 0\r\n\r\n")
            transport.write(b"".join(lines))
            return
        chunked = content_length is None
        if content_length is None:
            lines.append(b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        else:
            lines.append(b"\r\nContent-Length: %d\r\n\r\n" % content_length)
        transport.write(b"".join(lines))
        async for chunk in body:
            if not chunk:
                continue
            transport.write(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
            await connection.drain(self.read_timeout)
        if chunked:
            transport.write(b"0\r\n\r\n")

    def _drainer(self, connection: _Connection) -> Callable[[], Awaitable[None]]:
        return lambda: connection.drain(self.read_timeout)

    def close(self) -> None:
        for connection in self._idle:
            connection.abort()
        self._idle.clear()
