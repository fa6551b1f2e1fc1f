"""One upstream connection: HTTP/1.1 response framing (RFC 9112) on an asyncio protocol, llhttp.

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

import httptools

RawHeaders = list[tuple[bytes, bytes]]
MAX_BUFFERED_BODY_BYTES = 4 * 1024 * 1024  # pause reading the upstream above this


class UpstreamClosed(ConnectionError):
    """The upstream closed or broke the connection before the response was complete."""


class UpstreamInvalidResponse(UpstreamClosed):
    """The upstream answered with something that is not an HTTP/1.x response."""


class UpstreamTimedOut(TimeoutError):
    """Connecting, or waiting for the next bytes of the response, took too long."""


class UpstreamConnection(asyncio.Protocol):
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
        # The head and the body are separate writes: never wait on Nagle (TCP only: a Unix
        # socket has no Nagle, and refuses the option).
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.idle or self.complete:
            self.abort()  # a stale answer, a 408 before closing, a body after a 204: not ours
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamInvalidResponse("a protocol switch nobody asked for"))
            self.abort()
        except httptools.HttpParserError as exc:
            if not self.complete:
                reason = exc.__context__ if isinstance(exc.__context__, UpstreamClosed) else exc
                self._fail(UpstreamInvalidResponse(str(reason) or type(reason).__name__))
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
        if self.complete:  # a second answer after ours, in the same read: out of turn
            self._keep_alive = False
            return
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

    # used by the pool and its responses ----------------------------------------------------------

    async def next_chunk(self, timeout: float) -> bytes:
        """The next piece of body, b"" at its end."""
        while not self._chunks:
            if self.complete:
                return b""
            if self._error is not None:
                raise self._error
            self._data_waiter = self._loop.create_future()
            await within(self._data_waiter, timeout)
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._read_paused and self._buffered < MAX_BUFFERED_BODY_BYTES // 2 and self.transport:
            self._read_paused = False
            self.transport.resume_reading()
        return chunk

    async def drain(self, timeout: float) -> None:
        if self._write_paused:
            self._drain_waiter = self._loop.create_future()
            await within(self._drain_waiter, timeout)
        if self.closed:
            raise UpstreamClosed("the upstream closed the connection while the body was sent")

    def failure(self) -> BaseException:
        """Why the connection ended: the error recorded for it, else a plain close."""
        return self._error or UpstreamClosed("the upstream closed the connection")

    def keep_alive(self) -> bool:
        return self.complete and not self.closed and self._keep_alive

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, error: BaseException) -> None:
        if self._error is None:  # the first cause stands (the close that follows is its effect)
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


async def within(future: asyncio.Future[None], timeout: float) -> None:
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
