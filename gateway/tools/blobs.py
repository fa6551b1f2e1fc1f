"""Clip files named by their content: `DIR/<first 2 hex of sha256>/<sha256>.<ext>`.

A clip is first staged under a temporary name in its final directory, so the gateway's own
pipeline can read it back before the row names it; `commit` renames it into place (atomic: a
reader never sees half a clip) and `discard` removes it. Identical clips are written once.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from ..naming.formats import EXTENSION_BY_MIME, SNIFF_BYTES, sniff_mime


@dataclass(frozen=True, slots=True)
class StagedClip:
    """A clip's final path relative to the directory and, when new, where it is staged."""

    path: str
    staged: str | None  # relative too; None: the file was already there


class ClipDirectory:
    def __init__(self, root: str) -> None:
        self.root = Path(root)
        self.files_written = 0
        self.bytes_written = 0

    def stage(self, data: bytes, mime: str) -> StagedClip | None:
        """Stage a clip; None when its bytes are no audio container the gateway accepts.

        `mime` (the row's own type) only settles what the content leaves open (Ogg: Vorbis
        or Opus), exactly as a file's extension does for the server."""
        sniffed = sniff_mime(data[:SNIFF_BYTES], mime)
        if sniffed is None:
            return None
        digest = hashlib.sha256(data).hexdigest()
        final = f"{digest[:2]}/{digest}{EXTENSION_BY_MIME[sniffed]}"
        if (self.root / final).is_file():
            return StagedClip(final, None)
        directory = self.root / digest[:2]
        directory.mkdir(parents=True, exist_ok=True)
        staged = f"{digest[:2]}/.{digest}.{os.getpid()}.partial{EXTENSION_BY_MIME[sniffed]}"
        with open(self.root / staged, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        return StagedClip(final, staged)

    def commit(self, clip: StagedClip) -> None:
        """Rename a staged clip into place (a clip staged twice by one row is renamed once)."""
        if clip.staged is not None and (self.root / clip.staged).exists():
            os.replace(self.root / clip.staged, self.root / clip.path)
            self.files_written += 1
            self.bytes_written += (self.root / clip.path).stat().st_size

    def discard(self, clip: StagedClip) -> None:
        if clip.staged is not None:
            (self.root / clip.staged).unlink(missing_ok=True)
