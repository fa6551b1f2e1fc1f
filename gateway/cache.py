"""The encoded-audio store: a byte-bounded LRU with single-flight loading.

Keys are each source's content identity ((real path, st_mtime_ns, st_size) for a file; bucket,
key, ETag and size for an object): a rewritten file is a new key, an unchanged one is never
read again while its entry lives. Concurrent requests for one uncached clip share one
read and encode. Only the event loop touches the cache, so it needs no lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

from cachetools import LRUCache

from .config import CacheConfig
from .encoder import EncodedAudio, StreamedAudio
from .metrics import GatewayMetrics
from .sources import AudioSource

CacheKey = Hashable


class AudioStore:
    """`get(clip)` is the one interface the pipeline uses for a clip's bytes.

    `encode` is False in file:// mode, where only the MIME type (and with `digest` the sha256)
    is needed; `digest` asks for the sha256 of every clip (the opt-in part uuid).
    """

    def __init__(self, config: CacheConfig, metrics: GatewayMetrics, *, encode: bool, digest: bool):
        self.max_item_bytes = config.max_item_bytes
        self.enabled = config.max_bytes > 0
        self._encode = encode
        self._digest = digest
        self._metrics = metrics
        self._lru: LRUCache[CacheKey, EncodedAudio] = LRUCache(
            maxsize=max(config.max_bytes, 1), getsizeof=lambda entry: entry.nbytes
        )
        self._key_by_path: dict[Hashable, CacheKey] = {}  # by source identity
        self._inflight: dict[CacheKey, asyncio.Task[EncodedAudio]] = {}
        metrics.cache_bytes.set_function(lambda: self.bytes)
        metrics.cache_entries.set_function(lambda: self.entries)

    @property
    def bytes(self) -> int:
        return int(self._lru.currsize)

    @property
    def entries(self) -> int:
        return len(self._lru)

    async def get(self, clip: AudioSource) -> EncodedAudio | StreamedAudio:
        if self._encode and clip.encoded_size > self.max_item_bytes:
            self._metrics.cache_misses.inc()
            self._metrics.encoded_bytes.inc(clip.size)
            return await clip.open_stream(digest=self._digest)
        if not self.enabled:
            self._metrics.cache_misses.inc()
            return await self._load(clip)
        key = clip.cache_key
        entry = self._lru.get(key)
        if entry is not None:
            self._metrics.cache_hits.inc()
            return entry
        task = self._inflight.get(key)
        if task is not None:
            self._metrics.cache_hits.inc()
        else:
            self._metrics.cache_misses.inc()
            task = asyncio.create_task(self._load_and_store(key, clip))
            self._inflight[key] = task
            task.add_done_callback(lambda done: self._forget(key, done))
        # shield: a cancelled requester must not cancel the load the others wait on.
        return await asyncio.shield(task)

    async def _load(self, clip: AudioSource) -> EncodedAudio:
        entry = await clip.load(encode=self._encode, digest=self._digest)
        if self._encode and clip.encoded_size:
            self._metrics.encoded_bytes.inc(clip.size)
        return entry

    async def _load_and_store(self, key: CacheKey, clip: AudioSource) -> EncodedAudio:
        entry = await self._load(clip)
        stale_key = self._key_by_path.get(clip.identity)
        if stale_key is not None and stale_key != key:
            self._lru.pop(stale_key, None)  # the file was rewritten: its old encoding is dead
        try:
            self._lru[key] = entry
            self._key_by_path[clip.identity] = key
        except ValueError:
            pass  # larger than the whole budget: served, not cached
        self._prune_path_index()
        return entry

    def _forget(self, key: CacheKey, task: asyncio.Task[EncodedAudio]) -> None:
        self._inflight.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved here, so a load nobody awaits any more is not logged

    def _prune_path_index(self) -> None:
        if len(self._key_by_path) > 2 * len(self._lru) + 64:
            self._key_by_path = {
                path: key for path, key in self._key_by_path.items() if key in self._lru
            }
