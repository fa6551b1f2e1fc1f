"""What the stub's chat completion says: its text (the report of the clips it heard) one word
a token, cut at `max_tokens`; reasoning first when the request's `X-Stub-Reasoning` header
gives it; or, for a named or `required` tool_choice, a call (`tool_calls.py`)."""

from __future__ import annotations

from typing import Any

from .media import StubRejection
from .tool_calls import forced_call


class ChatAnswer:
    """One answer: its pieces (one token each), message, stream deltas, finish and usage."""

    def __init__(self, text: str, body: dict[str, Any], reasoning: str | None) -> None:
        words = text.split(" ")
        limit = body.get("max_tokens", body.get("max_completion_tokens"))
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise StubRejection(f"max_tokens must be a positive integer, not {limit!r}")
        self.call = forced_call(body, text, limit)
        self.words = [] if self.call else words[:limit] if limit is not None else words
        if self.call is not None:
            self.finish_reason = self.call.finish_reason
        else:
            self.finish_reason = "length" if len(self.words) < len(words) else "stop"
        self.reasoning = reasoning

    def pieces(self) -> list[str]:
        """Every generated piece, in order (reasoning first), one token each."""
        answer = self.call.token_pieces() if self.call else _pieces(self.words)
        return self.thought_pieces() + answer

    def thought_pieces(self) -> list[str]:
        return _pieces(self.reasoning.split(" ") if self.reasoning else [])

    def reply(self) -> dict[str, Any]:
        """The (non-streamed) message."""
        reply = self.call.message() if self.call else {"content": " ".join(self.words)}
        reply = {"role": "assistant", **reply}
        if self.reasoning is not None:
            reply["reasoning"] = self.reasoning
        return reply

    def deltas(self) -> list[dict[str, Any]]:
        """One delta a token: reasoning first, then the text or the call."""
        answer = self.call.deltas() if self.call else [{"content": p} for p in _pieces(self.words)]
        return [{"reasoning": piece} for piece in self.thought_pieces()] + answer

    def usage(self) -> dict[str, int]:
        completion = len(self.pieces())
        return {"prompt_tokens": 1, "completion_tokens": completion, "total_tokens": completion + 1}


def _pieces(words: list[str]) -> list[str]:
    """Stream deltas that join back to the words' text: each but the last keeps its space."""
    return [word + " " for word in words[:-1]] + words[-1:]
