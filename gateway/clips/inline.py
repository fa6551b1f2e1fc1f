"""Audio a client inlined itself, as clips the gateway holds (`[splice] repeats = "reference"`).
Pure.

A base64 data URI in an `audio_url` part, or `input_audio` data, carries a clip the gateway
can name by the sha256 of its decoded bytes: the same uuid a file with those bytes gets, so a
clip named by path in one request and inlined in another is one clip upstream. The digests come
from the clip key's one pass over the parts (`affinity.placed_digests`: base64 decoded and
hashed piece by piece, never copied whole). Left as the client sent them: a part with its own
`uuid` (kept, never replaced, and sent with its data: the gateway cannot vouch that the client's
uuid names these bytes in every request, and vLLM trusts a uuid blindly), a uuid-only part, a
URL vLLM fetches, and a payload that is not strict base64 (vLLM's 400 answers it; no uuid is
ever recorded for it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..affinity import SHA256_PREFIX, clip_key, part_digests, placed_digests
from ..naming.content_parts import PartClip, Place, content_parts, part_url
from ..references.body import InlinePart, ReferencedBody
from ..upstream.body import Placeholders


def client_digests(items: Any, in_parts: Sequence[PartClip]) -> dict[Place, str | None]:
    """The digest of each part of `items` by place, but for the path parts the gateway reads
    (`in_parts`): the audio parts the client inlined itself, hashed once for both the clip key
    and their uuids."""
    return placed_digests(items, {found.place for found in in_parts})


def inline_body(
    body: dict[str, Any], items: Any, digests: Mapping[Place, str | None], *, keyed: bool
) -> ReferencedBody | None:
    """A body with no clip for the gateway to read, as a `ReferencedBody` of the audio the
    client inlined (`items` is where its parts are); None when it has none to name."""
    inline = inline_parts(items, digests)
    if not inline:
        return None
    key = clip_key(part_digests(items, digests)) if keyed else None
    return ReferencedBody.of(body, Placeholders(), [], [], key, inline)


def inline_parts(items: Any, digests: Mapping[Place, str | None]) -> list[InlinePart]:
    """The parts of `items` (chat messages) at the places of `digests` that carry inline audio
    whose bytes were hashed, without a uuid of their own, in message then part order."""
    found: list[InlinePart] = []
    for place, part in content_parts(items):
        digest = digests.get(place)
        if digest is None or not digest.startswith(SHA256_PREFIX):
            continue  # not audio, a URL, uuid-only, not strict base64, or resolved from a path
        if part.get("uuid") is not None:
            continue  # the client's own uuid: its part goes as sent
        field, size = _inline_field(part)
        if field:
            found.append(InlinePart(part, field, digest[len(SHA256_PREFIX) :], size))
    return found


def _inline_field(part: dict[str, Any]) -> tuple[str, int]:
    """The field holding the part's data, and its base64 characters ("" when it has none)."""
    if part.get("type") == "input_audio":
        audio = part.get("input_audio")
        data = audio.get("data") if type(audio) is dict else None
        return ("input_audio", len(data)) if type(data) is str and data else ("", 0)
    url = part_url(part)
    if url is None:
        return "", 0
    return "audio_url", len(url) - url.find(",") - 1
