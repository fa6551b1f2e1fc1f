"""A Responses request as a chat-completions request. Pure: dicts in, dicts out.

Every top-level field of a Responses body (the openai SDK's `ResponseCreateParams` plus vLLM
0.33's `ResponsesRequest` extras) is in exactly one of three tables: mapped onto the chat body,
ignored because it cannot change the answer, or refused (400 `unsupported_by_audio_bridge`
naming it). A key in none of them is refused too: nothing is dropped silently. A null value
counts as absent, as it does for vLLM.

Audio in the input goes across as chat parts, in place: an `input_audio` part as chat's own,
an `input_file` naming an audio file by `file_url` (a path, see `naming.urls`) as an
`audio_url` part the pipeline resolves, one holding an audio data URI in `file_data` as an
`audio_url` data URI. Any other `input_file` is refused (400 naming `input[i].content[j]`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidRequest
from ..naming.formats import MIME_BY_EXTENSION
from ..naming.urls import MalformedFileURL, named_path

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
AUDIO_DATA_URI_PREFIX = "data:audio/"


@dataclass(frozen=True, slots=True)
class BridgedRequest:
    """The chat body to send (audio not yet spliced) and what the answer echoes back."""

    chat: dict[str, Any]
    echo: dict[str, Any]
    stream: bool
    # How errors name the chat parts made of `input_file` paths: (message, part) -> param.
    part_params: dict[tuple[int, int], str] = field(default_factory=dict)


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
    part_params: dict[tuple[int, int], str] = {}
    chat["messages"] = _messages(present.get("instructions"), body.get("input"), part_params)
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
    return BridgedRequest(chat, _echo(present), stream, part_params)


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


def carries_audio_parts(body: dict[str, Any]) -> bool:
    """Whether a Responses body's input holds audio the bridge carries: an `input_audio`
    part, or an `input_file` naming an audio file or holding an audio data URI."""
    items = body.get("input")
    if type(items) is not list:
        return False
    for item in items:
        content = item.get("content") if type(item) is dict else None
        if type(content) is list and any(_is_audio_part(part) for part in content):
            return True
    return False


def _is_audio_part(part: Any) -> bool:
    if type(part) is not dict:
        return False
    kind = part.get("type")
    if kind == "input_audio":
        return True
    return kind == "input_file" and _audio_file_url(part) is not None


def _audio_file_url(part: dict[str, Any]) -> str | None:
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


Params = dict[tuple[int, int], str]


def _messages(instructions: Any, items: Any, part_params: Params) -> list[dict[str, Any]]:
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
    for index, item in enumerate(items):
        messages.append(_message(item, f"input[{index}]", len(messages), part_params))
    return messages


def _message(item: Any, path: str, number: int, part_params: Params) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise InvalidRequest(f"{path} must be an object", param=path, code="invalid_input")
    kind = item.get("type", "message")
    if kind != "message":
        raise unsupported(f"{path}.type", f"input items of type {kind!r} are not supported")
    role = item.get("role")
    if role not in ROLES:
        raise unsupported(f"{path}.role", f"role {role!r} is not supported")
    content = _content(item.get("content"), f"{path}.content", number, part_params)
    return {"role": role, "content": content}


def _content(
    content: Any, path: str, number: int, part_params: Params
) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(
            f"{path} must be a string or a list of parts", param=path, code="invalid_content"
        )
    parts = []
    for index, part in enumerate(content):
        part_path = f"{path}[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "input_file":
            parts.append(_file_part(part, part_path))
            if type(part.get("file_data")) is not str:  # a path: the pipeline names it so
                part_params[(number, index)] = f"{part_path}.file_url"
        elif kind == "input_audio":
            parts.append(_audio_part(part, part_path))
        else:
            parts.append(_text_part(part, part_path, kind))
    return parts


def _file_part(part: dict[str, Any], path: str) -> dict[str, Any]:
    """An audio `input_file` as a chat `audio_url` part; any other file is refused."""
    url = _audio_file_url(part)
    if url is None:
        raise unsupported(
            path,
            "only an input_file naming an audio file (file_url: a path, file:// or s3:// "
            "URL) or holding an audio data URI (file_data: data:audio/...) is supported",
        )
    return {"type": "audio_url", "audio_url": {"url": url}}


def _audio_part(part: dict[str, Any], path: str) -> dict[str, Any]:
    """An `input_audio` part is chat's own: its base64 and format go across as they are."""
    audio = part.get("input_audio")
    if type(audio) is not dict or not {"data", "format"} <= set(audio):
        raise InvalidRequest(
            f"{path}.input_audio must be an object with data and format",
            param=f"{path}.input_audio",
            code="invalid_content",
        )
    return {"type": "input_audio", "input_audio": audio}


def _text_part(part: Any, path: str, kind: Any) -> dict[str, Any]:
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
