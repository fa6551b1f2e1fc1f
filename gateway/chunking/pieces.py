"""`Chunker.split(clip)`: the pieces of a clip longer than `threshold_seconds`, cached.

A clip whose header (WAV, FLAC) says it is short is answered at once, without a thread. A
clip whose pieces together would be over `cache.max_item_bytes` (the store streams such files
rather than hold them) is cut ON DEMAND, per request: one decoding pass finds the cuts, and
each piece's WAV is read again from the clip when the fan-out sends it, so a request holds
about `max_concurrent_chunks` pieces, not the clip (`ClipPieces.close()` releases the
clip's file). Any other clip is cut once (`cutter.cut_clip`, in a worker thread): concurrent
requests for one clip (the seeds of a row) share that cut, and the pieces are kept in the audio
store under the clip's content identity (the store's key for files and objects, the payload's
sha256 for inline audio), the settings that shape the cuts, and the piece index. A clip found
not to need splitting (a short MP3) is remembered too, so it is decoded once.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections.abc import Awaitable, Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from ..audio.cache import AudioStore
from ..audio.durations import HEADER_BASE64_CHARS, AudioHeader, read_base64_header
from ..config import AudioConfig, ChunkingConfig
from ..errors import InvalidRequest, PayloadTooLarge
from ..naming.sidechannel import InlineAudio, base64_decoded_size
from .cutter import PIECE_MIME, CutClip, DecodedTooLong, Undecodable, cut_clip, read_piece
from .reading import ClipFile, open_clip_file

if TYPE_CHECKING:  # annotations only
    from ..clips.loaded import LoadedClip

ENTRY_OVERHEAD_BYTES = 256
# Cuts are CPU-bound and may take seconds: their own threads, so a burst of long clips never
# occupies the loop's default executor (which aiofiles reads every clip through).
CUT_THREADS = max(1, min(4, (os.cpu_count() or 2) // 2))


@dataclass(frozen=True, slots=True)
class AudioPiece:
    """One piece: `data` is a complete audio file of type `mime` (WAV), the clip's frames
    [start_frame, end_frame) at its own sample rate, channels and sample format."""

    index: int
    start_seconds: float
    end_seconds: float
    mime: str
    data: bytes
    start_frame: int
    end_frame: int

    @property
    def nbytes(self) -> int:
        return len(self.data) + ENTRY_OVERHEAD_BYTES


@dataclass(frozen=True, slots=True)
class OnDemandPiece:
    """A piece of a clip cut on demand: `data` reads its frames from the clip again (blocking:
    the fan-out builds a piece's body in a thread), one piece at a time per clip."""

    index: int
    start_seconds: float
    end_seconds: float
    mime: str
    start_frame: int
    end_frame: int
    clip: ClipFile
    lock: threading.Lock

    @property
    def data(self) -> bytes:
        with self.lock:  # one file position per clip
            return read_piece(self.clip.file, self.start_frame, self.end_frame)


@dataclass(frozen=True, slots=True)
class ClipPieces:
    pieces: tuple[AudioPiece, ...] | tuple[OnDemandPiece, ...]
    duration_seconds: float
    # Blocking: releases what on-demand pieces read from (None: the pieces are bytes).
    close: Callable[[], None] | None = None


@dataclass(frozen=True, slots=True)
class _Outline:
    """The cached outline of a cut clip: how many pieces (0: not split), and its length."""

    count: int
    duration_seconds: float

    @property
    def nbytes(self) -> int:
        return ENTRY_OVERHEAD_BYTES


class Chunker:
    """Splits long clips; the caller decides whether chunking is on (`config.enabled`).
    `close()` it at shutdown (its cutting threads)."""

    def __init__(self, config: ChunkingConfig, store: AudioStore, audio: AudioConfig) -> None:
        self.config = config
        self._store = store
        self._max_seconds = audio.max_duration_seconds
        self._max_decode_bytes = audio.max_decode_bytes
        self._inflight: dict[Hashable, asyncio.Task[ClipPieces | None]] = {}
        self._threads = ThreadPoolExecutor(CUT_THREADS, thread_name_prefix="chunking")

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def split(
        self, clip: LoadedClip, config: ChunkingConfig | None = None
    ) -> ClipPieces | None:
        """The clip's pieces, or None when it is not longer than `threshold_seconds` (of
        `config`: the model's cuts; by default this chunker's own).

        Raises 400 `cannot_chunk_audio` for a clip that cannot be decoded when its length must
        be known, 413 `audio_too_long` / `audio_decode_too_large` for a decoded length over
        `audio.max_duration_seconds` / `audio.max_decode_bytes`."""
        config = config or self.config
        header = _header(clip)
        if header is not None and header.seconds <= config.threshold_seconds:
            return None  # the header says so: no decoding, no thread
        # 16-bit PCM at the least: pieces this large would not be kept, so none are held.
        if header is not None and header.frames * header.channels * 2 > self._store.max_item_bytes:
            return await self._guarded(clip, self._cut_on_demand(clip, config))
        # ("chunks", settings..., content): never the shape of the store's own (content, raw)
        key = (*_settings(config), await _content_key(clip))
        found = self._cached(key)
        if found is not None:
            return found or None
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.create_task(self._cut_and_keep(key, clip, config))
            self._inflight[key] = task
            task.add_done_callback(lambda done: self._forget(key, done))
        # shield: a cancelled requester must not cancel the cut the others wait on.
        return await self._guarded(clip, asyncio.shield(task))

    async def _guarded(
        self, clip: LoadedClip, cutting: Awaitable[ClipPieces | None]
    ) -> ClipPieces | None:
        try:
            return await cutting
        except Undecodable as exc:
            raise _cannot_chunk(clip, str(exc)) from None
        except DecodedTooLong as exc:
            raise _too_long(clip, exc) from None

    async def _cut_on_demand(self, clip: LoadedClip, config: ChunkingConfig) -> ClipPieces | None:
        """The cuts only; each piece is read from the clip's file when it is sent."""
        clip_file = await open_clip_file(clip)
        try:
            cut = await self._cut(clip_file, config, keep_data=False)
        except BaseException:
            await asyncio.to_thread(clip_file.close)
            raise
        if not cut.pieces:
            await asyncio.to_thread(clip_file.close)
            return None
        rate, lock = cut.sample_rate, threading.Lock()
        pieces = tuple(
            OnDemandPiece(
                i, p.start / rate, p.end / rate, PIECE_MIME, p.start, p.end, clip_file, lock
            )
            for i, p in enumerate(cut.pieces)
        )
        return ClipPieces(pieces, cut.frames / rate, clip_file.close)

    async def _cut(
        self, clip_file: ClipFile, config: ChunkingConfig, *, keep_data: bool = True
    ) -> CutClip:
        return await asyncio.get_running_loop().run_in_executor(
            self._threads,
            partial(
                cut_clip,
                clip_file.file,
                config,
                max_seconds=self._max_seconds,
                max_decode_bytes=self._max_decode_bytes,
                keep_data=keep_data,
            ),
        )

    def _cached(self, key: tuple[Hashable, ...]) -> ClipPieces | tuple[()] | None:
        """The cached pieces; `()` for a clip known not to split; None when not (all) cached."""
        outline = self._store.cached(key)
        if not isinstance(outline, _Outline):
            return None
        if outline.count == 0:
            return ()
        pieces = [self._store.cached((*key, index)) for index in range(outline.count)]
        if not all(isinstance(piece, AudioPiece) for piece in pieces):
            return None
        return ClipPieces(tuple(pieces), outline.duration_seconds)  # type: ignore[arg-type]

    async def _cut_and_keep(
        self, key: tuple[Hashable, ...], clip: LoadedClip, config: ChunkingConfig
    ) -> ClipPieces | None:
        clip_file = await open_clip_file(clip)
        try:
            cut = await self._cut(clip_file, config)
        finally:
            await asyncio.to_thread(clip_file.close)
        result = _pieces(cut)
        if result is None:
            self._store.keep(key, _Outline(0, cut.frames / cut.sample_rate))
            return None
        kept = [
            self._store.keep((*key, piece.index), piece)
            for piece in result.pieces
            if isinstance(piece, AudioPiece)  # all of them: `_pieces` holds bytes
        ]
        if all(kept):  # else an outline would only send every later seed to a new cut
            self._store.keep(key, _Outline(len(result.pieces), result.duration_seconds))
        return result

    def _forget(self, key: Hashable, task: asyncio.Task[ClipPieces | None]) -> None:
        self._inflight.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved, so a cut nobody awaits any more is not logged


def _settings(config: ChunkingConfig) -> tuple[Hashable, ...]:
    """Everything that changes where or how pieces are cut (not `join`, not concurrency)."""
    return (
        "chunks",
        config.threshold_seconds,
        config.max_chunk_seconds,
        config.min_tail_seconds,
        config.split,
        config.quiet_search_seconds,
    )


def _pieces(cut: CutClip) -> ClipPieces | None:
    if not cut.pieces:
        return None
    rate = cut.sample_rate
    pieces = tuple(
        AudioPiece(i, p.start / rate, p.end / rate, PIECE_MIME, p.data, p.start, p.end)
        for i, p in enumerate(cut.pieces)
    )
    return ClipPieces(pieces, cut.frames / rate)


def _header(clip: LoadedClip) -> AudioHeader | None:
    if isinstance(clip, InlineAudio):  # the header's base64 only, not a copy of the payload
        start = clip.payload_start
        head = clip.uri[start : start + HEADER_BASE64_CHARS]
        return read_base64_header(head, base64_decoded_size(clip.uri, start))
    return clip.audio.header


async def _content_key(clip: LoadedClip) -> Hashable:
    if isinstance(clip, InlineAudio):  # the data URI's sha256, off the loop (it may be MBs)
        uri = clip.uri
        return ("sha256", await asyncio.to_thread(lambda: hashlib.sha256(uri.encode()).hexdigest()))
    return clip.source.cache_key


def _named(clip: LoadedClip) -> tuple[str, str, str]:
    if isinstance(clip, InlineAudio):
        return clip.param, clip.given, clip.param
    ref = clip.source.ref
    return ref.label, ref.given, ref.param


def _mime(clip: LoadedClip) -> str:
    return clip.mime if isinstance(clip, InlineAudio) else clip.audio.mime


def _cannot_chunk(clip: LoadedClip, reason: str) -> InvalidRequest:
    label, given, param = _named(clip)
    return InvalidRequest(
        f"{label}: {given!r} ({_mime(clip)}) cannot be decoded, and its length must be known "
        f"to split it into pieces ([chunking]): {reason}",
        param=param,
        code="cannot_chunk_audio",
    )


def _too_long(clip: LoadedClip, exc: DecodedTooLong) -> PayloadTooLarge:
    label, given, param = _named(clip)
    return PayloadTooLarge(
        f"{label}: {given!r} decodes to {exc.what}, over the limit of {exc.limit} "
        f"({exc.key}; vLLM refuses larger audio); decoding stopped there",
        param=param,
        code=exc.code,
    )
