"""Reading the audio sidechannel out of a request's `metadata`. Pure: no I/O.

Exactly one of `audio_data` (legacy name `audio_url`), `audio_path` or `audio_paths` may be
present; every malformed value is a 400 naming the key. Under `[sidechannel] key_prefix` P the
keys are P + each name (`gateway_audio_path`); any other key, unprefixed `audio_*` included, is
ordinary metadata. `SidechannelKeys` holds the names under one prefix, computed once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from ..errors import InvalidRequest, PayloadTooLarge
from .formats import mime_for_extension
from .strict_base64 import is_strict_base64, strict_base64_sha256

SIDECHANNEL_KEYS = ("audio_data", "audio_url", "audio_path", "audio_paths")
LEGACY_INLINE_KEY = "audio_url"
KEY_PREFIX_PATTERN = re.compile(r"[A-Za-z0-9_.-]*")  # a plain identifier fragment, or ""

_DATA_URI = re.compile(r"^data:([A-Za-z0-9.+-]+/[A-Za-z0-9.+-]+)((?:;[^;,]+)*?);base64,", re.ASCII)


@dataclass(frozen=True, slots=True)
class InlineAudio:
    """A ready data URI from `audio_data`; `payload_start` is where the base64 begins."""

    uri: str
    mime: str
    payload_start: int
    param: str
    # The sha256 (hex) of the decoded bytes, when the check computed it (`read(sha256=True)`).
    sha256: str | None = None

    @property
    def payload(self) -> str:
        return self.uri[self.payload_start :]

    @property
    def given(self) -> str:
        """How messages name the clip: its data-URI lead, not its base64."""
        return self.uri[: self.payload_start] + "..."


@dataclass(frozen=True, slots=True)
class PathAudio:
    """One path as the client gave it."""

    given: str
    param: str  # the sidechannel key, e.g. "metadata.audio_paths"
    label: str  # the key with the list index, for messages: "metadata.audio_paths[2]"
    # What the file system or object store reads when it is not `given` as written: the
    # decoded path of a content part's file:// URL.
    path: str = ""

    @property
    def location(self) -> str:
        """The path (or object URL) to read: `path`, else `given`."""
        return self.path or self.given

    @property
    def claimed_mime(self) -> str:
        """The MIME type the extension promises; 400 `unsupported_audio_format` for another.

        Asked only once the path is known to name a regular file inside the roots, so the
        answer names the first rule a path breaks (roots, existence, file type, extension)."""
        return mime_for_extension(self.location, self.param, self.label)


@dataclass(frozen=True, slots=True)
class Sidechannel:
    key: str  # as sent, prefix included: "gateway_audio_path"
    kind: str  # the key without the prefix: one of SIDECHANNEL_KEYS
    clips: tuple[InlineAudio | PathAudio, ...]

    @property
    def param(self) -> str:
        return f"metadata.{self.key}"


class SidechannelKeys:
    """The sidechannel's key names under one prefix (`[sidechannel] key_prefix`), computed
    once per pipeline: reading costs the same whatever the prefix."""

    __slots__ = ("_metadata_params", "kinds", "names", "prefix")

    def __init__(self, prefix: str = "") -> None:
        if not KEY_PREFIX_PATTERN.fullmatch(prefix):
            raise ValueError(f"{prefix!r} is not a key prefix: use only A-Z a-z 0-9 _ . -")
        self.prefix = prefix
        self.names = tuple(prefix + kind for kind in SIDECHANNEL_KEYS)  # in SIDECHANNEL_KEYS order
        self.kinds = dict(zip(self.names, SIDECHANNEL_KEYS, strict=True))
        self._metadata_params = {name: f"metadata.{name}" for name in self.names}

    def name(self, kind: str) -> str:
        """The key as sent for `kind` (one of SIDECHANNEL_KEYS)."""
        return self.prefix + kind

    def carries(self, body: dict[str, Any]) -> bool:
        """Whether the body has any sidechannel key (valid or not) in its `metadata`."""
        metadata = body.get("metadata")
        return isinstance(metadata, dict) and any(name in metadata for name in self.names)

    def read(
        self, body: dict[str, Any], max_clips: int, max_clip_bytes: int, *, sha256: bool = False
    ) -> Sidechannel | None:
        """The validated sidechannel of a request body, or None when it carries none.

        `max_clip_bytes` bounds inline audio as `audio.max_file_bytes` bounds files (413 above);
        with `sha256`, inline audio's check also hashes its bytes (`InlineAudio.sha256`)."""
        metadata = body.get("metadata")
        if not isinstance(metadata, dict):
            return None
        return self._read(metadata, self._metadata_params, max_clips, max_clip_bytes, sha256)

    def read_fields(
        self, fields: Mapping[str, Any], max_clips: int, max_clip_bytes: int, *, prefix: str
    ) -> Sidechannel | None:
        """The sidechannel keys of `fields` (the fields of a form), validated as `read` does;
        errors name each key as `prefix + key`."""
        params = {name: prefix + name for name in self.names}
        return self._read(fields, params, max_clips, max_clip_bytes)

    def _read(
        self,
        fields: Mapping[str, Any],
        params: Mapping[str, str],
        max_clips: int,
        max_bytes: int,
        sha256: bool = False,
    ) -> Sidechannel | None:
        """The rules, in one place; `params` names each key in messages."""
        present = [name for name in self.names if name in fields]
        if not present:
            return None
        if len(present) > 1:
            names = [params[name] for name in present]
            raise InvalidRequest(
                f"{', '.join(names)}: give exactly one audio sidechannel key, not {len(names)}",
                param=names[0],
                code="conflicting_audio_keys",
            )
        key = present[0]
        kind = self.kinds[key]
        value = fields[key]
        param = params[key]
        if kind == "audio_path":
            return Sidechannel(key, kind, (_path_clip(value, param, param),))
        if kind != "audio_paths":  # audio_data, or its legacy name audio_url
            return Sidechannel(key, kind, (parse_data_uri(value, param, max_bytes, sha256=sha256),))
        paths = _path_list(value, param)
        if len(paths) > max_clips:
            raise InvalidRequest(
                f"{param}: {len(paths)} clips exceed the limit of {max_clips} per request",
                param=param,
                code="too_many_clips",
            )
        clips = tuple(_path_clip(path, param, f"{param}[{i}]") for i, path in enumerate(paths))
        return Sidechannel(key, kind, clips)


DEFAULT_KEYS = SidechannelKeys()


def strip_sidechannel(body: dict[str, Any], key: str) -> None:
    """Remove the consumed key; drop `metadata` when nothing else is left in it."""
    metadata = body["metadata"]
    del metadata[key]
    if not metadata:
        del body["metadata"]


def parse_data_uri(
    value: Any, param: str, max_clip_bytes: int, *, sha256: bool = False
) -> InlineAudio:
    """`value` as inline audio, checked (strict base64, an audio/* type, the size); with
    `sha256`, the check hashes the bytes it decodes (one decode for the check and the hash)."""
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
    digest = strict_base64_sha256(value, start) if sha256 else None
    if digest is None and (sha256 or not is_strict_base64(value, start)):
        raise _invalid(param, "does not hold valid base64 after ';base64,'")
    decoded_bytes = base64_decoded_size(value, start)
    if decoded_bytes > max_clip_bytes:
        raise PayloadTooLarge(
            f"{param} holds {decoded_bytes} bytes of audio, over the limit of {max_clip_bytes} "
            "bytes (audio.max_file_bytes)",
            param=param,
            code="audio_too_large",
        )
    return InlineAudio(uri=value, mime=mime, payload_start=start, param=param, sha256=digest)


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
    return PathAudio(given=value, param=param, label=label)


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
