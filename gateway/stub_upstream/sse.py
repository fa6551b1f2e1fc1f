"""vLLM's event streams as the stub starts them: Starlette's `StreamingResponse` with
`media_type="text/event-stream"`, which adds `charset=utf-8` to every `text/*` type."""

from __future__ import annotations

from aiohttp import web

EVENT_STREAM_TYPE = "text/event-stream; charset=utf-8"


async def start_event_stream(request: web.Request) -> web.StreamResponse:
    """A prepared 200 event stream."""
    response = web.StreamResponse(headers={"Content-Type": EVENT_STREAM_TYPE})
    await response.prepare(request)
    return response
