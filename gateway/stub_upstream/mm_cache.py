"""vLLM 0.33's multimodal processor cache, as one API-server process holds it.

vLLM keys each audio item of a chat request (`renderers/chat_utils`, `multimodal/processing`):
by the part's `uuid` when the request carries no `mm_processor_kwargs` / `media_io_kwargs`
(audio-scoped), else by a hash of (model, uuid, those kwargs); an item with no uuid by a hash
of its decoded content. Every item is checked before any is recorded
(`processor.py:1345-1384`, `is_cached` does not touch): the first item that is not held and has
no data is a 400 `Cache miss for audio at index N but data is not provided.`, N counting the
request's audio items, and nothing is recorded. Otherwise the held items are touched and the
others recorded, an item larger than the whole cache never (`cache_if_fits`).

With the default `mm_processor_cache_type = "lru"` the API server's cache (P0) holds only
metadata and the engine (P1) the tensors; P0 sends no data for an item it holds. When P1 has
lost it (the two can drift), the engine fails the request once it reaches it (a 500, or,
streamed, a 200 with the role chunk and an error event) and P0 forgets those items
(`v1/engine/core.py:2006-2140`, `async_llm.py:893-902`). Here P1 is a second LRU of the same
size (or `engine_capacity_bytes`), and tests make it drift with `lose_in_engine`.

The stub holds no tensors: an item's size is its decoded duration as 16 kHz mono float32 (64 KB a
second, about a Whisper-style log-mel tensor's 51 KB), or 4x its encoded bytes when the stub
cannot read the container's length (MP3, MP4).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cachetools import LRUCache

from .media import ClipReport, StubRejection

GIB = 1024**3
DEFAULT_CACHE_GB = 4.0  # vLLM's --mm-processor-cache-gb
ITEM_BYTES_PER_SECOND = 16_000 * 4
# vLLM scopes mm_processor_kwargs by modality: audio keeps its own and the flat keys.
OTHER_MODALITY_KWARGS = frozenset({"images_kwargs", "videos_kwargs"})


class CacheMiss(StubRejection):
    """vLLM's 400 for an item that is neither held nor carries data."""

    def __init__(self, index: int) -> None:
        super().__init__(f"Cache miss for audio at index {index} but data is not provided.")


@dataclass(frozen=True)
class HeldPart:
    """An audio part with a uuid and no data: vLLM uses the item it holds under that key."""

    uuid: str
    source: str = "uuid"


AudioItem = ClipReport | HeldPart


@dataclass
class Admission:
    """What the model sees for each item (a held item: the clip first recorded under its key,
    with this part's source), and the keys the engine had lost (non-empty: the request fails)."""

    clips: list[ClipReport]
    engine_misses: list[str]


def item_size(clip: ClipReport) -> int:
    if clip.duration_seconds is not None:
        return max(1, round(clip.duration_seconds * ITEM_BYTES_PER_SECOND))
    return 4 * clip.bytes


def hash_factors(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request's kwargs that change an audio item's key (`processing/inputs.py:47-74`)."""
    media = body.get("media_io_kwargs")
    audio_media = media.get("audio") if isinstance(media, dict) else None
    processor = body.get("mm_processor_kwargs")
    scoped = (
        {k: v for k, v in processor.items() if k not in OTHER_MODALITY_KWARGS}
        if isinstance(processor, dict)
        else {}
    )
    factors = {"media_io_kwargs": {"audio": audio_media} if audio_media else {}}
    factors["mm_processor_kwargs"] = scoped
    return {key: value for key, value in factors.items() if value}


def item_key(item: AudioItem, model: str, factors: Mapping[str, Any]) -> str:
    """The uuid itself; with kwargs, a hash of (model, uuid, kwargs); without a uuid, a hash of
    the content (never equal to a client's uuid)."""
    uuid = item.uuid
    if uuid is not None and not factors:
        return uuid
    identity = f"content:{item.sha256}" if isinstance(item, ClipReport) and uuid is None else uuid
    text = json.dumps({"model": model, "audio": identity, **factors}, sort_keys=True, default=str)
    return "mmhash:" + hashlib.sha256(text.encode()).hexdigest()


class MmProcessorCache:
    """P0 and its engine replica P1. Touched only from the event loop; every method is
    synchronous, so one request's check-and-record is atomic, as vLLM's single-worker
    multimodal executor makes it."""

    def __init__(self, capacity_bytes: int, engine_capacity_bytes: int | None = None) -> None:
        self.capacity_bytes = capacity_bytes
        engine = capacity_bytes if engine_capacity_bytes is None else engine_capacity_bytes
        self._p0: LRUCache[str, ClipReport] = LRUCache(max(capacity_bytes, 1), item_size)
        self._p1: LRUCache[str, ClipReport] = LRUCache(max(engine, 1), item_size)
        # vLLM's `vllm:mm_cache_queries` / `_hits`: one query per item of an admitted request
        # (uuid-only or with data), a hit when P0 holds its key at that point; a refused
        # request (a cache miss) counts nothing.
        self.queries = self.hits = self.misses = 0
        self.uuid_misses = self.engine_misses = self.clears = 0

    @property
    def enabled(self) -> bool:
        return self.capacity_bytes > 0

    def admit(
        self, items: list[AudioItem], keys: list[str], lose_in_engine: bool = False
    ) -> Admission:
        """vLLM's `_get_cache_missing_items`, `_merge_mm_kwargs`, then the engine's receiver
        cache. Raises `CacheMiss` (nothing recorded) or, with the cache off, the processor's
        failure on a data-less item."""
        if not self.enabled:
            return Admission(_without_cache(items), [])
        held = {key for key in keys if key in self._p0}  # `in` does not touch
        for index, (item, key) in enumerate(zip(items, keys, strict=True)):
            if key not in held and isinstance(item, HeldPart):
                self.uuid_misses += 1
                raise CacheMiss(index)
        # Both caches touch every held item of the request before recording any, so new ones
        # evict others first; the values are kept in case a tiny cache evicts them anyway.
        values = {key: self._p0[key] for key in keys if key in held}  # [] touches
        clips = [self._merge(i, k, values.get(k)) for i, k in zip(items, keys, strict=True)]
        if lose_in_engine:
            self.lose_in_engine(held)
        return Admission(clips, self._engine(keys, clips, held))

    def _engine(self, keys: list[str], clips: list[ClipReport], held: set[str]) -> list[str]:
        """P1's `get_and_update_features`: touch all, then take data (a P0 miss) in place of
        any entry, and find every held item; the keys it lost are dropped from P0 too (AsyncLLM
        invalidates them before the client sees the error)."""
        for key in keys:
            self._p1.get(key)  # touches
        lost = []
        for key, clip in zip(keys, clips, strict=True):
            if key not in held:
                self._p1.pop(key, None)
                _put_if_fits(self._p1, key, clip)
            elif key not in self._p1:
                lost.append(key)
        for key in lost:
            self._p0.pop(key, None)
        self.engine_misses += bool(lost)
        return lost

    def _merge(self, item: AudioItem, key: str, held: ClipReport | None) -> ClipReport:
        """P0's `get_and_update_item`: a hit also when an earlier item of this request
        recorded the key (the same clip twice: 2 queries, 1 hit)."""
        self.queries += 1
        if held is not None:
            self.hits += 1
            if isinstance(item, ClipReport) and item.uuid is None:
                return item  # held by its content: the same clip
            return dataclasses.replace(held, source=item.source, uuid=item.uuid)
        assert isinstance(item, ClipReport)
        if key in self._p0:
            self.hits += 1
        else:
            self.misses += 1
            _put_if_fits(self._p0, key, item)
        return item

    def lose_in_engine(self, keys: Iterable[str] | None = None) -> int:
        """P1 evicts these keys (None: all), as LRU drift would; P0 still holds them."""
        if keys is None:
            count = len(self._p1)
            self._p1.clear()
            return count
        return sum(self._p1.pop(key, None) is not None for key in list(keys))

    def clear(self) -> None:
        """`/pause` (clear_cache), `/sleep` (level >= 1), `/reset_mm_cache`."""
        self._p0.clear()
        self._p1.clear()
        self.clears += 1

    def stats(self) -> dict[str, int]:
        return {
            "capacity_bytes": self.capacity_bytes,
            "items": len(self._p0),
            "bytes": int(self._p0.currsize),
            "engine_items": len(self._p1),
            "queries": self.queries,
            "hits": self.hits,
            "misses": self.misses,
            "uuid_misses": self.uuid_misses,
            "engine_misses": self.engine_misses,
            "clears": self.clears,
        }


def _put_if_fits(cache: LRUCache[str, ClipReport], key: str, clip: ClipReport) -> None:
    if item_size(clip) <= cache.maxsize:
        cache[key] = clip


def _without_cache(items: list[AudioItem]) -> list[ClipReport]:
    """With `mm_processor_cache_gb = 0` vLLM hands a data-less item to the HF processor, which
    fails (the message depends on the model; this is Qwen2-Audio's shape)."""
    clips = []
    for item in items:
        if isinstance(item, HeldPart):
            raise StubRejection(
                "Failed to apply Qwen2AudioProcessor on data={'audio': [None]} "
                "with kwargs={'return_tensors': 'pt'}"
            )
        clips.append(item)
    return clips
