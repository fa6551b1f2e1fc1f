"""One loaded clip as the pipeline holds it, and what the splice and the messages need of it:
its names, its header, its base64, its uuid, its digest in the clip key. Pure but for closing
streamed clips."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pybase64

from ..affinity import (
    SHA256_PREFIX,
    base64_digest,
    bytes_digest,
    clip_key,
    identity_digest,
    part_digests,
    sha256_digest,
)
from ..audio.durations import AudioHeader, check_decode_limits, read_base64_header
from ..audio.encoder import EncodedAudio, StreamedAudio
from ..audio.sources import AudioSource
from ..audio.sources.objects import ObjectClip
from ..naming.content_parts import Place
from ..naming.sidechannel import InlineAudio, base64_decoded_size
from ..references.body import object_uuid
from ..splice import Part
from ..upstream.body import Segment

FileAudio = EncodedAudio | StreamedAudio


@dataclass(frozen=True, slots=True)
class PathClip:
    """A checked file or object and its audio; with `url` (file:// mode, presigned objects)
    vLLM fetches it and `audio` holds just its sniffed MIME type and digest."""

    source: AudioSource
    audio: FileAudio
    url: str | None = None


LoadedClip = InlineAudio | PathClip


def clip_names(clip: LoadedClip) -> tuple[str, str, str]:
    """How error messages name a clip: its label, the reference as given, and the param."""
    if isinstance(clip, InlineAudio):
        return clip.param, clip.given, clip.param
    ref = clip.source.ref
    return ref.label, ref.given, ref.param


def clip_header(clip: LoadedClip) -> AudioHeader | None:
    if isinstance(clip, InlineAudio):
        return read_base64_header(clip.payload, base64_decoded_size(clip.uri, clip.payload_start))
    return clip.audio.header


def check_clip_limits(clip: LoadedClip, max_seconds: float, max_decode_bytes: int) -> None:
    """vLLM's decode limits (`audio.max_duration_seconds`, `audio.max_decode_bytes`), from the
    clip's header: 413 before anything is sent."""
    label, given, param = clip_names(clip)
    check_decode_limits(
        clip_header(clip), max_seconds, max_decode_bytes, label=label, given=given, param=param
    )


def base64_segments(clip: LoadedClip) -> tuple[str, bytes, tuple[Segment, ...]]:
    """The clip's MIME type, its data-URI lead, and its base64 as body segments."""
    if isinstance(clip, InlineAudio):
        return clip.mime, clip.uri[: clip.payload_start].encode(), (clip.payload.encode(),)
    audio = clip.audio
    lead = b"data:" + audio.mime.encode() + b";base64,"
    if isinstance(audio, StreamedAudio):
        return audio.mime, lead, (audio,)
    return audio.mime, lead, audio.pieces


def reference_uuid(clip: LoadedClip, digest: str | None = None) -> str | None:
    """A presigned object is named by its identity (its bytes are never read here); any
    other clip by the sha256 of its bytes (`content_sha256`)."""
    if isinstance(clip, PathClip) and clip.url is not None and isinstance(clip.source, ObjectClip):
        return object_uuid(clip.source.info)
    return content_sha256(clip, digest)


def referable(clips: Sequence[LoadedClip], parts: Sequence[Part]) -> bool:
    """Whether a request may go with references: every part named, and no streamed clip (its
    bytes could not be sent again for a retry without reading it again)."""
    streamed = any(isinstance(c, PathClip) and isinstance(c.audio, StreamedAudio) for c in clips)
    return not streamed and all("uuid" in part for part in parts)


def base64_bytes(clip: LoadedClip) -> int | None:
    """The base64 a clip's part carries; None for a clip that goes as a URL."""
    if isinstance(clip, InlineAudio):
        return len(clip.payload)
    if clip.url is not None:
        return None
    audio = clip.audio
    return sum(len(piece) for piece in audio.pieces) if isinstance(audio, EncodedAudio) else 0


def content_sha256(clip: LoadedClip, digest: str | None = None) -> str:
    """The sha256 of the audio bytes themselves, never of a path: vLLM trusts the uuid blindly.
    `digest` is the clip's `clip_digest` when the key was taken: inline audio is not decoded
    and hashed twice."""
    if digest is not None and digest.startswith(SHA256_PREFIX):
        return digest[len(SHA256_PREFIX) :]
    if isinstance(clip, InlineAudio):
        if clip.sha256 is not None:  # hashed by the sidechannel's check
            return clip.sha256
        return hashlib.sha256(pybase64.b64decode(clip.payload)).hexdigest()
    if clip.audio.sha256 is None:
        raise AssertionError("the audio store computes digests when part_uuid is on")
    return clip.audio.sha256


def clip_digest(clip: LoadedClip) -> str:
    """How the clip key names the clip (`gateway.affinity`): by the sha256 of its bytes when
    the gateway has it (inline audio, a clip read whole, a converted WAV); a clip whose bytes
    were not hashed before it is sent (streamed, or fetched by vLLM from its URL) by its
    identity: a file's real path, mtime_ns and size; an object's bucket, key, ETag and size."""
    if isinstance(clip, InlineAudio):
        if clip.sha256 is not None:  # hashed by the sidechannel's check
            return sha256_digest(clip.sha256)
        return base64_digest(clip.uri, clip.payload_start)  # strict base64: checked
    if clip.audio.sha256 is not None:
        return sha256_digest(clip.audio.sha256)
    return identity_digest("source", clip.source.key_identity)


def clips_key(
    digests: Sequence[str],
    places: Sequence[Place],
    items: Any,
    own: Mapping[Place, str | None] | None = None,
) -> str | None:
    """The key of a request's clips (their `clip_digest`s) in clip order: the sidechannel's
    (the first clips), then the audio parts of `items` (its messages, or Responses input) in
    order, the path parts the last `len(places)` clips were read from and the parts the
    client inlined itself alike (`own`: their digests, when already taken)."""
    side = len(digests) - len(places)
    resolved = {**(own or {}), **dict(zip(places, digests[side:], strict=True))}
    return clip_key([*digests[:side], *part_digests(items, resolved)])


class PieceBytes(Protocol):
    """A long clip's piece (`gateway.chunking`): its `data` is a whole audio file."""

    @property
    def data(self) -> bytes: ...


def piece_key(items: Any, place: Place | None) -> Callable[[PieceBytes], str | None]:
    """How a long clip's piece is keyed: as the one clip in place of the whole, then the audio
    parts of `items` the client inlined itself (the part at `place`, where the clip came
    from, left out)."""
    others = part_digests(items, {} if place is None else {place: None})
    return lambda piece: clip_key([bytes_digest(piece.data), *others])


async def close_streams(clips: Sequence[LoadedClip]) -> None:
    for clip in clips:
        if isinstance(clip, PathClip) and isinstance(clip.audio, StreamedAudio):
            await clip.audio.aclose()
