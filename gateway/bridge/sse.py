"""Server-sent events, both ways. Pure: bytes in, payloads out; events in, bytes out.

`SSEDecoder` cuts the upstream's byte stream into `data:` payloads as bytes arrive (any cut,
CRLF or LF); `encode_event` writes one Responses event as `event:` + `data:` lines.
"""

from __future__ import annotations

from typing import Any

import msgspec


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


def encode_event(event: dict[str, Any]) -> bytes:
    return b"event: %b\ndata: %b\n\n" % (event["type"].encode(), msgspec.json.encode(event))
