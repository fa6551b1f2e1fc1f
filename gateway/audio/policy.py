"""The path policy: where an audio path may point and what it may be.

Resolving touches the file system and blocks, so the pipeline runs `resolve_all` in a worker
thread, once per request for all its clips (`recent.py` re-checks a path resolved moments ago
with one stat instead); `PathPolicy.checked` applies the rules to what the file system said.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import stat
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from ..config import AudioConfig
from ..errors import AudioOutsideRoots, InvalidRequest, PayloadTooLarge
from ..naming.formats import mime_for_extension
from ..naming.sidechannel import PathAudio
from .os_errors import RESOLVING, clip_os_error
from .roots import check_roots

O_PATH = getattr(os, "O_PATH", 0)  # Linux: a descriptor that names a file without opening it


@dataclass(frozen=True, slots=True)
class ResolvedClip:
    """A path that passed every check, with the file identity the checks saw."""

    ref: PathAudio
    real_path: str
    size: int
    mtime_ns: int
    inode: int
    device: int
    ctime_ns: int  # moves with every write, and cannot be set back
    links: int  # hard links: 1 means the real path is the file's only name

    @property
    def version(self) -> tuple[int, int, int, int, int]:
        """The file and its state: another file, or any write to it, is another version."""
        return (self.device, self.inode, self.size, self.mtime_ns, self.ctime_ns)

    @property
    def cache_key(self) -> tuple[str, int, int, int, int, int]:
        return (self.real_path, *self.version)


def file_version(info: os.stat_result) -> tuple[int, int, int, int, int]:
    """`ResolvedClip.version` of what a stat says."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def check_clip_size(ref: PathAudio, size: int, max_file_bytes: int) -> None:
    """413 `audio_too_large` for a file or object over `audio.max_file_bytes`, before any read."""
    if size > max_file_bytes:
        raise PayloadTooLarge(
            f"{ref.label}: {ref.given!r} is {size} bytes, over the limit of "
            f"{max_file_bytes} bytes (audio.max_file_bytes)",
            param=ref.param,
            code="audio_too_large",
        )


class PathPolicy:
    """Containment in the allowed roots, regular files only, a size limit."""

    def __init__(self, root: str, allowed_real_roots: Iterable[str], max_file_bytes: int):
        self.root = root
        self.allowed_real_roots = tuple(allowed_real_roots)
        self.max_file_bytes = max_file_bytes

    @classmethod
    def from_config(cls, audio: AudioConfig) -> PathPolicy:
        """Blocking: resolves the configured roots to real paths once, at start-up; a
        `ConfigError` for a local root that is not a readable directory (`roots`)."""
        check_roots(audio)
        roots = [os.path.realpath(root) for root in audio.effective_roots()]
        return cls(audio.local_root(), roots, audio.max_file_bytes)

    def resolve_all(self, refs: Iterable[PathAudio]) -> list[ResolvedClip]:
        return [self.resolve(ref) for ref in refs]

    def resolve(self, ref: PathAudio) -> ResolvedClip:
        """The checks in the order of the answer a path gets for the first rule it breaks:
        inside the roots (403), exists and readable (`os_errors`), a regular file (400), its
        extension (400), its size (413). Content is sniffed when the clip is read."""
        return self.checked(ref, *self._real_path_and_stat(self.absolute(ref)))

    def absolute(self, ref: PathAudio) -> str:
        """The path a reference names, relative ones joined to `audio.root`."""
        path = ref.location
        if os.path.isabs(path):
            return path
        if not self.root:
            raise InvalidRequest(
                f"{ref.label}: relative path {path!r} needs audio.root, which is not set",
                param=ref.param,
                code="audio_root_unset",
            )
        return os.path.join(self.root, path)

    def checked(
        self, ref: PathAudio, real_path: str, info: os.stat_result | OSError
    ) -> ResolvedClip:
        """`resolve`'s rules applied to what the file system said of the path (no I/O)."""
        if not self._is_allowed(real_path):
            # Same answer whether or not the file exists: a 403 must not probe the disk.
            raise AudioOutsideRoots(
                f"{ref.label}: {ref.given!r} is outside the allowed audio roots",
                param=ref.param,
                code="audio_path_forbidden",
            )
        if isinstance(info, OSError):
            raise clip_os_error(ref, info, RESOLVING)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidRequest(
                f"{ref.label}: {ref.given!r} is not a regular file",
                param=ref.param,
                code="not_a_regular_file",
            )
        mime_for_extension(ref.given, ref.param, ref.label)  # next rule: the extension (400)
        check_clip_size(ref, info.st_size, self.max_file_bytes)
        return ResolvedClip(
            ref=ref,
            real_path=real_path,
            size=info.st_size,
            mtime_ns=info.st_mtime_ns,
            inode=info.st_ino,
            device=info.st_dev,
            ctime_ns=info.st_ctime_ns,
            links=info.st_nlink,
        )

    def _real_path_and_stat(self, path: str) -> tuple[str, os.stat_result | OSError]:
        """The path with `..` and every symlink resolved, and its stat (or why there is none).

        On Linux the kernel resolves it: an O_PATH descriptor (which opens nothing, so a FIFO
        cannot block), its /proc/self/fd link, one fstat. Elsewhere, or when the file does not
        exist, `os.path.realpath` resolves what it can, so a missing file outside the roots
        still answers 403.
        """
        if O_PATH:
            try:
                fd = os.open(path, O_PATH | os.O_CLOEXEC)
            except OSError as exc:
                return os.path.realpath(path), exc
            try:
                return os.readlink(f"/proc/self/fd/{fd}"), os.fstat(fd)
            except OSError:
                pass  # no /proc: fall back to realpath below
            finally:
                os.close(fd)
        real_path = os.path.realpath(path)
        try:
            return real_path, os.stat(real_path)
        except OSError as exc:
            return real_path, exc

    def _is_allowed(self, real_path: str) -> bool:
        return any(
            real_path == root or real_path.startswith(root.rstrip(os.sep) + os.sep)
            for root in self.allowed_real_roots
        )


class RecentChecks(Protocol):
    """Paths the full check passed moments ago (`recent.RecentPaths`)."""

    def recheck(self, refs: list[PathAudio]) -> list[ResolvedClip] | None:
        """Every ref re-checked without the full check, or None: then it must run."""

    def remember(self, clips: Iterable[ResolvedClip], checked_at: float) -> None: ...


Outcome = list[ResolvedClip] | Exception
Batch = list[tuple[list[PathAudio], "asyncio.Future[list[ResolvedClip]]"]]


class BatchedResolver:
    """Runs `PathPolicy.resolve_all` on worker threads, one thread hop per batch of requests.

    Every request that asks during one event-loop iteration joins the same batch, so under load
    the hand-off to a thread (a queue put, a wake-up, one `call_soon_threadsafe` back) is paid
    once per batch rather than once per request; `queue.SimpleQueue` keeps that hand-off far
    cheaper than an executor's futures. File-system calls never run on the event loop, but for
    the one `stat` with which `recent` (`recent.RecentPaths`, on local file systems only)
    re-checks a path the full check passed moments ago.
    """

    def __init__(self, policy: PathPolicy, threads: int, recent: RecentChecks | None = None):
        self.policy = policy
        self.recent = recent
        self._pending: Batch = []
        self._queue: queue.SimpleQueue[tuple[asyncio.AbstractEventLoop, Batch] | None] = (
            queue.SimpleQueue()
        )
        self._threads = [
            threading.Thread(target=self._work, name=f"audio-resolver-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    async def resolve(self, refs: list[PathAudio]) -> list[ResolvedClip]:
        recent = self.recent
        if recent is None:
            return await self._resolve(refs)
        clips = recent.recheck(refs)
        if clips is None:
            started = time.monotonic()
            clips = await self._resolve(refs)
            recent.remember(clips, started)
        return clips

    def _resolve(self, refs: list[PathAudio]) -> asyncio.Future[list[ResolvedClip]]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[ResolvedClip]] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._dispatch, loop)
        self._pending.append((refs, future))
        return future

    def close(self) -> None:
        for _ in self._threads:
            self._queue.put(None)

    def _dispatch(self, loop: asyncio.AbstractEventLoop) -> None:
        batch, self._pending = self._pending, []
        self._queue.put((loop, batch))

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            loop, batch = item
            outcomes: list[tuple[asyncio.Future[list[ResolvedClip]], Outcome]] = []
            for refs, future in batch:
                try:
                    outcomes.append((future, self.policy.resolve_all(refs)))
                except Exception as exc:  # delivered to its own request only
                    outcomes.append((future, exc))
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(_deliver, outcomes)


def _deliver(outcomes: list[tuple[asyncio.Future[list[ResolvedClip]], Outcome]]) -> None:
    for future, outcome in outcomes:
        if future.done():  # the request was cancelled meanwhile
            continue
        if isinstance(outcome, Exception):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
