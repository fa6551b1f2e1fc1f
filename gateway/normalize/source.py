"""`NormalizedSource`: any `AudioSource` seen through `[normalize]`, and the `Normalizer`
that makes them and runs the conversions.

The audio store treats a normalized source like any other: its cache key is the clip's own
content key plus the target form, so the store keeps the normalized encoding, loads it once
for concurrent requests (single-flight) and streams it when it is too big to keep. Loading
reads the clip's header first: a WAV already in the form is the inner source's own bytes, as
they are; any other clip is decoded and converted in a worker thread into a spooled file
(memory up to `SPOOL_MEMORY_BYTES`, disk past it), whose bytes are then encoded or streamed.
A converted clip is marked `converted`: it has no file of its own, so it always goes upstream
as data (never as a file:// or presigned URL), and its sha256 is that of the WAV sent.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import IO, TypeVar

import pybase64

from ..audio.durations import HEADER_BYTES, AudioHeader
from ..audio.encoder import READ_CHUNK_BYTES, EncodedAudio, StreamedAudio, base64_size
from ..audio.sources import AudioSource
from ..chunking.reading import open_source_file
from ..config import AudioConfig, NormalizeConfig
from ..errors import InvalidRequest, PayloadTooLarge
from ..metrics import GatewayMetrics
from ..naming.formats import SNIFF_BYTES, checked_mime
from ..naming.sidechannel import PathAudio
from .form import TargetForm, in_form

NORMALIZED_MIME = "audio/wav"
SPOOL_MEMORY_BYTES = 8 * 1024 * 1024  # a converted WAV up to this stays in memory, else disk
# Conversions are CPU-bound: their own threads, off the loop's default executor (aiofiles').
CONVERT_THREADS = max(1, min(4, (os.cpu_count() or 2) // 2))

T = TypeVar("T")


class Normalizer:
    """Wraps sources (`wrap`) and converts the clips that are not in form. `close()` it at
    shutdown (its threads)."""

    def __init__(
        self, config: NormalizeConfig, audio: AudioConfig, metrics: GatewayMetrics
    ) -> None:
        self.form = TargetForm.of(config)
        self._max_seconds = audio.max_duration_seconds
        self._metrics = metrics
        self._threads = ThreadPoolExecutor(CONVERT_THREADS, thread_name_prefix="normalize")

    def wrap(self, source: AudioSource, form: TargetForm | None = None) -> NormalizedSource:
        """`source` seen in `form` (by default `[normalize]`'s own)."""
        return NormalizedSource(source, self, form or self.form)

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def encoded(
        self, source: AudioSource, mime: str, form: TargetForm, *, raw: bool
    ) -> EncodedAudio:
        """The converted clip whole: its base64 in pieces (with `raw`, its bytes) and sha256."""
        spool = await self._converted(source, mime, form)
        try:
            pieces, sha256 = await asyncio.to_thread(_read_spool, spool.file, raw)
        finally:
            await asyncio.to_thread(spool.file.close)
        return EncodedAudio(NORMALIZED_MIME, pieces, sha256, spool.header, converted=True)

    async def streamed(
        self, source: AudioSource, mime: str, form: TargetForm, *, digest: bool, raw: bool
    ) -> StreamedAudio:
        """The converted clip as a stream of base64 (with `raw`, its bytes), read from its
        spooled file while it is sent."""
        spool = await self._converted(source, mime, form)
        try:
            sha256 = await asyncio.to_thread(_hash_spool, spool.file) if digest else None
        except BaseException:
            await asyncio.to_thread(spool.file.close)
            raise
        return StreamedSpool(spool, sha256, raw=raw)

    async def _converted(self, source: AudioSource, mime: str, form: TargetForm) -> Spool:
        from .convert import TooLong, Undecodable, convert  # numpy, libsndfile, soxr: on use

        clip_file = await open_source_file(source)
        started = time.perf_counter()
        # Not a `with`: the spool outlives this call (closed by whoever reads it, or below).
        out = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES)  # noqa: SIM115
        try:
            work = partial(convert, clip_file.file, form, out, max_seconds=self._max_seconds)
            done = await self._converting(work)
            size = await asyncio.to_thread(_rewind, out)
        except Undecodable as exc:
            await asyncio.to_thread(out.close)
            raise cannot_decode(source.ref, mime, str(exc)) from None
        except TooLong as exc:
            await asyncio.to_thread(out.close)
            raise _too_long(source.ref, str(exc)) from None
        except BaseException:
            await asyncio.to_thread(out.close)
            raise
        finally:
            await asyncio.to_thread(clip_file.close)
        self._metrics.normalized_clips.inc()
        self._metrics.normalize_seconds.observe(time.perf_counter() - started)
        return Spool(out, size, AudioHeader(done.frames, done.channels, done.sample_rate))

    async def _converting(self, work: Callable[[], T]) -> T:
        """`work` on the conversion threads (small steps go to the default executor, never
        queued behind a long conversion)."""
        return await asyncio.get_running_loop().run_in_executor(self._threads, work)


@dataclass(frozen=True, slots=True)
class NormalizedSource:
    """`inner` as the model's form (see the module docstring); an `AudioSource`."""

    inner: AudioSource
    normalizer: Normalizer
    form: TargetForm

    @property
    def ref(self) -> PathAudio:
        return self.inner.ref

    @property
    def cache_key(self) -> Hashable:
        return ("normalized", self.form, self.inner.cache_key)

    @property
    def identity(self) -> Hashable:
        return ("normalized", self.form, self.inner.identity)

    @property
    def key_identity(self) -> Hashable:
        return ("normalized", self.form, self.inner.key_identity)

    @property
    def size(self) -> int:
        return self.inner.size

    @property
    def encoded_size(self) -> int:
        """The source's own base64 size: what the store weighs before anything is converted
        (a converted clip always carries its bytes, even when the source would go as a URL)."""
        return base64_size(self.inner.size)

    async def load(self, *, encode: bool, digest: bool, raw: bool = False) -> EncodedAudio:
        mime = await self._mime_if_converted()
        if mime is None:
            return await self.inner.load(encode=encode, digest=digest, raw=raw)
        return await self.normalizer.encoded(self.inner, mime, self.form, raw=raw)

    async def open_stream(self, *, digest: bool, raw: bool = False) -> StreamedAudio:
        mime = await self._mime_if_converted()
        if mime is None:
            return await self.inner.open_stream(digest=digest, raw=raw)
        return await self.normalizer.streamed(self.inner, mime, self.form, digest=digest, raw=raw)

    async def read_head(self, nbytes: int) -> bytes:
        """The stored clip's first bytes (not the converted WAV's)."""
        return await self.inner.read_head(nbytes)

    async def upstream_url(self) -> str | None:
        """None: a converted clip has no file of its own. (A clip in form goes upstream as
        `inner`, which the pipeline asks instead.)"""
        return None

    async def _mime_if_converted(self) -> str | None:
        """None for a clip already in form; else its sniffed MIME type (400 for a file that is
        not audio at all, as without [normalize])."""
        head = await self.inner.read_head(HEADER_BYTES)
        ref = self.ref
        mime = checked_mime(
            head[:SNIFF_BYTES], ref.claimed_mime, label=ref.label, given=ref.given, param=ref.param
        )
        return None if in_form(head, self.form) else mime


def as_sent(source: AudioSource, audio: EncodedAudio | StreamedAudio) -> AudioSource:
    """The source a loaded clip goes upstream as: a normalized clip found in form is its inner
    source (a file:// or presigned URL, an object's identity as its uuid, as without
    [normalize]); any other source is itself."""
    if isinstance(source, NormalizedSource) and not audio.converted:
        return source.inner
    return source


@dataclass(frozen=True, slots=True)
class Spool:
    """A converted clip's WAV, rewound: in memory or on disk. Close `file` (in a thread)."""

    file: IO[bytes]
    size: int
    header: AudioHeader


class StreamedSpool(StreamedAudio):
    """A converted clip's base64 (with `raw`, its bytes) read from its spool while sent."""

    converted = True

    def __init__(self, spool: Spool, sha256: str | None, *, raw: bool) -> None:
        self.mime = NORMALIZED_MIME
        self.sha256 = sha256
        self.header = spool.header
        self.nbytes = spool.size if raw else base64_size(spool.size)
        self._file = spool.file
        self._raw = raw

    async def chunks(self) -> AsyncIterator[bytes]:
        while chunk := await asyncio.to_thread(self._file.read, READ_CHUNK_BYTES):
            yield chunk if self._raw else pybase64.b64encode(chunk)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._file.close)


def cannot_decode(ref: PathAudio, mime: str, reason: str) -> InvalidRequest:
    return InvalidRequest(
        f"{ref.label}: {ref.given!r} ({mime}) cannot be decoded, and [normalize] must decode "
        f"it to send it at the model's rate and channels: {reason}",
        param=ref.param,
        code="cannot_decode_audio",
    )


def _too_long(ref: PathAudio, what: str) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"{ref.label}: {ref.given!r} decodes to {what}, over audio.max_duration_seconds "
        "(vLLM refuses longer audio); decoding stopped there",
        param=ref.param,
        code="audio_too_long",
    )


def _rewind(out: IO[bytes]) -> int:
    """Blocking: the spool's size, and the spool rewound for reading."""
    size = out.seek(0, os.SEEK_END)
    out.seek(0)
    return size


def _read_spool(file: IO[bytes], raw: bool) -> tuple[tuple[bytes, ...], str]:
    """Blocking: the spool's base64 (with `raw`, its bytes) in pieces, and its sha256."""
    hasher = hashlib.sha256()
    pieces = []
    while chunk := file.read(READ_CHUNK_BYTES):  # a multiple of 3: the pieces concatenate
        hasher.update(chunk)
        pieces.append(chunk if raw else pybase64.b64encode(chunk))
    return tuple(pieces), hasher.hexdigest()


def _hash_spool(file: IO[bytes]) -> str:
    """Blocking: the spool's sha256, the spool rewound after."""
    hasher = hashlib.sha256()
    while chunk := file.read(READ_CHUNK_BYTES):
        hasher.update(chunk)
    file.seek(0)
    return hasher.hexdigest()
