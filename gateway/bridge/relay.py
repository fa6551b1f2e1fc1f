"""The bridge's I/O: send the chat request upstream, turn its answer into a Responses answer.

A non-2xx upstream answer is relayed as it is. A 2xx JSON answer becomes one Responses object;
a 2xx event stream becomes Responses events, written as each upstream chunk is translated
(nothing is held back beyond an incomplete SSE line). Transport failures before the answer
starts are the usual 502/504; after it started the client connection is cut, as in `relay`.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import msgspec
from aiohttp import web

from ..upstream.answered import end_stream, event_stream
from ..upstream.body import SegmentedPayload
from ..upstream.pool import UpstreamPool, UpstreamResponse
from ..upstream.relay import RELAY_FAILURES, relay_answer, upstream_errors
from . import BridgedRequest, ChatStreamTranslator, ResponseIds, encode_event
from .answer import chat_to_response
from .outputs import invalid_answer
from .stream_items import Event

log = logging.getLogger("gateway.bridge_relay")  # named before the move: log filters key on it

CHAT_COMPLETIONS_PATH = "/v1/chat/completions"
# The gateway must read the answer it translates: no compressed upstream answers.
BRIDGE_DROPPED_HEADERS = frozenset({"accept-encoding"})


def chat_target(pool: UpstreamPool, request: web.Request) -> str:
    """The upstream's chat-completions target, with the client's query string kept."""
    query = f"?{request.query_string}" if request.query_string else ""
    return f"{pool.path_prefix}{CHAT_COMPLETIONS_PATH}{query}"


def bridge_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers if k.lower() not in BRIDGE_DROPPED_HEADERS]


async def relay_bridged(
    request: web.Request,
    pool: UpstreamPool,
    *,
    headers: list[tuple[str, str]],
    body: SegmentedPayload,
    bridged: BridgedRequest,
) -> web.StreamResponse:
    """Send `bridged.chat` (spliced into `body`) to the chat route and answer as Responses."""
    target = chat_target(pool, request)
    with upstream_errors(pool):
        upstream = await pool.request("POST", target, bridge_headers(headers), body)
    return await bridged_answer(request, pool, upstream, bridged)


async def bridged_answer(
    request: web.Request, pool: UpstreamPool, upstream: UpstreamResponse, bridged: BridgedRequest
) -> web.StreamResponse:
    """The upstream's chat answer, as the Responses answer of `bridged`; closes `upstream`."""
    if not 200 <= upstream.status < 300:
        return await relay_answer(request, pool, upstream)
    ids = ResponseIds.from_hex(uuid.uuid4().hex, int(time.time()))
    metadata = bridged.chat.get("metadata")  # what the sidechannel left, echoed back
    try:
        content_type = upstream.header(b"content-type") or b""
        if content_type.startswith(b"text/event-stream"):
            translator = ChatStreamTranslator(bridged, ids, metadata)
            return await _stream_events(request, upstream, translator)
        with upstream_errors(pool):
            raw = await upstream.read()
        response = chat_to_response(_json(raw), bridged, ids, metadata)
        return web.Response(body=msgspec.json.encode(response), content_type="application/json")
    finally:
        upstream.close()


def _json(raw: bytes) -> Any:
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        raise invalid_answer("its body is not JSON") from None


async def _stream_events(
    request: web.Request, upstream: UpstreamResponse, translator: ChatStreamTranslator
) -> web.StreamResponse:
    response = event_stream()
    await response.prepare(request)
    await _write(response, translator.start())
    try:
        async for chunk in upstream.chunks():
            await _write(response, translator.feed_sse(chunk))
    except RELAY_FAILURES as exc:
        log.warning("upstream failed mid-stream of a bridged %s: %r", request.path, exc)
        if request.transport is not None:
            request.transport.close()
        return response
    return await end_stream(request, response, b"".join(map(encode_event, translator.finish())))


async def _write(response: web.StreamResponse, events: list[Event]) -> None:
    if events:
        await response.write(b"".join(map(encode_event, events)))
