"""A Responses request as a chat-completions request. Pure: dicts in, dicts out.

Every top-level field of a Responses body (the openai SDK's `ResponseCreateParams` plus vLLM
0.33's `ResponsesRequest` extras) is in exactly one of these tables: carried onto the chat body
as it is, translated by a rule of its own (`items`, `tools`, `params`), ignored because it
cannot change the answer, or refused (400 `unsupported_by_audio_bridge` naming it). A key in
none of them is refused too, and so is any key the bridge does not translate inside an item, a
part or a tool: nothing is dropped silently. A null value counts as absent, as it does for vLLM.

Audio in the input goes across as chat parts, in place (see `parts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidRequest
from .fields import UNSUPPORTED, unsupported
from .items import chat_messages
from .params import generation_settings
from .parts import Params, is_audio_part
from .tools import chat_tools

__all__ = ["UNSUPPORTED", "BridgedRequest", "carries_audio_parts", "responses_to_chat"]

# Same name and meaning in vLLM 0.33's ChatCompletionRequest: copied as they are.
CARRIED_FIELDS = frozenset(
    {
        "model",
        "temperature",
        "top_p",
        "user",
        "metadata",  # what the sidechannel leaves; vLLM's chat route ignores it, we echo it
        # vLLM's sampling and engine extras, accepted by both of its routes
        "top_k",
        "min_p",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "seed",
        "stop",
        "stop_token_ids",
        "ignore_eos",
        "logit_bias",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "include_stop_str_in_output",
        "include_reasoning",
        "watermarking",
        "structured_outputs",
        "vllm_xargs",
        "kv_transfer_params",
        "ec_transfer_params",
        "chat_template_kwargs",
        "media_io_kwargs",
        "mm_processor_kwargs",
        "priority",
        "request_id",
        "session_id",
        "cache_salt",
        "mm_payload",
        "return_mm_kwargs",
    }
)
# Translated by a rule of their own (see `responses_to_chat`).
TRANSLATED_FIELDS = frozenset(
    {
        "input",
        "instructions",
        "max_output_tokens",
        "stream",
        "text",
        "truncation",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "reasoning",
        "top_logprobs",
        "include",
    }
)
# Accepted whatever their value: they cannot change what the model answers through the bridge.
IGNORED_FIELDS = frozenset(
    {
        "store",  # the bridged answer is never stored (vLLM stores only with its store enabled)
        "service_tier",  # vLLM ignores it
        "safety_identifier",  # vLLM accepts and ignores these four
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "stream_options",  # only include_obfuscation, and the bridge adds no obfuscation
    }
)
# Accepted only at their "off" value (null always counts as absent); anything else is refused.
OFF_VALUES: dict[str, tuple[Any, ...]] = {
    "background": (False,),
    "enable_response_messages": (False,),
}
# Refused whenever present and not null: state, tools and hosted features the chat route lacks.
REFUSED_FIELDS = frozenset(
    {
        "previous_response_id",
        "conversation",
        "prompt",
        "max_tool_calls",  # vLLM's chat route has no such cap
        "context_management",
        "moderation",
        "access_programs",
        "background_options",
        "image",
        "previous_input_messages",
    }
)


@dataclass(frozen=True, slots=True)
class BridgedRequest:
    """The chat body to send (audio not yet spliced) and what the answer echoes back."""

    chat: dict[str, Any]
    echo: dict[str, Any]
    stream: bool
    # How errors name the chat parts made of `input_file` paths: (message, part) -> param.
    part_params: dict[tuple[int, int], str] = field(default_factory=dict)


def responses_to_chat(body: dict[str, Any]) -> BridgedRequest:
    """The chat-completions request equivalent to a Responses request, or a 400 naming the
    first field the bridge cannot carry. `body` is not modified."""
    present = {key: value for key, value in body.items() if value is not None}
    for key, value in present.items():
        _check_field(key, value)
    chat: dict[str, Any] = {k: v for k, v in present.items() if k in CARRIED_FIELDS}
    part_params: Params = {}
    chat["messages"] = chat_messages(present.get("instructions"), body.get("input"), part_params)
    if "max_output_tokens" in present:
        chat["max_tokens"] = present["max_output_tokens"]
    stream = present.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequest("stream must be a boolean", param="stream", code="invalid_stream")
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}  # usage for response.completed
    chat |= chat_tools(present) | generation_settings(present)
    return BridgedRequest(chat, echo_fields(present), stream, part_params)


def _check_field(key: str, value: Any) -> None:
    if key in CARRIED_FIELDS or key in TRANSLATED_FIELDS or key in IGNORED_FIELDS:
        return
    if key in OFF_VALUES:
        if value not in OFF_VALUES[key]:
            allowed = " or ".join(repr(v) for v in OFF_VALUES[key])
            raise unsupported(key, f"only {allowed} (or null) is translated")
        return
    if key in REFUSED_FIELDS:
        raise unsupported(key, "not translated")
    raise unsupported(key, "not a Responses field the bridge knows")


def carries_audio_parts(body: dict[str, Any]) -> bool:
    """Whether a Responses body's input holds audio the bridge carries: an `input_audio`
    part, or an `input_file` naming an audio file or holding an audio data URI."""
    items = body.get("input")
    if type(items) is not list:
        return False
    for item in items:
        content = item.get("content") if type(item) is dict else None
        if type(content) is list and any(is_audio_part(part) for part in content):
            return True
    return False


# Request fields a Responses object repeats, with the API's defaults when absent.
ECHO_DEFAULTS: dict[str, Any] = {
    "instructions": None,
    "max_output_tokens": None,
    "parallel_tool_calls": True,
    "reasoning": None,
    "temperature": None,
    "tool_choice": "auto",
    "tools": [],
    "top_logprobs": None,
    "top_p": None,
    "truncation": "disabled",
    "user": None,
    "text": {"format": {"type": "text"}},
}


def echo_fields(present: dict[str, Any]) -> dict[str, Any]:
    """What the answer repeats of the request (the one place the answer side reads it)."""
    return {key: present.get(key, default) for key, default in ECHO_DEFAULTS.items()}
