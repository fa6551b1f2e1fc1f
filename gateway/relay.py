"""The upstream side: one pooled client session, header policy, buffered vs streamed copy.

Upstream 4xx/5xx answers are responses and are relayed as they are. Transport failures become
502 (unreachable) or 504 (timeout) only before the response to the client has started; after
that the connection is cut, which is all HTTP allows.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from .config import UpstreamConfig
from .errors import UpstreamTimeout, UpstreamUnavailable

log = logging.getLogger(__name__)

HOP_BY_HOP_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
BUFFERED_RESPONSE_MAX_BYTES = 1024 * 1024  # larger or unsized answers are streamed
STREAM_CHUNK_BYTES = 64 * 1024


def create_upstream_session(config: UpstreamConfig) -> aiohttp.ClientSession:
    """The process's one pooled session; it neither decompresses nor adds headers."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=config.max_connections, ttl_dns_cache=300),
        timeout=aiohttp.ClientTimeout(
            total=None,
            connect=config.connect_timeout_seconds,
            sock_read=config.read_timeout_seconds,
        ),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
    )


def upstream_url(origin: str, request: web.Request) -> URL:
    return URL(origin + request.raw_path, encoded=True)


def _connection_named(headers: CIMultiDictProxy[str]) -> set[str]:
    named = set()
    for value in headers.getall("Connection", ()):
        named.update(token.strip().lower() for token in value.split(","))
    return named


def request_headers_for_upstream(request: web.Request, *, body_replaced: bool) -> CIMultiDict[str]:
    """The client's headers minus hop-by-hop ones, Host and the framing aiohttp recomputes.

    aiohttp's server has already decoded any request Content-Encoding, so that header (and the
    length it framed) cannot be forwarded either.
    """
    drop = HOP_BY_HOP_HEADERS | _connection_named(request.headers) | {"host"}
    if body_replaced or "Content-Encoding" in request.headers:
        drop |= {"content-length", "content-encoding"}
    return CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in drop)


def response_headers_for_client(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    drop = HOP_BY_HOP_HEADERS | _connection_named(headers) | {"content-length"}
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in drop)


@contextmanager
def upstream_errors(url: URL) -> Iterator[None]:
    """Translate transport failures into the gateway's 502/504."""
    try:
        yield
    except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
        raise UpstreamTimeout(
            f"the upstream {url.origin()} did not answer in time", code="upstream_timeout"
        ) from exc
    except aiohttp.ClientError as exc:
        raise UpstreamUnavailable(
            f"the upstream {url.origin()} is unreachable: {exc.__class__.__name__}: {exc}",
            code="upstream_unreachable",
        ) from exc


async def relay(
    request: web.Request,
    session: aiohttp.ClientSession,
    url: URL,
    *,
    data: Any,
    headers: CIMultiDict[str],
) -> web.StreamResponse:
    """Send one request upstream and copy its answer back to the client."""
    with upstream_errors(url):
        upstream = await session.request(request.method, url, data=data, headers=headers)
    try:
        if _should_stream(upstream):
            return await _stream_back(request, upstream)
        with upstream_errors(url):
            body = await upstream.read()
        return web.Response(
            status=upstream.status,
            reason=upstream.reason,
            headers=response_headers_for_client(upstream.headers),
            body=body,
        )
    finally:
        upstream.close()


def _should_stream(upstream: aiohttp.ClientResponse) -> bool:
    length = upstream.content_length
    return (
        length is None
        or length > BUFFERED_RESPONSE_MAX_BYTES
        or upstream.content_type == "text/event-stream"
    )


async def _stream_back(
    request: web.Request, upstream: aiohttp.ClientResponse
) -> web.StreamResponse:
    response = web.StreamResponse(
        status=upstream.status,
        reason=upstream.reason,
        headers=response_headers_for_client(upstream.headers),
    )
    response.headers["X-Accel-Buffering"] = "no"
    if upstream.content_length is not None:
        response.content_length = upstream.content_length
    await response.prepare(request)
    try:
        async for chunk in _chunks(upstream):
            await response.write(chunk)
    except (TimeoutError, aiohttp.ClientError) as exc:
        # The status line is gone already: all that is left is to cut the client off.
        log.warning("upstream %s failed mid-response: %r", upstream.url, exc)
        if request.transport is not None:
            request.transport.close()
        return response
    await response.write_eof()
    return response


async def _chunks(upstream: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """Whatever has arrived, as soon as it arrives: SSE events are never held back."""
    while True:
        chunk = await upstream.content.readany()
        if not chunk:
            return
        yield chunk
