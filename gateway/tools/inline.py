"""The inline audio of a request, and the same request naming it by path instead. Pure.

Inline audio is the sidechannel's `audio_data` (or legacy `audio_url`) data URI, then the audio
parts at the front of the last user message (chat `audio_url` data URIs, chat and Responses
`input_audio` parts): the order in which the gateway would splice clips back. Audio anywhere
else, or mixed with path keys, cannot be moved without changing what vLLM receives.
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass
from typing import Any

import msgspec
import pybase64

from ..errors import GatewayError
from ..naming.formats import MIME_BY_EXTENSION
from ..naming.sidechannel import InlineAudio, Sidechannel, SidechannelKeys, parse_data_uri
from ..splice import last_user_message
from .rows import RowRequest

AUDIO_PART_TYPES = ("audio_url", "input_audio")
_MIME_BY_FORMAT = {extension[1:]: mime for extension, mime in MIME_BY_EXTENSION.items()}


@dataclass(frozen=True, slots=True)
class InlineClip:
    """One inline clip's bytes and the MIME type the row gave it."""

    data: bytes
    mime: str


@dataclass(frozen=True, slots=True)
class InlineAudioFound:
    """Movable inline audio: the clips in splice order and how many leading parts held them."""

    clips: tuple[InlineClip, ...]
    sidechannel_key: str | None
    leading_parts: int


class KeepInline(Exception):
    """The row's inline audio cannot move to paths; `reason` says why (for the summary)."""


def find_inline_audio(
    found: RowRequest, sidechannel: Sidechannel | None
) -> InlineAudioFound | None:
    """The movable inline audio of a request; None when it has no inline audio at all.

    Raises KeepInline when it has some that cannot move."""
    clips: list[InlineClip] = []
    key = None
    if sidechannel is not None:
        first = sidechannel.clips[0]
        if isinstance(first, InlineAudio):
            key = sidechannel.key
            clips.append(InlineClip(pybase64.b64decode(first.payload), first.mime))
    items = _message_items(found)
    target = last_user_message(items)
    leading = _leading_audio_parts(target)
    if _audio_parts_elsewhere(items, target, len(leading)):
        raise KeepInline("audio parts not at the front of the last user message")
    if leading and sidechannel is not None and key is None:
        raise KeepInline("inline audio parts mixed with audio paths")
    clips.extend(_decoded_part(part) for part in leading)
    if not clips:
        return None
    if not isinstance(found.request.get("metadata", {}), dict):
        raise KeepInline("a metadata that is not an object cannot take audio paths")
    return InlineAudioFound(tuple(clips), key, len(leading))


def with_paths(
    found: RowRequest, audio: InlineAudioFound, paths: list[str], keys: SidechannelKeys
) -> dict[str, Any]:
    """A copy of the request with its inline audio replaced by `paths` (one per clip, in
    order) under `keys`' names; containers on the way are copied, so the parsed request stays
    as it was."""
    request = dict(found.request)
    metadata = dict(request.get("metadata") or {})
    if audio.sidechannel_key is not None:
        del metadata[audio.sidechannel_key]
    if len(paths) == 1:
        metadata[keys.name("audio_path")] = paths[0]
    else:
        # NeMo Gym types metadata as string-to-string: a JSON array in a string passes it.
        metadata[keys.name("audio_paths")] = _json_list(paths) if found.nested else paths
    request["metadata"] = metadata
    if audio.leading_parts:
        items_key = "input" if found.route == "responses" else "messages"
        items = list(request[items_key])
        index = _index_of_last_user_message(items)
        message = dict(items[index])
        message["content"] = message["content"][audio.leading_parts :]
        items[index] = message
        request[items_key] = items
    return request


def _message_items(found: RowRequest) -> list[Any]:
    items = found.request.get("input" if found.route == "responses" else "messages")
    return items if isinstance(items, list) else []


def _leading_audio_parts(message: dict[str, Any] | None) -> list[dict[str, Any]]:
    content = message.get("content") if message is not None else None
    if not isinstance(content, list):
        return []
    leading = []
    for part in content:
        if not (isinstance(part, dict) and part.get("type") in AUDIO_PART_TYPES):
            break
        leading.append(part)
    return leading


def _audio_parts_elsewhere(items: list[Any], target: dict[str, Any] | None, skip: int) -> bool:
    for item in items:
        content = item.get("content") if isinstance(item, dict) else None
        if not isinstance(content, list):
            continue
        rest = content[skip:] if item is target else content
        if any(isinstance(p, dict) and p.get("type") in AUDIO_PART_TYPES for p in rest):
            return True
    return False


def _decoded_part(part: dict[str, Any]) -> InlineClip:
    try:
        if part["type"] == "audio_url":
            uri = parse_data_uri(part["audio_url"]["url"], "part", max_clip_bytes=2**62)
            return InlineClip(pybase64.b64decode(uri.payload), uri.mime)
        data = part["input_audio"]
        mime = _MIME_BY_FORMAT.get(str(data.get("format")).lower(), "")
        return InlineClip(pybase64.b64decode(data["data"], validate=True), mime)
    except (GatewayError, KeyError, TypeError, AttributeError, binascii.Error, ValueError):
        raise KeepInline("an audio part that is not inline base64 audio") from None


def _index_of_last_user_message(items: list[Any]) -> int:
    target = last_user_message(items)
    return next(i for i, item in enumerate(items) if item is target)


def _json_list(paths: list[str]) -> str:
    return msgspec.json.encode(paths).decode()
