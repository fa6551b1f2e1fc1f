"""A Responses request's generation settings as chat's: `reasoning`, `text`, logprobs and
`truncation`. Pure. NeMo Gym 0.7.0's mapping, where it has one.

- `reasoning.effort` -> `reasoning_effort`; `summary`, `mode`, `context` and
  `generate_summary` are refused (chat has no such settings).
- `text.format` -> `response_format` (`text`, the default, sends none); any other key of the
  format is refused by name, as everywhere in the body.
- `text.verbosity`: vLLM's chat request (0.32 to 0.34) has no `verbosity` and ignores unknown
  keys, so only "medium" (the API's default) is accepted and nothing is sent; "low" and "high"
  are refused rather than silently ignored.
- `top_logprobs` -> `logprobs: true` + `top_logprobs` (vLLM refuses `top_logprobs` without
  `logprobs`); `include: ["message.output_text.logprobs"]` -> `logprobs: true`. Any other
  `include` value is refused.
- `truncation` "auto" -> `truncate_prompt_tokens: -1` (what vLLM's Responses route does).
"""

from __future__ import annotations

from typing import Any

from .fields import check_keys, invalid, require_object, unsupported

LOGPROBS_INCLUDE = "message.output_text.logprobs"
DEFAULT_VERBOSITY = "medium"


def generation_settings(present: dict[str, Any]) -> dict[str, Any]:
    """The chat body's fields for the request's non-null `reasoning`, `text`, `top_logprobs`,
    `include` and `truncation`."""
    chat: dict[str, Any] = {}
    effort = _reasoning_effort(present.get("reasoning"))
    if effort is not None:
        chat["reasoning_effort"] = effort
    response_format = _response_format(present.get("text"))
    if response_format is not None:
        chat["response_format"] = response_format
    chat.update(_logprobs(present.get("top_logprobs"), present.get("include")))
    truncation = present.get("truncation", "disabled")
    if truncation not in ("auto", "disabled"):
        raise unsupported("truncation", "only 'auto' or 'disabled' is translated")
    if truncation == "auto":
        chat["truncate_prompt_tokens"] = -1
    return chat


def _reasoning_effort(reasoning: Any) -> Any:
    if reasoning is None:
        return None
    reasoning = require_object(reasoning, "reasoning", "invalid_parameter")
    check_keys(reasoning, "reasoning", ("effort",))
    return reasoning.get("effort")


def _response_format(text: Any) -> dict[str, Any] | None:
    if text is None:
        return None
    text = require_object(text, "text", "invalid_parameter")
    check_keys(text, "text", ("format", "verbosity"))
    verbosity = text.get("verbosity")
    if verbosity not in (None, DEFAULT_VERBOSITY):
        why = f"only {DEFAULT_VERBOSITY!r} is translated (vLLM's chat route has no verbosity)"
        raise unsupported("text.verbosity", why)
    fmt = text.get("format")
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if fmt is None:
        return None
    if kind == "text":  # chat's default: nothing to send
        check_keys(fmt, "text.format", ("type",))
        return None
    if kind == "json_object":
        check_keys(fmt, "text.format", ("type",))
        return {"type": "json_object"}
    if kind == "json_schema":
        keys = ("name", "schema", "description", "strict")
        check_keys(fmt, "text.format", ("type", *keys))
        return {"type": "json_schema", "json_schema": {k: fmt[k] for k in keys if k in fmt}}
    raise unsupported("text.format", f"format type {kind!r} is not translated")


def _logprobs(top_logprobs: Any, include: Any) -> dict[str, Any]:
    if include is not None:
        if not isinstance(include, list):
            raise invalid("include", "must be a list", "invalid_parameter")
        for index, value in enumerate(include):
            if value != LOGPROBS_INCLUDE:
                why = f"only {LOGPROBS_INCLUDE!r} is translated, not {value!r}"
                raise unsupported(f"include[{index}]", why)
    chat: dict[str, Any] = {}
    if include:
        chat["logprobs"] = True
    if top_logprobs is not None:
        if isinstance(top_logprobs, bool) or not isinstance(top_logprobs, int):
            raise invalid("top_logprobs", "must be an integer", "invalid_parameter")
        chat |= {"logprobs": True, "top_logprobs": top_logprobs}
    return chat
