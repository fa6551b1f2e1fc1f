"""The workers' metrics directory (`PROMETHEUS_MULTIPROC_DIR`): made private, found again when
its gateway is gone.

The supervisor removes its directory when it exits; one killed with SIGKILL cannot, so each
start also removes the directories of gateways that are gone. A directory is the gateway's when
its name has `PREFIX` and it holds `LOCK_NAME`, and its gateway is gone when no process holds the
lock on that file: the supervisor takes it before the directory gets its name (it is made under
another one and renamed), and its workers inherit the lock, so it lasts until the last process
writing there has exited, whatever killed it, in any PID namespace. Only the user's own
directories are looked at (and removed); anything else with the prefix is left alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PREFIX = "audio-gateway-metrics-"
MAKING_PREFIX = "audio-gateway-making-"  # not yet locked: never swept
LOCK_NAME = "supervisor.lock"


@dataclass(frozen=True)
class MetricsDirectory:
    """A live metrics directory: `lock_fd` holds its lock (pass it to the workers)."""

    path: str
    lock_fd: int


@contextlib.contextmanager
def metrics_directory(parent: str | None = None) -> Iterator[MetricsDirectory]:
    """A new private directory in `parent` (the temporary directory by default), locked and
    named for as long as this lasts, then removed; stale ones are removed first."""
    parent = parent or tempfile.gettempdir()
    remove_stale(parent)
    making = tempfile.mkdtemp(prefix=MAKING_PREFIX, dir=parent)
    lock_fd = os.open(os.path.join(making, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        path = os.path.join(parent, PREFIX + os.path.basename(making).removeprefix(MAKING_PREFIX))
        os.rename(making, path)
        making = path
        yield MetricsDirectory(path, lock_fd)
    finally:
        shutil.rmtree(making, ignore_errors=True)
        os.close(lock_fd)


def remove_stale(parent: str) -> list[str]:
    """Remove the metrics directories in `parent` whose gateway is gone; their paths."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            if entry.name.startswith(PREFIX) and _remove_if_stale(entry.path):
                removed.append(entry.path)
    for path in removed:
        log.info("removed the metrics directory of a gateway that is gone: %s", path)
    return removed


def _remove_if_stale(path: str) -> bool:
    try:
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            return False  # a link, a file, someone else's: not ours to judge
        fd = os.open(os.path.join(path, LOCK_NAME), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False  # gone already, or no lock file: not a directory this gateway made
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False  # held: its gateway is alive
    try:
        shutil.rmtree(path, ignore_errors=True)
    finally:
        os.close(fd)
    return not Path(path).exists()
