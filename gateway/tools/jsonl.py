"""JSONL in and out: lines streamed one at a time, output files replaced atomically."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO


class UsageError(Exception):
    """A command that cannot run as given (missing file, bad config, refused output): exit 2."""


@dataclass(frozen=True, slots=True)
class Line:
    file: str
    number: int  # 1-based, as editors count
    data: bytes  # with its line ending, for byte-for-byte copies

    @property
    def blank(self) -> bool:
        return not self.data.strip()


def existing_inputs(paths: Iterable[str]) -> list[str]:
    """The input files, each checked to be a readable regular file (else a usage error)."""
    checked = []
    for path in paths:
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            raise UsageError(f"{path}: no such readable file")
        checked.append(path)
    return checked


def read_lines(path: str) -> Iterator[Line]:
    """The lines of `path`, one at a time: memory holds one line, however long the file."""
    with open(path, "rb") as handle:
        for number, data in enumerate(handle, 1):
            yield Line(path, number, data)


def check_output_target(source: str, target: str, force: bool) -> None:
    """Refuse to write over the input, or over an existing output without `force`."""
    if os.path.exists(target):
        if os.path.samefile(source, target):
            raise UsageError(f"{target}: refusing to write over the input file")
        if not force:
            raise UsageError(f"{target}: exists; pass --force to replace it")
    if not os.path.isdir(os.path.dirname(os.path.abspath(target))):
        raise UsageError(f"{target}: its directory does not exist")


class AtomicFile:
    """A file written under a temporary name next to `target` and renamed over it on
    `commit()`; left uncommitted (an error, an interrupt) the temporary file is removed, so
    `target` is never half-written."""

    def __init__(self, target: str | Path) -> None:
        self.target = Path(target)
        try:
            fd, temporary = tempfile.mkstemp(
                dir=self.target.parent, prefix=f".{self.target.name}.", suffix=".partial"
            )
        except OSError as exc:
            raise UsageError(f"{target}: cannot write next to it ({exc.strerror})") from exc
        self.temporary = Path(temporary)
        self.handle: IO[bytes] = os.fdopen(fd, "wb")
        self._committed = False

    def commit(self) -> None:
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()
        os.replace(self.temporary, self.target)
        self._committed = True

    def discard(self) -> None:
        if not self._committed:
            self.handle.close()
            self.temporary.unlink(missing_ok=True)

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.discard()
