"""How each rewritten route takes its audio (`RouteShape` and the routes' shapes), and the
JSON-object parse every route starts from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from ..errors import InvalidRequest
from ..splice import Part, splice_chat, splice_responses


@dataclass(frozen=True, slots=True)
class RouteShape:
    """How one rewritten route takes its audio."""

    name: str
    splice: Callable[[dict[str, Any], list[Part]], None]
    input_audio_parts: bool
    # How to send a clip that input_audio cannot carry (told in the 400 refusing it).
    input_audio_fix: str = ""
    # Whether a long clip may be split ([chunking]): routes whose answers the gateway can merge.
    chunkable: bool = False
    # [splice] repeats = "reference": the body comes back as a `ReferencedBody`.
    references: bool = False
    # Chat bodies: audio_url parts naming a path are clips ([sidechannel] content_parts).
    content_parts: bool = False
    # Where the body's messages are, with the audio parts a client put there itself.
    items: str = "messages"


CHAT_AUDIO_URL = RouteShape(
    "chat", splice_chat, input_audio_parts=False, chunkable=True, content_parts=True
)
CHAT_INPUT_AUDIO = RouteShape(
    "chat",
    splice_chat,
    input_audio_parts=True,
    chunkable=True,
    content_parts=True,
    input_audio_fix='set [splice] chat_part = "audio_url" to send it as an audio_url data URI',
)
RESPONSES = RouteShape(
    "responses",
    splice_responses,
    input_audio_parts=True,
    items="input",
    input_audio_fix='send it through the chat bridge ([responses] audio = "chat_bridge")',
)


def parse_json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise InvalidRequest(
            f"the request body is not valid JSON: {exc}", code="invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object", code="invalid_json")
    return body
