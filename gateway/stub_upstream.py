"""A vLLM-faithful stub upstream, for tests, `audio-gateway demo` and `bench/`.

It parses chat-completions and Responses bodies the way vLLM's OpenAI server does, rejects
what vLLM would reject (unknown content parts, non-audio MIME types, bad base64, undecodable
audio, `file://` outside its allowed media path, non-string Responses metadata), decodes every
clip, and answers with what it got: per clip the sha256 of the decoded bytes, MIME type,
size, duration and sample rate. Streams SSE when asked. Run alone with
`python -m gateway.stub_upstream --port 8000`.
"""

from __future__ import annotations

import argparse
import asyncio
import binascii
import hashlib
import io
import json
import os
import re
import time
import wave
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

import msgspec
import pybase64
from aiohttp import web

try:  # soundfile decodes FLAC/Ogg; WAV needs only the standard library.
    import soundfile
except (ImportError, OSError):  # pragma: no cover - depends on the machine
    soundfile = None

INPUT_AUDIO_FORMATS = frozenset({"wav", "mp3", "flac", "m4a", "ogg", "opus", "webm", "aac"})
CHAT_PART_KEYS = {
    "text": "text",
    "image_url": "image_url",
    "audio_url": "audio_url",
    "input_audio": "input_audio",
    "video_url": "video_url",
    "file": "file",
    "refusal": "refusal",
}
RESPONSES_PART_KEYS = {
    "input_text": "text",
    "output_text": "text",
    "input_image": "image_url",
    "input_audio": "input_audio",
    "input_file": "file_id",
    "audio_url": "audio_url",
}
_DATA_URI = re.compile(r"^data:([^;,]+)((?:;[^;,]+)*);base64,", re.ASCII)


class StubRejection(Exception):
    """What vLLM would answer 400 to."""


@dataclass
class ReceivedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class StubState:
    allowed_local_media_path: str | None = None
    record: bool = True
    requests: list[ReceivedRequest] = field(default_factory=list)
    request_count: int = 0
    audio_requests: int = 0
    rejected: int = 0
    streams_finished: int = 0
    cancelled: int = 0
    hold: asyncio.Event = field(default_factory=asyncio.Event)


stub_state_key = web.AppKey("stub_state_key", StubState)


@dataclass(frozen=True)
class ClipReport:
    source: str  # "data" or "file"
    mime: str
    container: str
    bytes: int
    sha256: str
    duration_seconds: float | None
    sample_rate: int | None
    channels: int | None
    uuid: str | None

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def create_stub_app(
    allowed_local_media_path: str | None = None, *, record: bool = True
) -> web.Application:
    app = web.Application(client_max_size=2 * 1024**3, middlewares=[_count])
    app[stub_state_key] = StubState(
        allowed_local_media_path=os.path.realpath(allowed_local_media_path)
        if allowed_local_media_path
        else None,
        record=record,
    )
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/responses", responses)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", vllm_health)
    app.router.add_get("/metrics", vllm_metrics)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_get("/stub/hang", hang)
    app.router.add_get("/stub/slow", slow)
    app.router.add_route("*", "/stub/status/{code}", status)
    app.router.add_route("*", "/{tail:.*}", echo)
    return app


@web.middleware
async def _count(request: web.Request, handler: Any) -> web.StreamResponse:
    state = request.app[stub_state_key]
    state.request_count += 1
    if state.record:
        body = await request.read()
        state.requests.append(
            ReceivedRequest(request.method, request.path_qs, dict(request.headers), body)
        )
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except StubRejection as exc:
        state.rejected += 1
        return vllm_error(str(exc))


def vllm_error(message: str, status: int = 400) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": "BadRequestError", "param": None, "code": status}},
        status=status,
    )


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = msgspec.json.decode(await request.read())  # as fast as vLLM's pydantic-core
    except msgspec.DecodeError as exc:
        raise StubRejection(f"invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise StubRejection("the body must be a JSON object")
    return body


# --- chat completions -------------------------------------------------------------------------


async def chat_completions(request: web.Request) -> web.StreamResponse:
    body = await _json_body(request)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise StubRejection("'messages' must be a non-empty list")
    state = request.app[stub_state_key]
    clips: list[ClipReport] = []
    for message in messages:
        clips.extend(await _chat_message_clips(message, state))
    report = _report(body, clips, messages[-1] if messages else None)
    state.audio_requests += bool(clips)
    if body.get("stream"):
        return await _stream_chat(request, body, report)
    return web.json_response(
        {
            "id": f"chatcmpl-stub-{state.request_count}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stub"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": _summary(clips)},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            "stub": report,
        }
    )


async def _chat_message_clips(message: Any, state: StubState) -> list[ClipReport]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise StubRejection("each message must be an object with a 'role'")
    content = message.get("content")
    if content is None or isinstance(content, str):
        return []
    if not isinstance(content, list):
        raise StubRejection("message content must be a string, a list of parts or null")
    return [clip for part in content if (clip := await _part_clip(part, CHAT_PART_KEYS, state))]


async def _part_clip(part: Any, known: dict[str, str], state: StubState) -> ClipReport | None:
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        raise StubRejection(f"a content part must be an object with a 'type': {part!r:.80}")
    kind = part["type"]
    if kind not in known:
        raise StubRejection(f"Unknown part type: {kind}")
    extra = set(part) - {"type", known[kind], "uuid"}
    if extra:
        raise StubRejection(f"unexpected keys {sorted(extra)} in a {kind} part")
    if known[kind] not in part:
        raise StubRejection(f"a {kind} part needs its {known[kind]!r} field")
    uuid = part.get("uuid")
    if uuid is not None and not isinstance(uuid, str):
        raise StubRejection("a part's uuid must be a string")
    if kind == "audio_url":
        return await _audio_url_clip(part["audio_url"], state, uuid)
    if kind == "input_audio":
        return _input_audio_clip(part["input_audio"], uuid)
    return None


async def _audio_url_clip(value: Any, state: StubState, uuid: str | None) -> ClipReport:
    url = value.get("url") if isinstance(value, dict) else None
    if not isinstance(url, str):
        raise StubRejection("audio_url.url must be a string")
    if url.startswith("data:"):
        match = _DATA_URI.match(url)
        if match is None:
            raise StubRejection("audio data URIs must be 'data:<mime>;base64,<data>'")
        mime = match.group(1).lower()
        if not mime.startswith("audio/"):
            raise StubRejection(f"data URI MIME type {mime!r} is not audio")
        return decode_audio(_b64(url[match.end() :]), "data", mime, uuid)
    if url.startswith("file:"):
        data = await _read_local_media(url, state)
        return decode_audio(data, "file", "", uuid)
    raise StubRejection(f"the stub fetches no remote media: {url[:40]!r}")


def _input_audio_clip(value: Any, uuid: str | None) -> ClipReport:
    if not isinstance(value, dict) or not isinstance(value.get("data"), str):
        raise StubRejection("input_audio needs a base64 string 'data'")
    fmt = value.get("format")
    if fmt not in INPUT_AUDIO_FORMATS:
        raise StubRejection(
            f"input_audio.format {fmt!r} is not one of {sorted(INPUT_AUDIO_FORMATS)}"
        )
    if value["data"].startswith("data:"):
        raise StubRejection("input_audio.data is bare base64, not a data URI")
    return decode_audio(_b64(value["data"]), "data", f"audio/{fmt}", uuid)


def _b64(payload: str) -> bytes:
    try:
        return pybase64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise StubRejection("audio data is not valid base64") from None


async def _read_local_media(url: str, state: StubState) -> bytes:
    """As vLLM's --allowed-local-media-path: only files under that directory are read."""
    if state.allowed_local_media_path is None:
        raise StubRejection("Cannot load local files without `--allowed-local-media-path`.")
    parsed = urlparse(url)
    path = os.path.realpath(unquote(parsed.path))
    root = state.allowed_local_media_path
    if not (path == root or path.startswith(root.rstrip(os.sep) + os.sep)):
        raise StubRejection(
            f"The file path {path} must be a subpath of `--allowed-local-media-path` {root}."
        )
    try:
        return await asyncio.to_thread(_read_file, path)
    except OSError as exc:
        raise StubRejection(f"cannot read {path}: {exc.strerror}") from None


def _read_file(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def decode_audio(data: bytes, source: str, mime: str, uuid: str | None) -> ClipReport:
    """Decode the clip as vLLM's audio loader would, by content; raise when it cannot."""
    if not data:
        raise StubRejection("empty audio")
    container = _container(data[:12])
    duration = rate = channels = None
    if container == "wav":
        try:
            with wave.open(io.BytesIO(data)) as clip:
                rate, channels = clip.getframerate(), clip.getnchannels()
                frames = clip.getnframes()
                clip.readframes(min(frames, 16))
            duration = frames / rate
        except (wave.Error, EOFError) as exc:
            raise StubRejection(f"failed to decode WAV audio: {exc}") from None
    elif container in ("flac", "ogg") and soundfile is not None:
        try:
            info = soundfile.info(io.BytesIO(data))
        except RuntimeError as exc:
            raise StubRejection(f"failed to decode {container} audio: {exc}") from None
        rate, channels, duration = info.samplerate, info.channels, info.duration
    elif container is None:
        raise StubRejection("failed to decode audio: no known audio container")
    return ClipReport(
        source=source,
        mime=mime,
        container=container,
        bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        duration_seconds=duration,
        sample_rate=rate,
        channels=channels,
        uuid=uuid,
    )


def _container(head: bytes) -> str | None:
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "ogg"
    if head[4:8] == b"ftyp":
        return "mp4"
    if head[:3] == b"ID3" or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "mp3"
    return None


def _report(body: dict[str, Any], clips: list[ClipReport], last: Any) -> dict[str, Any]:
    parts = last.get("content") if isinstance(last, dict) else None
    return {
        "clips": [clip.to_json() for clip in clips],
        "metadata": body.get("metadata"),
        "has_metadata": "metadata" in body,
        "last_message_part_types": [p.get("type") for p in parts if isinstance(p, dict)]
        if isinstance(parts, list)
        else None,
    }


def _summary(clips: list[ClipReport]) -> str:
    if not clips:
        return "no audio"
    return "; ".join(
        f"{c.container} {c.bytes} B {c.duration_seconds or 0:.2f} s sha256={c.sha256[:12]}"
        for c in clips
    )


async def _stream_chat(
    request: web.Request, body: dict[str, Any], report: dict[str, Any]
) -> web.StreamResponse:
    response = await _start_sse(request)
    base = {
        "id": "chatcmpl-stub",
        "object": "chat.completion.chunk",
        "model": body.get("model", "stub"),
    }
    first = {**base, "choices": [{"index": 0, "delta": {"role": "assistant"}}], "stub": report}
    await _sse(response, first)
    await _maybe_hold(request)
    for word in _summary([ClipReport(**c) for c in report["clips"]]).split(" "):
        await _sse(response, {**base, "choices": [{"index": 0, "delta": {"content": word + " "}}]})
    await _sse(response, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    await response.write(b"data: [DONE]\n\n")
    return await _finish_sse(request, response)


# --- responses --------------------------------------------------------------------------------


async def responses(request: web.Request) -> web.StreamResponse:
    body = await _json_body(request)
    metadata = body.get("metadata")
    if metadata is not None and (
        not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values())
    ):
        raise StubRejection("metadata must map strings to strings")
    items = body.get("input")
    state = request.app[stub_state_key]
    clips: list[ClipReport] = []
    last: Any = None
    if isinstance(items, list):
        for item in items:
            clips.extend(await _responses_item_clips(item, state))
            last = item
    elif not isinstance(items, str):
        raise StubRejection("'input' must be a string or a list of items")
    report = _report(body, clips, last)
    state.audio_requests += bool(clips)
    result = {
        "id": f"resp-stub-{state.request_count}",
        "object": "response",
        "status": "completed",
        "model": body.get("model", "stub"),
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": _summary(clips)}],
            }
        ],
        "stub": report,
    }
    if not body.get("stream"):
        return web.json_response(result)
    response = await _start_sse(request)
    await _sse(
        response,
        {"type": "response.created", "response": {**result, "status": "in_progress"}},
        "response.created",
    )
    await _maybe_hold(request)
    await _sse(
        response,
        {"type": "response.output_text.delta", "delta": _summary(clips)},
        "response.output_text.delta",
    )
    await _sse(response, {"type": "response.completed", "response": result}, "response.completed")
    return await _finish_sse(request, response)


async def _responses_item_clips(item: Any, state: StubState) -> list[ClipReport]:
    if not isinstance(item, dict):
        raise StubRejection("each input item must be an object")
    if item.get("type", "message") != "message":
        return []
    if not isinstance(item.get("role"), str):
        raise StubRejection("a message item needs a 'role'")
    content = item.get("content")
    if isinstance(content, str):
        return []
    if not isinstance(content, list):
        raise StubRejection("message content must be a string or a list of parts")
    return [c for part in content if (c := await _part_clip(part, RESPONSES_PART_KEYS, state))]


# --- SSE plumbing -----------------------------------------------------------------------------


async def _start_sse(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    return response


async def _sse(
    response: web.StreamResponse, data: dict[str, Any], event: str | None = None
) -> None:
    prefix = f"event: {event}\n" if event else ""
    await response.write(f"{prefix}data: {json.dumps(data)}\n\n".encode())


async def _maybe_hold(request: web.Request) -> None:
    """With `X-Stub-Hold: 1` the stream pauses after its first event until `release()`."""
    if request.headers.get("X-Stub-Hold") == "1":
        await request.app[stub_state_key].hold.wait()


async def _finish_sse(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    await response.write_eof()
    request.app[stub_state_key].streams_finished += 1
    return response


# --- other vLLM routes, and test helpers ------------------------------------------------------


async def models(request: web.Request) -> web.Response:
    return web.json_response(
        {
            "object": "list",
            "data": [{"id": "stub-audio-model", "object": "model", "owned_by": "stub"}],
        }
    )


async def vllm_health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def vllm_metrics(request: web.Request) -> web.Response:
    state = request.app[stub_state_key]
    text = (
        "# TYPE vllm:request_success_total counter\n"
        f"vllm:request_success_total {state.request_count}\n"
    )
    return web.Response(text=text, content_type="text/plain")


async def tokenize(request: web.Request) -> web.Response:
    body = await _json_body(request)
    tokens = [len(word) for word in str(body.get("prompt", "")).split()]
    return web.json_response({"tokens": tokens, "count": len(tokens), "max_model_len": 4096})


async def echo(request: web.Request) -> web.Response:
    """Any other route: says what arrived, so passthrough can be checked byte for byte."""
    body = await request.read()
    return web.json_response(
        {
            "method": request.method,
            "path_qs": request.path_qs,
            "headers": dict(request.headers),
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "body_bytes": len(body),
        },
        headers={"X-Stub-Echo": "1"},
    )


async def status(request: web.Request) -> web.Response:
    code = int(request.match_info["code"])
    return web.json_response(
        {"error": {"message": f"stub status {code}", "code": code}}, status=code
    )


async def slow(request: web.Request) -> web.Response:
    await asyncio.sleep(float(request.query.get("seconds", "5")))
    return web.json_response({"slow": True})


async def hang(request: web.Request) -> web.Response:
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        request.app[stub_state_key].cancelled += 1
        raise
    raise AssertionError("unreachable")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--allowed-local-media-path", default=None)
    args = parser.parse_args(argv)
    app = create_stub_app(args.allowed_local_media_path, record=False)
    web.run_app(
        app, host=args.host, port=args.port, access_log=None, handler_cancellation=True, print=None
    )


if __name__ == "__main__":
    main()
