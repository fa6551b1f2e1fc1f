"""A spliced body that can be sent with some clips by reference, and again with all their data.

In `[splice] repeats = "reference"` every audio part carries its clip's uuid. `render` leaves
out the data of the clips the upstream holds: the part keeps its type and uuid, its data field
becomes null (vLLM 0.33's uuid-only shape; a part without the field is a 400 there). The body
keeps what a render with every clip's data needs (the cached base64 pieces, the URLs), so a
retry never reads a file again. Audio the client inlined itself (`InlinePart`) is a clip too:
its part gets the uuid, and by reference its data field becomes null the same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..audio.sources.s3 import ObjectInfo
from ..splice import Part
from ..upstream.body import Placeholders, SegmentedPayload
from .held import ClipKey, kwargs_key


@dataclass(frozen=True, slots=True)
class InlinePart:
    """An audio part the client inlined itself (a base64 data URI, or `input_audio` data),
    without a uuid of its own: a clip the gateway holds, named by its bytes' sha256."""

    part: Part  # the client's dict, in the body
    field: str  # "audio_url" or "input_audio"
    uuid: str  # the sha256 (hex) of its decoded bytes, as for a file's clip
    size: int  # its base64 characters (what going by reference saves)


@dataclass(frozen=True, slots=True)
class ClipPart:
    """One audio part of the body, and what its data form needs back."""

    part: Part  # the dict inside the body
    field: str  # "audio_url" or "input_audio"
    data: Any  # the field's value with the data (a placeholder token, or a URL)
    key: ClipKey
    placeholder: int | None  # the Placeholders number of its base64 (None: a URL)
    base64_bytes: int  # what going by reference saves (0 for a URL)


class ReferencedBody:
    """The body of one request in reference mode, and its audio parts in clip order."""

    def __init__(
        self,
        body: dict[str, Any],
        placeholders: Placeholders,
        parts: Sequence[ClipPart],
        clip_key: str | None = None,
    ) -> None:
        self._body = body
        self._placeholders = placeholders
        self.parts = tuple(parts)
        self.clip_key = clip_key  # every render carries it, the retry with data too
        model = body.get("model")
        self.model = model if type(model) is str else ""  # whose references these are
        self.keys = tuple(dict.fromkeys(part.key for part in parts))

    @classmethod
    def of(
        cls,
        body: dict[str, Any],
        placeholders: Placeholders,
        parts: Sequence[Part],
        base64_sizes: Sequence[int | None],
        clip_key: str | None = None,
        inline: Sequence[InlinePart] = (),
    ) -> ReferencedBody:
        """The spliced `body` and its audio `parts` (each with its uuid), in clip order, with
        the base64 size each part carries (None: a URL, no placeholder) and the clip key;
        then the audio parts the client inlined itself (`inline`), which get their uuid now."""
        kwargs = kwargs_key(body)
        numbers = iter(range(len(placeholders)))  # one placeholder per part with bytes, in order
        clip_parts = []
        for part, size in zip(parts, base64_sizes, strict=True):
            field = part["type"]
            placeholder = None if size is None else next(numbers)
            key = (part["uuid"], kwargs)
            clip_parts.append(ClipPart(part, field, part[field], key, placeholder, size or 0))
        for found in inline:
            found.part["uuid"] = found.uuid
            data = found.part[found.field]
            key = (found.uuid, kwargs)
            clip_parts.append(ClipPart(found.part, found.field, data, key, None, found.size))
        return cls(body, placeholders, clip_parts, clip_key)

    def render(self, references: frozenset[ClipKey]) -> SegmentedPayload:
        """The body with the clips in `references` as uuid-only parts and the others whole."""
        by_reference = [p for p in self.parts if p.key in references]
        skip = {p.placeholder for p in by_reference if p.placeholder is not None}
        for p in by_reference:
            p.part[p.field] = None
        try:
            segments = self._placeholders.render(self._body, skip)
        finally:
            for p in by_reference:
                p.part[p.field] = p.data
        return SegmentedPayload(segments, self.clip_key)

    def by_reference(self, references: frozenset[ClipKey]) -> tuple[int, int]:
        """How many parts go by reference, and the base64 bytes that saves."""
        parts = [p for p in self.parts if p.key in references]
        return len(parts), sum(p.base64_bytes for p in parts)


def object_uuid(info: ObjectInfo) -> str | None:
    """A presigned object's uuid, from its identity (bucket, key, ETag, size): a rewritten
    object has a new ETag, so a new uuid. None for an object without an ETag (the size alone
    cannot tell two versions apart): it always goes with its URL."""
    if not info.etag:
        return None
    identity = "\0".join((info.name.bucket, info.name.key, info.etag, str(info.size)))
    return "s3-etag:" + hashlib.sha256(identity.encode()).hexdigest()
