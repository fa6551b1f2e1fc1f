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
from collections.abc import Hashable
from typing import Protocol

from cachetools import LRUCache

from ..config import CacheConfig
from ..errors import GatewayError
from ..metrics import GatewayMetrics
from ..naming.sidechannel import PathAudio
from .encoder import EncodedAudio, StreamedAudio
from .sources import AudioSource

CacheKey = tuple[Hashable, bool]  # the source's content key, and `raw`


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
        self._inflight: dict[CacheKey, tuple[asyncio.Task[EncodedAudio], PathAudio]] = {}
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
        load = self._inflight.get(key)
        if load is not None:
            self._metrics.cache_hits.inc()
        else:
            self._metrics.cache_misses.inc()
            load = asyncio.create_task(self._load_and_store(key, clip)), clip.ref
            self._inflight[key] = load
            load[0].add_done_callback(lambda done: self._forget(key, done))
        try:
            # shield: a cancelled requester must not cancel the load the others wait on.
            return await asyncio.shield(load[0])
        except GatewayError as error:
            if load[1] is clip.ref:
                raise
            raise as_seen_by(error, load[1], clip.ref) from None

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

    def _forget(self, key: CacheKey, task: asyncio.Task[EncodedAudio]) -> None:
        self._inflight.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved here, so a load nobody awaits any more is not logged

    def _prune_identity_index(self) -> None:
        if len(self._content_by_identity) > 2 * len(self._lru) + 64:
            self._content_by_identity = {
                identity: content
                for identity, content in self._content_by_identity.items()
                if (content, False) in self._lru or (content, True) in self._lru
            }


def as_seen_by(error: GatewayError, loader: PathAudio, requester: PathAudio) -> GatewayError:
    """A shared load's error, worded for another request for the same clip: its own key and
    path as it gave them (the two may name the clip differently)."""
    message = error.message.replace(loader.label, requester.label, 1)
    message = message.replace(repr(loader.given), repr(requester.given), 1)
    return type(error)(message, param=requester.param, code=error.code)
