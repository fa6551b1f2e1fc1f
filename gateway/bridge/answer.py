"""A chat-completions answer as a Responses object. Pure: dicts in, dicts out.

Output items come in generation order: a `reasoning` item when vLLM returned reasoning, the
assistant `message` (its text, with logprobs, and its refusal; present when there is text or a
refusal, or when nothing else came back), then one `function_call` item per tool call.
`status` is "incomplete" (reason "max_output_tokens") when the chat answer stopped for length,
and so is the last item's.

Every field of vLLM's chat answer is carried or has a reason not to be (`UPSTREAM_FIELDS`):
the table the docs' parity page repeats.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .outputs import (
    function_call_item,
    invalid_answer,
    message_item,
    message_parts,
    reasoning_item,
    reasoning_text,
    tool_call_fields,
)
from .request import BridgedRequest
from .store import BRIDGED_ID_PREFIX

# chat finish_reason -> Responses incomplete_details.reason; any other reason is "completed"
INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}
# Top-level fields of vLLM's chat answer carried onto the Responses object under the same name
# (vLLM's own Responses object has each of them); only when not null.
CARRIED_ANSWER_FIELDS = ("service_tier", "kv_transfer_params", "ec_transfer_params", "metrics")
# Every field of vLLM's chat answer (and of its stream chunks: `delta` for `message`), where
# it goes (`MAPPED`) or why it goes nowhere (`NOT_CARRIED`); docs/reference/responses-bridge.md
# shows both tables, tests/test_bridge_answers.py holds vLLM's answers to them.
MAPPED = {
    "model": "model",
    "usage.prompt_tokens": "usage.input_tokens",
    "usage.completion_tokens": "usage.output_tokens",
    "usage.total_tokens": "usage.total_tokens",
    "usage.prompt_tokens_details.cached_tokens": "usage.input_tokens_details.cached_tokens",
    "usage.prompt_tokens_details.created_cache_tokens": "usage.input_tokens_details."
    "cache_write_tokens",
    "usage.completion_tokens_details.reasoning_tokens": "usage.output_tokens_details."
    "reasoning_tokens",
    "choices[0].index": "(always 0)",
    "choices[0].finish_reason": "status, incomplete_details, the last item's status",
    "choices[0].logprobs": "output_text.logprobs (streamed: output_text.delta logprobs)",
    "choices[0].message.role": "the message item's role (assistant)",
    "choices[0].message.content": "an output_text part",
    "choices[0].message.refusal": "a refusal part",
    "choices[0].message.annotations": "output_text.annotations (url_citation)",
    "choices[0].message.reasoning": "a reasoning item",
    "choices[0].message.reasoning_content": "a reasoning item (vLLM before 0.33)",
    "choices[0].message.tool_calls": "function_call items",
    "choices[0].message.function_call": "a function_call item",
    **{f"{key}": key for key in CARRIED_ANSWER_FIELDS},
}
NOT_CARRIED = {
    "id": "the Responses object has its own id (resp_bridge_...)",
    "object": "'chat.completion' becomes 'response'",
    "created": "created_at is when the gateway started the answer (a stream's first event "
    "precedes the upstream's first chunk)",
    "system_fingerprint": "no Responses field; vLLM's own Responses route drops it too",
    "prompt_logprobs": "only with the chat field prompt_logprobs, which the bridge refuses",
    "prompt_token_ids": "only with return_token_ids, which the bridge refuses",
    "prompt_text": "only with return_prompt_text, which the bridge refuses",
    "choices[1:]": "only with n > 1, which the bridge refuses",
    "choices[0].stop_reason": "no Responses field (the stop string or token id that ended "
    "the answer); vLLM's own Responses route drops it too",
    "choices[0].token_ids": "only with return_token_ids, which the bridge refuses",
    "choices[0].routed_experts": "no Responses field; vLLM's own Responses route drops it too",
    "choices[0].message.audio": "only with audio output (modalities), which the bridge refuses",
    "usage.prompt_tokens_details.multimodal_tokens": "a breakdown of input_tokens, which "
    "counts them; Responses usage has no field for it",
    "logprobs of reasoning and call tokens, streamed": "a Responses event has no field for them",
}


@dataclass(frozen=True, slots=True)
class ResponseIds:
    """The ids of one bridged response and its items, and when it was created (epoch s).
    Items after the first of their kind have the output index in their id."""

    token: str
    created_at: int

    @classmethod
    def from_hex(cls, token: str, created_at: int) -> ResponseIds:
        return cls(token, created_at)

    @property
    def response(self) -> str:
        return f"{BRIDGED_ID_PREFIX}{self.token}"

    @property
    def message(self) -> str:
        return f"msg_{self.token}"

    @property
    def reasoning(self) -> str:
        return f"rs_{self.token}"

    def item(self, prefix: str, output_index: int) -> str:
        return f"{prefix}_{self.token}_{output_index}"


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
    return response_object(
        bridged,
        ids,
        model=answer.get("model"),
        status=status,
        reason=reason,
        output=output_items(message, choice.get("logprobs"), ids, status),
        usage=answer.get("usage"),
        metadata=metadata,
        upstream=answer,
    )


def output_items(
    message: dict[str, Any], logprobs: Any, ids: ResponseIds, status: str
) -> list[dict[str, Any]]:
    """Reasoning, message, function calls: the order vLLM generates them in. The last item
    has the answer's `status` (an answer cut short was cut in it), the others are complete."""
    output = []
    reasoning = reasoning_text(message)
    if reasoning is not None:
        output.append(reasoning_item(ids.reasoning, reasoning))
    calls = chat_tool_calls(message)
    content, refusal = message.get("content"), message.get("refusal")
    if content or isinstance(refusal, str) or not calls:
        output.append(message_item(ids.message, message_parts(message, logprobs), "completed"))
    for index, (call_id, name, arguments) in enumerate(calls, start=len(output)):
        item_id = ids.item("fc", index)
        output.append(function_call_item(item_id, call_id or item_id, name, arguments, "completed"))
    output[-1]["status"] = status
    return output


def chat_tool_calls(message: dict[str, Any]) -> list[tuple[str | None, str, str]]:
    """(id, name, arguments) of each tool call, and of the deprecated `function_call`."""
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise invalid_answer("message.tool_calls is not a list")
    found = [tool_call_fields(c, f"message.tool_calls[{i}]") for i, c in enumerate(calls or [])]
    if message.get("function_call") is not None:  # vLLM never sets it; OpenAI's older shape
        legacy = {"function": message["function_call"]}
        found.append(tool_call_fields(legacy, "message.function_call"))
    return found


def finish_status(finish_reason: Any) -> tuple[str, str | None]:
    """(status, incomplete reason) for a chat finish_reason."""
    reason = INCOMPLETE_REASONS.get(finish_reason) if isinstance(finish_reason, str) else None
    return ("incomplete", reason) if reason else ("completed", None)


def response_usage(usage: Any) -> dict[str, Any] | None:
    """Chat `usage` in Responses terms. The details are read when given: vLLM 0.33 sends
    `prompt_tokens_details: null` where 0.34 leaves the key out."""
    if not isinstance(usage, dict):
        return None
    prompt = _count(usage.get("prompt_tokens"))
    completion = _count(usage.get("completion_tokens"))
    total = _count(usage.get("total_tokens"))
    cached = _count(_detail(usage, "prompt_tokens_details", "cached_tokens"))
    written = _count(_detail(usage, "prompt_tokens_details", "created_cache_tokens"))
    thought = _count(_detail(usage, "completion_tokens_details", "reasoning_tokens"))
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
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
    upstream: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A whole Responses object; `status` "in_progress" for the opening stream events.
    `upstream`: the chat answer (or the stream's last chunk) whose vLLM fields it carries."""
    carried = {
        key: upstream[key]
        for key in CARRIED_ANSWER_FIELDS
        if upstream is not None and upstream.get(key) is not None
    }
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
        **carried,
    }
