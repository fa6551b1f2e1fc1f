"""One upstream body per piece of a split clip. Pure (CPU only: run `build` off the loop).

A piece goes upstream exactly as a one-clip row's inline audio would: the row's body with its
sidechannel stripped, the piece spliced where the clip would have gone, in the route's wire form
(`audio_url` data URI or `input_audio`, with its format rules and `part_uuid`). Pieces have no
file, so in `file_url` / `presigned_url` mode they too go as data.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import pybase64

from ..naming.sidechannel import InlineAudio
from ..splice import Part
from ..upstream.body import Placeholders, SegmentedPayload


class Piece(Protocol):
    """A piece of a clip as the chunker cuts it (`gateway.chunking` AudioPiece)."""

    @property
    def index(self) -> int: ...
    @property
    def start_seconds(self) -> float: ...
    @property
    def end_seconds(self) -> float: ...
    @property
    def mime(self) -> str: ...
    @property
    def data(self) -> bytes: ...


Splice = Callable[[dict[str, Any], list[Part]], None]
MakePart = Callable[[InlineAudio, Placeholders], Part]


@dataclass(frozen=True, slots=True)
class ChunkedRequest:
    """A request whose one clip was split: what the fan-out sends and how it answers."""

    pieces: tuple[Piece, ...]
    clip: str  # how messages name the clip, e.g. "metadata.audio_path 'long.wav'"
    stream: bool
    include_usage: bool
    build: Callable[[Piece], SegmentedPayload]  # a piece's upstream body (CPU: off the loop)
    release: Callable[[], None] | None = None  # blocking: what on-demand pieces read from

    async def aclose(self) -> None:
        """Release the clip on-demand pieces are read from (when the request is over)."""
        if self.release is not None:
            await asyncio.to_thread(self.release)

    def label(self, piece: Piece) -> str:
        """How messages name a piece: its number, time range and clip."""
        return (
            f"piece {piece.index + 1} of {len(self.pieces)} "
            f"({piece.start_seconds:.3f}-{piece.end_seconds:.3f} s of {self.clip})"
        )


def chunked_request(
    body: dict[str, Any],
    pieces: Sequence[Piece],
    *,
    clip: str,
    param: str,
    splice: Splice,
    part: MakePart,
    release: Callable[[], None] | None = None,
    key: Callable[[Piece], str | None] | None = None,
) -> ChunkedRequest:
    """The plan for `body` (sidechannel already stripped): each piece's body is built when it
    is about to be sent, so a long clip's pieces are not all held as base64 at once; `key`
    gives a piece body its clip key (`gateway.affinity`)."""
    template = msgspec.json.encode(body)

    def build(piece: Piece) -> SegmentedPayload:
        copy = msgspec.json.decode(template)
        placeholders = Placeholders()
        splice(copy, [part(piece_audio(piece, param), placeholders)])
        return SegmentedPayload(placeholders.render(copy), key(piece) if key else None)

    stream = body.get("stream") is True
    options = body.get("stream_options")
    include_usage = stream and isinstance(options, dict) and options.get("include_usage") is True
    return ChunkedRequest(tuple(pieces), clip, stream, include_usage, build, release)


def piece_audio(piece: Piece, param: str) -> InlineAudio:
    """A piece as an inline clip of the row's sidechannel key (errors name that key)."""
    lead = f"data:{piece.mime};base64,"
    uri = lead + pybase64.b64encode(piece.data).decode("ascii")
    return InlineAudio(uri=uri, mime=piece.mime, payload_start=len(lead), param=param)
