"""The pieces' chat answers as one answer. Pure: dicts in, dicts out.

read_completion(answer)          one piece's chat.completion, checked (ValueError if not)
merge_completions(pieces, join)  one chat.completion: contents joined in piece order,
                                 usage summed, finish_reason "length" if any piece stopped
                                 on length, else the last piece's
StreamMerge                      the pieces' chunks, fed in piece order, as one stream: one
                                 id, one role chunk, `join` between pieces, one
                                 finish_reason, one usage chunk when asked
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Chunk = dict[str, Any]
LENGTH = "length"


@dataclass(frozen=True, slots=True)
class PieceCompletion:
    """What the merge takes from one piece's non-streamed answer."""

    answer: dict[str, Any]
    content: str
    reasoning: str | None
    finish_reason: Any
    usage: Any


def read_completion(answer: Any) -> PieceCompletion:
    """One piece's chat.completion; ValueError saying what is missing when it is not one."""
    if not isinstance(answer, dict) or not isinstance(answer.get("choices"), list):
        raise ValueError("no 'choices' list")
    choices = answer["choices"]
    if not choices or not isinstance(choices[0], dict):
        raise ValueError("an empty 'choices' list")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise ValueError("the first choice has no 'message' object")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise ValueError("the message content is not a string")
    return PieceCompletion(
        answer=answer,
        content=content or "",
        reasoning=_reasoning(message),
        finish_reason=choices[0].get("finish_reason"),
        usage=answer.get("usage"),
    )


def _reasoning(message: dict[str, Any]) -> str | None:
    """vLLM 0.33 names it `reasoning`; earlier versions `reasoning_content`."""
    for key in ("reasoning", "reasoning_content"):
        if isinstance(value := message.get(key), str):
            return value
    return None


def merge_completions(pieces: Sequence[PieceCompletion], join: str) -> dict[str, Any]:
    """One chat.completion for the pieces, in piece order (at least one). The first piece's
    answer gives the envelope (id, created, model, ...) and the message's other fields."""
    first = pieces[0].answer
    first_choice = first["choices"][0]
    message = dict(first_choice["message"])
    message["content"] = join.join(piece.content for piece in pieces)
    reasonings = [piece.reasoning for piece in pieces if piece.reasoning is not None]
    for key in ("reasoning", "reasoning_content"):
        if key in message:
            message[key] = join.join(reasonings) if reasonings else None
    choice = {
        **first_choice,
        "index": 0,
        "message": message,
        "finish_reason": merged_finish_reason([piece.finish_reason for piece in pieces]),
    }
    if "stop_reason" in choice:
        choice["stop_reason"] = pieces[-1].answer["choices"][0].get("stop_reason")
    return {**first, "choices": [choice], "usage": sum_usage([p.usage for p in pieces])}


def merged_finish_reason(reasons: Sequence[Any]) -> Any:
    """ "length" when any piece stopped on length (the text has a gap), else the last one's."""
    return LENGTH if LENGTH in reasons else (reasons[-1] if reasons else None)


def sum_usage(usages: Sequence[Any]) -> dict[str, Any] | None:
    """The pieces' usage objects added key by key (nested details too); None when a piece
    gave none, rather than a total that silently leaves pieces out."""
    if not usages or not all(isinstance(usage, dict) for usage in usages):
        return None
    total: dict[str, Any] = {}
    for usage in usages:
        total = _add(total, usage)
    return total


def _add(total: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any]:
    out = dict(total)
    for key, value in usage.items():
        have = out.get(key)
        if _is_count(value) and (have is None or _is_count(have)):
            out[key] = (have or 0) + value
        elif isinstance(value, dict) and (have is None or isinstance(have, dict)):
            out[key] = _add(have or {}, value)
        elif key not in out:
            out[key] = value
    return out


def _is_count(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class StreamMerge:
    """One stream out of the pieces' chat chunks, which must be fed in relay order: every
    chunk of piece k before any of piece k+1 (`piece_chunk`), then `finish`."""

    def __init__(self, join: str, include_usage: bool) -> None:
        self._join = join
        self._include_usage = include_usage
        self._envelope: dict[str, Any] | None = None  # id, object, created, model: piece 0's
        self._piece = -1
        self._reasons: list[Any] = []
        self._usages: list[Any] = []

    def piece_chunk(self, index: int, chunk: Chunk) -> list[Chunk]:
        """The chunks to send for one chunk of piece `index` (none, it, or the join first)."""
        out: list[Chunk] = []
        if index != self._piece:
            out += self._start_piece(index, chunk)
        if chunk.get("usage") is not None:
            self._usages[-1] = chunk["usage"]  # the last one a piece sends is its total
        kept = self._rewritten(chunk, index)
        return out + ([kept] if kept is not None else [])

    def finish(self) -> list[Chunk]:
        """The one finish_reason chunk, and the summed usage chunk when it was asked for."""
        envelope = self._envelope or {"object": "chat.completion.chunk"}
        last = {"index": 0, "delta": {}, "logprobs": None}
        last["finish_reason"] = merged_finish_reason(self._reasons)
        out = [{**envelope, "choices": [last]}]
        if self._include_usage:
            out.append({**envelope, "choices": [], "usage": sum_usage(self._usages)})
        return out

    def _start_piece(self, index: int, chunk: Chunk) -> list[Chunk]:
        if index != self._piece + 1:
            raise ValueError(f"piece {index} fed after piece {self._piece}")
        self._piece = index
        self._reasons.append(None)
        self._usages.append(None)
        if self._envelope is None:
            keys = ("id", "object", "created", "model")
            self._envelope = {key: chunk[key] for key in keys if key in chunk}
        if index == 0 or not self._join:
            return []
        return [self._content_chunk(self._join)]

    def _content_chunk(self, text: str) -> Chunk:
        choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}
        return {**(self._envelope or {}), "choices": [choice]}

    def _rewritten(self, chunk: Chunk, index: int) -> Chunk | None:
        """The chunk under the one envelope, without what only the end may say (its finish
        reason, its usage) and, after piece 0, without the role; None when nothing is left."""
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return None  # a usage-only chunk: the sum is sent at the end
        choice = dict(choices[0])
        if choice.get("finish_reason") is not None:
            self._reasons[-1] = choice["finish_reason"]
        choice["finish_reason"] = None
        choice.pop("stop_reason", None)
        delta = choice.get("delta")
        delta = dict(delta) if isinstance(delta, dict) else {}
        if index > 0:
            delta.pop("role", None)
        if not any(value for value in delta.values()) and not (index == 0 and "role" in delta):
            return None
        choice["delta"] = delta
        rest = {k: v for k, v in chunk.items() if k not in ("choices", "usage")}
        return {**rest, **(self._envelope or {}), "choices": [{**choice, "index": 0}]}
