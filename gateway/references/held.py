"""What the upstream holds: the clips its multimodal processor cache was sent, by uuid.

vLLM 0.33 keeps a processed clip in its API server's processor cache under the part's `uuid`
(folded with the request's `mm_processor_kwargs` and `media_io_kwargs` when there are any), and
answers a part that carries the uuid alone from there. `UpstreamClips` is the gateway's record
of those keys: a bounded LRU, filled when a request that carried a clip's data succeeded,
emptied of a request's clips when the upstream missed them and wholly when the upstream's caches
were cleared (`/pause`, `/sleep`, `/reset_mm_cache`). A record larger than what vLLM holds only
costs misses, which the reference relay answers by sending the data again.

Requests for a clip whose data is on its way upstream (a seed in flight) wait for it, up to
`wait_seconds` after the seed was sent, then go by reference: vLLM holds the clip once it has
preprocessed the seed, long before a non-streamed seed's answer is complete. A streamed seed
says so itself (vLLM starts the stream after preprocessing): its 2xx head releases them at
once. Only the event loop touches the record, so it needs no lock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
from cachetools import LRUCache

from ..metrics import GatewayMetrics

ClipKey = tuple[str, bytes]  # the part's uuid, and the request's kwargs (canonical JSON)
KWARGS_FIELDS = ("mm_processor_kwargs", "media_io_kwargs")  # what vLLM folds into the key
NO_KWARGS = b""
# A reference to a clip recorded this recently that misses says the layout forgets clips
# (references/models.py), not that a large working set evicted it.
RECENT_SECONDS = 60.0


def kwargs_key(body: Mapping[str, Any]) -> bytes:
    """The request's share of a clip's key: its `mm_processor_kwargs` and `media_io_kwargs`,
    as canonical JSON (keys sorted); empty when neither is set (vLLM then keys by uuid alone)."""
    kwargs = [body.get(name) or None for name in KWARGS_FIELDS]
    if kwargs == [None, None]:
        return NO_KWARGS
    return msgspec.json.encode(kwargs, order="sorted")


@dataclass(eq=False)
class _Seed:
    """The data-carrying requests in flight for one clip. `released` is set when followers
    need wait no longer: recorded, rendered, failed, or `wait_seconds` after it was sent (one
    timer per seed, not one per waiting request)."""

    count: int = 1
    released: asyncio.Event = field(default_factory=asyncio.Event)
    deadline: asyncio.TimerHandle | None = None

    def release(self) -> None:
        self.released.set()
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None


class Sending:
    """The clips one request carries with their data: end it with `succeeded()` or `ended()`."""

    def __init__(self, record: UpstreamClips, keys: list[ClipKey]) -> None:
        self._record = record
        self._keys = keys
        self._epoch = record.epoch
        self._open = True
        self._then: Callable[[], None] | None = None

    def then(self, callback: Callable[[], None]) -> None:
        """Call `callback` once if the request succeeds (its clips are recorded as held)."""
        self._then = callback

    def add(self, other: Sending) -> None:
        """Take `other`'s clips into this request's."""
        self._keys.extend(other._keys)
        other._open = False

    def rendered(self) -> None:
        """The upstream answered with a 2xx stream: vLLM starts a stream only once it has
        preprocessed the request, so it holds the clips now. Their followers stop waiting and
        go by reference; the clips are recorded when the answer succeeds."""
        if self._open:
            self._record.release(self._keys)

    def succeeded(self) -> None:
        """The upstream took the request (a complete 2xx, or a streamed answer's first
        content): it holds the clips, unless its caches were cleared since they were sent."""
        if self._open:
            self._open = False
            self._record.settle(self._keys, held=self._epoch == self._record.epoch)
            if self._then is not None:
                self._then()

    def ended(self) -> None:
        """The request is over; if it never succeeded, its clips are not recorded."""
        if self._open:
            self._open = False
            self._record.settle(self._keys, held=False)


class UpstreamClips:
    def __init__(
        self,
        max_clips: int,
        wait_seconds: float,
        metrics: GatewayMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.wait_seconds = wait_seconds
        self.epoch = 0  # bumped when the upstream's caches are cleared
        self._clock = clock
        # when each clip was last recorded (its data accepted), by the clock
        self._held: LRUCache[ClipKey, float] = LRUCache(maxsize=max_clips)
        self._seeds: dict[ClipKey, _Seed] = {}
        metrics.reference_clips.set_function(lambda: len(self._held))

    def __len__(self) -> int:
        return len(self._held)

    def holds(self, key: ClipKey) -> bool:
        """Whether `key` is recorded (and, if so, now the most recently used)."""
        return self._held.get(key) is not None

    def recently_held(self, keys: Iterable[ClipKey]) -> bool:
        """Whether every one of `keys` was recorded within RECENT_SECONDS: a reference to it
        should not miss in a layout that keeps clips."""
        since = self._clock() - RECENT_SECONDS
        return all((at := self._held.get(key)) is not None and at >= since for key in keys)

    async def plan(self, keys: Iterable[ClipKey]) -> tuple[frozenset[ClipKey], Sending]:
        """Which of a request's clips go by reference, and the `Sending` of the others.

        A recorded clip goes by reference. A clip with a seed in flight waits for it until
        `wait_seconds` after the seed was sent: by reference if it got recorded or the wait ran
        out with the seed still in flight, with its data if the seed failed. Any other clip
        goes with its data, and this request becomes its seed."""
        references: set[ClipKey] = set()
        waiting: list[tuple[ClipKey, _Seed]] = []
        data: list[ClipKey] = []
        for key in dict.fromkeys(keys):
            if self.holds(key):
                references.add(key)
            elif self.wait_seconds and (seed := self._seeds.get(key)) is not None:
                waiting.append((key, seed))
            else:
                data.append(key)
        sending = self.sending(data)  # now: others wait for these while this one waits
        for key, seed in waiting:
            try:
                await self._wait(seed)
            except BaseException:
                sending.ended()
                raise
            if self.holds(key) or self._seeds.get(key) is seed:
                references.add(key)
            else:  # the seed failed: this request carries the data itself
                sending.add(self.sending([key]))
        return frozenset(references), sending

    def sending(self, keys: list[ClipKey]) -> Sending:
        """Mark `keys` as on their way upstream with their data, from now."""
        for key in keys:
            seed = self._seeds.get(key)
            if seed is None:
                self._seeds[key] = seed = _Seed()
                if self.wait_seconds:
                    loop = asyncio.get_running_loop()
                    seed.deadline = loop.call_later(self.wait_seconds, seed.released.set)
            else:
                seed.count += 1
        return Sending(self, keys)

    def settle(self, keys: list[ClipKey], *, held: bool) -> None:
        now = self._clock()
        for key in keys:
            if held:
                self._held[key] = now
            seed = self._seeds.get(key)
            if seed is None:
                continue
            seed.count -= 1
            if held or seed.count == 0:
                del self._seeds[key]
                seed.release()

    def release(self, keys: Iterable[ClipKey]) -> None:
        for key in keys:
            if (seed := self._seeds.get(key)) is not None:
                seed.release()

    def forget(self, keys: Iterable[ClipKey]) -> None:
        """The upstream missed these clips: send their data next time."""
        for key in keys:
            self._held.pop(key, None)

    def forget_all(self) -> None:
        """The upstream's caches were cleared; seeds in flight before it record nothing."""
        self._held.clear()
        self.epoch += 1

    async def _wait(self, seed: _Seed) -> None:
        if not seed.released.is_set():
            await seed.released.wait()
