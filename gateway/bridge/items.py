"""A Responses `input` (and `instructions`) as chat messages. Pure. NeMo Gym 0.7.0's mapping.

- `message` items (an item with a role and no type too): user, system and developer as chat
  messages of that role (parts: see `parts`); a chat-shaped `role: "tool"` item as a tool
  message.
- One assistant turn is the run of consecutive assistant-side items: assistant messages (their
  text joined, their `refusal` parts as chat's `refusal`, chat-shaped `tool_calls` kept),
  `function_call` items (as `tool_calls`, call ids kept) and `reasoning` items (their text as
  the message's `reasoning`, vLLM's key). The run becomes one chat assistant message, even when
  it is only a reasoning item; any other item ends it.
- `function_call_output` as a `role: "tool"` message (`tool_call_id` = its `call_id`).
- `instructions` as one leading system message, with the input's leading system and developer
  messages (text only) folded into it, joined by blank lines.

Fields that only describe an output item being replayed (`id`, `status`) are accepted and not
sent; every other field the bridge does not translate is refused naming its place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .fields import check_keys, invalid, require_object, require_str, unsupported
from .parts import Params, assistant_texts, content_parts, text_only

REPLAY_ONLY = ("id", "status")
MESSAGE_KEYS = ("type", "role", "content", *REPLAY_ONLY)
FOLDED_ROLES = ("system", "developer")
REASONING_JOIN = "\n"


@dataclass
class _AssistantTurn:
    """The assistant message being assembled from consecutive assistant-side items."""

    open: bool = False
    text: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        if "".join(self.refusal):
            message["refusal"] = "".join(self.refusal)
        if self.reasoning:
            message["reasoning"] = REASONING_JOIN.join(self.reasoning)
        return message


@dataclass
class _Messages:
    part_params: Params
    folding: bool  # still folding leading system/developer messages into `instructions`
    messages: list[dict[str, Any]] = field(default_factory=list)
    turn: _AssistantTurn = field(default_factory=_AssistantTurn)

    def assistant(self) -> _AssistantTurn:
        self.folding = False
        self.turn.open = True
        return self.turn

    def add(self, message: dict[str, Any]) -> None:
        self.flush()
        self.folding = False
        self.messages.append(message)

    def flush(self) -> None:
        if self.turn.open:
            self.messages.append(self.turn.message())
            self.turn = _AssistantTurn()


def chat_messages(instructions: Any, items: Any, part_params: Params) -> list[dict[str, Any]]:
    """The chat messages for `instructions` and `input`; `part_params` gets how errors name the
    chat parts made of `input_file` paths."""
    if instructions is not None and not isinstance(instructions, str):
        raise unsupported("instructions", "only a string is translated")
    state = _Messages(part_params, folding=bool(instructions))
    if instructions:
        state.messages.append({"role": "system", "content": instructions})
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    elif items is None:
        items = []
    elif not isinstance(items, list):
        raise invalid("input", "must be a string or a list of items", "invalid_input")
    for index, item in enumerate(items):
        _item(require_object(item, f"input[{index}]", "invalid_input"), f"input[{index}]", state)
    state.flush()
    return state.messages


def _item(item: dict[str, Any], path: str, state: _Messages) -> None:
    kind = item.get("type") or "message"
    if kind == "message":
        _message(item, path, state)
    elif kind == "reasoning":
        state.assistant().reasoning.extend(_reasoning_texts(item, path))
    elif kind == "function_call":
        state.assistant().tool_calls.append(_function_call(item, path))
    elif kind == "function_call_output":
        check_keys(item, path, ("type", "call_id", "output", *REPLAY_ONLY))
        call_id = require_str(item, "call_id", path, "invalid_input")
        content = _tool_output(item.get("output"), f"{path}.output")
        state.add({"role": "tool", "tool_call_id": call_id, "content": content})
    else:
        raise unsupported(f"{path}.type", f"input items of type {kind!r} are not translated")


def _message(item: dict[str, Any], path: str, state: _Messages) -> None:
    role = item.get("role")
    if role == "assistant":
        check_keys(item, path, (*MESSAGE_KEYS, "tool_calls"))
        text, refusal = assistant_texts(item.get("content"), f"{path}.content")
        turn = state.assistant()
        turn.text.append(text)
        turn.refusal.append(refusal)
        turn.tool_calls.extend(_chat_tool_calls(item.get("tool_calls"), f"{path}.tool_calls"))
    elif role == "tool":
        check_keys(item, path, ("type", "role", "content", "tool_call_id"))
        call_id = require_str(item, "tool_call_id", path, "invalid_input")
        content = _tool_output(item.get("content"), f"{path}.content")
        state.add({"role": "tool", "tool_call_id": call_id, "content": content})
    elif role in ("user", *FOLDED_ROLES):
        check_keys(item, path, MESSAGE_KEYS)
        number = len(state.messages) + (1 if state.turn.open else 0)
        content = content_parts(item.get("content"), f"{path}.content", number, state.part_params)
        _add_or_fold(state, role, content)
    else:
        raise unsupported(f"{path}.role", f"role {role!r} is not translated")


def _add_or_fold(state: _Messages, role: str, content: Any) -> None:
    text = text_only(content) if role in FOLDED_ROLES else None
    if state.folding and text is not None:
        state.messages[0]["content"] += "\n\n" + text
        return
    state.add({"role": role, "content": content})


def _reasoning_texts(item: dict[str, Any], path: str) -> list[str]:
    """The reasoning's text: its `content` (`reasoning_text` parts, the bridge's and vLLM's
    shape) when it has any, else its `summary` (`summary_text` parts, OpenAI's and Gym's)."""
    check_keys(item, path, ("type", "summary", "content", *REPLAY_ONLY))
    content = _text_parts(item.get("content"), f"{path}.content", "reasoning_text")
    summary = _text_parts(item.get("summary"), f"{path}.summary", "summary_text")
    return content or summary


def _text_parts(parts: Any, path: str, kind: str) -> list[str]:
    if parts is None:
        return []
    if not isinstance(parts, list):
        raise invalid(path, "must be a list of parts", "invalid_input")
    texts = []
    for index, part in enumerate(parts):
        part_path = f"{path}[{index}]"
        part = require_object(part, part_path, "invalid_input")
        if part.get("type") != kind:
            raise unsupported(f"{part_path}.type", f"only {kind!r} parts are translated here")
        check_keys(part, part_path, ("type", "text"))
        texts.append(require_str(part, "text", part_path, "invalid_input"))
    return texts


def _function_call(item: dict[str, Any], path: str) -> dict[str, Any]:
    check_keys(item, path, ("type", "call_id", "name", "arguments", *REPLAY_ONLY))
    function = {
        "name": require_str(item, "name", path, "invalid_input"),
        "arguments": require_str(item, "arguments", path, "invalid_input"),
    }
    call_id = require_str(item, "call_id", path, "invalid_input")
    return {"id": call_id, "type": "function", "function": function}


def _chat_tool_calls(calls: Any, path: str) -> list[dict[str, Any]]:
    """Chat-shaped `tool_calls` on an assistant item, as they are (keys checked)."""
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise invalid(path, "must be a list", "invalid_input")
    out = []
    for index, call in enumerate(calls):
        call_path = f"{path}[{index}]"
        call = require_object(call, call_path, "invalid_input")
        check_keys(call, call_path, ("id", "type", "function"))
        if call.get("type", "function") != "function":
            raise unsupported(f"{call_path}.type", "only function tool calls are translated")
        function = require_object(call.get("function"), f"{call_path}.function", "invalid_input")
        check_keys(function, f"{call_path}.function", ("name", "arguments"))
        name = require_str(function, "name", f"{call_path}.function", "invalid_input")
        arguments = require_str(function, "arguments", f"{call_path}.function", "invalid_input")
        call_id = require_str(call, "id", call_path, "invalid_input")
        out.append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        )
    return out


def _tool_output(output: Any, path: str) -> str | list[dict[str, Any]]:
    """A tool result: a string, or `input_text` parts as chat `text` parts."""
    if isinstance(output, str):
        return output
    if not isinstance(output, list):
        raise invalid(path, "must be a string or a list of parts", "invalid_input")
    parts = []
    for index, part in enumerate(output):
        part_path = f"{path}[{index}]"
        part = require_object(part, part_path, "invalid_input")
        if part.get("type") not in ("input_text", "text"):
            why = f"tool output parts of type {part.get('type')!r} are not translated"
            raise unsupported(f"{part_path}.type", why)
        check_keys(part, part_path, ("type", "text"))
        parts.append(
            {"type": "text", "text": require_str(part, "text", part_path, "invalid_input")}
        )
    return parts
