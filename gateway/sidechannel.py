"""Reading the audio sidechannel out of a request's `metadata`. Pure: no I/O.

Exactly one of `audio_data` (legacy name `audio_url`), `audio_path` or `audio_paths` may be
present; every malformed value is a 400 naming the key.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
import pybase64

from .errors import InvalidRequest, PayloadTooLarge
from .formats import mime_for_extension

SIDECHANNEL_KEYS = ("audio_data", "audio_url", "audio_path", "audio_paths")
LEGACY_INLINE_KEY = "audio_url"

_DATA_URI = re.compile(r"^data:([A-Za-z0-9.+-]+/[A-Za-z0-9.+-]+)((?:;[^;,]+)*?);base64,", re.ASCII)


@dataclass(frozen=True, slots=True)
class InlineAudio:
    """A ready data URI from `audio_data`; `payload_start` is where the base64 begins."""

    uri: str
    mime: str
    payload_start: int
    param: str

    @property
    def payload(self) -> str:
        return self.uri[self.payload_start :]

    @property
    def given(self) -> str:
        """How messages name the clip: its data-URI lead, not its base64."""
        return self.uri[: self.payload_start] + "..."


@dataclass(frozen=True, slots=True)
class PathAudio:
    """One path as the client gave it, with the MIME type its extension promises."""

    given: str
    param: str  # the sidechannel key, e.g. "metadata.audio_paths"
    label: str  # the key with the list index, for messages: "metadata.audio_paths[2]"
    claimed_mime: str


@dataclass(frozen=True, slots=True)
class Sidechannel:
    key: str
    clips: tuple[InlineAudio | PathAudio, ...]

    @property
    def param(self) -> str:
        return f"metadata.{self.key}"


def carries_sidechannel(body: dict[str, Any]) -> bool:
    """Whether the body has any sidechannel key (valid or not) in its `metadata`."""
    metadata = body.get("metadata")
    return isinstance(metadata, dict) and any(key in metadata for key in SIDECHANNEL_KEYS)


def read_sidechannel(
    body: dict[str, Any], max_clips: int, max_clip_bytes: int
) -> Sidechannel | None:
    """The validated sidechannel of a request body, or None when it carries none.

    `max_clip_bytes` bounds inline audio as `audio.max_file_bytes` bounds files (413 above)."""
    metadata = body.get("metadata")
    if not isinstance(metadata, dict):
        return None
    return read_audio_keys(metadata, max_clips, max_clip_bytes, prefix="metadata.")


def read_audio_keys(
    fields: Mapping[str, Any], max_clips: int, max_clip_bytes: int, *, prefix: str
) -> Sidechannel | None:
    """The sidechannel keys of `fields` (a request's `metadata`, or the fields of a form),
    validated as `read_sidechannel` does; errors name each key as `prefix + key`."""
    present = [key for key in SIDECHANNEL_KEYS if key in fields]
    if not present:
        return None
    if len(present) > 1:
        names = ", ".join(f"{prefix}{key}" for key in present)
        raise InvalidRequest(
            f"{names}: give exactly one audio sidechannel key, not {len(present)}",
            param=f"{prefix}{present[0]}",
            code="conflicting_audio_keys",
        )
    key = present[0]
    value = fields[key]
    param = f"{prefix}{key}"
    if key in ("audio_data", LEGACY_INLINE_KEY):
        return Sidechannel(key, (parse_data_uri(value, param, max_clip_bytes),))
    if key == "audio_path":
        return Sidechannel(key, (_path_clip(value, param, param),))
    paths = _path_list(value, param)
    if len(paths) > max_clips:
        raise InvalidRequest(
            f"{param}: {len(paths)} clips exceed the limit of {max_clips} per request",
            param=param,
            code="too_many_clips",
        )
    return Sidechannel(
        key, tuple(_path_clip(path, param, f"{param}[{i}]") for i, path in enumerate(paths))
    )


def strip_sidechannel(body: dict[str, Any], key: str) -> None:
    """Remove the consumed key; drop `metadata` when nothing else is left in it."""
    metadata = body["metadata"]
    del metadata[key]
    if not metadata:
        del body["metadata"]


def parse_data_uri(value: Any, param: str, max_clip_bytes: int) -> InlineAudio:
    if not isinstance(value, str):
        raise _invalid(param, f"must be a data URI string, got {type(value).__name__}")
    if not value:
        raise _empty(param)
    match = _DATA_URI.match(value)
    if match is None:
        raise _invalid(param, f"is not a 'data:audio/<fmt>;base64,...' URI: {value[:48]!r}")
    mime = match.group(1).lower()
    if not mime.startswith("audio/"):
        raise _invalid(param, f"has MIME type {mime!r}; an audio/* type is required")
    start = match.end()
    if start == len(value):
        raise _invalid(param, "has an empty base64 payload")
    if not _is_strict_base64(value, start):
        raise _invalid(param, "does not hold valid base64 after ';base64,'")
    decoded_bytes = base64_decoded_size(value, start)
    if decoded_bytes > max_clip_bytes:
        raise PayloadTooLarge(
            f"{param} holds {decoded_bytes} bytes of audio, over the limit of {max_clip_bytes} "
            "bytes (audio.max_file_bytes)",
            param=param,
            code="audio_too_large",
        )
    return InlineAudio(uri=value, mime=mime, payload_start=start, param=param)


VALIDATE_CHUNK_CHARS = 4 * 1024 * 1024  # a multiple of 4: base64 quanta never straddle chunks


def _is_strict_base64(text: str, start: int) -> bool:
    """Whether `text[start:]` is strict, padded base64, decoded chunk by chunk: the decoded
    bytes are dropped as they come, so a large inline clip costs no large allocation."""
    end = len(text)
    if (end - start) % 4:
        return False
    for offset in range(start, end, VALIDATE_CHUNK_CHARS):
        chunk = text[offset : offset + VALIDATE_CHUNK_CHARS]
        if offset + VALIDATE_CHUNK_CHARS < end and "=" in chunk:
            return False  # padding only at the very end
        try:
            pybase64.b64decode(chunk, validate=True)
        except (binascii.Error, ValueError):
            return False
    return True


def base64_decoded_size(text: str, start: int) -> int:
    padding = (text.endswith("=") and 1) + (text.endswith("==") and 1)
    return (len(text) - start) // 4 * 3 - padding


def _path_clip(value: Any, param: str, label: str) -> PathAudio:
    if not isinstance(value, str):
        raise _invalid(param, f"must be a path string, got {type(value).__name__}", label)
    if not value:
        raise _empty(param, label)
    if "\x00" in value:
        raise _invalid(param, "contains a NUL byte", label)
    return PathAudio(
        given=value, param=param, label=label, claimed_mime=mime_for_extension(value, param, label)
    )


def _path_list(value: Any, param: str) -> list[Any]:
    """A list, or (metadata being string-to-string) a string holding a JSON array."""
    if isinstance(value, str):
        if not value:
            raise _empty(param)
        try:
            value = msgspec.json.decode(value)
        except msgspec.DecodeError:
            raise _invalid(
                param, "must be a list of paths or a string holding a JSON array of paths"
            ) from None
    if not isinstance(value, list):
        raise _invalid(param, f"must be a list of path strings, got {type(value).__name__}")
    if not value:
        raise _empty(param)
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise _invalid(
                param, f"must be a path string, got {type(item).__name__}", f"{param}[{index}]"
            )
    return value


def _invalid(param: str, reason: str, label: str | None = None) -> InvalidRequest:
    return InvalidRequest(f"{label or param} {reason}", param=param, code="invalid_audio_reference")


def _empty(param: str, label: str | None = None) -> InvalidRequest:
    return InvalidRequest(
        f"{label or param} is empty: an empty audio reference is a bug in the data, not 'no audio'",
        param=param,
        code="empty_audio_reference",
    )
