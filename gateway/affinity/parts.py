"""The digests of the audio parts in a chat `messages` list or a Responses `input` list. Pure.

A part the gateway resolved (a path part: its clip's digest is given by place) counts as its
clip; any other audio part counts as what it carries: an `audio_url` data URI or an
`input_audio` payload by the sha256 of its decoded bytes (alike for alike payloads, and alike
for the same bytes from a file), another URL by its text, a uuid-only part by its uuid.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

from ..naming.content_parts import Place, content_parts, part_url
from .key import base64_digest, identity_digest


def part_digests(items: Any, resolved: Mapping[Place, str | None]) -> list[str]:
    """Every audio part of `items` in message then part order: the digest at its place in
    `resolved` (None: left out), else its own (`part_digest`)."""
    digests: list[str] = []
    for place, part in content_parts(items):
        if place in resolved:
            digest = resolved[place]
        else:
            digest = part_digest(part) if type(part) is dict else None
        if digest is not None:
            digests.append(digest)
    return digests


def placed_digests(items: Any, skip: Container[Place] = ()) -> dict[Place, str | None]:
    """The digest (`part_digest`) of every audio part of `items` by its place, the places in
    `skip` left out: computed once, for the key and for the uuids of inline audio both."""
    return {
        place: part_digest(part) if type(part) is dict else None
        for place, part in content_parts(items)
        if place not in skip
    }


def part_digest(part: dict[str, Any]) -> str | None:
    """The digest of one content part's audio; None for a part that is not audio."""
    kind = part.get("type")
    if kind == "audio_url":
        url = part_url(part)
        return _uuid_digest(part) if url is None else url_digest(url)
    if kind == "input_audio":
        audio = part.get("input_audio")
        data = audio.get("data") if type(audio) is dict else None
        return base64_digest(data) if type(data) is str and data else _uuid_digest(part)
    return None


def url_digest(url: str) -> str:
    """A base64 data URI by its bytes; any other URL (vLLM fetches it) by its text."""
    comma = url.find(",") if url[:5].lower() == "data:" else -1
    if comma > 0 and url[:comma].lower().endswith(";base64"):
        return base64_digest(url, comma + 1)
    return identity_digest("url", url)


def _uuid_digest(part: dict[str, Any]) -> str | None:
    uuid = part.get("uuid")
    return identity_digest("uuid", uuid) if type(uuid) is str and uuid else None
