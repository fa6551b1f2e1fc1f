"""Reading a checked clip and base64-encoding it chunk by chunk.

`encode_clip` produces a cacheable `EncodedAudio`; `open_streamed_clip` hands back a
`StreamedAudio` whose chunks are read and encoded while the upstream body is being written, so
a clip too big for the cache never sits in memory whole.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiofiles
import pybase64

from .audio import ResolvedClip
from .errors import AudioFileChanged, AudioNotFound, InvalidRequest
from .formats import SUPPORTED_EXTENSIONS, sniff_mime

READ_CHUNK_BYTES = 3 * 256 * 1024  # multiple of 3: base64 pieces concatenate without padding
OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC  # never block on a FIFO


def base64_size(size: int) -> int:
    return 4 * ((size + 2) // 3)


@dataclass(frozen=True, slots=True)
class EncodedAudio:
    """A clip as the cache keeps it: the base64 in pieces (never joined), its MIME type and,
    when asked for, the sha256 of the file bytes. `pieces` is empty when only the MIME type
    was needed (file:// mode)."""

    mime: str
    pieces: tuple[bytes, ...]
    sha256: str | None

    @property
    def nbytes(self) -> int:
        return sum(len(piece) for piece in self.pieces) + 256


class StreamedAudio:
    """An open clip whose base64 is produced while it is sent; close it on every path."""

    def __init__(self, clip: ResolvedClip, handle: Any, head: bytes, mime: str, sha256: str | None):
        self.clip = clip
        self.mime = mime
        self.sha256 = sha256
        self.nbytes = base64_size(clip.size)
        self._handle = handle
        self._head = head

    async def chunks(self) -> AsyncIterator[bytes]:
        sent = len(self._head)
        yield pybase64.b64encode(self._head)
        while sent < self.clip.size:
            chunk = await self._handle.read(min(READ_CHUNK_BYTES, self.clip.size - sent))
            if not chunk:
                raise _changed(self.clip)
            sent += len(chunk)
            yield pybase64.b64encode(chunk)

    async def aclose(self) -> None:
        await self._handle.close()


async def encode_clip(clip: ResolvedClip, *, encode: bool, digest: bool) -> EncodedAudio:
    """Read the whole clip once: sniff it, and base64-encode and/or hash it as asked."""
    async with _open_clip(clip) as handle:
        head = await handle.read(READ_CHUNK_BYTES)
        mime = _checked_mime(clip, head)
        if not (encode or digest):
            return EncodedAudio(mime, (), None)
        hasher = hashlib.sha256() if digest else None
        pieces: list[bytes] = []
        chunk, total = head, 0
        while chunk:
            total += len(chunk)
            if hasher is not None:
                hasher.update(chunk)
            if encode:
                pieces.append(pybase64.b64encode(chunk))
            if total >= clip.size:
                break
            chunk = await handle.read(min(READ_CHUNK_BYTES, clip.size - total))
        if total != clip.size:
            raise _changed(clip)
        return EncodedAudio(mime, tuple(pieces), hasher.hexdigest() if hasher else None)


async def open_streamed_clip(clip: ResolvedClip, *, digest: bool) -> StreamedAudio:
    """Open and sniff a clip for streaming; with `digest`, hash it first in a worker thread."""
    handle = await _open_clip(clip)
    try:
        head = await handle.read(READ_CHUNK_BYTES)
        mime = _checked_mime(clip, head)
        sha256 = None
        if digest:
            sha256 = await asyncio.to_thread(_hash_file_descriptor, handle.fileno(), clip.size)
        return StreamedAudio(clip, handle, head, mime, sha256)
    except BaseException:
        await handle.close()
        raise


def _hash_file_descriptor(fd: int, size: int) -> str:
    hasher = hashlib.sha256()
    offset = 0
    while offset < size:
        chunk = os.pread(fd, min(8 * READ_CHUNK_BYTES, size - offset), offset)
        if not chunk:
            break
        hasher.update(chunk)
        offset += len(chunk)
    return hasher.hexdigest()


def _open_clip(clip: ResolvedClip) -> Any:
    """aiofiles' open, through an opener that refuses anything but the file the checks saw."""
    return aiofiles.open(clip.real_path, "rb", opener=_checked_opener(clip))


def _checked_opener(clip: ResolvedClip) -> Callable[[str, int], int]:
    def opener(path: str, flags: int) -> int:
        try:
            fd = os.open(path, OPEN_FLAGS)
        except FileNotFoundError:
            raise AudioNotFound(
                f"{clip.ref.label}: audio file {clip.ref.given!r} does not exist",
                param=clip.ref.param,
                code="audio_not_found",
            ) from None
        except OSError:
            # O_NOFOLLOW met a symlink swapped in after the checks, or similar.
            os_error = _changed(clip)
            raise os_error from None
        info = os.fstat(fd)
        same_file = (info.st_ino, info.st_dev, info.st_size, info.st_mtime_ns) == (
            clip.inode,
            clip.device,
            clip.size,
            clip.mtime_ns,
        )
        if not (stat.S_ISREG(info.st_mode) and same_file):
            os.close(fd)
            raise _changed(clip)
        return fd

    return opener


def _checked_mime(clip: ResolvedClip, head: bytes) -> str:
    mime = sniff_mime(head, clip.ref.claimed_mime)
    if mime is None:
        raise InvalidRequest(
            f"{clip.ref.label}: {clip.ref.given!r} is not an audio file (no {SUPPORTED_EXTENSIONS} "
            "container signature in its first bytes)",
            param=clip.ref.param,
            code="not_audio",
        )
    return mime


def _changed(clip: ResolvedClip) -> AudioFileChanged:
    return AudioFileChanged(
        f"{clip.ref.label}: {clip.ref.given!r} changed while it was being read; retry the request",
        param=clip.ref.param,
        code="audio_file_changed",
    )
