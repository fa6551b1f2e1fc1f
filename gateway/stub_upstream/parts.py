"""Content parts as vLLM parses them: known types only, their fields, and the audio in them."""

from __future__ import annotations

from typing import Any

from .media import (
    DATA_URI,
    INPUT_AUDIO_FORMATS,
    ClipReport,
    StubRejection,
    b64_bytes,
    decode_audio,
    fetch_remote_media,
    read_local_media,
)
from .mm_cache import AudioItem, HeldPart
from .state import StubState

AUDIO_PARTS = ("audio_url", "input_audio")

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
    "refusal": "refusal",
    "input_image": "image_url",
    "input_audio": "input_audio",
    "audio_url": "audio_url",
}
OPTIONAL_PART_KEYS = {"output_text": {"annotations", "logprobs"}, "input_image": {"detail"}}
# vLLM 0.33 validates Responses input with the openai SDK's types: a message's parts are these
# (an assistant message with `id` and `status` is an output message, with output parts) ...
RESPONSES_INPUT_PARTS = ("input_text", "input_image", "input_file")
RESPONSES_OUTPUT_PARTS = ("output_text", "refusal")
# ... and what an upstream whose Responses API takes audio (`responses_accept_audio`) adds.
RESPONSES_AUDIO_PARTS = ("input_audio", "audio_url")


async def chat_message_clips(message: Any, state: StubState) -> list[AudioItem]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise StubRejection("each message must be an object with a 'role'")
    content = message.get("content")
    if content is None or isinstance(content, str):
        return []
    if not isinstance(content, list):
        raise StubRejection("message content must be a string, a list of parts or null")
    return [clip for part in content if (clip := await _part_clip(part, CHAT_PART_KEYS, state))]


MISSING_TYPE = "Missing 'type' field in multimodal part. (parameter=type)"  # str() of vLLM's error
# Without a `type` vLLM takes the part by its media key, in this order (`chat_message.py:255`).
UNTYPED_MEDIA_KEYS = ("image_url", "audio_url", "input_audio", "video_url")


async def _part_clip(part: Any, known: dict[str, str], state: StubState) -> AudioItem | None:
    if not isinstance(part, dict):
        raise StubRejection(f"a content part must be an object with a 'type': {part!r:.80}")
    untyped = part.get("type") is None
    if untyped:
        kind = next((key for key in UNTYPED_MEDIA_KEYS if key in part), None)
        if kind is None:
            raise StubRejection(MISSING_TYPE, param="type")
        part = {**part, "type": kind}
    kind = part["type"]
    if not isinstance(kind, str) or kind not in known:
        raise StubRejection(f"Unknown part type: {kind}")
    extra = set(part) - {"type", known[kind], "uuid"} - OPTIONAL_PART_KEYS.get(kind, set())
    if extra:
        raise StubRejection(f"unexpected keys {sorted(extra)} in a {kind} part")
    uuid = None if part.get("uuid") is None else str(part["uuid"])  # vLLM str()s any uuid
    if known[kind] not in part:
        if uuid is not None and kind in AUDIO_PARTS:  # vLLM's uuid branch finds no media key
            raise StubRejection(MISSING_TYPE, param="type")
        raise StubRejection(f"a {kind} part needs its {known[kind]!r} field")
    if kind not in AUDIO_PARTS:
        return None
    if uuid is not None and not _carries_data(kind, part[kind]):
        return HeldPart(uuid)
    if kind == "audio_url":
        # vLLM's lenient branch (a uuid, or no type) also takes a bare URL string
        lenient = untyped or uuid is not None
        clip = await _audio_url_clip(part["audio_url"], state, uuid, lenient)
    else:
        clip = _input_audio_clip(part["input_audio"], uuid)
    state.decodes += 1
    return clip


def _carries_data(kind: str, value: Any) -> bool:
    """vLLM's uuid branch loads nothing for a falsy URL or data (`content_parser.py:476-502`):
    `audio_url` null, "" or {"url": ""}; `input_audio` null or {"data": ""}."""
    if isinstance(value, dict):
        value = value.get("url" if kind == "audio_url" else "data")
    return bool(value)


async def _audio_url_clip(
    value: Any, state: StubState, uuid: str | None, lenient: bool = False
) -> ClipReport:
    url = value.get("url") if isinstance(value, dict) else value if lenient else None
    if not isinstance(url, str):
        raise StubRejection("audio_url.url must be a string")
    if url.startswith("data:"):
        match = DATA_URI.match(url)
        if match is None:
            raise StubRejection("audio data URIs must be 'data:<mime>;base64,<data>'")
        mime = match.group(1).lower()
        if not mime.startswith("audio/"):
            raise StubRejection(f"data URI MIME type {mime!r} is not audio")
        return decode_audio(b64_bytes(url[match.end() :]), "data", mime, uuid)
    if url.startswith("file:"):
        data = await read_local_media(url, state.allowed_local_media_path)
        return decode_audio(data, "file", "", uuid)
    if url.startswith(("http://", "https://")):
        data = await fetch_remote_media(
            url, state.allowed_media_domains, state.audio_fetch_timeout_seconds
        )
        return decode_audio(data, "url", "", uuid)
    raise StubRejection(f"unsupported audio URL scheme: {url[:40]!r}")


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
    return decode_audio(b64_bytes(value["data"]), "data", f"audio/{fmt}", uuid)


async def responses_item_clips(item: Any, state: StubState) -> list[AudioItem]:
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
    allowed = _responses_part_types(item, state.responses_accept_audio)
    for part in content:
        _check_responses_part(part, allowed)
    return [c for part in content if (c := await _part_clip(part, RESPONSES_PART_KEYS, state))]


def _responses_part_types(item: dict[str, Any], accept_audio: bool) -> tuple[str, ...]:
    if item.get("role") == "assistant" and "id" in item and "status" in item:
        return RESPONSES_OUTPUT_PARTS
    return RESPONSES_INPUT_PARTS + (RESPONSES_AUDIO_PARTS if accept_audio else ())


def _check_responses_part(part: Any, allowed: tuple[str, ...]) -> None:
    """vLLM's two refusals: pydantic's for a type the SDK's union lacks, then its content
    parser's for `input_file` (it has no parser for files, audio or not)."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind not in allowed:
        expected = ", ".join(repr(name) for name in allowed)
        raise StubRejection(
            f"1 validation error for ResponsesRequest: input content part: "
            f"Input should be {expected} (input {kind!r})"
        )
    if kind == "input_file":
        raise StubRejection(f"Unsupported chat content part type: {kind!r}")
