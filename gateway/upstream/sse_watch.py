"""Pure: reading the start of a chat answer, to tell whether the upstream took the request.

`AnswerWatch.feed(chunk)` reads an OpenAI chat-completions event stream as it arrives and says
what its first telling event was: "content" (non-empty content, reasoning or a tool call, or a
choice that finished), "error" (an `{"error": ...}` event, as vLLM sends when generation failed
after the stream began), or "done" (`[DONE]`). vLLM's first chunk, the role with
`"content": ""`, tells nothing.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

Verdict = Literal["content", "error", "done"]
CACHE_MISS_PREFIX = "Cache miss for"  # vLLM 0.33: "Cache miss for audio at index N but data ..."
ANSWER_DELTA_FIELDS = ("content", "reasoning", "reasoning_content", "tool_calls")


def is_cache_miss(body: bytes) -> bool:
    """Whether an upstream error body is vLLM's processor-cache miss."""
    try:
        error = msgspec.json.decode(body).get("error")
    except (msgspec.DecodeError, AttributeError):
        return False
    message = error.get("message") if isinstance(error, dict) else None
    return isinstance(message, str) and message.startswith(CACHE_MISS_PREFIX)


def event_verdict(event: Any) -> Verdict | None:
    """What one parsed `data:` event says (None: nothing yet)."""
    if not isinstance(event, dict):
        return None
    if event.get("error") is not None:
        return "error"
    choices = event.get("choices")
    if not isinstance(choices, list):
        return None
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict) and any(delta.get(name) for name in ANSWER_DELTA_FIELDS):
            return "content"
        if choice.get("finish_reason") not in (None, "error"):
            return "content"
    return None


class AnswerWatch:
    """Feeds on an event stream's chunks until its first telling event, then keeps it."""

    def __init__(self) -> None:
        self.verdict: Verdict | None = None
        self._partial = b""

    def feed(self, chunk: bytes) -> Verdict | None:
        if self.verdict is not None:
            return self.verdict
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()  # the incomplete last line (b"" after a newline)
        for line in lines:
            verdict = _line_verdict(line.strip())
            if verdict is not None:
                self.verdict = verdict
                self._partial = b""
                break
        return self.verdict


def _line_verdict(line: bytes) -> Verdict | None:
    if not line.startswith(b"data:"):
        return None
    data = line[5:].strip()
    if data == b"[DONE]":
        return "done"
    try:
        return event_verdict(msgspec.json.decode(data))
    except msgspec.DecodeError:
        return None
