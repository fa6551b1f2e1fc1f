"""A Responses request as a chat-completions request. Pure: dicts in, dicts out.

Every top-level field of a Responses body (the openai SDK's `ResponseCreateParams` plus vLLM
0.33's `ResponsesRequest` extras) is in exactly one of three tables: mapped onto the chat body,
ignored because it cannot change the answer, or refused (400 `unsupported_by_audio_bridge`
naming it). A key in none of them is refused too: nothing is dropped silently. A null value
counts as absent, as it does for vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest

UNSUPPORTED = "unsupported_by_audio_bridge"

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
    {"input", "instructions", "max_output_tokens", "stream", "text", "truncation"}
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
        "parallel_tool_calls",  # tools are refused, so these cannot apply
        "max_tool_calls",
        "top_logprobs",  # vLLM uses it only with include=[...logprobs], which is refused
    }
)
# Accepted only at their "off" value (null always counts as absent); anything else is refused.
OFF_VALUES: dict[str, tuple[Any, ...]] = {
    "tools": ([],),
    "tool_choice": ("auto", "none"),
    "include": ([],),
    "background": (False,),
    "enable_response_messages": (False,),
}
# Refused whenever present and not null: state, tools and hosted features the chat route lacks.
REFUSED_FIELDS = frozenset(
    {
        "previous_response_id",
        "conversation",
        "prompt",
        "reasoning",
        "context_management",
        "moderation",
        "access_programs",
        "background_options",
        "image",
        "previous_input_messages",
    }
)
ROLES = frozenset({"user", "system", "developer", "assistant"})
TEXT_PART_TYPES = frozenset({"input_text", "output_text"})


@dataclass(frozen=True, slots=True)
class BridgedRequest:
    """The chat body to send (audio not yet spliced) and what the answer echoes back."""

    chat: dict[str, Any]
    echo: dict[str, Any]
    stream: bool


def unsupported(param: str, reason: str) -> InvalidRequest:
    return InvalidRequest(
        f"{param}: {reason}; the audio bridge (responses.audio = 'chat_bridge') sends this "
        f"request to /v1/chat/completions, which cannot honour it",
        param=param,
        code=UNSUPPORTED,
    )


def responses_to_chat(body: dict[str, Any]) -> BridgedRequest:
    """The chat-completions request equivalent to a Responses request, or a 400 naming the
    first field the bridge cannot carry. `body` is not modified."""
    present = {key: value for key, value in body.items() if value is not None}
    for key, value in present.items():
        _check_field(key, value)
    chat: dict[str, Any] = {k: v for k, v in present.items() if k in CARRIED_FIELDS}
    chat["messages"] = _messages(present.get("instructions"), body.get("input"))
    if "max_output_tokens" in present:
        chat["max_tokens"] = present["max_output_tokens"]
    stream = present.get("stream", False)
    if not isinstance(stream, bool):
        raise InvalidRequest("stream must be a boolean", param="stream", code="invalid_stream")
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}  # usage for response.completed
    response_format = _response_format(present.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    truncation = present.get("truncation", "disabled")
    if truncation not in ("auto", "disabled"):
        raise unsupported("truncation", "only 'auto' or 'disabled' is supported")
    if truncation == "auto":
        chat["truncate_prompt_tokens"] = -1  # what vLLM's Responses route does for "auto"
    return BridgedRequest(chat, _echo(present), stream)


def _check_field(key: str, value: Any) -> None:
    if key in CARRIED_FIELDS or key in TRANSLATED_FIELDS or key in IGNORED_FIELDS:
        return
    if key in OFF_VALUES:
        if value not in OFF_VALUES[key]:
            allowed = " or ".join(repr(v) for v in OFF_VALUES[key])
            raise unsupported(key, f"only {allowed} (or null) is supported")
        return
    if key in REFUSED_FIELDS:
        raise unsupported(key, "not supported")
    raise unsupported(key, "not a Responses field the bridge knows")


def _messages(instructions: Any, items: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if instructions is not None:
        if not isinstance(instructions, str):
            raise unsupported("instructions", "only a string is supported")
        messages.append({"role": "system", "content": instructions})
    if items is None:
        return messages
    if isinstance(items, str):
        return [*messages, {"role": "user", "content": items}]
    if not isinstance(items, list):
        raise InvalidRequest(
            "input must be a string or a list of items", param="input", code="invalid_input"
        )
    return messages + [_message(item, f"input[{index}]") for index, item in enumerate(items)]


def _message(item: Any, path: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise InvalidRequest(f"{path} must be an object", param=path, code="invalid_input")
    kind = item.get("type", "message")
    if kind != "message":
        raise unsupported(f"{path}.type", f"input items of type {kind!r} are not supported")
    role = item.get("role")
    if role not in ROLES:
        raise unsupported(f"{path}.role", f"role {role!r} is not supported")
    return {"role": role, "content": _content(item.get("content"), f"{path}.content")}


def _content(content: Any, path: str) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(
            f"{path} must be a string or a list of parts", param=path, code="invalid_content"
        )
    return [_text_part(part, f"{path}[{index}]") for index, part in enumerate(content)]


def _text_part(part: Any, path: str) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind not in TEXT_PART_TYPES:
        raise unsupported(f"{path}.type", f"content parts of type {kind!r} are not supported")
    text = part.get("text")
    if not isinstance(text, str):
        raise InvalidRequest(f"{path}.text must be a string", param=path, code="invalid_content")
    return {"type": "text", "text": text}


def _response_format(text: Any) -> dict[str, Any] | None:
    """`text.format` as chat's `response_format`; `text.verbosity` is ignored (so is it by
    vLLM's own Responses route)."""
    if text is None:
        return None
    if not isinstance(text, dict) or not set(text) <= {"format", "verbosity"}:
        raise unsupported("text", "only text.format and text.verbosity are supported")
    fmt = text.get("format")
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if fmt is None or kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "description", "strict") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise unsupported("text.format", f"format type {kind!r} is not supported")


# Request fields a Responses object repeats, with the API's defaults when absent.
ECHO_DEFAULTS: dict[str, Any] = {
    "instructions": None,
    "max_output_tokens": None,
    "parallel_tool_calls": True,
    "temperature": None,
    "tool_choice": "auto",
    "tools": [],
    "top_p": None,
    "truncation": "disabled",
    "user": None,
    "text": {"format": {"type": "text"}},
}


def _echo(present: dict[str, Any]) -> dict[str, Any]:
    return {key: present.get(key, default) for key, default in ECHO_DEFAULTS.items()}
