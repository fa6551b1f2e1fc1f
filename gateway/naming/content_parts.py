"""Chat content parts that name a path for the gateway to read. Pure: no I/O.

A part `{"type": "audio_url", "audio_url": {"url": U}}` (or vLLM's bare-string form
`"audio_url": U`), in any message, whose `U` names a path or object by `urls.named_path`, is a
clip to resolve as the sidechannel's are (`[sidechannel] content_parts = "resolve"`). Parts
whose `U` is a URL for vLLM (data:, http(s)://, ...) and malformed parts are not ours: they
go on as they are, for vLLM to judge.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest
from .object_names import url_scheme
from .sidechannel import PathAudio
from .urls import MalformedFileURL, named_path

CONTENT_PARTS_KEY = "sidechannel.content_parts"
PASS_HINT = 'or set [sidechannel] content_parts = "pass" to relay path parts to vLLM untouched'

Place = tuple[int, int]  # (message index, part index) in the chat body's messages


@dataclass(frozen=True, slots=True)
class PartClip:
    """One content part naming a clip, and where it is."""

    place: Place
    ref: PathAudio


@dataclass(frozen=True, slots=True)
class PartRoots:
    """What the configured roots allow a part to name: absolute paths and objects need some
    root (`audio.root` or `audio.allowed_roots`), relative paths `audio.root` itself."""

    any_root: bool
    relative_root: bool


def part_clips(
    messages: Any, roots: PartRoots, params: Mapping[Place, str] | None = None
) -> list[PartClip]:
    """Every path-naming audio part of `messages`, in message then part order; 400 for a
    malformed file URL or a path the roots cannot admit. `params` names a part in errors
    where the body is not the client's own (the Responses bridge); by default
    `messages[i].content[j].audio_url.url`."""
    found: list[PartClip] = []
    for (i, j), part in content_parts(messages):
        if type(part) is dict and part.get("type") == "audio_url":
            url = part_url(part)
            if url is not None:
                param = params.get((i, j)) if params else None
                ref = _part_ref(url, param or f"messages[{i}].content[{j}].audio_url.url", roots)
                if ref is not None:
                    found.append(PartClip((i, j), ref))
    return found


def content_parts(items: Any) -> Iterator[tuple[Place, Any]]:
    """Every content part of a chat `messages` or Responses `input` list, with its place;
    items and contents of other shapes hold none."""
    if type(items) is not list:
        return
    for i, item in enumerate(items):
        content = item.get("content") if type(item) is dict else None
        if type(content) is list:
            for j, part in enumerate(content):
                yield (i, j), part


def part_url(part: dict[str, Any]) -> str | None:
    """The URL of an `audio_url` part, in either form; None when it has none."""
    value = part.get("audio_url")
    if type(value) is dict:
        value = value.get("url")
    return value if type(value) is str else None


def _part_ref(url: str, param: str, roots: PartRoots) -> PathAudio | None:
    try:
        path = named_path(url)
    except MalformedFileURL as exc:
        raise InvalidRequest(
            f"{param}: {url!r} {exc}", param=param, code="invalid_audio_reference"
        ) from None
    if path is None:
        return None
    if not path:
        raise InvalidRequest(
            f"{param} is empty: an empty audio reference is a bug in the data, not 'no audio'",
            param=param,
            code="empty_audio_reference",
        )
    relative = not os.path.isabs(path) and url_scheme(path) is None
    if not roots.any_root:
        raise _root_unset(param, f"{url!r} names a path, but no audio root is set: set audio.root")
    if relative and not roots.relative_root:
        raise _root_unset(
            param, f"relative path {url!r} needs audio.root, which is not set: set it"
        )
    return PathAudio(given=url, param=param, label=param, path=path)


def _root_unset(param: str, reason: str) -> InvalidRequest:
    return InvalidRequest(
        f"{param}: {reason} (the directory audio paths are under), {PASS_HINT}",
        param=param,
        code="audio_root_unset",
    )


def check_clip_count(
    params: Sequence[str], parts: int, sidechannel: str | None, max_clips: int
) -> None:
    """400 `too_many_clips` when a request's carriers together name more than `max_clips`
    clips; `params` names each clip in order (the sidechannel's, then `parts` content parts),
    `sidechannel` is the sidechannel's key (None: none)."""
    if len(params) <= max_clips:
        return
    carriers = "all in content parts"
    if sidechannel is not None:
        carriers = f"{len(params) - parts} in {sidechannel} and {parts} in content parts"
    param = params[max_clips]
    raise InvalidRequest(
        f"{param}: the request names {len(params)} audio clips ({carriers}), over the limit "
        f"of {max_clips} per request (audio.max_clips)",
        param=param,
        code="too_many_clips",
    )
