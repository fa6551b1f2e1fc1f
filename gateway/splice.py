"""Putting audio parts into a request body. Pure: takes the parsed body and the parts.

Same semantics as NeMo Gym's vllm_model: the sidechannel's parts go at the front of the last
user message, in clip order; text stays after them; without a user message one is appended.
A content part that named a clip is replaced where it stands (`splice_in_place`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .errors import InvalidRequest

Part = dict[str, Any]


def splice_chat(body: dict[str, Any], parts: list[Part]) -> None:
    """Chat completions: string content becomes a `text` part after the audio."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise InvalidRequest(
            "messages must be a list to receive the audio",
            param="messages",
            code="invalid_messages",
        )
    _into_last_user_message(messages, parts, "text", "messages")


def splice_clips(
    body: dict[str, Any],
    splice: Callable[[dict[str, Any], list[Part]], None],
    parts: list[Part],
    places: Sequence[tuple[int, int]],
) -> list[Part]:
    """A request's clip parts into its body: the last `len(places)` (content parts' clips)
    where their parts stand, then, so that those places still hold, the others (the
    sidechannel's) as the route's `splice` puts them. Returns the parts as placed."""
    sidechannel = len(parts) - len(places)
    placed = parts[:sidechannel]
    if places:
        placed += splice_in_place(body, places, parts[sidechannel:])
    if sidechannel:
        splice(body, parts[:sidechannel])
    return placed


def splice_in_place(
    body: dict[str, Any], places: Sequence[tuple[int, int]], parts: Sequence[Part]
) -> list[Part]:
    """Chat content parts replaced where they stand: `parts[k]` takes the place of
    `messages[i].content[j]` for `places[k] == (i, j)`, keeping the keys of the old part that
    the new one does not set (all but its `type` and `audio_url`). Returns the parts as placed
    (the dicts now in the body)."""
    messages = body["messages"]
    placed = []
    for (i, j), part in zip(places, parts, strict=True):
        content = messages[i]["content"]
        old = content[j]
        kept = {key: value for key, value in old.items() if key not in _REPLACED_KEYS}
        content[j] = new = {**kept, **part}
        placed.append(new)
    return placed


_REPLACED_KEYS = frozenset({"type", "audio_url"})


def splice_responses(body: dict[str, Any], parts: list[Part]) -> None:
    """Responses: a string `input` becomes one user message; text parts are `input_text`."""
    items = body.get("input")
    if items is None or isinstance(items, str):
        content = list(parts) if items is None else _prepend(parts, items, "input_text", "input")
        body["input"] = [{"role": "user", "content": content}]
        return
    if not isinstance(items, list):
        raise InvalidRequest(
            "input must be a string or a list to receive the audio",
            param="input",
            code="invalid_input",
        )
    _into_last_user_message(items, parts, "input_text", "input")


def _into_last_user_message(
    items: list[Any], parts: list[Part], text_type: str, param: str
) -> None:
    message = last_user_message(items)
    if message is None:
        items.append({"role": "user", "content": list(parts)})
        return
    message["content"] = _prepend(parts, message.get("content"), text_type, param)


def last_user_message(items: list[Any]) -> dict[str, Any] | None:
    """The message the audio goes into (the dataset tools look for inline parts there)."""
    for item in reversed(items):
        if (
            isinstance(item, dict)
            and item.get("role") == "user"
            and item.get("type", "message") == "message"
        ):
            return item
    return None


def _prepend(parts: list[Part], content: Any, text_type: str, param: str) -> list[Any]:
    if content is None:
        return list(parts)
    if isinstance(content, str):
        return [*parts, {"type": text_type, "text": content}]
    if isinstance(content, list):
        return [*parts, *content]
    raise InvalidRequest(
        f"the last user message's content must be a string, a list or null, "
        f"not {type(content).__name__}",
        param=param,
        code="invalid_content",
    )
