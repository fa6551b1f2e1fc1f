"""Chat-completions SSE chunks as Responses stream events. Pure: bytes and dicts in, events out.

`ChatStreamTranslator` turns each chat chunk into the Responses events it completes:

    response.created, response.in_progress,
    the output items, each whole before the next starts (`stream_items.py`), in the order the
    model generated them: reasoning, the message (output_text and refusal parts), one
    function_call per tool call (a new tool-call index ends the call before it),
    response.completed (or response.incomplete when the chat answer stopped for length;
    response.failed after vLLM's mid-stream error chunk, which is also sent as `error`)

every event with the next `sequence_number`. An answer with neither text nor a call still gets
an (empty) message, as the non-streamed answer does. A chunk's logprobs ride on the
`response.output_text.delta` of its text; those of reasoning or call tokens have no place in a
Responses event and are not sent.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import msgspec

from .answer import CARRIED_ANSWER_FIELDS, ResponseIds, finish_status, response_object
from .outputs import part_logprobs, reasoning_text
from .request import BridgedRequest
from .sse import SSEDecoder
from .stream_items import CallWriter, Event, ItemWriter, MessageWriter, ReasoningWriter, event

DONE = b"[DONE]"


class ChatStreamTranslator:
    """One bridged stream's state: the open item, the finished ones, the next number."""

    def __init__(self, bridged: BridgedRequest, ids: ResponseIds, metadata: Any) -> None:
        self._bridged = bridged
        self._ids = ids
        self._metadata = metadata
        self._sequence = 0
        self._model: Any = None
        self._usage: Any = None
        self._carried: dict[str, Any] = {}
        self._finish_reason: Any = None
        self._open: ItemWriter | None = None
        self._open_call: int | None = None  # the chat tool-call index of the open call
        self._calls_seen: set[int] = set()
        self._unnamed: dict[int, dict[str, Any]] = {}  # call deltas before their name came
        self._failure: dict[str, Any] | None = None
        self._decoder = SSEDecoder()
        self._done: list[dict[str, Any]] = []  # finished output items

    def start(self) -> list[Event]:
        snapshot = self._response("in_progress")
        return self._numbered(
            [
                event("response.created", response=snapshot),
                event("response.in_progress", response=snapshot),
            ]
        )

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
            return self._numbered(self._error(chunk["error"]))
        self._note(chunk)
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return []
        choice = choices[0]
        self._finish_reason = choice.get("finish_reason") or self._finish_reason
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return []
        return self._numbered(self._delta(delta, choice.get("logprobs")))

    def finish(self) -> list[Event]:
        """The closing events, after the upstream's [DONE] (or its end of stream)."""
        tail = [event for data in self._decoder.close() for event in self.feed(data)]
        return tail + self._numbered(self._closing())

    def _note(self, chunk: dict[str, Any]) -> None:
        self._model = chunk.get("model", self._model)
        self._usage = chunk.get("usage") or self._usage
        for key in CARRIED_ANSWER_FIELDS:
            if chunk.get(key) is not None:
                self._carried[key] = chunk[key]

    def _closing(self) -> list[Event]:
        unnamed = "the upstream streamed a tool call without its name"
        events = self._error({"message": unnamed}) if self._unnamed else []
        if self._failure is not None:
            failed = self._response("failed")
            failed["error"] = self._failure
            return [*events, event("response.failed", response=failed)]
        status, reason = finish_status(self._finish_reason)
        answered = any(item["type"] in ("message", "function_call") for item in self._done)
        if not answered and not isinstance(self._open, MessageWriter | CallWriter):
            events += self._begin(MessageWriter, "msg")  # an empty answer is an empty message
        events += self._close(status)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return [*events, event(kind, response=self._response(status, reason))]

    # --- deltas --------------------------------------------------------------------------------

    def _delta(self, delta: dict[str, Any], logprobs: Any) -> list[Event]:
        events: list[Event] = []
        thought = reasoning_text(delta)
        if thought:
            events += self._reasoning(events).add(thought)
        content, refusal = delta.get("content"), delta.get("refusal")
        tokens = part_logprobs(logprobs)
        if (isinstance(content, str) and content) or (tokens and self._is_text_only(delta)):
            events += self._message(events).text(content or "", tokens)
        if isinstance(refusal, str) and refusal:
            events += self._message(events).refusal(refusal)
        calls = delta.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            if isinstance(call, dict) and self._failure is None:
                events += self._tool_call(call)
        return events

    def _is_text_only(self, delta: dict[str, Any]) -> bool:
        """A chunk of logprobs and no text (a token that decodes to nothing yet) is text
        when nothing else is under way."""
        nothing_else = not reasoning_text(delta) and not delta.get("tool_calls")
        return nothing_else and not isinstance(self._open, ReasoningWriter | CallWriter)

    def _reasoning(self, events: list[Event]) -> ReasoningWriter:
        if not isinstance(self._open, ReasoningWriter):
            events += self._begin(ReasoningWriter, "rs")
        assert isinstance(self._open, ReasoningWriter)
        return self._open

    def _message(self, events: list[Event]) -> MessageWriter:
        if not isinstance(self._open, MessageWriter):
            events += self._begin(MessageWriter, "msg")
        assert isinstance(self._open, MessageWriter)
        return self._open

    def _tool_call(self, call: dict[str, Any]) -> list[Event]:
        index = call.get("index", 0)
        function: dict[str, Any] = (
            call["function"] if isinstance(call.get("function"), dict) else {}
        )
        arguments = function.get("arguments") or ""
        if not isinstance(arguments, str):  # as `tool_call_fields` refuses it unstreamed
            return self._error(
                {"message": f"the upstream's tool call {index} has arguments that are not a string"}
            )
        if index == self._open_call and isinstance(self._open, CallWriter):
            return self._open.add(arguments)
        if index in self._calls_seen:
            message = f"the upstream streamed tool call {index} again after another item began"
            return self._error({"message": message})
        pending = self._unnamed.setdefault(index, {"id": None, "arguments": []})
        call_id = call.get("id")
        pending["id"] = call_id if isinstance(call_id, str) and call_id else pending["id"]
        pending["arguments"].append(arguments)
        if not isinstance(function.get("name"), str):
            return []  # its item opens with its name
        del self._unnamed[index]
        writer = partial(CallWriter, call_id=pending["id"], name=function["name"])
        events = self._begin(writer, "fc")
        assert isinstance(self._open, CallWriter)
        self._open_call = index
        self._calls_seen.add(index)
        return [*events, *self._open.add("".join(pending["arguments"]))]

    # --- items -------------------------------------------------------------------------------

    def _begin(self, writer: Callable[[str, int], ItemWriter], prefix: str) -> list[Event]:
        """Close the open item (it is complete: another began) and open the one `writer` makes
        of its id and output index (reasoning "rs", message "msg", function call "fc")."""
        events = self._close("completed")
        output_index = len(self._done)
        self._open = writer(self._item_id(prefix, output_index), output_index)
        return events + self._open.open()

    def _item_id(self, prefix: str, output_index: int) -> str:
        """The first reasoning item and the first message have the response's own ids (as
        the plain answer's do); any other item its prefix and output index."""
        firsts = {"rs": ("reasoning", self._ids.reasoning), "msg": ("message", self._ids.message)}
        kind, first_id = firsts.get(prefix, ("", ""))
        if kind and not any(item["type"] == kind for item in self._done):
            return first_id
        return self._ids.item(prefix, output_index)

    def _close(self, status: str) -> list[Event]:
        if self._open is None:
            return []
        events, item = self._open.close(status)
        self._done.append(item)
        self._open, self._open_call = None, None
        return events

    # --- event shapes --------------------------------------------------------------------------

    def _numbered(self, events: list[Event]) -> list[Event]:
        for one in events:
            one["sequence_number"] = self._sequence
            self._sequence += 1
        return events

    def _error(self, error: dict[str, Any]) -> list[Event]:
        """vLLM's mid-stream error chunk (or a stream the bridge cannot order): an `error`
        event now, `response.failed` at the end."""
        if self._failure is not None:
            return []
        message = error.get("message")
        if not isinstance(message, str):
            message = "the upstream failed during the stream"
        self._failure = {"code": "server_error", "message": message}
        code, param = error.get("code"), error.get("param")
        return [
            event(
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
            upstream=self._carried,
        )
