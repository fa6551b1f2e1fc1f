"""Object clips: the `AudioSource` of one object, and the lookup that makes them.

`ObjectSources.source(ref)` checks the name (400/403), HEADs the object for its identity
(bucket, key, ETag, size; 404), then its extension (400) and size limit (413 before any
GET), and returns an `ObjectClip` that the cache keys by that identity. With
`revalidate = false` an object HEADed before is trusted as it was: no request reaches the
store for a clip the cache still holds.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Hashable

import pybase64
from cachetools import LRUCache

from ...config import Config, S3Config
from ...errors import AudioFileChanged
from ...metrics import GatewayMetrics
from ...naming.formats import SNIFF_BYTES, checked_mime, mime_for_extension
from ...naming.object_names import ObjectName, ObjectPolicy
from ...naming.sidechannel import PathAudio
from ..durations import HEADER_BYTES, AudioHeader, read_header
from ..encoder import READ_CHUNK_BYTES, EncodedAudio, StreamedAudio, base64_size
from ..policy import check_clip_size
from .s3 import ObjectInfo, S3Client

STREAM_CHUNK_BYTES = 1024 * 1024  # a streamed GET's chunks: small, for a flat peak RSS
KNOWN_OBJECTS = 65_536  # HEAD results kept for revalidate = false (~0.5 KB each)


def object_sources(config: Config, metrics: GatewayMetrics) -> ObjectSources:
    """Blocking (the credential chain may ask the instance metadata service): the object
    policy of `audio`, and a store client for every bucket it allows. `serve` and the
    dataset tools build theirs here, so both check objects alike."""
    policy = ObjectPolicy(config.audio.object_root(), config.audio.object_roots())
    return ObjectSources(
        policy,
        S3Client(config.storage.s3, policy.buckets, metrics),
        config.storage.s3,
        max_file_bytes=config.audio.max_file_bytes,
    )


class ObjectSources:
    """Turns object references into checked `ObjectClip`s."""

    def __init__(
        self,
        policy: ObjectPolicy,
        client: S3Client,
        config: S3Config,
        *,
        max_file_bytes: int,
    ) -> None:
        self.policy = policy
        self.client = client
        self.revalidate = config.revalidate
        self.max_file_bytes = max_file_bytes
        self._known: LRUCache[ObjectName, ObjectInfo] = LRUCache(maxsize=KNOWN_OBJECTS)

    async def source(self, ref: PathAudio, *, presigned: bool) -> ObjectClip:
        """The checked clip of `ref`; with `presigned`, one that goes upstream as a URL."""
        name = self.policy.resolve(ref)
        info = None if self.revalidate else self._known.get(name)
        if info is None:
            info = await self.client.head(name, ref)
            if not self.revalidate:  # only then is a HEAD result ever read again
                self._known[name] = info
        mime_for_extension(ref.given, ref.param, ref.label)  # after existence, as for files
        check_clip_size(ref, info.size, self.max_file_bytes)
        return ObjectClip(ref, info, self, presigned=presigned)

    def forget(self, info: ObjectInfo) -> None:
        """The store no longer holds this version: the next request HEADs the object again."""
        if self._known.get(info.name) == info:
            del self._known[info.name]


class ObjectClip:
    """One object as an `AudioSource`. A presigned clip needs only its first bytes (sniffing,
    the duration header): vLLM fetches the rest itself."""

    def __init__(
        self, ref: PathAudio, info: ObjectInfo, sources: ObjectSources, *, presigned: bool
    ) -> None:
        self.ref = ref
        self.info = info
        self.presigned = presigned
        self._sources = sources
        self._client = sources.client

    @property
    def cache_key(self) -> Hashable:
        return (*self.info.cache_key, "url" if self.presigned else "bytes")

    @property
    def identity(self) -> Hashable:
        return (self.info.name, self.presigned)

    @property
    def key_identity(self) -> Hashable:
        return ("object", *self.info.cache_key)  # bucket, key, ETag, size: not the mode

    @property
    def size(self) -> int:
        return self.info.size

    @property
    def encoded_size(self) -> int:
        return 0 if self.presigned else base64_size(self.info.size)

    async def load(self, *, encode: bool, digest: bool, raw: bool = False) -> EncodedAudio:
        try:
            return await self._load(encode=encode, digest=digest, raw=raw)
        except AudioFileChanged:
            self._sources.forget(self.info)
            raise

    async def _load(self, *, encode: bool, digest: bool, raw: bool) -> EncodedAudio:
        if not self.info.size:
            self._checked(b"")  # an empty object: "not audio", and no GET to ask
        if self.presigned:
            encode = False
        if not (encode or digest or raw):
            head = await self._client.read(self.info, self.ref, HEADER_BYTES)
            mime, header = self._checked(head)
            return EncodedAudio(mime, (), None, header)
        hasher = hashlib.sha256() if digest else None
        pieces: list[bytes] = []
        checked: tuple[str, AudioHeader | None] | None = None
        async for chunk in self._aligned_chunks(READ_CHUNK_BYTES):
            checked = checked or self._checked(chunk)
            if hasher is not None:
                hasher.update(chunk)
            if raw:
                pieces.append(bytes(chunk))
            elif encode:
                pieces.append(pybase64.b64encode(chunk))
        mime, header = checked or self._checked(b"")
        return EncodedAudio(mime, tuple(pieces), hasher.hexdigest() if hasher else None, header)

    async def open_stream(self, *, digest: bool, raw: bool = False) -> StreamedAudio:
        chunks = self._aligned_chunks(STREAM_CHUNK_BYTES)
        try:
            sha256 = await self._sha256() if digest else None
            head = await anext(chunks, b"")
            mime, header = self._checked(head)
        except BaseException as exc:
            await chunks.aclose()
            if isinstance(exc, AudioFileChanged):
                self._sources.forget(self.info)
            raise
        return StreamedObject(self.info.size, head, chunks, mime, sha256, header, raw=raw)

    async def read_head(self, nbytes: int) -> bytes:
        if not self.info.size:
            return b""  # no GET to ask
        try:
            return await self._client.read(self.info, self.ref, min(nbytes, self.info.size))
        except AudioFileChanged:
            self._sources.forget(self.info)
            raise

    async def upstream_url(self) -> str | None:
        if not self.presigned:
            return None
        return await self._client.presign(self.info.name, self.ref)

    async def _sha256(self) -> str:
        hasher = hashlib.sha256()
        async for chunk in self._client.stream(self.info, self.ref, chunk_bytes=STREAM_CHUNK_BYTES):
            hasher.update(chunk)
        return hasher.hexdigest()

    def _aligned_chunks(self, chunk_bytes: int) -> AsyncGenerator[bytes | memoryview, None]:
        """The object in chunks of whole multiples of 3 bytes but the last (base64 pieces
        concatenate), the first at least `HEADER_BYTES` when the object is that long."""
        stream = self._client.stream(self.info, self.ref, chunk_bytes=chunk_bytes)
        return align_to_three(stream)

    def _checked(self, head: bytes | memoryview) -> tuple[str, AudioHeader | None]:
        """The sniffed MIME type (400 for no audio) and what the header says (the pipeline
        holds it to vLLM's decode limits, as for files)."""
        ref = self.ref
        mime = checked_mime(
            bytes(head[:SNIFF_BYTES]),
            ref.claimed_mime,
            label=ref.label,
            given=ref.given,
            param=ref.param,
        )
        return mime, read_header(bytes(head[:HEADER_BYTES]), self.info.size)


class StreamedObject(StreamedAudio):
    """An object's base64 produced while the upstream body is written: one GET in flight,
    one chunk in memory."""

    def __init__(
        self,
        size: int,
        head: bytes | memoryview,
        rest: AsyncGenerator[bytes | memoryview, None],
        mime: str,
        sha256: str | None,
        header: AudioHeader | None,
        *,
        raw: bool = False,
    ) -> None:
        self.mime = mime
        self.sha256 = sha256
        self.header = header
        self.nbytes = size if raw else base64_size(size)
        self._first: bytes | memoryview | None = head
        self._rest = rest
        self._piece: Callable[[bytes | memoryview], bytes] = bytes if raw else pybase64.b64encode

    async def chunks(self) -> AsyncIterator[bytes]:
        if self._first is not None:
            first, self._first = self._first, None
            yield self._piece(first)
        async for chunk in self._rest:
            yield self._piece(chunk)

    async def aclose(self) -> None:
        self._first = None
        await self._rest.aclose()


async def align_to_three(
    chunks: AsyncGenerator[memoryview, None],
) -> AsyncGenerator[bytes | memoryview, None]:
    """Re-cut `chunks` so every piece but the last is a multiple of 3 bytes long."""
    aligner = ThreeAligner()
    try:
        async for chunk in chunks:
            for piece in aligner.feed(chunk):
                yield piece
        tail = aligner.finish()
        if tail:
            yield tail
    finally:
        await chunks.aclose()


class ThreeAligner:
    """Pure: cuts chunks at multiples of 3 bytes without copying them. The 0-2 bytes past a
    chunk's last multiple of 3 are completed from the next chunk's first bytes, as a piece
    of exactly 3 bytes; the rest of each chunk is a view of it."""

    def __init__(self) -> None:
        self._carry = b""

    def feed(self, chunk: bytes | memoryview) -> list[bytes | memoryview]:
        view = memoryview(chunk).cast("B")
        pieces: list[bytes | memoryview] = []
        if self._carry:
            needed = 3 - len(self._carry)
            self._carry += bytes(view[:needed])
            view = view[needed:]
            if len(self._carry) < 3:
                return pieces
            pieces.append(self._carry)
        cut = len(view) - len(view) % 3
        self._carry = bytes(view[cut:])
        if cut:
            pieces.append(view[:cut])
        return pieces

    def finish(self) -> bytes:
        tail, self._carry = self._carry, b""
        return tail
