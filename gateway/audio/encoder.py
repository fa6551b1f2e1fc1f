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

from ..errors import AudioFileChanged, GatewayError
from ..naming.formats import SNIFF_BYTES, checked_mime
from .durations import HEADER_BYTES, AudioHeader, read_header
from .os_errors import clip_os_error
from .policy import ResolvedClip, file_version

READ_CHUNK_BYTES = 3 * 1024 * 1024  # multiple of 3: base64 pieces concatenate without padding
OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC  # never block on a FIFO


def base64_size(size: int) -> int:
    return 4 * ((size + 2) // 3)


@dataclass(frozen=True, slots=True)
class EncodedAudio:
    """A clip as the cache keeps it: the base64 in pieces (never joined; raw file bytes for the
    speech-to-text routes), its MIME type, when asked for the sha256 of the file bytes, and what
    its header says (length, channels, rate; None when the format does not say), so cached clips
    are checked without a re-read.
    `pieces` is empty when only the MIME type was needed (file:// mode). `converted`: the
    bytes are the gateway's own WAV of the clip (`[normalize]`), which no file holds."""

    mime: str
    pieces: tuple[bytes, ...]
    sha256: str | None
    header: AudioHeader | None = None
    converted: bool = False

    @property
    def nbytes(self) -> int:
        return sum(len(piece) for piece in self.pieces) + 256


class ChunkReader:
    """Reads a clip chunk by chunk into one reused buffer.

    A fresh bytes object per chunk costs a fresh allocation (and its page faults) per chunk;
    the reused buffer keeps a miss at the speed of the page cache. A chunk is only valid until
    the next `read()`.
    """

    def __init__(self, clip: ResolvedClip, handle: Any) -> None:
        self.clip = clip
        self._handle = handle
        self._view = memoryview(bytearray(max(1, min(READ_CHUNK_BYTES, clip.size))))
        self._remaining = clip.size

    async def read(self) -> memoryview:
        """The next chunk; empty once the clip's `size` bytes are read."""
        if self._remaining == 0:
            return self._view[:0]
        try:
            count = await self._handle.readinto(self._view[: min(len(self._view), self._remaining)])
        except OSError as exc:  # EIO from a failing disk or a network file system
            raise clip_os_error(self.clip.ref, exc) from None
        if not count:
            raise _changed(self.clip)  # shorter than when it was checked
        self._remaining -= count
        return self._view[:count]

    async def aclose(self) -> None:
        await self._handle.close()


class StreamedAudio:
    """An open clip whose base64 (with `raw`, its bytes) is produced while it is sent; close it
    on every path."""

    converted = False  # see EncodedAudio

    def __init__(
        self,
        reader: ChunkReader,
        head: memoryview,
        mime: str,
        sha256: str | None,
        header: AudioHeader | None,
        *,
        raw: bool = False,
    ):
        self.mime = mime
        self.sha256 = sha256
        self.header = header
        self.nbytes = reader.clip.size if raw else base64_size(reader.clip.size)
        self._reader = reader
        self._head = head
        self._piece: Callable[[memoryview], bytes] = bytes if raw else pybase64.b64encode

    async def chunks(self) -> AsyncIterator[bytes]:
        chunk = self._head
        while chunk:
            yield self._piece(chunk)  # copied or encoded before the buffer is read into again
            chunk = await self._reader.read()

    async def aclose(self) -> None:
        await self._reader.aclose()


async def encode_clip(
    clip: ResolvedClip, *, encode: bool, digest: bool, raw: bool = False
) -> EncodedAudio:
    """Read the whole clip once: sniff it, and base64-encode and/or hash it as asked; with
    `raw`, the pieces are the file's own bytes (the speech-to-text multipart upload).

    A clip of one read chunk or less (most are) is opened, read and closed in one trip to
    the loop's executor, not one per file operation."""
    if clip.size <= READ_CHUNK_BYTES:
        loop = asyncio.get_running_loop()
        data = await loop.run_in_executor(None, read_whole_clip, clip, clip.size)
        return _encoded_at_once(clip, data, encode=encode, digest=digest, raw=raw)
    reader = ChunkReader(clip, await _open_clip(clip))
    try:
        chunk = await reader.read()
        mime = _checked_mime(clip, chunk)
        header = _header(clip, chunk)
        if not (encode or digest or raw):
            return EncodedAudio(mime, (), None, header)
        hasher = hashlib.sha256() if digest else None
        piece: Callable[[memoryview], bytes] = bytes if raw else pybase64.b64encode
        pieces: list[bytes] = []
        while chunk:
            if hasher is not None:
                hasher.update(chunk)
            if encode or raw:
                pieces.append(piece(chunk))  # copied or encoded: the reader's buffer is reused
            chunk = await reader.read()
        return EncodedAudio(mime, tuple(pieces), hasher.hexdigest() if hasher else None, header)
    finally:
        await reader.aclose()


def _encoded_at_once(
    clip: ResolvedClip, data: bytes, *, encode: bool, digest: bool, raw: bool
) -> EncodedAudio:
    """`encode_clip` of a clip read whole into `data`."""
    head = memoryview(data)
    mime = _checked_mime(clip, head)
    header = _header(clip, head)
    sha256 = hashlib.sha256(data).hexdigest() if digest else None
    pieces: tuple[bytes, ...] = ()
    if data and (raw or encode):
        pieces = (data,) if raw else (pybase64.b64encode(data),)
    return EncodedAudio(mime, pieces, sha256, header)


def read_whole_clip(clip: ResolvedClip, nbytes: int) -> bytes:
    """Blocking: the first `nbytes` bytes of exactly the file the checks saw (all of them:
    a file that turned out shorter is one that changed), opened and closed here."""
    fd = _checked_opener(clip)(clip.real_path, os.O_RDONLY)
    try:
        parts: list[bytes] = []
        left = nbytes
        while left and (part := read_checked(clip, fd, left, nbytes - left)):
            parts.append(part)
            left -= len(part)
    finally:
        os.close(fd)
    if left:
        raise _changed(clip)
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def open_streamed_clip(
    clip: ResolvedClip, *, digest: bool, raw: bool = False
) -> StreamedAudio:
    """Open and sniff a clip for streaming; with `digest`, hash it first in a worker thread;
    with `raw`, its chunks are the file's bytes rather than base64."""
    handle = await _open_clip(clip)
    reader = ChunkReader(clip, handle)
    try:
        head = await reader.read()
        mime = _checked_mime(clip, head)
        sha256 = None
        if digest:
            sha256 = await asyncio.to_thread(_hash_file_descriptor, clip, handle.fileno())
        return StreamedAudio(reader, head, mime, sha256, _header(clip, head), raw=raw)
    except BaseException:
        await reader.aclose()
        raise


async def read_clip_head(clip: ResolvedClip, nbytes: int) -> bytes:
    """The clip's first `nbytes` bytes, from exactly the file the checks saw (one trip to the
    loop's executor)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, read_whole_clip, clip, min(nbytes, clip.size))


def _hash_file_descriptor(clip: ResolvedClip, fd: int) -> str:
    hasher = hashlib.sha256()
    offset, size = 0, clip.size
    while offset < size:
        chunk = read_checked(clip, fd, min(8 * READ_CHUNK_BYTES, size - offset), offset)
        if not chunk:
            break
        hasher.update(chunk)
        offset += len(chunk)
    return hasher.hexdigest()


def _open_clip(clip: ResolvedClip) -> Any:
    """aiofiles' open, through an opener that refuses anything but the file the checks saw."""
    return aiofiles.open(clip.real_path, "rb", buffering=0, opener=_checked_opener(clip))


def _checked_opener(clip: ResolvedClip) -> Callable[[str, int], int]:
    def opener(path: str, flags: int) -> int:
        try:
            fd = os.open(path, OPEN_FLAGS)
        except OSError as exc:
            raise _open_error(clip, exc) from None
        info = os.fstat(fd)
        if not _same_file(clip, info):
            os.close(fd)
            raise _changed(clip)
        return fd

    return opener


def _same_file(clip: ResolvedClip, info: os.stat_result) -> bool:
    """Whether `info` is the regular file the checks saw: same identity, same version."""
    return stat.S_ISREG(info.st_mode) and file_version(info) == clip.version


def _open_error(clip: ResolvedClip, exc: OSError) -> GatewayError:
    """Why the checked file would not open: 409 only when what its path names now is not the
    file that was checked (replaced, rewritten, a symlink swapped in: O_NOFOLLOW's ELOOP);
    otherwise the errno's own cause (`os_errors`), e.g. 403 for a file the gateway's user
    may not read, 404 for one removed since."""
    try:
        now = os.lstat(clip.real_path)
    except OSError as gone:  # removed, or a directory above it made unreadable
        return clip_os_error(clip.ref, gone)
    return clip_os_error(clip.ref, exc) if _same_file(clip, now) else _changed(clip)


def _checked_mime(clip: ResolvedClip, head: memoryview) -> str:
    ref = clip.ref
    head_bytes = bytes(head[:SNIFF_BYTES])
    return checked_mime(
        head_bytes, ref.claimed_mime, label=ref.label, given=ref.given, param=ref.param
    )


def _header(clip: ResolvedClip, head: memoryview) -> AudioHeader | None:
    """The header in the first chunk (which holds HEADER_BYTES, or the whole clip)."""
    return read_header(bytes(head[:HEADER_BYTES]), clip.size)


def _changed(clip: ResolvedClip) -> AudioFileChanged:
    return AudioFileChanged(
        f"{clip.ref.label}: {clip.ref.given!r} changed while it was being read; retry the request",
        param=clip.ref.param,
        code="audio_file_changed",
    )


def open_checked_file(clip: ResolvedClip) -> int:
    """Blocking: a read-only descriptor of exactly the file the checks saw (the dataset tools
    open files as the server does); raises the server's errors otherwise."""
    return _checked_opener(clip)(clip.real_path, os.O_RDONLY)


def read_checked(clip: ResolvedClip, fd: int, size: int, offset: int) -> bytes:
    """Blocking: `os.pread` of a checked file, its OS errors named as the server names them."""
    try:
        return os.pread(fd, size, offset)
    except OSError as exc:
        raise clip_os_error(clip.ref, exc) from None
