"""The local audio roots, checked where the operator looks: at start-up and by readiness.

A root that is not a directory the gateway may list and enter (a volume that is not mounted,
a typo, a permission) would otherwise turn every request into a 404 or 403 while the gateway
looks healthy. `check_roots` makes it a start-up error naming the key and the path;
`unreadable_roots` is what `/gateway/ready` asks again while serving.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass

from ..config import AudioConfig, ConfigError
from ..naming.object_names import is_object_url


@dataclass(frozen=True, slots=True)
class LocalRoot:
    key: str  # where it is configured: "audio.root", "audio.allowed_roots[1]"
    path: str


def local_roots(audio: AudioConfig) -> tuple[LocalRoot, ...]:
    """`audio.root` (when a local directory) and every local `allowed_roots` entry."""
    roots = [LocalRoot("audio.root", audio.root)] if audio.local_root() else []
    roots += [
        LocalRoot(f"audio.allowed_roots[{index}]", path)
        for index, path in enumerate(audio.allowed_roots)
        if not is_object_url(path)
    ]
    return tuple(roots)


def describe_roots(audio: AudioConfig) -> str:
    """The roots for the start-up log line."""
    roots = [*audio.effective_roots(), *(prefix.url for prefix in audio.object_roots())]
    if not roots:
        return "no audio roots: every audio path is refused"
    relative = f"relative paths under {audio.root}" if audio.root else "no relative paths"
    return f"audio roots {', '.join(roots)}; {relative}"


def root_problem(path: str) -> str | None:
    """Blocking: why `path` is not a directory this process may list and enter, or None."""
    try:
        info = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return "it does not exist (is the volume mounted?)"
        if exc.errno in (errno.EACCES, errno.EPERM):
            return "permission denied on a directory above it"
        return f"it cannot be reached: {exc.strerror}"
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a directory"
    if not os.access(path, os.R_OK | os.X_OK):
        return "permission denied (the gateway's user needs read and execute on it)"
    return None


def unreadable_roots(roots: Iterable[LocalRoot]) -> list[str]:
    """Blocking: one message per root that is not a readable directory, naming key and path."""
    problems = []
    for root in roots:
        problem = root_problem(root.path)
        if problem is not None:
            problems.append(f"{root.key}: {root.path!r} is not a readable directory: {problem}")
    return problems


def check_roots(audio: AudioConfig) -> None:
    """Blocking: a `ConfigError` naming every local root that is not a readable directory."""
    problems = unreadable_roots(local_roots(audio))
    if problems:
        raise ConfigError("; ".join(problems))
