"""A Responses request's `tools`, `tool_choice` and `parallel_tool_calls` as chat's. Pure.

Function tools become chat function tools (`name`, `description`, `parameters`, `strict`: vLLM
enforces `strict` argument schemas with structured outputs). `tool_choice` "auto", "none",
"required" and a named function translate; `allowed_tools`, hosted tools and any other tool
type (web search, file search, MCP, computer use, `custom`, ...) are refused naming the field.
Without tools, `tool_choice` "auto" / "none" and `parallel_tool_calls` change nothing and are
not sent (NeMo Gym's mapping); any other `tool_choice` is refused.
"""

from __future__ import annotations

from typing import Any

from .fields import check_keys, invalid, require_object, require_str, unsupported

FUNCTION_KEYS = ("type", "name", "description", "parameters", "strict")
CHOICE_WORDS = ("auto", "none", "required")


def chat_tools(present: dict[str, Any]) -> dict[str, Any]:
    """The chat body's `tools`, `tool_choice` and `parallel_tool_calls` (only when there are
    tools), from the request's non-null fields."""
    tools = present.get("tools", [])
    if not isinstance(tools, list):
        raise invalid("tools", "must be a list", "invalid_tools")
    converted = [_function_tool(tool, f"tools[{index}]") for index, tool in enumerate(tools)]
    choice = _tool_choice(present.get("tool_choice"))
    parallel = present.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise invalid("parallel_tool_calls", "must be a boolean", "invalid_tools")
    if not converted:
        if choice not in (None, "auto", "none"):
            raise invalid("tool_choice", f"{choice!r} needs at least one tool", "invalid_tools")
        return {}
    out: dict[str, Any] = {"tools": converted}
    if choice is not None:
        out["tool_choice"] = choice
    if parallel is not None:
        out["parallel_tool_calls"] = parallel
    return out


def _function_tool(tool: Any, path: str) -> dict[str, Any]:
    tool = require_object(tool, path, "invalid_tools")
    kind = tool.get("type")
    if kind != "function":
        raise unsupported(f"{path}.type", f"tools of type {kind!r} are not translated")
    check_keys(tool, path, FUNCTION_KEYS)
    function = {key: tool[key] for key in FUNCTION_KEYS[1:] if tool.get(key) is not None}
    require_str(function, "name", path, "invalid_tools")
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if choice is None:
        return None
    if isinstance(choice, str):
        if choice not in CHOICE_WORDS:
            raise invalid("tool_choice", f"{choice!r} is not a tool choice", "invalid_tools")
        return choice
    choice = require_object(choice, "tool_choice", "invalid_tools")
    kind = choice.get("type")
    if kind != "function":
        why = f"tool_choice of type {kind!r} is not translated (only a named function is)"
        raise unsupported("tool_choice.type", why)
    check_keys(choice, "tool_choice", ("type", "name"))
    name = require_str(choice, "name", "tool_choice", "invalid_tools")
    return {"type": "function", "function": {"name": name}}
