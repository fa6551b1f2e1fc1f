"""A streamed answer written to its end is final.

The server cancels a handler whose client disconnects (or a write to the gone client fails).
When that happens once the client has the whole answer (the handler was still releasing what
the request held, or waiting for the upstream's end of body after relaying its last event), it
changes nothing the client saw, so the error middleware counts and logs the answer's own status
instead of 499 (`answered_in_full`, read by `app.errors_as_json`). A streamed answer counts as
whole:

- once `end_stream` wrote its last bytes and the body's end, in one write (the gateway's own
  streams: the chunked merge, the Responses bridge), or the relay's end of a copied body;
- once the relay copied an event stream's `data: [DONE]`, the event that ends every OpenAI
  (and vLLM) chat and completions stream: nothing but the body's end comes after it.

The event streams the gateway writes itself say `charset=utf-8`, as vLLM's own do (Starlette
adds it to every `text/*` type): a client that follows the header decodes non-ASCII text right.
"""

from __future__ import annotations

from aiohttp import web

EVENT_STREAM_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # nginx in front: relay each event as it comes
}
DONE_EVENT = b"data: [DONE]"
DONE_TAIL_BYTES = 32  # the event and its line ends, however they are spelled
answered_key = web.RequestKey("answered_key", web.StreamResponse)


def event_stream() -> web.StreamResponse:
    """A 200 event stream with the gateway's headers, not yet prepared."""
    return web.StreamResponse(headers=EVENT_STREAM_HEADERS)


async def end_stream(
    request: web.Request, response: web.StreamResponse, last: bytes = b""
) -> web.StreamResponse:
    """Write `last` and the end of `response`'s body together; from then on the request
    counts as answered in full. Returns `response`."""
    await response.write_eof(last)
    mark_answered(request, response)
    return response


def mark_answered(request: web.Request, response: web.StreamResponse) -> None:
    """`response` has reached the client whole (what may follow is only the body's end)."""
    request[answered_key] = response


def ends_event_stream(chunk: bytes) -> bool:
    """Whether an event-stream chunk ends with the stream's last event, `data: [DONE]`."""
    return chunk[-DONE_TAIL_BYTES:].rstrip().endswith(DONE_EVENT)  # no copy of a long chunk


def answered_in_full(request: web.Request) -> web.StreamResponse | None:
    """The streamed answer that reached the client whole, if any."""
    return request.get(answered_key)
