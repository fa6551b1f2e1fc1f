"""The encoded-audio store: a byte-bounded LRU with single-flight loading.

Keys are (real path, st_mtime_ns, st_size, raw): a rewritten file is a new key, an unchanged
one is never read again while its entry lives. `raw` entries hold the file's own bytes (the
speech-to-text uploads) rather than its base64; both kinds share one byte budget. Concurrent
requests for one uncached clip share one read and encode. Only the event loop touches the
cache, so it needs no lock.
"""

from __future__ import annotations

import asyncio

from cachetools import LRUCache

from .audio import ResolvedClip
from .config import CacheConfig
from .encoder import EncodedAudio, StreamedAudio, base64_size, encode_clip, open_streamed_clip
from .errors import GatewayError
from .metrics import GatewayMetrics
from .sidechannel import PathAudio

FileIdentity = tuple[str, int, int]  # (real path, st_mtime_ns, st_size)
CacheKey = tuple[str, int, int, bool]  # the identity and `raw`


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
        self._identity_by_path: dict[str, FileIdentity] = {}
        self._inflight: dict[CacheKey, tuple[asyncio.Task[EncodedAudio], PathAudio]] = {}
        metrics.cache_bytes.set_function(lambda: self.bytes)
        metrics.cache_entries.set_function(lambda: self.entries)

    @property
    def bytes(self) -> int:
        return int(self._lru.currsize)

    @property
    def entries(self) -> int:
        return len(self._lru)

    async def get(self, clip: ResolvedClip, *, raw: bool = False) -> EncodedAudio | StreamedAudio:
        """The clip's base64 (with `raw`, its bytes), cached, or streamed when too big."""
        if raw and clip.size > self.max_item_bytes:
            self._metrics.cache_misses.inc()
            return await open_streamed_clip(clip, digest=False, raw=True)
        if self._encode and not raw and base64_size(clip.size) > self.max_item_bytes:
            self._metrics.cache_misses.inc()
            self._metrics.encoded_bytes.inc(clip.size)
            return await open_streamed_clip(clip, digest=self._digest)
        if not self.enabled:
            self._metrics.cache_misses.inc()
            return await self._load(clip, raw)
        key = (*clip.cache_key, raw)
        entry = self._lru.get(key)
        if entry is not None:
            self._metrics.cache_hits.inc()
            return entry
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
            raise _as_seen_by(error, load[1], clip.ref) from None

    async def _load(self, clip: ResolvedClip, raw: bool) -> EncodedAudio:
        if raw:
            return await encode_clip(clip, encode=False, digest=False, raw=True)
        entry = await encode_clip(clip, encode=self._encode, digest=self._digest)
        if self._encode:
            self._metrics.encoded_bytes.inc(clip.size)
        return entry

    async def _load_and_store(self, key: CacheKey, clip: ResolvedClip) -> EncodedAudio:
        entry = await self._load(clip, key[3])
        identity = clip.cache_key
        stale = self._identity_by_path.get(identity[0])
        if stale is not None and stale != identity:
            # The file was rewritten: both kinds of its old entry are dead.
            self._lru.pop((*stale, False), None)
            self._lru.pop((*stale, True), None)
        try:
            self._lru[key] = entry
            self._identity_by_path[identity[0]] = identity
        except ValueError:
            pass  # larger than the whole budget: served, not cached
        self._prune_path_index()
        return entry

    def _forget(self, key: CacheKey, task: asyncio.Task[EncodedAudio]) -> None:
        self._inflight.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved here, so a load nobody awaits any more is not logged

    def _prune_path_index(self) -> None:
        if len(self._identity_by_path) > 2 * len(self._lru) + 64:
            self._identity_by_path = {
                path: identity
                for path, identity in self._identity_by_path.items()
                if (*identity, False) in self._lru or (*identity, True) in self._lru
            }


def _as_seen_by(error: GatewayError, loader: PathAudio, requester: PathAudio) -> GatewayError:
    """A shared load's error, worded for another request for the same file: its own key and
    path as it gave them (the two may name the file differently)."""
    message = error.message.replace(loader.label, requester.label, 1)
    message = message.replace(repr(loader.given), repr(requester.given), 1)
    return type(error)(message, param=requester.param, code=error.code)
