"""`check`'s object references: the server's own `ObjectSources`, on an event loop of their own.

`check` runs its file checks on worker threads, while object requests are async (obstore). A
worker hands its row's objects to one event loop on a background thread and waits for them, as
it waits on a file's `pread`: `--jobs` still bounds the rows in flight, the loop multiplexes
their requests (within `storage.s3.max_concurrency`), and memory stays flat. Per object it does
what `serve` does before sending one: the name checks (400 / 403), a HEAD for its identity and
the size limit (404 / 413 / 502 / 504), then a ranged GET of its first `HEADER_BYTES` for
sniffing and the duration header (`ObjectClip.load` without encoding, as in presigned mode).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Hashable, Sequence
from typing import Any, TypeVar

from cachetools import LRUCache

from ..audio.cache import SharedLoads
from ..audio.durations import HEADER_BYTES, AudioHeader
from ..audio.sources.objects import ObjectClip, object_sources
from ..config import Config
from ..metrics import GatewayMetrics
from ..naming.sidechannel import PathAudio
from ..normalize.form import WavFormat, wav_format

_T = TypeVar("_T")
ObjectHead = tuple[str, AudioHeader | None, WavFormat | None]  # MIME type, header, WAV format
HEAD_MEMO_ENTRIES = 65_536  # object versions whose first bytes were read (seeds repeat a clip)


class ObjectChecks:
    """Object references checked as `serve` checks them; blocking calls, for worker threads.
    The loop's thread starts at the first object, so a dataset without any costs nothing."""

    def __init__(self, config: Config) -> None:
        self.sources = object_sources(config, GatewayMetrics())
        self._normalize = config.normalize.enabled
        self._heads: LRUCache[Hashable, ObjectHead] = LRUCache(maxsize=HEAD_MEMO_ENTRIES)
        # The reads in flight, by the same key: rows naming one object at once share its GET.
        self._reading: SharedLoads[Hashable, ObjectHead] = SharedLoads()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()

    def claims(self, ref: PathAudio) -> bool:
        """Whether `ref` names an object (the server's test: `ObjectPolicy.claims`)."""
        return self.sources.policy.claims(ref)

    def clips(self, refs: Sequence[PathAudio]) -> list[ObjectClip | BaseException]:
        """Each reference's checked clip (name, HEAD, size limit) or the error it got; the
        references are checked concurrently, as the server's pipeline does."""
        return self._run(self._clips(refs))

    def heads(self, clips: Sequence[ObjectClip]) -> list[ObjectHead | BaseException]:
        """Each clip's sniffed MIME type, its header (400 `not_audio` as the server says) and,
        with `[normalize]` on, its WAV format, or the error it got; the clips are read
        concurrently, as the server's pipeline does. An object version already read is not
        read again, and one being read is not read twice."""
        return self._run(self._heads_of(clips))

    def close(self) -> None:
        """Stop the loop; object checks still in flight (a run cut short) are cancelled, so
        no worker waits on them forever."""
        if self._loop is None or self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(_cancel_others(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self._loop = self._thread = None

    async def _clips(self, refs: Sequence[PathAudio]) -> list[ObjectClip | BaseException]:
        checks = (self.sources.source(ref, presigned=False) for ref in refs)
        return await asyncio.gather(*checks, return_exceptions=True)

    async def _heads_of(self, clips: Sequence[ObjectClip]) -> list[ObjectHead | BaseException]:
        return await asyncio.gather(*map(self._head, clips), return_exceptions=True)

    async def _head(self, clip: ObjectClip) -> ObjectHead:
        """On the loop's thread only, so the memo needs no lock. The claimed MIME type is part
        of the key: the same bytes may pass under one extension and fail under another. Rows
        checked at once that name one object version share one read (as the server's cache
        does), and a failed read's error is worded for each of them."""
        key = (clip.cache_key, clip.ref.claimed_mime)
        known = self._heads.get(key)
        if known is not None:
            return known
        return await self._reading.get(key, clip.ref, lambda: self._read_head(key, clip))

    async def _read_head(self, key: Hashable, clip: ObjectClip) -> ObjectHead:
        audio = await clip.load(encode=False, digest=False)
        form = None
        if self._normalize:  # what the server reads first to decide (its fmt chunk)
            form = wav_format(await clip.read_head(HEADER_BYTES))
        self._heads[key] = known = (audio.mime, audio.header, form)
        return known

    def _run(self, work: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(work, self._running_loop()).result()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._starting:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name="check-objects", daemon=True
                )
                self._thread.start()
            return self._loop


async def _cancel_others() -> None:
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
