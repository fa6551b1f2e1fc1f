"""Where a dataset row's request is. Pure.

A NeMo Gym row holds a Responses body in `responses_create_params` (every other field is the
row's own); any other row is itself the request: a chat completions body (`messages`) or a
Responses body (`input`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from ..bridge import carries_audio_parts, responses_to_chat
from ..config import Config
from ..errors import GatewayError, PayloadTooLarge
from ..naming.content_parts import part_url
from ..naming.sidechannel import SidechannelKeys
from ..request.shapes import (
    CHAT_AUDIO_URL,
    CHAT_INPUT_AUDIO,
    RESPONSES,
    RouteShape,
    parse_json_object,
)
from .jsonl import Line
from .results import RowError

NEMO_GYM_KEY = "responses_create_params"

Route = Literal["chat", "responses"]


@dataclass(frozen=True, slots=True)
class RowRequest:
    """The request inside a row; `prefix` is how row-level keys name its fields."""

    row: dict[str, Any]
    request: dict[str, Any]
    route: Route
    nested: bool  # a NeMo Gym row: the request is row["responses_create_params"]

    @property
    def prefix(self) -> str:
        return f"{NEMO_GYM_KEY}." if self.nested else ""

    def row_with(self, request: dict[str, Any]) -> dict[str, Any]:
        """The row with `request` in place of its request (every other field kept)."""
        return {**self.row, NEMO_GYM_KEY: request} if self.nested else request

    def encoded_request(self, line: bytes) -> bytes:
        """The request's JSON bytes: the line itself unless the request is nested."""
        return msgspec.json.encode(self.request) if self.nested else line


def parse_row(line: bytes) -> RowRequest:
    """The request of one JSONL line; 400 `invalid_json` as the server answers a bad body."""
    row = parse_json_object(line)
    nested = row.get(NEMO_GYM_KEY)
    if isinstance(nested, dict):
        return RowRequest(row, nested, "responses", nested=True)
    route: Route = "responses" if "input" in row and "messages" not in row else "chat"
    return RowRequest(row, row, route, nested=False)


def bridged(found: RowRequest, config: Config) -> bool:
    """Whether the server sends this row through the Responses -> chat bridge."""
    return found.route == "responses" and config.responses.audio == "chat_bridge"


def carries_audio(found: RowRequest, config: Config, keys: SidechannelKeys) -> bool:
    """Whether the server reads this row's audio before its body goes on: the sidechannel, or
    (a bridged Responses row) audio parts in its input. Chat path parts are found later."""
    if keys.carries(found.request):
        return True
    return bridged(found, config) and carries_audio_parts(found.request)


def served_request(
    found: RowRequest, config: Config
) -> tuple[dict[str, Any], dict[tuple[int, int], str]]:
    """The body the server's audio pipeline works on, and how its content parts are named in
    errors: a bridged Responses row becomes its chat body (a 400 `unsupported_by_audio_bridge`
    as the server answers), any other row is itself."""
    if not bridged(found, config):
        return found.request, {}
    chat = responses_to_chat(found.request)
    return chat.chat, chat.part_params


def route_shape(found: RowRequest, config: Config, *, bridge: bool = True) -> RouteShape:
    """How the gateway's route for this row takes its audio. With `bridge`, as `serve` does
    under `[responses] audio`; without, a Responses row keeps the Responses splice."""
    if found.route == "responses" and not (bridge and bridged(found, config)):
        return RESPONSES
    return CHAT_INPUT_AUDIO if config.splice.chat_part == "input_audio" else CHAT_AUDIO_URL


def request_too_large(size: int, max_body_bytes: int) -> PayloadTooLarge | None:
    """The server's answer to a body over `server.max_body_bytes`, or None."""
    if size <= max_body_bytes:
        return None
    return PayloadTooLarge(
        f"the request body is {size} bytes, over server.max_body_bytes ({max_body_bytes})",
        code="request_too_large",
    )


def row_error(
    line: Line,
    found: RowRequest | None,
    error: GatewayError,
    keys: SidechannelKeys,
    path: str | None = None,
) -> RowError:
    """The server's error located in the dataset: row-level key, path as written (`keys`:
    the sidechannel's names the row was read with)."""
    prefix = found.prefix if found is not None else ""
    if path is None and found is not None:
        path = _path_named_by(found, error, keys)
    key = prefix + error.param if error.param else None
    return RowError(line.file, line.number, error.code, key, path, error.message)


_PART_PARAM = re.compile(r"(messages|input)\[(\d+)\]\.content\[(\d+)\]\.(audio_url\.url|file_url)$")


def _path_in_part(request: dict[str, Any], param: str) -> str | None:
    """The URL as written that a `messages[i].content[j].audio_url.url` or
    `input[i].content[j].file_url` error is about."""
    match = _PART_PARAM.match(param)
    if match is None:
        return None
    items, i, j = match.group(1), int(match.group(2)), int(match.group(3))
    try:
        part = request[items][i]["content"][j]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(part, dict):
        return None
    url = part_url(part) if part.get("type") == "audio_url" else part.get("file_url")
    return url if isinstance(url, str) else None


def _path_named_by(found: RowRequest, error: GatewayError, keys: SidechannelKeys) -> str | None:
    """The path as written that a sidechannel or content-part error is about
    (`metadata.audio_paths[2]`, `messages[1].content[0].audio_url.url`)."""
    if error.param and (path := _path_in_part(found.request, error.param)) is not None:
        return path
    metadata = found.request.get("metadata")
    if not isinstance(metadata, dict) or not error.param:
        return None
    name = error.param.removeprefix("metadata.")
    value = metadata.get(name)
    kind = keys.kinds.get(name) if error.param.startswith("metadata.") else None
    if kind == "audio_path":
        return value if isinstance(value, str) else None
    if kind != "audio_paths":
        return None
    index = re.match(re.escape(error.param) + r"\[(\d+)\]", error.message)
    if isinstance(value, str):
        try:
            value = msgspec.json.decode(value)
        except msgspec.DecodeError:
            return None
    if index is None or not isinstance(value, list):
        return None
    item = value[int(index.group(1))]
    return item if isinstance(item, str) else None
