"""Chat-completions SSE chunks as Responses stream events. Pure: bytes and dicts in, events out.

`SSEDecoder` cuts the upstream's byte stream into `data:` payloads as bytes arrive;
`ChatStreamTranslator` turns each chat chunk into the Responses events it completes, in the
documented order:

    response.created, response.in_progress,
    [reasoning item: output_item.added, content_part.added, reasoning_text.delta...,
     reasoning_text.done, content_part.done, output_item.done]
    response.output_item.added, response.content_part.added, response.output_text.delta...,
    response.output_text.done, response.content_part.done, response.output_item.done,
    response.completed (or response.incomplete when the chat answer stopped for length)

every event with the next `sequence_number`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .answer import (
    ResponseIds,
    finish_status,
    message_item,
    output_text_part,
    reasoning_item,
    reasoning_text,
    response_object,
)
from .request import BridgedRequest

Event = dict[str, Any]
DONE = b"[DONE]"


class SSEDecoder:
    """Server-sent events to their `data` payloads, fed in pieces of any size."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The data of every event completed by `chunk` (multi-line data joined by newlines)."""
        # joined before replacing: a CR ending one chunk and its LF starting the next are a pair
        self._pending = (self._pending + chunk).replace(b"\r\n", b"\n")
        *events, self._pending = self._pending.split(b"\n\n")
        return [data for event in events if (data := _data_of(event)) is not None]

    def close(self) -> list[bytes]:
        """The last event, when the stream ended without its blank line."""
        event, self._pending = self._pending, b""
        data = _data_of(event)
        return [] if data is None else [data]


def _data_of(event: bytes) -> bytes | None:
    lines = [line[5:].removeprefix(b" ") for line in event.split(b"\n") if line[:5] == b"data:"]
    return b"\n".join(lines) if lines else None


def encode_event(event: Event) -> bytes:
    return b"event: %b\ndata: %b\n\n" % (event["type"].encode(), msgspec.json.encode(event))


class ChatStreamTranslator:
    """One bridged stream's state: which items are open, the text so far, the next number."""

    def __init__(self, bridged: BridgedRequest, ids: ResponseIds, metadata: Any) -> None:
        self._bridged = bridged
        self._ids = ids
        self._metadata = metadata
        self._sequence = 0
        self._model: Any = None
        self._usage: Any = None
        self._finish_reason: Any = None
        self._reasoning: list[str] | None = None  # from the first reasoning delta on
        self._reasoning_closed = False
        self._text: list[str] | None = None  # from the first content delta on
        self._failure: dict[str, Any] | None = None
        self._decoder = SSEDecoder()
        self._done: list[dict[str, Any]] = []  # finished output items

    def start(self) -> list[Event]:
        snapshot = self._response("in_progress")
        return [
            self._event("response.created", response=snapshot),
            self._event("response.in_progress", response=snapshot),
        ]

    def feed_sse(self, chunk: bytes) -> list[Event]:
        """The events a piece of the upstream's SSE byte stream completes."""
        return [event for data in self._decoder.feed(chunk) for event in self.feed(data)]

    def feed(self, data: bytes) -> list[Event]:
        """The events one chat chunk (an SSE `data` payload) completes; [DONE] gives none."""
        if data.strip() == DONE:
            return []
        try:
            chunk = msgspec.json.decode(data)
        except msgspec.DecodeError:
            return []  # vLLM sends JSON only; a stray line changes nothing
        if not isinstance(chunk, dict) or self._failure is not None:
            return []
        if isinstance(chunk.get("error"), dict):
            return self._error(chunk["error"])
        self._model = chunk.get("model", self._model)
        self._usage = chunk.get("usage") or self._usage
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return []
        choice = choices[0]
        self._finish_reason = choice.get("finish_reason") or self._finish_reason
        delta = choice.get("delta")
        return self._delta(delta) if isinstance(delta, dict) else []

    def finish(self) -> list[Event]:
        """The closing events, after the upstream's [DONE] (or its end of stream)."""
        tail = [event for data in self._decoder.close() for event in self.feed(data)]
        return tail + self._closing()

    def _closing(self) -> list[Event]:
        if self._failure is not None:
            failed = self._response("failed")
            failed["error"] = self._failure
            return [self._event("response.failed", response=failed)]
        status, reason = finish_status(self._finish_reason)
        events = self._close_reasoning()
        if self._text is None:
            events += self._open_message()
        events += self._close_message(status)
        final = self._response(status, reason)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return [*events, self._event(kind, response=final)]

    # --- items ---------------------------------------------------------------------------------

    def _delta(self, delta: dict[str, Any]) -> list[Event]:
        events: list[Event] = []
        thought = reasoning_text(delta)
        if thought:
            events += self._reason(thought)
        content = delta.get("content")
        if isinstance(content, str) and content:
            events += self._close_reasoning()
            if self._text is None:
                events += self._open_message()
            assert self._text is not None
            self._text.append(content)
            events.append(self._in_message("response.output_text.delta", delta=content))
        return events

    def _reason(self, thought: str) -> list[Event]:
        if self._reasoning_closed:
            return []  # vLLM's reasoning parsers end reasoning before content: never reached
        events: list[Event] = []
        if self._reasoning is None:
            self._reasoning = []
            item = reasoning_item(self._ids.reasoning, None, "in_progress")
            events.append(self._item_event("response.output_item.added", item))
            part = {"type": "reasoning_text", "text": ""}
            events.append(self._in_reasoning("response.content_part.added", part=part))
        self._reasoning.append(thought)
        events.append(self._in_reasoning("response.reasoning_text.delta", delta=thought))
        return events

    def _close_reasoning(self) -> list[Event]:
        if self._reasoning is None or self._reasoning_closed:
            return []
        self._reasoning_closed = True
        text = "".join(self._reasoning)
        part = {"type": "reasoning_text", "text": text}
        item = reasoning_item(self._ids.reasoning, text)
        events = [
            self._in_reasoning("response.reasoning_text.done", text=text),
            self._in_reasoning("response.content_part.done", part=part),
            self._item_event("response.output_item.done", item),
        ]
        self._done.append(item)
        return events

    def _open_message(self) -> list[Event]:
        self._text = []
        item = message_item(self._ids.message, None, "in_progress")
        return [
            self._item_event("response.output_item.added", item),
            self._in_message("response.content_part.added", part=output_text_part("")),
        ]

    def _close_message(self, status: str) -> list[Event]:
        text = "".join(self._text or [])
        item = message_item(self._ids.message, text, status)
        events = [
            self._in_message("response.output_text.done", text=text, logprobs=[]),
            self._in_message("response.content_part.done", part=output_text_part(text)),
            self._item_event("response.output_item.done", item),
        ]
        self._done.append(item)
        return events

    # --- event shapes --------------------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> Event:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def _item_event(self, kind: str, item: dict[str, Any]) -> Event:
        return self._event(kind, output_index=len(self._done), item=item)

    def _in_reasoning(self, kind: str, **fields: Any) -> Event:
        return self._event(
            kind, item_id=self._ids.reasoning, output_index=0, content_index=0, **fields
        )

    def _in_message(self, kind: str, **fields: Any) -> Event:
        if kind == "response.output_text.delta":
            fields["logprobs"] = []
        return self._event(
            kind, item_id=self._ids.message, output_index=len(self._done), content_index=0, **fields
        )

    def _error(self, error: dict[str, Any]) -> list[Event]:
        """vLLM's mid-stream error chunk: an `error` event now, `response.failed` at the end."""
        if self._failure is not None:
            return []
        message = error.get("message")
        if not isinstance(message, str):
            message = "the upstream failed during the stream"
        self._failure = {"code": "server_error", "message": message}
        code, param = error.get("code"), error.get("param")
        return [
            self._event(
                "error",
                code=None if code is None else str(code),
                message=message,
                param=param if isinstance(param, str) else None,
            )
        ]

    def _response(self, status: str, reason: str | None = None) -> dict[str, Any]:
        return response_object(
            self._bridged,
            self._ids,
            model=self._model,
            status=status,
            reason=reason,
            output=list(self._done),
            usage=self._usage,
            metadata=self._metadata,
        )
