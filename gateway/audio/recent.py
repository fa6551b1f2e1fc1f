"""Paths checked moments ago: re-checked on the event loop with one `stat`, not a thread hop.

Sixteen seeds of one prompt name the same clip within milliseconds. The first request's path
goes through `PathPolicy.resolve` on a worker thread (O_PATH open, the kernel's real path,
fstat); for `RECHECK_WINDOW_SECONDS` after that, a request naming the same path is checked
with a single `os.stat` of it on the event loop instead, and reuses the real path only when
the stat shows the very file and version the full check saw:

- the same device and inode: the path still leads to that file. A file replaced (written
  elsewhere and renamed over, deleted and made again, a symlink on the way swapped to another
  file, inside the roots or out) is another inode, and goes to the full check, which answers
  for it (a 403 outside the roots, the new file's bytes inside);
- the same size, mtime_ns and ctime_ns: that file was not written to since. ctime cannot be set
  by a user and moves with every write, truncation, rename and chmod. The audio cache's key
  is the real path and these five (`ResolvedClip.cache_key`): a re-checked clip is never served
  from an entry a full check would not have chosen;
- one hard link (`st_nlink == 1`): no other name of the file exists, so the path still
  resolves to the real path the full check saw (the roots are checked on that real path);
- a regular file; the extension and size rules run again on every request.

Anything else (a miss, a stat error, another version) goes to the worker thread as before, so
every error keeps its answer. The loop-side stat is taken only where it cannot hang: when every
audio root sits on a local file system (`/proc/self/mountinfo`); on NFS, SMB, FUSE and the
like, `RecentPaths.for_policy` returns None and every check stays on the worker threads.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from ..naming.sidechannel import PathAudio
from .policy import PathPolicy, ResolvedClip, file_version

RECHECK_WINDOW_SECONDS = 1.0
MAX_RECENT_PATHS = 4096
# File systems whose stat is served by this kernel from its own caches or local disks.
LOCAL_FILE_SYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "tmpfs", "ramfs", "overlay"}
)
MOUNTINFO = "/proc/self/mountinfo"
OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")  # mountinfo writes a space in a path as \040

Version = tuple[int, int, int, int, int]  # device, inode, size, mtime_ns, ctime_ns (policy)


@dataclass(frozen=True, slots=True)
class _Checked:
    real_path: str
    version: Version
    until: float  # time.monotonic() when the window closes


class RecentPaths:
    """Only the event loop touches it, so it needs no lock."""

    def __init__(self, policy: PathPolicy, window_seconds: float = RECHECK_WINDOW_SECONDS):
        self.policy = policy
        self.window_seconds = window_seconds
        self._checked: OrderedDict[str, _Checked] = OrderedDict()

    @classmethod
    def for_policy(cls, policy: PathPolicy, mountinfo: str = MOUNTINFO) -> RecentPaths | None:
        """Blocking (reads the mount table, at start-up): None unless every root is local."""
        try:
            mounts = _mount_types(mountinfo)
        except OSError:
            return None
        roots = policy.allowed_real_roots
        if roots and all(_type_of(root, mounts) in LOCAL_FILE_SYSTEMS for root in roots):
            return cls(policy)
        return None

    def recheck(self, refs: list[PathAudio]) -> list[ResolvedClip] | None:
        """Every ref re-checked from the window, or None: then the full check must run."""
        now = time.monotonic()
        clips: list[ResolvedClip] = []
        for ref in refs:
            clip = self._recheck(ref, now)
            if clip is None:
                return None
            clips.append(clip)
        return clips

    def remember(self, clips: Iterable[ResolvedClip], checked_at: float) -> None:
        """Clips the full check passed, from a check started at `checked_at` (monotonic)."""
        until = checked_at + self.window_seconds
        for clip in clips:
            if clip.links != 1:
                continue
            path = self.policy.absolute(clip.ref)
            self._checked[path] = _Checked(clip.real_path, clip.version, until)
            self._checked.move_to_end(path)
        while len(self._checked) > MAX_RECENT_PATHS:
            self._checked.popitem(last=False)

    def _recheck(self, ref: PathAudio, now: float) -> ResolvedClip | None:
        location = ref.location
        if not os.path.isabs(location) and not self.policy.root:
            return None  # the full check answers audio_root_unset
        path = self.policy.absolute(ref)
        seen = self._checked.get(path)
        if seen is None:
            return None
        if seen.until < now:
            del self._checked[path]
            return None
        try:
            info = os.stat(path)  # one syscall, on a local file system (see for_policy)
        except OSError:
            return None
        same = file_version(info) == seen.version and stat.S_ISREG(info.st_mode)
        if not same or info.st_nlink != 1:
            return None
        return self.policy.checked(ref, seen.real_path, info)


def _mount_types(mountinfo: str) -> list[tuple[str, str]]:
    """(mount point, file system type) of every mount, as proc(5) lists them."""
    mounts = []
    # newline="\n": the kernel escapes a newline in a path (\012) but not a carriage return.
    with open(mountinfo, encoding="utf-8", errors="surrogateescape", newline="\n") as lines:
        for line in lines:
            fields, _, rest = line.partition(" - ")
            point = OCTAL_ESCAPE.sub(lambda m: chr(int(m[1], 8)), fields.split(" ")[4])
            mounts.append((point, rest.split(" ")[0]))
    return mounts


def _type_of(real_path: str, mounts: list[tuple[str, str]]) -> str:
    """The type of the file system `real_path` is on: its deepest mount point, latest wins."""
    best, kind = -1, ""
    for point, fs_type in mounts:
        inside = real_path == point or real_path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= best:
            best, kind = len(point), fs_type
    return kind
