"""A chat-completions answer as a Responses object. Pure: dicts in, dicts out.

The object has the fields the openai SDK's `Response` model requires, one assistant `message`
item with one `output_text` part, a `reasoning` item before it when vLLM returned reasoning, and
`status` "incomplete" (reason "max_output_tokens") when the chat answer stopped for length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UpstreamUnavailable
from .request import BridgedRequest

# chat finish_reason -> Responses incomplete_details.reason; any other reason is "completed"
INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}


@dataclass(frozen=True, slots=True)
class ResponseIds:
    """The ids of one bridged response and its items, and when it was created (epoch s)."""

    response: str
    message: str
    reasoning: str
    created_at: int

    @classmethod
    def from_hex(cls, token: str, created_at: int) -> ResponseIds:
        return cls(f"resp_{token}", f"msg_{token}", f"rs_{token}", created_at)


def invalid_answer(reason: str) -> UpstreamUnavailable:
    return UpstreamUnavailable(
        f"the upstream's chat completions answer cannot be bridged: {reason}",
        code="upstream_invalid_response",
    )


def chat_to_response(
    answer: Any, bridged: BridgedRequest, ids: ResponseIds, metadata: Any
) -> dict[str, Any]:
    """The Responses object for a (non-streamed) chat completion answer."""
    if not isinstance(answer, dict) or not isinstance(answer.get("choices"), list):
        raise invalid_answer("no 'choices' list")
    if not answer["choices"] or not isinstance(answer["choices"][0], dict):
        raise invalid_answer("an empty 'choices' list")
    choice = answer["choices"][0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise invalid_answer("the first choice has no 'message' object")
    status, reason = finish_status(choice.get("finish_reason"))
    output = []
    reasoning = reasoning_text(message)
    if reasoning is not None:
        output.append(reasoning_item(ids.reasoning, reasoning))
    output.append(message_item(ids.message, _text(message.get("content")), status))
    return response_object(
        bridged,
        ids,
        model=answer.get("model"),
        status=status,
        reason=reason,
        output=output,
        usage=answer.get("usage"),
        metadata=metadata,
    )


def _text(content: Any) -> str:
    return content if isinstance(content, str) else ""


def reasoning_text(message_or_delta: dict[str, Any]) -> str | None:
    """vLLM 0.33 names it `reasoning`; earlier versions `reasoning_content`."""
    for key in ("reasoning", "reasoning_content"):
        value = message_or_delta.get(key)
        if isinstance(value, str):
            return value
    return None


def finish_status(finish_reason: Any) -> tuple[str, str | None]:
    """(status, incomplete reason) for a chat finish_reason."""
    reason = INCOMPLETE_REASONS.get(finish_reason) if isinstance(finish_reason, str) else None
    return ("incomplete", reason) if reason else ("completed", None)


def output_text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    """The assistant message; `text` None gives the empty item of output_item.added."""
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [] if text is None else [output_text_part(text)],
    }


def reasoning_item(item_id: str, text: str | None, status: str = "completed") -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": [] if text is None else [{"type": "reasoning_text", "text": text}],
        "status": status,
    }


def response_usage(usage: Any) -> dict[str, Any] | None:
    """Chat `usage` in Responses terms (cached and reasoning token details kept when given)."""
    if not isinstance(usage, dict):
        return None
    prompt = _count(usage.get("prompt_tokens"))
    completion = _count(usage.get("completion_tokens"))
    total = _count(usage.get("total_tokens"))
    cached = _count(_detail(usage, "prompt_tokens_details", "cached_tokens"))
    thought = _count(_detail(usage, "completion_tokens_details", "reasoning_tokens"))
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": thought},
        "total_tokens": total or prompt + completion,
    }


def _detail(usage: dict[str, Any], group: str, key: str) -> Any:
    details = usage.get(group)
    return details.get(key) if isinstance(details, dict) else None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def response_object(
    bridged: BridgedRequest,
    ids: ResponseIds,
    *,
    model: Any,
    status: str,
    output: list[dict[str, Any]],
    reason: str | None = None,
    usage: Any = None,
    metadata: Any = None,
) -> dict[str, Any]:
    """A whole Responses object; `status` "in_progress" for the opening stream events."""
    return {
        "id": ids.response,
        "object": "response",
        "created_at": ids.created_at,
        "model": model if isinstance(model, str) else bridged.chat.get("model", ""),
        "status": status,
        "error": None,
        "incomplete_details": {"reason": reason} if reason else None,
        "output": output,
        "usage": response_usage(usage),
        "metadata": metadata if isinstance(metadata, dict) else None,
        "previous_response_id": None,
        "reasoning": None,
        "store": False,
        "background": False,
        **bridged.echo,
    }
