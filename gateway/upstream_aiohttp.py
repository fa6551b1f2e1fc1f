"""MEASUREMENT ONLY: the upstream pool's interface on aiohttp's ClientSession, to compare with
the lean client by the framing suite and the bench (AUDIO_GATEWAY_UPSTREAM_CLIENT=aiohttp)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterable
from typing import Any

import aiohttp
from aiohttp.abc import AbstractStreamWriter
from yarl import URL

from .body import SegmentedPayload
from .encoder import StreamedAudio
from .origin import UpstreamOrigin
from .upstream import RawHeaders, UpstreamClosed, UpstreamInvalidResponse, UpstreamTimedOut

SKIPPED = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")


class _Segments(aiohttp.payload.Payload):
    def __init__(self, value: SegmentedPayload) -> None:
        super().__init__(value, content_type=None)
        self._size = value.size

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        raise TypeError("not decodable")

    async def write(self, writer: AbstractStreamWriter) -> None:
        for segment in self._value._segments:
            if isinstance(segment, StreamedAudio):
                async for chunk in segment.chunks():
                    await writer.write(chunk)
            else:
                await writer.write(segment)


def _translate(exc: BaseException) -> BaseException:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return exc
    if isinstance(exc, asyncio.TimeoutError):
        return UpstreamTimedOut(str(exc) or "timed out")
    if isinstance(exc, aiohttp.ClientResponseError):
        return UpstreamInvalidResponse(str(exc))
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError):
        return UpstreamClosed(str(exc))
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, aiohttp.ClientError):
        return UpstreamClosed(str(exc))
    return exc


class AiohttpUpstreamResponse:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers: RawHeaders = list(response.raw_headers)
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
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _translate(exc) from exc

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    def close(self) -> None:
        if self.released:
            return
        self.released = True
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


class AiohttpUpstreamPool:
    def __init__(
        self,
        origin: UpstreamOrigin,
        *,
        ssl_context: ssl.SSLContext | None,
        connect_timeout: float,
        read_timeout: float,
        max_connections: int,
    ) -> None:
        self.origin = origin
        self.ssl = ssl_context
        self.path_prefix = origin.path_prefix
        self.host_header = origin.host_header
        scheme = "https" if origin.tls else "http"
        self._base = f"{scheme}://{origin.host_header}"
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector: aiohttp.BaseConnector
            if self.origin.socket_path:
                connector = aiohttp.UnixConnector(
                    self.origin.socket_path, limit=self._max_connections
                )
            else:
                connector = aiohttp.TCPConnector(
                    limit=self._max_connections, ssl=self.ssl if self.ssl else True
                )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=self._connect_timeout, sock_read=self._read_timeout
                ),
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=SKIPPED,
            )
        return self._session

    async def request(
        self,
        method: str,
        target: str,
        headers: Iterable[tuple[str, str]],
        body: bytes | SegmentedPayload | AsyncIterator[bytes] | None,
        content_length: int | None = None,
    ) -> AiohttpUpstreamResponse:
        sent = list(headers)
        data: Any = body
        if isinstance(body, SegmentedPayload):
            data = _Segments(body)
        elif body is not None and not isinstance(body, bytes):
            data = aiohttp.payload.AsyncIterablePayload(body, content_type=None)
            if content_length is not None:
                sent.append(("Content-Length", str(content_length)))
        try:
            response = await self._get_session().request(
                method,
                URL(self._base + target, encoded=True),
                headers=sent,
                data=data,
                allow_redirects=False,
                compress=None,
            )
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _translate(exc) from exc
        return AiohttpUpstreamResponse(response)

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
