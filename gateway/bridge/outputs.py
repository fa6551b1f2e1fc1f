"""The Responses output items and content parts the bridge builds, from chat-completion pieces.
Pure: dicts in, dicts out.

    reasoning      <- message.reasoning (or reasoning_content): one `reasoning_text` part
    message        <- message.content: an `output_text` part (with logprobs and annotations),
                      message.refusal: a `refusal` part
    function_call  <- each of message.tool_calls: call_id = the tool call's id, name, and
                      arguments exactly as the model produced them

Chat's per-token `logprobs.content` entries become the `Logprob` of an `output_text` part
(`bytes` filled from the token's UTF-8 when vLLM sends none) or, streamed, the lighter entries
of `response.output_text.delta` (token, logprob, top_logprobs; the spec's delta has no bytes).
"""

from __future__ import annotations

from typing import Any

from ..errors import UpstreamUnavailable


def invalid_answer(reason: str) -> UpstreamUnavailable:
    return UpstreamUnavailable(
        f"the upstream's chat completions answer cannot be bridged: {reason}",
        code="upstream_invalid_response",
    )


def reasoning_text(message_or_delta: dict[str, Any]) -> str | None:
    """vLLM 0.33 names it `reasoning`; earlier versions `reasoning_content`."""
    for key in ("reasoning", "reasoning_content"):
        value = message_or_delta.get(key)
        if isinstance(value, str):
            return value
    return None


def reasoning_item(item_id: str, text: str | None, status: str = "completed") -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": [] if text is None else [{"type": "reasoning_text", "text": text}],
        "status": status,
    }


def output_text_part(
    text: str, logprobs: list[dict[str, Any]] | None = None, annotations: Any = None
) -> dict[str, Any]:
    return {
        "type": "output_text",
        "text": text,
        "annotations": response_annotations(annotations),
        "logprobs": logprobs or [],
    }


def refusal_part(refusal: str) -> dict[str, Any]:
    return {"type": "refusal", "refusal": refusal}


def message_item(item_id: str, parts: list[dict[str, Any]], status: str) -> dict[str, Any]:
    """The assistant message; no parts for the item of output_item.added."""
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": parts,
    }


def message_parts(message: dict[str, Any], logprobs: Any) -> list[dict[str, Any]]:
    """A chat message's text and refusal as content parts: text first (an empty one when the
    message has neither), then the refusal."""
    content, refusal = message.get("content"), message.get("refusal")
    parts = []
    if (isinstance(content, str) and content) or not isinstance(refusal, str):
        text = content if isinstance(content, str) else ""
        parts.append(output_text_part(text, part_logprobs(logprobs), message.get("annotations")))
    if isinstance(refusal, str):
        parts.append(refusal_part(refusal))
    return parts


def function_call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str
) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def tool_call_fields(call: Any, where: str) -> tuple[str | None, str, str]:
    """(id, name, arguments) of one chat tool call; a 502 when it is not one."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise invalid_answer(f"{where} is not a function call with a name")
    arguments = function.get("arguments", "")
    if not isinstance(arguments, str):
        raise invalid_answer(f"{where}.function.arguments is not a string")
    call_id = call.get("id")
    return (call_id if isinstance(call_id, str) else None), function["name"], arguments


# --- logprobs -----------------------------------------------------------------------------------


def part_logprobs(logprobs: Any) -> list[dict[str, Any]]:
    """Chat `logprobs` ({"content": [...]}) as an `output_text` part's logprobs."""
    return [_token(entry, top=True) for entry in _entries(logprobs)]


def light_logprobs(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Part logprobs in the lighter shape of the text events."""
    return [_light(entry) for entry in entries]


def _entries(logprobs: Any) -> list[dict[str, Any]]:
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if content is None:
        return []
    if not isinstance(content, list) or not all(_is_entry(e) for e in content):
        raise invalid_answer("logprobs.content is not a list of token entries")
    return content


def _is_entry(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("token"), str)
        and isinstance(entry.get("logprob"), int | float)
    )


def _token(entry: dict[str, Any], *, top: bool) -> dict[str, Any]:
    raw = entry.get("bytes")
    token: dict[str, Any] = {
        "token": entry["token"],
        "logprob": entry["logprob"],
        "bytes": raw if isinstance(raw, list) else list(entry["token"].encode()),
    }
    if top:
        tops = entry.get("top_logprobs") or []
        token["top_logprobs"] = [_token(t, top=False) for t in tops if _is_entry(t)]
    return token


def _light(entry: dict[str, Any]) -> dict[str, Any]:
    tops = entry.get("top_logprobs") or []
    return {
        "token": entry["token"],
        "logprob": entry["logprob"],
        "top_logprobs": [
            {"token": t["token"], "logprob": t["logprob"]} for t in tops if _is_entry(t)
        ],
    }


# --- annotations --------------------------------------------------------------------------------


def response_annotations(annotations: Any) -> list[dict[str, Any]]:
    """Chat's `url_citation` annotations in the Responses shape (flat); vLLM sends none (0.33
    a null, 0.34 no key). Any other kind has no Responses equivalent: a 502 names it."""
    if annotations is None:
        return []
    if not isinstance(annotations, list):
        raise invalid_answer("message.annotations is not a list")
    return [_citation(annotation) for annotation in annotations]


def _citation(annotation: Any) -> dict[str, Any]:
    kind = annotation.get("type") if isinstance(annotation, dict) else None
    citation = annotation.get("url_citation") if kind == "url_citation" else None
    if not isinstance(citation, dict):
        raise invalid_answer(f"an annotation of type {kind!r} has no Responses equivalent")
    keys = ("start_index", "end_index", "title", "url")
    return {"type": "url_citation", **{key: citation.get(key) for key in keys}}
