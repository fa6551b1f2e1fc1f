"""What a row comes to: its error, located as a user finds it, and the facts `check` learns
about its clips. Plain records at the bottom of the tools: `rows`, `check`, `convert` and
`summary` all import them, and they import nothing of the tools but `jsonl`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .jsonl import Line


@dataclass(frozen=True, slots=True)
class RowError:
    """One row's error, located as a user finds it: file, line, key and path as written."""

    file: str
    line: int
    code: str
    key: str | None  # e.g. "responses_create_params.metadata.audio_paths"
    path: str | None  # the path exactly as the row wrote it, when the error is about one
    message: str

    def example(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "key": self.key,
            "path": self.path,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class ClipFacts:
    """One clip that passed: where it is and what its header says."""

    key: str  # the row-level key, e.g. "responses_create_params.metadata.audio_paths[1]"
    path: str | None  # as written; None for inline audio
    real_path: str | None
    size: int
    seconds: float | None  # None: the container does not state it (see durations.py)
    normalized: bool = False  # [normalize] on and the clip not a WAV in its form already


@dataclass(frozen=True, slots=True)
class CheckedRow:
    line: Line
    has_audio: bool
    clips: tuple[ClipFacts, ...] = ()
    error: RowError | None = None
