"""Requests a split cannot answer honestly. Pure.

A request whose clip is split is answered by merging one answer per piece. What cannot be
merged (several choices, per-token data, tool calls, structured output that each piece would
produce whole) is refused with 400 `chunking_unsupported` naming the field, before anything is
sent upstream. Rows that are not split are never refused for these.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..errors import InvalidRequest

CHUNKING_UNSUPPORTED = "chunking_unsupported"

# The Responses bridge's chat body says `response_format` for what its client sent as
# `text.format`, `logprobs` for `include` (or `top_logprobs`, which it carries as it is): the
# refusal names the field the client wrote.
BRIDGE_PARAMS = {"response_format": "text.format", "logprobs": "include"}


def _on(value: Any) -> bool:
    return value is not None and value is not False


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _not_text_format(value: Any) -> bool:
    return value is not None and not (isinstance(value, dict) and value.get("type") == "text")


# field -> (refused when, why)
RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "n": (lambda v: _positive(v) and v > 1, "several choices per piece cannot be paired up"),
    "logprobs": (_on, "per-token log probabilities are not merged across pieces"),
    "top_logprobs": (_positive, "per-token log probabilities are not merged across pieces"),
    "prompt_logprobs": (_on, "each piece has its own prompt"),
    "echo": (_on, "each piece would echo its own prompt"),
    "return_token_ids": (_on, "token ids are per piece (each has its own prompt)"),
    "return_tokens_as_token_ids": (_on, "token ids are per piece (each has its own prompt)"),
    "tools": (lambda v: isinstance(v, list) and bool(v), "tool calls are not merged across pieces"),
    "response_format": (_not_text_format, "each piece would answer a whole structured object"),
    "structured_outputs": (_on, "each piece would answer a whole structured object"),
}


def refuse_unmergeable(body: Mapping[str, Any], route: str) -> None:
    """400 `chunking_unsupported` naming the first field of `body` (a chat request about to be
    split) whose answer cannot be merged; `route` "responses" names bridged fields as sent."""
    for field, (refused, why) in RULES.items():
        if refused(body.get(field)):
            if route == "responses" and field == "logprobs" and "top_logprobs" in body:
                field = "top_logprobs"  # the bridge's `logprobs: true` came with it
            _refuse(field, why, route)
    options = body.get("stream_options")
    if isinstance(options, dict) and _on(options.get("continuous_usage_stats")):
        why = "each piece counts its own usage"
        _refuse("stream_options.continuous_usage_stats", why, route)


def _refuse(field: str, why: str, route: str) -> None:
    param = BRIDGE_PARAMS.get(field, field) if route == "responses" else field
    raise InvalidRequest(
        f"{param}: this request's audio is longer than chunking.threshold_seconds, so it is "
        f"split into pieces answered one by one and merged, and {why}; send it without "
        f"{param}, or split the audio yourself",
        param=param,
        code=CHUNKING_UNSUPPORTED,
    )
