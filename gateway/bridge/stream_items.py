"""One streamed output item each: the events that open it, grow it and close it. Pure.

A writer knows its item's id and `output_index` and returns events without their
`sequence_number` (the translator numbers them as it sends them):

    reasoning      output_item.added, content_part.added (reasoning_text),
                   reasoning_text.delta..., reasoning_text.done, content_part.done,
                   output_item.done
    message        output_item.added, then per part (output_text, refusal, in the order their
                   first delta came) content_part.added and its deltas; at the end each part's
                   output_text.done / refusal.done and content_part.done, output_item.done
    function_call  output_item.added (arguments ""), function_call_arguments.delta...,
                   function_call_arguments.done, output_item.done
"""

from __future__ import annotations

from typing import Any

from .outputs import (
    function_call_item,
    light_logprobs,
    message_item,
    output_text_part,
    reasoning_item,
    refusal_part,
)

Event = dict[str, Any]


def event(kind: str, **fields: Any) -> Event:
    return {"type": kind, **fields}


class ItemWriter:
    """What every writer has: its item's place, and the added / done events of the item."""

    kind = ""

    def __init__(self, item_id: str, output_index: int) -> None:
        self.item_id = item_id
        self.output_index = output_index

    def open(self) -> list[Event]:
        return [self._item_event("response.output_item.added", self.item("in_progress"))]

    def close(self, status: str) -> tuple[list[Event], dict[str, Any]]:
        """The closing events and the finished item."""
        item = self.item(status)
        return [self._item_event("response.output_item.done", item)], item

    def item(self, status: str) -> dict[str, Any]:
        raise NotImplementedError

    def _item_event(self, kind: str, item: dict[str, Any]) -> Event:
        return event(kind, output_index=self.output_index, item=item)

    def _in_item(self, kind: str, **fields: Any) -> Event:
        return event(kind, item_id=self.item_id, output_index=self.output_index, **fields)


class ReasoningWriter(ItemWriter):
    kind = "reasoning"

    def __init__(self, item_id: str, output_index: int) -> None:
        super().__init__(item_id, output_index)
        self.text: list[str] = []

    def open(self) -> list[Event]:
        part = {"type": "reasoning_text", "text": ""}
        added = self._in_item("response.content_part.added", content_index=0, part=part)
        return [*super().open(), added]

    def add(self, text: str) -> list[Event]:
        self.text.append(text)
        return [self._in_item("response.reasoning_text.delta", content_index=0, delta=text)]

    def close(self, status: str) -> tuple[list[Event], dict[str, Any]]:
        text = "".join(self.text)
        part = {"type": "reasoning_text", "text": text}
        events = [
            self._in_item("response.reasoning_text.done", content_index=0, text=text),
            self._in_item("response.content_part.done", content_index=0, part=part),
        ]
        done, item = super().close(status)
        return events + done, item

    def item(self, status: str) -> dict[str, Any]:
        text = None if status == "in_progress" else "".join(self.text)  # added: no part yet
        return reasoning_item(self.item_id, text, status)


class _Part:
    """One content part of a streamed message: its pieces and (text only) their logprobs."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "output_text" or "refusal"
        self.pieces: list[str] = []
        self.logprobs: list[dict[str, Any]] = []

    def shape(self) -> dict[str, Any]:
        joined = "".join(self.pieces)
        if self.kind == "refusal":
            return refusal_part(joined)
        return output_text_part(joined, self.logprobs)


class MessageWriter(ItemWriter):
    kind = "message"

    def __init__(self, item_id: str, output_index: int) -> None:
        super().__init__(item_id, output_index)
        self.parts: list[_Part] = []

    def text(self, delta: str, logprobs: list[dict[str, Any]]) -> list[Event]:
        """A piece of text with its tokens' logprobs (part shape)."""
        index, events = self._part("output_text")
        self.parts[index].pieces.append(delta)
        self.parts[index].logprobs += logprobs
        fields = {"content_index": index, "delta": delta, "logprobs": light_logprobs(logprobs)}
        return [*events, self._in_item("response.output_text.delta", **fields)]

    def refusal(self, delta: str) -> list[Event]:
        index, events = self._part("refusal")
        self.parts[index].pieces.append(delta)
        delta_event = self._in_item("response.refusal.delta", content_index=index, delta=delta)
        return [*events, delta_event]

    def _part(self, kind: str) -> tuple[int, list[Event]]:
        """The index of the part of this kind, and the event that opens it if it is new."""
        for index, part in enumerate(self.parts):
            if part.kind == kind:
                return index, []
        self.parts.append(_Part(kind))
        index = len(self.parts) - 1
        empty = self.parts[index].shape()
        return index, [
            self._in_item("response.content_part.added", content_index=index, part=empty)
        ]

    def close(self, status: str) -> tuple[list[Event], dict[str, Any]]:
        events = [] if self.parts else self._part("output_text")[1]  # an empty answer: ""
        for index, part in enumerate(self.parts):
            events.append(self._part_done(index, part))
            shape = part.shape()
            events.append(
                self._in_item("response.content_part.done", content_index=index, part=shape)
            )
        done, item = super().close(status)
        return events + done, item

    def _part_done(self, index: int, part: _Part) -> Event:
        joined = "".join(part.pieces)
        if part.kind == "refusal":
            return self._in_item("response.refusal.done", content_index=index, refusal=joined)
        logprobs = light_logprobs(part.logprobs)
        return self._in_item(
            "response.output_text.done", content_index=index, text=joined, logprobs=logprobs
        )

    def item(self, status: str) -> dict[str, Any]:
        parts = [] if status == "in_progress" else [part.shape() for part in self.parts]
        return message_item(self.item_id, parts, status)


class CallWriter(ItemWriter):
    kind = "function_call"

    def __init__(self, item_id: str, output_index: int, call_id: str | None, name: str) -> None:
        super().__init__(item_id, output_index)
        self.call_id = call_id or item_id  # a call the upstream gave no id is named by its item
        self.name = name
        self.arguments: list[str] = []

    def add(self, arguments: str) -> list[Event]:
        if not arguments:
            return []
        self.arguments.append(arguments)
        return [self._in_item("response.function_call_arguments.delta", delta=arguments)]

    def close(self, status: str) -> tuple[list[Event], dict[str, Any]]:
        joined = "".join(self.arguments)
        events = [self._in_item("response.function_call_arguments.done", arguments=joined)]
        done, item = super().close(status)
        return events + done, item

    def item(self, status: str) -> dict[str, Any]:
        arguments = "" if status == "in_progress" else "".join(self.arguments)
        return function_call_item(self.item_id, self.call_id, self.name, arguments, status)
