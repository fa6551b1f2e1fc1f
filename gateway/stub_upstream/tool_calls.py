"""vLLM's forced tool calls on chat completions, as the stub answers them.

A request with `tools` and a named `tool_choice` ({"type": "function", "function": {"name"}})
or `"required"` gets one call to that function (`required`: the first tool), as vLLM 0.32 with
`--structured-outputs-config '{"backend": "xgrammar", "disable_any_whitespace": true}'` answers
it (shapes seen on the running engine, held by tests/engine/test_stub_vs_engine.py):

- the arguments are a JSON object that fits the function's `parameters`: the first `enum`
  value, `true` for a boolean, 0 (or the minimum) for a number, the stub's answer text for a
  string, every property present; written without whitespace (named) and, for `required`,
  re-serialised as vLLM's parser does (`json.dumps`: a space after `:` and `,`);
- the message: `"content": ""` and `tool_calls: [{"id": "chatcmpl-tool-<16 hex>", "type":
  "function", "function": {"name", "arguments"}}]`; `finish_reason` "stop" (named) or
  "tool_calls" (`required`), `stop_reason` null (the tokenizer's end of turn ended it); cut by
  `max_tokens`, the arguments stop mid-JSON and `finish_reason` is "length";
- streamed, one chunk a token: the first `{"tool_calls": [{"id", "type", "index": 0,
  "function": {"name", "arguments": <first token>}}]}`, then `{"tool_calls": [{"index": 0,
  "function": {"arguments": <token>}}]}` (`required` also sends `"name": null`), and the
  end-of-turn token's chunk with the finish reason: `"arguments": ""` (named) or an empty
  delta (`required`).

`tools` and `tool_choice` are checked as vLLM's `check_tool_usage` does (its 400s). `auto` (or
no choice) is answered with text, as the tiny engine's `pythonic` parser finds no call in it.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from .media import StubRejection

END_OF_TURN = "<|im_end|>"  # the token that ends a call
CORRECT_USAGE = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'
TOKEN = re.compile(r"\w+|\s+|.")  # a word, a run of spaces or one character: one token each


def _invalid(message: str, *, param: str) -> StubRejection:
    """vLLM's VLLMValidationError as its 400 writes it: the parameter named in the message."""
    return StubRejection(f"{message} (parameter={param})", param=param)


def check_tool_usage(body: dict[str, Any]) -> None:
    """vLLM's `ChatCompletionRequest.check_tool_usage`: its 400s, in its order."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools == []:
        raise _invalid(
            "`tools` must not be an empty array. Either provide at least one tool or omit the "
            "field entirely.",
            param="tools",
        )
    if choice is None or choice == "none":
        return
    if tools is None:
        raise _invalid("When using `tool_choice`, `tools` must be set.", param="tool_choice")
    if choice not in ("auto", "required") and not isinstance(choice, dict):
        raise _invalid(
            f'Invalid value for `tool_choice`: {choice}! Only named tools, "none", "auto" '
            'or "required" are supported.',
            param="tool_choice",
        )
    if isinstance(choice, dict):
        _check_named(choice, tools)


def _check_named(choice: dict[str, Any], tools: Any) -> None:
    function = choice.get("function")
    if not isinstance(function, dict):
        raise _invalid(
            f"Invalid value for `function`: `{function}` in `tool_choice`! {CORRECT_USAGE}",
            param="tool_choice.function",
        )
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise _invalid(
            f"Invalid `name` in `function`: `{name}` in `tool_choice`! {CORRECT_USAGE}",
            param="tool_choice.function.name",
        )
    if _tool(tools, name) is None:
        raise _invalid(
            "The tool specified in `tool_choice` does not match any of the specified `tools`",
            param="tool_choice",
        )


def _tool(tools: Any, name: str) -> dict[str, Any] | None:
    for tool in tools if isinstance(tools, list) else []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and function.get("name") == name:
            return function
    return None


@dataclass(frozen=True, slots=True)
class ForcedCall:
    """One forced call: its tokens (the arguments' pieces), cut at `max_tokens` or not."""

    call_id: str
    name: str
    named: bool
    pieces: list[str]
    complete: bool

    @property
    def arguments(self) -> str:
        text = "".join(self.pieces)
        if self.named or not self.complete:
            return text
        return json.dumps(json.loads(text), ensure_ascii=False)  # vLLM's `required` parser

    @property
    def finish_reason(self) -> str:
        if not self.complete:
            return "length"
        return "stop" if self.named else "tool_calls"

    def token_pieces(self) -> list[str]:
        """Every generated token's text: the arguments', then the end of turn."""
        return [*self.pieces, END_OF_TURN] if self.complete else list(self.pieces)

    def message(self) -> dict[str, Any]:
        function = {"name": self.name, "arguments": self.arguments}
        call = {"id": self.call_id, "type": "function", "function": function}
        return {"role": "assistant", "content": "", "tool_calls": [call]}

    def deltas(self) -> list[dict[str, Any]]:
        """One delta a token (the end of turn's with empty arguments)."""
        more: dict[str, Any] = {} if self.named else {"name": None}
        first = {"id": self.call_id, "type": "function", "index": 0}
        head = {"name": self.name, "arguments": self.pieces[0]}
        out: list[dict[str, Any]] = [{"tool_calls": [{**first, "function": head}]}]
        for text in self.pieces[1:]:
            out.append({"tool_calls": [{"index": 0, "function": {**more, "arguments": text}}]})
        if self.complete and self.named:  # the end of turn flushes empty arguments
            out.append({"tool_calls": [{"index": 0, "function": {"arguments": ""}}]})
        elif self.complete:  # `required`: its parser has nothing left to send
            out.append({})
        return out


def forced_call(body: dict[str, Any], text: str, limit: int | None) -> ForcedCall | None:
    """The call a named or `required` tool_choice forces (None for any other request);
    `text` fills string arguments, `limit` is max_tokens."""
    choice, tools = body.get("tool_choice"), body.get("tools")
    if isinstance(choice, dict):
        function, named = _tool(tools, choice["function"]["name"]), True
    elif choice == "required" and isinstance(tools, list) and tools:
        first = tools[0] if isinstance(tools[0], dict) else {}
        function, named = first.get("function"), False
    else:
        return None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise StubRejection("each tool must be a function with a name", param="tools")
    arguments = json.dumps(example(function.get("parameters"), text), separators=(",", ":"))
    pieces = TOKEN.findall(arguments)
    # a forced call is its arguments, then the end-of-turn token: both count for max_tokens
    complete = limit is None or len(pieces) + 1 <= limit
    kept = pieces if complete else pieces[:limit]
    call_id = f"chatcmpl-tool-{uuid.uuid4().hex[:16]}"
    return ForcedCall(call_id, function["name"], named, kept, complete)


def example(schema: Any, text: str) -> Any:
    """A value that fits `schema` (the JSON-schema subset tool parameters use); an object with
    no schema is `{}`, as vLLM's grammar for a function without parameters."""
    if not isinstance(schema, dict):
        return {}
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return example(schema[key][0], text)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    return _typed(kind, schema, text)


def _typed(kind: str, schema: dict[str, Any], text: str) -> Any:
    if kind == "object":
        properties = schema.get("properties")
        props = properties if isinstance(properties, dict) else {}
        return {name: example(sub, text) for name, sub in props.items()}
    if kind == "array":
        count = schema.get("minItems", 0)
        return [example(schema.get("items"), text) for _ in range(count)]
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    return {"boolean": True, "string": text, "null": None}.get(kind, {})
