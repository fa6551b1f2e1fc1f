"""The encoded-audio store: a byte-bounded LRU with single-flight loading.

Keys are each source's content identity ((real path, device, inode, size, mtime_ns, ctime_ns)
for a file: any write to it, or another file under its name, is a new key; bucket,
key, ETag and size for an object) and whether the entry is `raw`: raw entries hold the clip's
own bytes (the speech-to-text uploads) rather than its base64, in the same byte budget. A
rewritten file is a new key, an unchanged one is never read again while its entry lives.
Concurrent requests for one uncached clip share one read and encode. Only the event loop
touches the cache, so it needs no lock. Other derived entries (the pieces of a long clip,
`gateway.chunking`) share the same byte budget through `cached` / `keep`, under keys of their
own shape.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, Protocol, TypeVar

from cachetools import LRUCache

from ..config import CacheConfig
from ..errors import GatewayError
from ..metrics import GatewayMetrics
from ..naming.sidechannel import PathAudio
from .encoder import EncodedAudio, StreamedAudio
from .sources import AudioSource

CacheKey = tuple[Hashable, bool]  # the source's content key, and `raw`
_K = TypeVar("_K", bound=Hashable)
_T = TypeVar("_T")


class Weighed(Protocol):
    """A cache entry: weighed by its `nbytes` against the byte budget."""

    @property
    def nbytes(self) -> int: ...


class AudioStore:
    """`get(clip)` is the one interface the pipeline uses for a clip's bytes.

    `encode` is False in file:// mode, where only the MIME type (and with `digest` the sha256)
    is needed; `digest` asks for the sha256 of every clip (the opt-in part uuid).
    """

    def __init__(
        self,
        config: CacheConfig,
        metrics: GatewayMetrics,
        *,
        encode: bool,
        digest: bool,
        digest_urls: bool = True,
        digest_read: bool = False,
    ):
        """`digest_urls = False` hashes no clip that goes upstream as a URL without its bytes
        (presigned objects: their identity names them instead). `digest_read` hashes every
        clip whose bytes are read whole anyway (the clip key, `gateway.affinity`): never one
        streamed or sent as a URL, which would take another read."""
        self.max_item_bytes = config.max_item_bytes
        self.enabled = config.max_bytes > 0
        self._encode = encode
        self._digest = digest
        self._digest_urls = digest_urls
        self._digest_read = digest_read
        self._metrics = metrics
        self._lru: LRUCache[Hashable, Weighed] = LRUCache(
            maxsize=max(config.max_bytes, 1), getsizeof=lambda entry: entry.nbytes
        )
        self._content_by_identity: dict[Hashable, Hashable] = {}  # a source's latest version
        self._inflight: SharedLoads[CacheKey, EncodedAudio] = SharedLoads()
        metrics.cache_bytes.set_function(lambda: self.bytes)
        metrics.cache_entries.set_function(lambda: self.entries)

    @property
    def bytes(self) -> int:
        return int(self._lru.currsize)

    @property
    def entries(self) -> int:
        return len(self._lru)

    async def get(self, clip: AudioSource, *, raw: bool = False) -> EncodedAudio | StreamedAudio:
        """The clip's base64 (with `raw`, its bytes), cached, or streamed when too big."""
        if raw and clip.size > self.max_item_bytes:
            self._metrics.cache_misses.inc()
            return await clip.open_stream(digest=False, raw=True)
        if self._encode and not raw and clip.encoded_size > self.max_item_bytes:
            self._metrics.cache_misses.inc()
            self._metrics.encoded_bytes.inc(clip.size)
            return await clip.open_stream(digest=self._digest)
        if not self.enabled:
            self._metrics.cache_misses.inc()
            return await self._load(clip, raw)
        key = (clip.cache_key, raw)
        entry = self._lru.get(key)
        if entry is not None:
            self._metrics.cache_hits.inc()
            return entry  # type: ignore[return-value]  # (content, raw) keys hold EncodedAudio
        if key in self._inflight:
            self._metrics.cache_hits.inc()
        else:
            self._metrics.cache_misses.inc()
        return await self._inflight.get(key, clip.ref, lambda: self._load_and_store(key, clip))

    def cached(self, key: Hashable) -> Weighed | None:
        """A derived entry kept with `keep` (its key must not be a `CacheKey`), or None."""
        return self._lru.get(key) if self.enabled else None

    def keep(self, key: Hashable, entry: Weighed) -> bool:
        """Keep a derived entry in the shared byte budget; whether it was kept (not when over
        `max_item_bytes` or the whole budget, or with caching off)."""
        if not self.enabled or entry.nbytes > self.max_item_bytes:
            return False
        with contextlib.suppress(ValueError):  # larger than the whole budget
            self._lru[key] = entry
            return True
        return False

    async def _load(self, clip: AudioSource, raw: bool) -> EncodedAudio:
        if raw:
            return await clip.load(encode=False, digest=self._digest_read, raw=True)
        has_bytes = clip.encoded_size > 0
        digest = self._digest and (self._digest_urls or has_bytes)
        digest = digest or (self._digest_read and self._encode and has_bytes)  # read anyway
        entry = await clip.load(encode=self._encode, digest=digest)
        if self._encode and clip.encoded_size:
            self._metrics.encoded_bytes.inc(clip.size)
        return entry

    async def _load_and_store(self, key: CacheKey, clip: AudioSource) -> EncodedAudio:
        entry = await self._load(clip, key[1])
        content = clip.cache_key
        stale = self._content_by_identity.get(clip.identity)
        if stale is not None and stale != content:
            # The file or object was rewritten: both kinds of its old entry are dead.
            self._lru.pop((stale, False), None)
            self._lru.pop((stale, True), None)
        try:
            self._lru[key] = entry
            self._content_by_identity[clip.identity] = content
        except ValueError:
            pass  # larger than the whole budget: served, not cached
        self._prune_identity_index()
        return entry

    def _prune_identity_index(self) -> None:
        if len(self._content_by_identity) > 2 * len(self._lru) + 64:
            self._content_by_identity = {
                identity: content
                for identity, content in self._content_by_identity.items()
                if (content, False) in self._lru or (content, True) in self._lru
            }


class SharedLoads(Generic[_K, _T]):
    """Loads in flight by key (single-flight): a request for a key being loaded waits for that
    load instead of starting another. Only the event loop touches it, so it needs no lock."""

    def __init__(self) -> None:
        self._loads: dict[_K, tuple[asyncio.Task[_T], PathAudio]] = {}

    def __contains__(self, key: _K) -> bool:
        return key in self._loads

    async def get(self, key: _K, ref: PathAudio, load: Callable[[], Awaitable[_T]]) -> _T:
        """The result of the load of `key` in flight, or of `load()` started now for `ref`. A
        cancelled requester does not cancel it for the others; its error is worded for each
        requester (its own key and path)."""
        shared = self._loads.get(key)
        if shared is None:
            shared = self._loads[key] = asyncio.ensure_future(load()), ref
            shared[0].add_done_callback(lambda done: self._forget(key, done))
        try:
            return await asyncio.shield(shared[0])
        except GatewayError as error:
            if shared[1] is ref:
                raise
            raise as_seen_by(error, shared[1], ref) from None

    def _forget(self, key: _K, task: asyncio.Task[_T]) -> None:
        self._loads.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved here, so a load nobody awaits any more is not logged


def as_seen_by(error: GatewayError, loader: PathAudio, requester: PathAudio) -> GatewayError:
    """A shared load's error, worded for another request for the same clip: its own key and
    path as it gave them (the two may name the clip differently)."""
    message = error.message.replace(loader.label, requester.label, 1)
    message = message.replace(repr(loader.given), repr(requester.given), 1)
    return type(error)(message, param=requester.param, code=error.code)
