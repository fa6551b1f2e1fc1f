"""How many file checks to run at once: few on local disks, many on network file systems and
object storage, where each stat, open or HEAD waits on a round trip rather than on the CPU."""

from __future__ import annotations

import os

LOCAL_JOBS = 4  # the checks are mostly Python: more threads than cores only add contention
NETWORK_JOBS = 32  # enough round trips in flight to hide an NFS/Lustre server's latency
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "lustre",
        "gpfs",
        "beegfs",
        "ceph",
        "glusterfs",
        "9p",
        "afs",
        "virtiofs",
        "wekafs",
    }
)
MOUNTS_FILE = "/proc/self/mounts"


def default_jobs(roots: list[str], *, objects: bool = False) -> int:
    """`NETWORK_JOBS` when any audio root lies on a network file system or on object storage
    (`objects`), else `LOCAL_JOBS`."""
    if objects:
        return NETWORK_JOBS
    mounts = _read_mounts()
    for root in roots:
        kind = filesystem_type(os.path.realpath(root), mounts)
        if kind is not None and is_network_filesystem(kind):
            return NETWORK_JOBS
    return LOCAL_JOBS


def is_network_filesystem(kind: str) -> bool:
    return kind in NETWORK_FILESYSTEMS or kind.startswith("fuse.")  # sshfs, s3fs, gcsfuse, ...


def filesystem_type(path: str, mounts: list[tuple[str, str]]) -> str | None:
    """The type of the file system holding `path`: the longest mount point above it."""
    best: tuple[str, str] | None = None
    for point, kind in mounts:
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) > len(best[0])):
            best = (point, kind)
    return None if best is None else best[1]


def _read_mounts() -> list[tuple[str, str]]:
    try:
        with open(MOUNTS_FILE, encoding="utf-8", errors="replace") as handle:
            fields = [line.split() for line in handle]
    except OSError:
        return []  # not Linux: assume local disks
    return [(_unescape(f[1]), f[2]) for f in fields if len(f) >= 3]


def _unescape(field: str) -> str:
    """/proc/mounts writes a space in a mount point as \\040 (octal escapes)."""
    return field.encode().decode("unicode_escape") if "\\" in field else field
