"""What `check` and `convert` report: counts, errors grouped by code, as a table or JSON."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from .results import CheckedRow, ClipFacts, RowError
from .root_hints import describe_root

if TYPE_CHECKING:
    from .long_audio import LongAudioTally

EXAMPLES_PER_CODE = 5
EXIT_CLEAN, EXIT_ROW_ERRORS, EXIT_USAGE = 0, 1, 2  # no row error / some / a usage error


@dataclass(slots=True)
class ErrorGroups:
    """Errors by code: a count and the first few examples of each."""

    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    rows: int = 0

    def add(self, error: RowError) -> None:
        self.rows += 1
        group = self.groups.setdefault(error.code, {"count": 0, "examples": []})
        group["count"] += 1
        if len(group["examples"]) < EXAMPLES_PER_CODE:
            group["examples"].append(error.example())

    def to_json(self) -> dict[str, Any]:
        return dict(sorted(self.groups.items(), key=lambda item: -item[1]["count"]))

    def render(self) -> list[str]:
        lines = []
        for code, group in self.to_json().items():
            lines.append(f"  {code}: {group['count']} row(s)")
            for example in group["examples"]:
                where = f"{example['file']}:{example['line']}"
                lines.append(f"    {where}  {example['message']}")
        return lines


def print_summary(summary: dict[str, Any] | str) -> None:
    """The table, or the JSON object on one line, on stdout."""
    if isinstance(summary, str):
        print(summary)
    else:
        sys.stdout.write(msgspec.json.encode(summary).decode() + "\n")
    sys.stdout.flush()


def render_table(title: str, rows: list[tuple[str, str]], errors: ErrorGroups) -> str:
    """A two-column summary followed by the errors (or "no errors")."""
    width = max(len(name) for name, _ in rows)
    lines = [title, *(f"  {name:<{width}}  {value}" for name, value in rows)]
    lines.append("errors:" if errors.groups else "errors: none")
    lines.extend(errors.render())
    return "\n".join(lines)


def human_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:,.0f} {unit}" if unit == "B" else f"{count:,.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


@dataclass(slots=True)
class CheckSummary:
    """Totals of a `check` run; memory grows with distinct files, never with rows."""

    files: list[str]
    audio_root: str = ""  # the [audio] root relative paths were resolved against ("": none)
    rows: int = 0
    rows_with_audio: int = 0
    clips: int = 0
    inline_clips: int = 0
    audio_bytes: int = 0
    audio_seconds: float = 0.0
    clips_without_duration: int = 0
    clips_normalized: int = 0  # what [normalize] would convert (0 with it off)
    longest: dict[str, Any] | None = None
    errors: ErrorGroups = field(default_factory=ErrorGroups)
    seconds: float = 0.0
    long_audio: LongAudioTally | None = None
    _distinct: set[str] = field(default_factory=set)

    def add(self, row: CheckedRow) -> None:
        self.rows += 1
        self.rows_with_audio += row.has_audio
        if self.long_audio is not None:
            self.long_audio.add(row)
        if row.error is not None:
            self.errors.add(row.error)
        for clip in row.clips:
            self._add_clip(row, clip)

    def _add_clip(self, row: CheckedRow, clip: ClipFacts) -> None:
        self.clips += 1
        self.clips_normalized += clip.normalized
        self.audio_bytes += clip.size
        if clip.real_path is None:
            self.inline_clips += 1
        else:
            self._distinct.add(clip.real_path)
        if clip.seconds is None:
            self.clips_without_duration += 1
            return
        self.audio_seconds += clip.seconds
        if self.longest is None or clip.seconds > self.longest["seconds"]:
            line = row.line
            self.longest = {
                "file": line.file,
                "line": line.number,
                "key": clip.key,
                "path": clip.path,
                "seconds": clip.seconds,
            }

    def to_json(self) -> dict[str, Any]:
        return {
            "command": "check",
            "files": self.files,
            "audio_root": self.audio_root or None,
            "rows": self.rows,
            "rows_with_audio": self.rows_with_audio,
            "rows_with_errors": self.errors.rows,
            "clips": self.clips,
            "inline_clips": self.inline_clips,
            "distinct_files": len(self._distinct),
            "audio_bytes": self.audio_bytes,
            "audio_seconds": round(self.audio_seconds, 3),
            "clips_without_duration": self.clips_without_duration,
            "clips_normalized": self.clips_normalized,
            "longest_clip": self.longest,
            **({"long_audio": self.long_audio.to_json()} if self.long_audio else {}),
            "errors": self.errors.to_json(),
            "seconds": round(self.seconds, 3),
        }

    def render(self) -> str:
        longest = "-"
        if self.longest is not None:
            where = self.longest["path"] or self.longest["key"]
            longest = (
                f"{self.longest['seconds']:.2f} s  {where}  "
                f"({self.longest['file']}:{self.longest['line']})"
            )
        rate = self.rows / self.seconds if self.seconds else 0.0
        rows = [
            ("audio root", describe_root(self.audio_root)),
            ("rows read", f"{self.rows:,}"),
            ("rows with audio", f"{self.rows_with_audio:,}"),
            ("rows with errors", f"{self.errors.rows:,}"),
            ("clips", f"{self.clips:,} ({self.inline_clips:,} inline)"),
            ("distinct files", f"{len(self._distinct):,}"),
            ("audio bytes", human_bytes(self.audio_bytes)),
            (
                "audio seconds",
                f"{self.audio_seconds:,.1f} s ({self.clips_without_duration:,} "
                "clips of unknown length: only WAV and FLAC headers state it)",
            ),
            ("longest clip", longest),
            ("clips normalized", f"{self.clips_normalized:,} ([normalize]: not a WAV in form)"),
            *([self.long_audio.render()] if self.long_audio else []),
            ("time", f"{self.seconds:.1f} s ({rate:,.0f} rows/s)"),
        ]
        return render_table("audio-gateway check: " + ", ".join(self.files), rows, self.errors)


@dataclass(slots=True)
class ConvertSummary:
    """Totals of a `convert` run."""

    direction: str  # "extract", "inline" or "key_prefix" (--to-key-prefix alone)
    source: str
    target: str
    to_key_prefix: str | None = None  # --to-key-prefix, when given
    rows: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    clips: int = 0
    files_written: int = 0
    clip_bytes_written: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    seconds: float = 0.0
    stopped: bool = False  # --strict met an error: OUT was not written
    errors: ErrorGroups = field(default_factory=ErrorGroups)

    def add(self, status: str, clips: int, error: RowError | None, nbytes: int) -> None:
        self.bytes_in += nbytes
        self.rows += 1
        self.statuses[status] = self.statuses.get(status, 0) + 1
        self.clips += clips
        if error is not None:
            self.errors.add(error)

    @property
    def ratio(self) -> float:
        """OUT's size over IN's: 0.002 means OUT is 500x smaller."""
        return self.bytes_out / self.bytes_in if self.bytes_in else 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "command": "convert",
            "direction": self.direction,
            "to_key_prefix": self.to_key_prefix,
            "input": self.source,
            "output": self.target,
            "written": not self.stopped,
            "rows": self.rows,
            "rows_converted": self.statuses.get("converted", 0),
            "rows_kept_inline": self.statuses.get("kept_inline", 0),
            "rows_unchanged": self.statuses.get("unchanged", 0),
            "rows_with_errors": self.errors.rows,
            "clips": self.clips,
            "files_written": self.files_written,
            "clip_bytes_written": self.clip_bytes_written,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "ratio": round(self.ratio, 6),
            "seconds": round(self.seconds, 3),
            "errors": self.errors.to_json(),
        }

    def render(self) -> str:
        data = self.to_json()
        outcome = "written" if data["written"] else "NOT written (--strict stopped at an error)"
        rows = [
            ("output", f"{self.target} ({outcome})"),
            ("rows", f"{self.rows:,}"),
            ("converted", f"{data['rows_converted']:,}"),
            ("kept inline", f"{data['rows_kept_inline']:,}"),
            ("unchanged", f"{data['rows_unchanged']:,} (no audio to move, copied as they are)"),
            ("rows with errors", f"{self.errors.rows:,} (copied unchanged)"),
            ("clips", f"{self.clips:,}"),
            ("files written", f"{self.files_written:,} ({human_bytes(self.clip_bytes_written)})"),
            ("bytes in / out", f"{human_bytes(self.bytes_in)} / {human_bytes(self.bytes_out)}"),
            ("ratio", f"{self.ratio:.4g} (OUT / IN)"),
            ("time", f"{self.seconds:.1f} s"),
        ]
        flags = {"extract": "--extract-to", "inline": "--inline"}.get(self.direction, "")
        if self.to_key_prefix is not None:
            flags = f"{flags} --to-key-prefix {self.to_key_prefix!r}".strip()
        title = f"audio-gateway convert {flags}: {self.source} -> {self.target}"
        return render_table(title, rows, self.errors)
