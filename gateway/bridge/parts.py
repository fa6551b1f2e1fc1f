"""A Responses message's content parts as chat content parts. Pure.

User, system, developer and tool messages: `input_text` (and a replayed `output_text`) as
`text`, `input_image` as `image_url` (with its `detail`, "auto" by default, as NeMo Gym sends
it), `input_audio` as chat's own part, an audio `input_file` as `audio_url` (see
`audio_file_url`). Assistant messages: the text of their `output_text` parts and of their
`refusal` parts, each joined into one string (NeMo Gym's mapping). Every other part type, and
every key the bridge does not translate, is refused naming its place.
"""

from __future__ import annotations

import os
from typing import Any

from ..naming.formats import MIME_BY_EXTENSION
from ..naming.urls import MalformedFileURL, named_path
from .fields import check_keys, invalid, require_str, unsupported

AUDIO_DATA_URI_PREFIX = "data:audio/"
TEXT_PART_TYPES = frozenset({"input_text", "output_text"})
# Keys a part may carry besides what it translates: an `output_text` being replayed describes
# itself with these; a file's name says nothing the bytes do not.
REPLAY_ONLY = {"output_text": ("annotations", "logprobs"), "input_file": ("filename",)}
IMAGE_DETAILS = ("auto", "low", "high")
# How errors name the chat parts made of `input_file` paths: (message, part) -> param.
Params = dict[tuple[int, int], str]


def audio_file_url(part: dict[str, Any]) -> str | None:
    """The URL an audio `input_file` becomes in chat (its path or its data URI), or None."""
    data = part.get("file_data")
    if type(data) is str and data[: len(AUDIO_DATA_URI_PREFIX)].lower() == AUDIO_DATA_URI_PREFIX:
        return data
    url = part.get("file_url")
    if type(url) is not str:
        return None
    try:
        path = named_path(url)
    except MalformedFileURL:
        path = url  # still a file URL: the pipeline refuses it by name
    if path is None or os.path.splitext(path)[1].lower() not in MIME_BY_EXTENSION:
        return None
    return url


def is_audio_part(part: Any) -> bool:
    if type(part) is not dict:
        return False
    kind = part.get("type")
    return kind == "input_audio" or (kind == "input_file" and audio_file_url(part) is not None)


def content_parts(content: Any, path: str, number: int, part_params: Params) -> Any:
    """A user/system/developer/tool message's content: a string as it is, parts translated.
    `number` is the chat message's index (for `part_params`)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(path, "must be a string or a list of parts", "invalid_content")
    parts = []
    for index, part in enumerate(content):
        part_path = f"{path}[{index}]"
        parts.append(_part(part, part_path))
        if part.get("type") == "input_file" and type(part.get("file_data")) is not str:
            part_params[(number, index)] = f"{part_path}.file_url"  # the pipeline names it so
    return parts


def _part(part: Any, path: str) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise invalid(path, "must be an object", "invalid_content")
    kind = part.get("type")
    if kind in TEXT_PART_TYPES:
        check_keys(part, path, ("type", "text", *REPLAY_ONLY.get(kind, ())))
        return {"type": "text", "text": require_str(part, "text", path, "invalid_content")}
    if kind == "input_image":
        return _image_part(part, path)
    if kind == "input_audio":
        return _audio_part(part, path)
    if kind == "input_file":
        return _file_part(part, path)
    raise unsupported(f"{path}.type", f"content parts of type {kind!r} are not translated")


def _image_part(part: dict[str, Any], path: str) -> dict[str, Any]:
    check_keys(part, path, ("type", "image_url", "detail"))
    url = require_str(part, "image_url", path, "invalid_content")
    detail = part.get("detail") or "auto"
    if detail not in IMAGE_DETAILS:
        raise unsupported(f"{path}.detail", f"detail {detail!r} is not translated")
    return {"type": "image_url", "image_url": {"url": url, "detail": detail}}


def _audio_part(part: dict[str, Any], path: str) -> dict[str, Any]:
    """An `input_audio` part is chat's own: its base64 and format go across as they are."""
    check_keys(part, path, ("type", "input_audio"))
    audio = part.get("input_audio")
    if type(audio) is not dict or not {"data", "format"} <= set(audio):
        raise invalid(
            f"{path}.input_audio", "must be an object with data and format", "invalid_content"
        )
    check_keys(audio, f"{path}.input_audio", ("data", "format"))
    return {"type": "input_audio", "input_audio": audio}


def _file_part(part: dict[str, Any], path: str) -> dict[str, Any]:
    """An audio `input_file` as a chat `audio_url` part; any other file is refused."""
    url = audio_file_url(part)
    if url is None:
        raise unsupported(
            path,
            "only an input_file naming an audio file (file_url: a path, file:// or s3:// "
            "URL) or holding an audio data URI (file_data: data:audio/...) is translated",
        )
    keep = "file_data" if url is part.get("file_data") else "file_url"
    check_keys(part, path, ("type", keep, *REPLAY_ONLY["input_file"]))
    return {"type": "audio_url", "audio_url": {"url": url}}


def assistant_texts(content: Any, path: str) -> tuple[str, str]:
    """An assistant message's content as (text, refusal), each parts' strings joined."""
    if content is None or isinstance(content, str):
        return content or "", ""
    if not isinstance(content, list):
        raise invalid(path, "must be a string, null or a list of parts", "invalid_content")
    texts, refusals = [], []
    for index, part in enumerate(content):
        part_path = f"{path}[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "refusal":
            check_keys(part, part_path, ("type", "refusal"))
            refusals.append(require_str(part, "refusal", part_path, "invalid_content"))
        elif kind in TEXT_PART_TYPES:
            check_keys(part, part_path, ("type", "text", *REPLAY_ONLY.get(kind, ())))
            texts.append(require_str(part, "text", part_path, "invalid_content"))
        else:
            why = f"assistant content parts of type {kind!r} are not translated"
            raise unsupported(f"{part_path}.type", why)
    return "".join(texts), "".join(refusals)


def text_only(content: Any) -> str | None:
    """The text of a content that holds only text (a string or text parts), else None."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(part.get("type") == "text" for part in content):
        return "".join(part["text"] for part in content)
    return None
