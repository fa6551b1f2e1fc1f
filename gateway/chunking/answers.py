"""The client's one answer to a chunked request: chat completions or the Responses bridge,
streamed or not. The pieces' answers come from `PieceRuns`, merged by `merge.py`.

Before anything is written a failing piece gets its own status and error; once the stream has
started, a piece's in-stream error chunk is relayed (then `[DONE]`, as vLLM ends such a stream),
and any other failure cuts the connection, as `relay` does: never a clean end.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import msgspec
from aiohttp import web

from ..bridge import (
    BridgedRequest,
    ChatStreamTranslator,
    ResponseIds,
    chat_to_response,
    encode_event,
)
from ..errors import GatewayError
from ..upstream.answered import end_stream, event_stream
from .bodies import ChunkedRequest
from .fanout import PieceErrorChunk, PieceFailed, PieceRuns
from .merge import Chunk, StreamMerge, merge_completions

log = logging.getLogger(__name__)


async def answer_chunked(
    request: web.Request,
    runs: PieceRuns,
    chunked: ChunkedRequest,
    join: str,
    bridged: BridgedRequest | None,
) -> web.StreamResponse:
    """Run the pieces and answer the client once, as chat completions or (with `bridged`) as
    the Responses bridge would have answered the unsplit request."""
    if chunked.stream:
        sink: _Sink = _ChatSink() if bridged is None else _BridgeSink(bridged)
        return await _stream(request, runs, StreamMerge(join, chunked.include_usage), sink)
    try:
        merged = merge_completions(await runs.completions(), join)
    except (PieceFailed, PieceErrorChunk) as failure:
        return failure.response()
    if bridged is not None:
        metadata = bridged.chat.get("metadata")
        merged = chat_to_response(merged, bridged, _response_ids(), metadata)
    return web.Response(body=msgspec.json.encode(merged), content_type="application/json")


def _response_ids() -> ResponseIds:
    return ResponseIds.from_hex(uuid.uuid4().hex, int(time.time()))


async def _stream(
    request: web.Request, runs: PieceRuns, merge: StreamMerge, sink: _Sink
) -> web.StreamResponse:
    response: web.StreamResponse | None = None
    try:
        async for index, chunk in runs.chunks():
            for out in merge.piece_chunk(index, chunk):
                response = response or await _start(request, sink)
                await response.write(sink.chunk(out))
        response = response or await _start(request, sink)
        last = b"".join(map(sink.chunk, merge.finish())) + sink.end()
    except (PieceFailed, PieceErrorChunk, GatewayError) as failure:
        if response is None:
            if isinstance(failure, GatewayError):
                raise
            return failure.response()
        if not isinstance(failure, PieceErrorChunk):
            log.warning("a piece failed mid-stream of %s: %s", request.path, failure)
            if request.transport is not None:
                request.transport.close()  # the status is gone: cut, as the relay does
            return response
        last = sink.chunk(failure.chunk) + sink.end()
    except OSError:  # the client went away (upstream failures arrive as GatewayErrors)
        return _client_gone(request, response)
    try:
        return await end_stream(request, response, last)
    except OSError:
        return _client_gone(request, response)


def _client_gone(request: web.Request, response: web.StreamResponse | None) -> web.StreamResponse:
    if request.transport is not None:
        request.transport.close()
    return response or web.Response(status=499)


async def _start(request: web.Request, sink: _Sink) -> web.StreamResponse:
    response = event_stream()
    await response.prepare(request)
    if opening := sink.start():
        await response.write(opening)
    return response


class _Sink:
    """How merged chat chunks are written to the client."""

    def start(self) -> bytes:
        return b""

    def chunk(self, chunk: Chunk) -> bytes:
        raise NotImplementedError

    def end(self) -> bytes:
        raise NotImplementedError


class _ChatSink(_Sink):
    def chunk(self, chunk: Chunk) -> bytes:
        return b"data: %b\n\n" % msgspec.json.encode(chunk)

    def end(self) -> bytes:
        return b"data: [DONE]\n\n"


class _BridgeSink(_Sink):
    """The bridge's Responses events, from the merged chat chunks."""

    def __init__(self, bridged: BridgedRequest) -> None:
        self._translator = ChatStreamTranslator(
            bridged, _response_ids(), bridged.chat.get("metadata")
        )

    def start(self) -> bytes:
        return _events(self._translator.start())

    def chunk(self, chunk: Chunk) -> bytes:
        return _events(self._translator.feed(msgspec.json.encode(chunk)))

    def end(self) -> bytes:
        return _events(self._translator.finish())


def _events(events: list[dict[str, Any]]) -> bytes:
    return b"".join(map(encode_event, events))
