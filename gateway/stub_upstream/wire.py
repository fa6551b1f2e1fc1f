"""vLLM's answers on the wire, as Starlette writes them: `JSONResponse` (compact JSON, not ASCII
escaped, `Content-Type: application/json` with no charset: Starlette adds one to `text/*` types
only) and `StreamingResponse(media_type="text/event-stream")`, which does get `charset=utf-8`."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

EVENT_STREAM_TYPE = "text/event-stream; charset=utf-8"
JSON_TYPE = "application/json"


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def vllm_json(value: Any, status: int = 200) -> web.Response:
    """A JSON answer, byte for byte as vLLM's."""
    return web.Response(
        body=compact_json(value).encode(), status=status, headers={"Content-Type": JSON_TYPE}
    )


async def start_event_stream(request: web.Request) -> web.StreamResponse:
    """A prepared 200 event stream."""
    response = web.StreamResponse(headers={"Content-Type": EVENT_STREAM_TYPE})
    await response.prepare(request)
    return response
