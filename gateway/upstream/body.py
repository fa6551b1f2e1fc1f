"""The outgoing request body as a sequence of segments, written straight to the upstream.

The spliced body is serialised with a placeholder string where each clip's base64 belongs;
the JSON is then cut at the placeholders and the clip's cached bytes (or its streamed chunks)
go between the cuts. Multi-megabyte audio is never copied into a JSON string per request.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Awaitable, Callable, Container, Iterator
from typing import Any

import msgspec

from ..audio.encoder import StreamedAudio

Segment = bytes | StreamedAudio


_PROCESS_SECRET = os.urandom(8).hex()  # clients cannot guess it, so their text never collides
_request_numbers = itertools.count()


class Placeholders:
    """Tokens standing for audio in one request's body: a per-process secret and a per-request
    number, so neither a client's text nor another request's token can match them."""

    def __init__(self) -> None:
        self._prefix = f"@@audio-gateway:{_PROCESS_SECRET}:{next(_request_numbers)}:"
        self._fills: list[tuple[bytes, tuple[Segment, ...]]] = []

    def add(self, lead: bytes, segments: tuple[Segment, ...]) -> str:
        """A token for a JSON string whose value is `lead` followed by `segments`."""
        self._fills.append((lead, segments))
        return f"{self._prefix}{len(self._fills) - 1}@@"

    def __len__(self) -> int:
        return len(self._fills)

    def render(self, body: dict[str, Any], skip: Container[int] = ()) -> list[Segment]:
        """Serialise `body` and put each placeholder's segments where its token stands; the
        placeholders numbered in `skip` were taken out of `body` (a clip sent by reference)."""
        text = msgspec.json.encode(body)
        # Tokens are found wherever they stand: a clip's place in the body need not follow
        # its number (content parts in earlier messages come before the sidechannel's).
        spots = []
        for index, (lead, segments) in enumerate(self._fills):
            if index in skip:
                continue
            token = f'"{self._prefix}{index}@@"'.encode()
            at = text.find(token)
            if at < 0:
                raise RuntimeError(f"placeholder {index} vanished from the spliced body")
            spots.append((at, len(token), lead, segments))
        if len(spots) > 1:
            spots.sort(key=lambda spot: spot[0])
        out: list[Segment] = []
        position = 0
        for at, size, lead, segments in spots:
            out.append(text[position : at + 1] + lead)  # up to and with the opening quote
            out.extend(segments)
            position = at + size - 1  # the closing quote starts the next text segment
        out.append(text[position:])
        return out


class SegmentedPayload:
    """A request body of byte segments and streamed clips, with its exact length, and the key
    of the clips it carries (`gateway.affinity`; None: no audio, or no key asked for)."""

    def __init__(self, segments: list[Segment], clip_key: str | None = None) -> None:
        self._segments = segments
        self.clip_key = clip_key
        self.size = sum(len(s) if isinstance(s, bytes) else s.nbytes for s in segments)

    @property
    def segments(self) -> list[Segment]:
        """The body in order (the dataset tools write it to a file instead of a socket)."""
        return self._segments

    def streamed(self) -> Iterator[StreamedAudio]:
        return (s for s in self._segments if isinstance(s, StreamedAudio))

    async def write_to(
        self, transport: asyncio.WriteTransport, head: bytes, drain: Callable[[], Awaitable[None]]
    ) -> None:
        """Write `head` and the segments; runs of bytes go out in one writelines call."""
        pending: list[bytes] = [head]
        for segment in self._segments:
            if isinstance(segment, bytes):
                pending.append(segment)
                continue
            transport.writelines(pending)
            pending = []
            async for chunk in segment.chunks():
                transport.write(chunk)
                await drain()
        transport.writelines(pending)

    async def aclose(self) -> None:
        for streamed in self.streamed():
            await streamed.aclose()
