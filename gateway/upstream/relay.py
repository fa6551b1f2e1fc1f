"""The upstream side: one pooled client session, header policy, buffered vs streamed copy.

Upstream 4xx/5xx answers are responses and are relayed as they are. Transport failures become
502 (unreachable, TLS verification, not HTTP) or 504 (timeout) only before the upstream's head
has arrived; after that its status stands and a failure cuts the client's transfer short (as
nginx does), whether the body was being streamed or buffered: never a clean end.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Sequence
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from ..config import UpstreamConfig
from ..errors import UpstreamTimeout, UpstreamUnavailable
from ..hop_headers import FRAMING_HEADERS, HOP_BY_HOP_HEADERS, named_in_connection
from .answered import end_stream, ends_event_stream, mark_answered
from .body import SegmentedPayload
from .pool import (
    RawHeaders,
    UpstreamClosed,
    UpstreamInvalidResponse,
    UpstreamPool,
    UpstreamResponse,
    UpstreamTimedOut,
)

log = logging.getLogger("gateway.relay")  # named before the move: log filters key on it

# Headers a router in front of the replicas adds to name the replica that answered: a backend
# address (SMG's `x-smg-routed-worker-id: http://10.0.0.11:8000`), which the gateway's clients
# have no business seeing. Its `x-request-id` names the request, not the replica: relayed.
BACKEND_ADDRESS_HEADERS = frozenset({"x-smg-routed-worker-id"})
BUFFERED_RESPONSE_MAX_BYTES = 1024 * 1024  # larger or unsized answers are streamed
RELAY_FAILURES = (UpstreamClosed, UpstreamTimedOut, OSError)


def create_upstream_pool(
    config: UpstreamConfig,
    ssl_context: ssl.SSLContext | None,
    affinity_headers: Sequence[str] = (),
) -> UpstreamPool:
    """The process's one pool of keep-alive connections to the upstream; `ssl_context` is
    `config.origin().ssl_context()`, built once at start-up (it reads the CA files);
    `affinity_headers` carry each body's clip key (`[routing]`)."""
    return UpstreamPool(
        config.origin(),
        ssl_context=ssl_context,
        connect_timeout=config.connect_timeout_seconds,
        read_timeout=config.read_timeout_seconds,
        max_connections=config.max_connections,
        api_key=config.api_key,
        affinity_headers=affinity_headers,
    )


def upstream_target(pool: UpstreamPool, request: web.Request) -> str:
    """The request target upstream: the origin's own path prefix (if any) plus the client's."""
    return pool.path_prefix + request.raw_path


def request_headers_for_upstream(
    request: web.Request,
    *,
    json_body: bool = False,
    content_type: str | None = None,
    decoded: bool = False,
) -> list[tuple[str, str]]:
    """The client's headers minus hop-by-hop ones, Host, and the framing the relay recomputes.

    Content-Encoding goes with the body it describes (the server does not decode bodies), unless
    `decoded`: the gateway undid it. With `json_body` or `content_type` (a body the gateway
    rewrote) the Content-Type is ours.
    """
    if json_body:
        content_type = "application/json"
    drop = HOP_BY_HOP_HEADERS | named_in_connection(request.headers.getall("Connection", ()))
    drop |= FRAMING_HEADERS
    if decoded:
        drop |= {"content-encoding"}
    if content_type:
        drop |= {"content-type"}
    headers = [(k, v) for k, v in request.headers.items() if k.lower() not in drop]
    if content_type:
        headers.append(("Content-Type", content_type))
    return headers


def names_a_backend(name: str) -> bool:
    """`name` (any case) is a header that gives away the address of a replica behind the
    upstream: never relayed to the client."""
    return name.lower() in BACKEND_ADDRESS_HEADERS


def response_headers_for_client(headers: RawHeaders) -> CIMultiDict[str]:
    """The upstream's headers minus hop-by-hop ones, Content-Length (the relay frames) and those
    that name a backend (`names_a_backend`)."""
    connection = [v.decode("latin-1") for k, v in headers if k.lower() == b"connection"]
    drop = HOP_BY_HOP_HEADERS | named_in_connection(connection) | {"content-length"}
    drop |= BACKEND_ADDRESS_HEADERS
    kept: CIMultiDict[str] = CIMultiDict()
    for key, value in headers:
        name = key.decode("latin-1")
        if name.lower() not in drop:
            kept.add(name, value.decode("utf-8", "surrogateescape"))
    return kept


class upstream_errors:
    """Translate transport failures into the gateway's 502/504.

    A class, not a @contextmanager generator: it runs twice on every relayed request."""

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> None:
        if exc is None:
            return
        origin = self.pool.origin.label
        if isinstance(exc, UpstreamTimedOut):
            raise UpstreamTimeout(
                f"the upstream {origin} did not answer in time: {exc}", code="upstream_timeout"
            ) from exc
        if isinstance(exc, ssl.SSLCertVerificationError):
            message = f"TLS certificate verification of the upstream {origin} failed: {exc}"
        elif isinstance(exc, UpstreamInvalidResponse):
            message = f"the upstream {origin} answered with something that is not HTTP: {exc}"
        elif isinstance(exc, OSError | UpstreamClosed):
            message = f"the upstream {origin} is unreachable: {exc.__class__.__name__}: {exc}"
        else:
            return
        raise UpstreamUnavailable(message, code="upstream_unreachable") from exc


async def relay(
    request: web.Request,
    pool: UpstreamPool,
    target: str,
    *,
    headers: list[tuple[str, str]],
    body: bytes | SegmentedPayload | AsyncIterator[bytes] | None,
    content_length: int | None = None,
) -> web.StreamResponse:
    """Send one request upstream and copy its answer back to the client."""
    with upstream_errors(pool):
        upstream = await pool.request(request.method, target, headers, body, content_length)
    return await relay_answer(request, pool, upstream)


async def relay_answer(
    request: web.Request, pool: UpstreamPool, upstream: UpstreamResponse
) -> web.StreamResponse:
    """Copy an upstream answer back to the client as it is (buffered or streamed); closes it."""
    try:
        if _should_stream(request, upstream):
            return await _stream_back(request, upstream, upstream.chunks())
        return await _buffer_back(request, upstream)
    finally:
        upstream.close()


def _should_stream(request: web.Request, upstream: UpstreamResponse) -> bool:
    if request.method == "HEAD" or upstream.status in (204, 304):
        return False  # no body, whatever the headers say
    length = upstream.content_length
    content_type = upstream.header(b"content-type") or b""
    return (
        length is None
        or length > BUFFERED_RESPONSE_MAX_BYTES
        or content_type.startswith(b"text/event-stream")
    )


async def _buffer_back(request: web.Request, upstream: UpstreamResponse) -> web.StreamResponse:
    """A small sized answer, sent in one piece; one cut short is relayed as far as it came."""
    received: list[bytes] = []
    try:
        async for chunk in upstream.chunks():
            received.append(chunk)
    except RELAY_FAILURES as exc:  # the upstream's status stands: the client sees the cut
        return await _stream_back(request, upstream, _then_fail(received, exc))
    headers = response_headers_for_client(upstream.headers)
    if request.method == "HEAD" and upstream.content_length is not None:
        # It describes the body a GET would get; nginx relays it too. (aiohttp drops it on 304.)
        headers["Content-Length"] = str(upstream.content_length)
    return web.Response(status=upstream.status, headers=headers, body=b"".join(received))


async def _then_fail(received: list[bytes], error: BaseException) -> AsyncIterator[bytes]:
    yield b"".join(received)
    raise error


async def _stream_back(
    request: web.Request, upstream: UpstreamResponse, chunks: AsyncIterator[bytes]
) -> web.StreamResponse:
    response = web.StreamResponse(
        status=upstream.status, headers=response_headers_for_client(upstream.headers)
    )
    response.headers["X-Accel-Buffering"] = "no"
    if upstream.content_length is not None:
        response.content_length = upstream.content_length
    await response.prepare(request)
    events = (upstream.header(b"content-type") or b"").startswith(b"text/event-stream")
    try:
        async for chunk in chunks:
            await response.write(chunk)
            if events and ends_event_stream(chunk):
                mark_answered(request, response)  # the upstream's end of body may lag
    except RELAY_FAILURES as exc:
        # The status line is gone already: all that is left is to cut the client off.
        log.warning("upstream failed mid-response to %s: %r", request.path, exc)
        if request.transport is not None:
            request.transport.close()
        return response
    return await end_stream(request, response)


def request_body_length(request: web.Request) -> int | None:
    """The client's Content-Length: exact, as the server never decodes a body."""
    return request.content_length


async def request_body_chunks(request: web.Request) -> AsyncIterator[bytes]:
    """The client's body as it arrives, for the passthrough relay."""
    while chunk := await request.content.readany():
        yield chunk
