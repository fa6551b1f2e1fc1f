"""A lean HTTP/1.1 client for the one upstream: pooled keep-alive connections, httptools parsing.

aiohttp's ClientSession spent about a third of the gateway's CPU per request (request object,
cookie jar, tracing, header normalisation) on work a proxy to one known origin does not need
(measured again, with the framing suite, for issue 9: README, "The encoder and the cache").
This client writes the request head and the body segments straight to the transport and hands
the response back as status, raw headers and body chunks, with backpressure both ways.
Each connection's wire protocol and framing live in `connection.py`.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any

from pydantic import SecretStr

from ..affinity import with_clip_key
from ..auth import with_upstream_key
from ..origin import UpstreamOrigin
from .body import SegmentedPayload
from .connection import (
    RawHeaders,
    UpstreamClosed,
    UpstreamConnection,
    UpstreamInvalidResponse,
    UpstreamTimedOut,
    within,
)

__all__ = [
    "RawHeaders",
    "UpstreamClosed",
    "UpstreamInvalidResponse",
    "UpstreamPool",
    "UpstreamResponse",
    "UpstreamTimedOut",
]


class UpstreamResponse:
    """Status, raw headers and the body of one upstream answer. Always `close()` it."""

    def __init__(self, pool: UpstreamPool, connection: UpstreamConnection, head_only: bool) -> None:
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
        api_key: SecretStr | None = None,
        affinity_headers: Sequence[str] = (),
    ) -> None:
        """With `api_key` (`upstream.api_key`), every request carries its Bearer credential in
        place of the client's Authorization; with `affinity_headers` (`[routing]`), every body
        that carries a clip key sends it in those headers, in place of the client's: one place
        for every route that goes upstream."""
        if origin.tls and ssl_context is None:
            raise ValueError("an https origin needs an SSL context")
        self.origin = origin
        self.ssl = ssl_context
        self.path_prefix = origin.path_prefix  # an origin like http://host/prefix
        self.host_header = origin.host_header
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._idle: list[UpstreamConnection] = []
        self._slots = asyncio.Semaphore(max_connections) if max_connections else None
        self._api_key = api_key if api_key and api_key.get_secret_value() else None
        self._affinity_headers = tuple(affinity_headers)

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
        length = content_length
        if self._api_key is not None:
            headers = with_upstream_key(list(headers), self._api_key)
        if self._affinity_headers and isinstance(body, SegmentedPayload) and body.clip_key:
            headers = with_clip_key(headers, self._affinity_headers, body.clip_key)
        if self._slots is not None:
            await self._slots.acquire()
        try:
            for attempt in (1, 2):
                connection = await self._connection()
                connection.start_exchange(head_only)
                try:
                    await self._send_checked(connection, method, target, headers, body, length)
                    await within(connection.headers_done, self.read_timeout)
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

    async def _connection(self) -> UpstreamConnection:
        while self._idle:
            connection = self._idle.pop()
            transport = connection.transport
            if not connection.closed and transport is not None and not transport.is_closing():
                return connection
        loop = asyncio.get_running_loop()
        origin = self.origin
        if origin.socket_path is not None:
            connecting = loop.create_unix_connection(
                lambda: UpstreamConnection(loop), origin.socket_path
            )
        else:
            connecting = loop.create_connection(
                lambda: UpstreamConnection(loop), origin.host, origin.port, ssl=self.ssl
            )
        try:
            _, protocol = await asyncio.wait_for(connecting, self.connect_timeout)
        except TimeoutError:
            raise UpstreamTimedOut(
                f"connecting to the upstream took over {self.connect_timeout:g} s"
            ) from None
        return protocol

    def give_back(self, connection: UpstreamConnection) -> None:
        connection.reset_for_reuse()
        self._idle.append(connection)

    async def _send_checked(self, connection: UpstreamConnection, *request: Any) -> None:
        """`_send`, failing with the connection's own error when the upstream already closed it.

        uvloop raises RuntimeError for a write on a closed transport (asyncio drops the bytes)."""
        if connection.closed:  # it died before the request went out: a banner, a reset
            raise connection.failure()
        try:
            await self._send(connection, *request)
        except RuntimeError as exc:
            if not connection.closed:
                raise
            raise connection.failure() from exc

    async def _send(
        self,
        connection: UpstreamConnection,
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

    def _drainer(self, connection: UpstreamConnection) -> Callable[[], Awaitable[None]]:
        return lambda: connection.drain(self.read_timeout)

    def close(self) -> None:
        for connection in self._idle:
            connection.abort()
        self._idle.clear()
