"""Where the cutter reads a clip's bytes from, without holding a second copy of them.

- base64 already in memory (an inline data URI, a cached clip's base64 pieces): read through
  `Base64File`, a seekable file that decodes only the quanta each read asks for;
- a local file (not cached): its checked file descriptor (`encoder.open_checked_file`, which
  refuses a file changed since its checks), read natively by libsndfile;
- anything else (an object too big to cache, or sent upstream as a URL): its bytes streamed
  through the `AudioSource` interface into an anonymous temporary file.
"""

from __future__ import annotations

import asyncio
import bisect
import io
import os
import tempfile
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

import pybase64

from ..audio.encoder import EncodedAudio, open_checked_file
from ..audio.sources import AudioSource
from ..audio.sources.local import LocalClip
from ..naming.sidechannel import InlineAudio

if TYPE_CHECKING:  # annotations only
    from ..clips.loaded import LoadedClip


class Base64File(io.RawIOBase):
    """A read-only, seekable binary file over base64 text in pieces (each piece but the last
    a whole number of padding-free quanta, as the encoder and the S3 reader cut them); the
    first piece's base64 starts at `skip` (a data URI's payload: no copy of it is made)."""

    def __init__(self, pieces: Sequence[bytes | str], skip: int = 0) -> None:
        super().__init__()
        self._pieces = pieces
        self._skips = [skip] + [0] * (len(pieces) - 1)
        self._starts: list[int] = []  # decoded offset of each piece
        size = 0
        for piece, skipped in zip(pieces, self._skips, strict=True):
            self._starts.append(size)
            size += (len(piece) - skipped) // 4 * 3 - _padding(piece)
        self._size = size
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self._position < self._size:
            chunk = self._read_within_piece(len(view) - done)
            view[done : done + len(chunk)] = chunk
            done += len(chunk)
            self._position += len(chunk)
        return done

    def _read_within_piece(self, wanted: int) -> bytes:
        index = bisect.bisect_right(self._starts, self._position) - 1
        piece, skip = self._pieces[index], self._skips[index]
        local = self._position - self._starts[index]
        first_quantum = local // 3
        end = min(local + wanted, (len(piece) - skip) // 4 * 3)
        last_quantum = -(-end // 3)
        decoded = pybase64.b64decode(piece[skip + first_quantum * 4 : skip + last_quantum * 4])
        skip = local - first_quantum * 3
        return decoded[skip : skip + wanted]


def _padding(piece: bytes | str) -> int:
    tail = piece[-2:]
    marker = b"=" if isinstance(tail, bytes) else "="
    return len(tail) - len(tail.rstrip(marker))  # type: ignore[arg-type]


class ClipFile:
    """What the cutter opens: `file` for soundfile; close it (in a thread) when done."""

    def __init__(self, file: Any, handle: IO[bytes] | None = None) -> None:
        self.file = file
        self._handle = handle

    def close(self) -> None:
        """Blocking."""
        if self._handle is not None:
            self._handle.close()
        elif isinstance(self.file, int):
            os.close(self.file)


async def open_clip_file(clip: LoadedClip) -> ClipFile:
    """The clip's bytes as a file libsndfile can read (see the module docstring)."""
    if isinstance(clip, InlineAudio):
        return ClipFile(Base64File((clip.uri,), skip=clip.payload_start))
    audio = clip.audio
    if isinstance(audio, EncodedAudio) and audio.pieces:
        return ClipFile(Base64File(audio.pieces))
    return await open_source_file(clip.source)


async def open_source_file(source: AudioSource) -> ClipFile:
    """A source's own bytes as a file libsndfile can read: a local file's checked descriptor,
    anything else spooled to an anonymous temporary file."""
    if isinstance(source, LocalClip):
        return ClipFile(await asyncio.to_thread(open_checked_file, source.clip))
    return await _spooled(source)


async def _spooled(source: AudioSource) -> ClipFile:
    handle = await asyncio.to_thread(tempfile.TemporaryFile)
    try:
        stream = await source.open_stream(digest=False, raw=True)
        try:
            async for chunk in stream.chunks():
                await asyncio.to_thread(handle.write, chunk)
        finally:
            await stream.aclose()
        await asyncio.to_thread(handle.seek, 0)
    except BaseException:
        await asyncio.to_thread(handle.close)
        raise
    return ClipFile(handle, handle)
