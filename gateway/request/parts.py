"""One loaded clip as the audio part the route takes: an `audio_url` (a URL vLLM fetches, or a
data URI placeholder), or an `input_audio` (wav or mp3 only), with its uuid when one is sent."""

from __future__ import annotations

from ..clips.loaded import (
    LoadedClip,
    PathClip,
    base64_segments,
    clip_names,
    content_sha256,
    reference_uuid,
)
from ..naming.formats import input_audio_format
from ..splice import Part
from ..upstream.body import Placeholders
from .shapes import RouteShape


def audio_part(
    clip: LoadedClip,
    shape: RouteShape,
    placeholders: Placeholders,
    digest: str | None = None,
    *,
    part_uuid: bool,
) -> Part:
    """The clip's audio part; `digest` (its `clip_digest`, when the key was taken) spares
    hashing inline audio again for its uuid. `part_uuid`: [splice] part_uuid."""
    part: Part
    if isinstance(clip, PathClip) and clip.url is not None:
        # input_audio has no URL form: a clip vLLM fetches is an audio_url part.
        part = {"type": "audio_url", "audio_url": {"url": clip.url}}
    else:
        mime, lead, segments = base64_segments(clip)
        if shape.input_audio_parts:
            label, given, param = clip_names(clip)
            fmt = input_audio_format(
                mime, label=label, given=given, param=param, fix=shape.input_audio_fix
            )
            token = placeholders.add(b"", segments)
            data = {"data": token, "format": fmt}
            part = {"type": "input_audio", "input_audio": data}
        else:
            token = placeholders.add(lead, segments)
            part = {"type": "audio_url", "audio_url": {"url": token}}
    if shape.references:
        if (uuid := reference_uuid(clip, digest)) is not None:
            part["uuid"] = uuid
    elif part_uuid:
        part["uuid"] = content_sha256(clip, digest)
    return part
