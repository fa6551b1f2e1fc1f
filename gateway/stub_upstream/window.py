"""The stub as a model with a short audio window, and as a slow, observable one.

`ModelWindow` (installed by `create_stub_app(window=...)`, CLI `--window-seconds`) decodes
every clip of a chat request and:

- keeps only the first `seconds` of a longer clip (`mode="truncate"`, as Qwen2-Audio does
  silently) or refuses the request with a vLLM-like 400 (`mode="refuse"`, as MiniCPM-o does);
- answers with what the model kept, one word per clip (`HeardClip.word`): frames, sample rate,
  channels, seconds and the sha256 of the decoded PCM (`pcm_sha256`), so a test can check each
  piece of a split clip and that the pieces' samples concatenate to the clip's;
- waits `delay_seconds + delay_per_audio_second x seconds of audio` before answering (a model's
  time grows with its input), and `rule(clips, arrival)` can delay chosen requests, fail
  them with a status, or end their stream with vLLM's in-stream error chunk;
- counts requests in flight (and the most at once) and the ones cancelled before answering.

A uuid-only part is heard as vLLM hears it: as the clip first sent with its data under that
uuid (kept here, up to `HELD_MAX_BYTES`); one the window never heard adds nothing, and the chat
handler answers it as vLLM's cache does (a miss is its 400).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import io
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
from aiohttp import web
from cachetools import LRUCache

from .media import DATA_URI, StubRejection, b64_bytes
from .wire import start_event_stream

try:  # decoding needs soundfile (a test and bench dependency)
    import numpy
    import soundfile
except (ImportError, OSError):  # pragma: no cover - depends on the machine
    soundfile = None

WindowMode = Literal["truncate", "refuse"]
HELD_MAX_BYTES = 256 * 1024**2  # the clips kept for uuid-only parts, by their encoded bytes
ANSWER_KEY = web.RequestKey("stub_window_answer", str)  # the chat handler says this text


@dataclass(frozen=True, slots=True)
class HeardClip:
    """One clip as the windowed model heard it."""

    frames: int  # kept
    total_frames: int  # in the clip
    sample_rate: int
    channels: int
    pcm_sha256: str  # of the kept frames, as int32 samples (see `pcm_samples`)

    @property
    def seconds(self) -> float:
        return self.frames / self.sample_rate

    @property
    def total_seconds(self) -> float:
        return self.total_frames / self.sample_rate

    def word(self) -> str:
        """The clip in one whitespace-free word (so `join = " "` keeps pieces apart)."""
        return (
            f"pcm_sha256={self.pcm_sha256},frames={self.frames},total_frames={self.total_frames},"
            f"rate={self.sample_rate},channels={self.channels},seconds={self.seconds:.6f}"
        )


def parse_word(word: str) -> dict[str, str]:
    """A `HeardClip.word()` back as its fields (for tests and the bench)."""
    return dict(item.split("=", 1) for item in word.split(","))


@dataclass(frozen=True, slots=True)
class Action:
    """What `ModelWindow.rule` decides for one request: extra delay, a failure status, or (a
    streamed request) vLLM's in-stream error chunk after the role chunk, as when the engine
    fails mid-generation."""

    delay_seconds: float = 0.0
    fail_status: int | None = None
    stream_error: bool = False


@dataclass
class ModelWindow:
    """The window's settings (tests may change them between requests) and what it saw."""

    seconds: float | None = None  # None: no window (only delays and counting)
    mode: WindowMode = "truncate"
    delay_seconds: float = 0.0
    delay_per_audio_second: float = 0.0
    rule: Callable[[list[HeardClip], int], Action] | None = None  # (clips, arrival number)
    in_flight: int = 0
    max_in_flight: int = 0
    arrivals: int = 0
    cancelled: int = 0
    heard: list[list[HeardClip]] = field(default_factory=list)  # per answered request
    # the bytes first sent under each uuid: what a uuid-only part stands for
    held: LRUCache[str, bytes] = field(default_factory=lambda: LRUCache(HELD_MAX_BYTES, len))

    async def hear(self, body: dict[str, Any]) -> tuple[list[HeardClip], Action]:
        """Decode the clips of a chat body and apply the window (StubRejection if refused)."""
        clips = await asyncio.to_thread(_decode_all, _audio_bytes(body, self.held), self.seconds)
        if self.mode == "refuse" and self.seconds is not None:
            for clip in clips:
                if clip.total_seconds > self.seconds:
                    raise StubRejection(
                        f"Audio duration {clip.total_seconds:.2f}s exceeds the maximum "
                        f"supported duration of {self.seconds:g}s for this model."
                    )
        self.arrivals += 1
        action = self.rule(clips, self.arrivals - 1) if self.rule else Action()
        return clips, action

    def delay_for(self, clips: list[HeardClip], action: Action) -> float:
        audio = sum(clip.seconds for clip in clips)
        return self.delay_seconds + self.delay_per_audio_second * audio + action.delay_seconds


window_key = web.AppKey("window_key", ModelWindow)


@web.middleware
async def windowed(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Chat completions through the window: decode, wait, maybe fail, then answer with what
    was heard (the handler takes its text from `request[ANSWER_KEY]`)."""
    if request.path != "/v1/chat/completions" or request.method != "POST":
        return await handler(request)
    window = request.app[window_key]
    try:
        body = msgspec.json.decode(await request.read())
    except msgspec.DecodeError:
        return await handler(request)  # the handler refuses it as vLLM does
    window.in_flight += 1
    window.max_in_flight = max(window.max_in_flight, window.in_flight)
    try:
        return await _answer(request, handler, window, body if isinstance(body, dict) else {})
    except asyncio.CancelledError:  # the client (the gateway) went away
        window.cancelled += 1
        raise
    finally:
        window.in_flight -= 1


async def _answer(
    request: web.Request,
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    window: ModelWindow,
    body: dict[str, Any],
) -> web.StreamResponse:
    clips, action = await window.hear(body)
    await asyncio.sleep(window.delay_for(clips, action))
    if action.fail_status is not None:
        return _failure(action.fail_status, clips)
    if action.stream_error and body.get("stream"):
        return await _stream_error(request)
    if clips:
        request[ANSWER_KEY] = " ".join(clip.word() for clip in clips)
    window.heard.append(clips)
    return await handler(request)


async def _stream_error(request: web.Request) -> web.StreamResponse:
    """vLLM's stream when generation fails after its 200: an error chunk, then [DONE]."""
    response = await start_event_stream(request)
    choice = {"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}
    role = {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "choices": [choice]}
    error = {"message": "stub engine failure", "type": "InternalServerError", "code": 500}
    for data in (role, {"error": {**error, "param": None}}):
        await response.write(b"data: %b\n\n" % msgspec.json.encode(data))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def _failure(status: int, clips: list[HeardClip]) -> web.Response:
    message = f"stub failure for the clip {clips[0].word() if clips else '(none)'}"
    error = {"message": message, "type": "InternalServerError", "param": None, "code": status}
    return web.json_response({"error": error}, status=status)


def _audio_bytes(body: dict[str, Any], held: LRUCache[str, bytes]) -> list[bytes]:
    """The bytes of every inline clip of the chat body's messages, in order: a uuid-only
    part's are those first sent under its uuid (none when never sent)."""
    found: list[bytes] = []
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            if isinstance(data := _part_bytes(part, held), bytes):
                found.append(data)
    return found


def _part_bytes(part: Any, held: LRUCache[str, bytes]) -> bytes | None:
    if not isinstance(part, dict) or part.get("type") not in ("audio_url", "input_audio"):
        return None
    uuid = None if part.get("uuid") is None else str(part["uuid"])
    data = _inline_bytes(part)
    if data is None:
        return held.get(uuid) if uuid is not None else None
    if uuid is not None and uuid not in held and len(data) <= HELD_MAX_BYTES:
        held[uuid] = data  # vLLM keeps the first clip under a uuid; a later one is not checked
    return data


def _inline_bytes(part: dict[str, Any]) -> bytes | None:
    """A part's inline bytes; None for a part without data (uuid-only), file:// and http(s)
    clips (not windowed: the gateway sends pieces inline)."""
    value = part.get(part["type"])
    if part["type"] == "input_audio":
        data = value.get("data") if isinstance(value, dict) else None
        return b64_bytes(data) if isinstance(data, str) and data else None
    url = value.get("url") if isinstance(value, dict) else value
    if isinstance(url, str) and (match := DATA_URI.match(url)):
        return b64_bytes(url[match.end() :])
    return None


def pcm_samples(data: bytes) -> Any:
    """A clip's decoded samples as int32 frames x channels: exact for 8-32 bit PCM, so the
    digest of a lossless piece equals the digest of the same frames of the whole clip."""
    if soundfile is None:  # pragma: no cover
        raise StubRejection("the stub's model window needs soundfile")
    return _read(data)[0]


def _read(data: bytes) -> tuple[Any, int]:
    try:
        samples, rate = soundfile.read(io.BytesIO(data), dtype="int32", always_2d=True)
    except RuntimeError as exc:  # soundfile's LibsndfileError is one
        raise StubRejection(f"failed to decode audio: {exc}") from None
    return samples, int(rate)


def pcm_sha256(samples: Any) -> str:
    return hashlib.sha256(numpy.ascontiguousarray(samples).tobytes()).hexdigest()


def _decode_all(clips: list[bytes], window_seconds: float | None) -> list[HeardClip]:
    """Blocking (decoding): runs on a worker thread."""
    return [_decode(data, window_seconds) for data in clips]


def _decode(data: bytes, window_seconds: float | None) -> HeardClip:
    if soundfile is None:  # pragma: no cover
        raise StubRejection("the stub's model window needs soundfile")
    samples, rate = _read(data)
    total, channels = samples.shape
    kept = total if window_seconds is None else min(total, int(window_seconds * rate))
    return HeardClip(kept, total, rate, channels, pcm_sha256(samples[:kept]))


def add_window_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model window (chat completions)")
    group.add_argument("--window-seconds", type=float, default=None, help="the model's window")
    group.add_argument(
        "--window-mode",
        choices=["truncate", "refuse"],
        default="truncate",
        help="keep the first --window-seconds of a longer clip, or answer 400",
    )
    group.add_argument("--delay-seconds", type=float, default=0.0, help="per request")
    group.add_argument(
        "--delay-per-audio-second", type=float, default=0.0, help="per second of audio heard"
    )


def window_from_arguments(args: argparse.Namespace) -> ModelWindow | None:
    """The window the flags ask for; None when none of them is given."""
    if args.window_seconds is None and not args.delay_seconds and not args.delay_per_audio_second:
        return None
    return ModelWindow(
        seconds=args.window_seconds,
        mode=args.window_mode,
        delay_seconds=args.delay_seconds,
        delay_per_audio_second=args.delay_per_audio_second,
    )
