"""The stub's WebSocket routes: vLLM's realtime transcription shape, and an echo for relay tests.

GET /v1/realtime   as vLLM: `session.created` first; each `input_audio_buffer.append` answered by a
                   `transcription.delta` naming the decoded PCM16 bytes (count, sha256 prefix);
                   `input_audio_buffer.commit` by `transcription.done`; `session.update` taken
                   silently; bad base64 or JSON, or any other event type: an `error` event.
GET /stub/ws/echo  every text and binary message sent back as it came; the text
                   `close <code> <reason>` closes the session from the stub's side; with
                   `X-Stub-Hold: 1` it reads nothing until `StubState.hold` is set
                   (backpressure tests). Offers the subprotocols `stub.echo.v1`, `stub.echo.v2`.

Each ended session appends the close code and reason the stub received to
`StubState.websocket_closes`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import WSMessage, WSMsgType, web

from .state import StubState, stub_state_key

MAX_MESSAGE_BYTES = 16 * 1024**2  # uvicorn's default ws_max_size, which vLLM runs with
ECHO_PROTOCOLS = ("stub.echo.v1", "stub.echo.v2")


async def _open(request: web.Request, protocols: tuple[str, ...] = ()) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(protocols=protocols, max_msg_size=MAX_MESSAGE_BYTES)
    await ws.prepare(request)
    request.app[stub_state_key].websocket_sessions += 1
    return ws


async def _messages(ws: web.WebSocketResponse, state: StubState) -> AsyncIterator[WSMessage]:
    """Text and binary messages until the session ends; the end is recorded."""
    while True:
        message = await ws.receive()
        if message.type in (WSMsgType.TEXT, WSMsgType.BINARY):
            yield message
            continue
        if message.type is WSMsgType.CLOSE:
            state.websocket_closes.append((message.data, message.extra or ""))
        else:
            state.websocket_closes.append((None, ""))
        return


async def realtime(request: web.Request) -> web.WebSocketResponse:
    state = request.app[stub_state_key]
    ws = await _open(request)
    created = {"type": "session.created", "id": f"sess-stub-{state.websocket_sessions}"}
    await ws.send_json({**created, "created": int(time.time())})
    deltas: list[str] = []
    async for message in _messages(ws, state):
        answer = _realtime_answer(message, deltas)
        if answer is not None:
            await ws.send_json(answer)
    return ws


def _realtime_answer(message: WSMessage, deltas: list[str]) -> dict[str, Any] | None:
    try:
        event = json.loads(message.data)
    except (ValueError, TypeError):
        return _error("Invalid JSON", "invalid_json")
    kind = event.get("type") if isinstance(event, dict) else None
    if kind == "session.update":
        return None
    if kind == "input_audio_buffer.append":
        try:
            pcm = base64.b64decode(event.get("audio", ""), validate=True)
        except (binascii.Error, TypeError):
            return _error("Invalid audio data", "invalid_audio")
        deltas.append(f"[{len(pcm)} bytes sha256={hashlib.sha256(pcm).hexdigest()[:12]}]")
        return {"type": "transcription.delta", "delta": deltas[-1]}
    if kind == "input_audio_buffer.commit":
        text = " ".join(deltas)
        deltas.clear()
        return {"type": "transcription.done", "text": text, "usage": None}
    return _error(f"Unknown event type: {kind}", "unknown_event")


def _error(message: str, code: str) -> dict[str, Any]:
    return {"type": "error", "error": message, "code": code}


async def echo_session(request: web.Request) -> web.WebSocketResponse:
    state = request.app[stub_state_key]
    ws = await _open(request, ECHO_PROTOCOLS)
    if request.headers.get("X-Stub-Hold") == "1":
        await state.hold.wait()
    async for message in _messages(ws, state):
        if message.type is WSMsgType.BINARY:
            await ws.send_bytes(message.data)
        elif message.data.startswith("close "):
            _, code, reason = message.data.split(" ", 2)
            await ws.close(code=int(code), message=reason.encode())
            state.websocket_closes.append((ws.close_code, ""))  # the gateway's reply
            break
        else:
            await ws.send_str(message.data)
    return ws
