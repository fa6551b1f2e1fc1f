"""What `check` says about long audio (`[chunking]`), from the clips' header lengths.

With chunking on: the rows the server would split (one clip longer than `threshold_seconds`)
and into how many pieces (exact for fixed cuts, a range for quiet ones, which depend on the
samples). With it off: the rows with a clip over `threshold_seconds`, which a model with that
window would truncate or refuse. Rows with several clips are never split. Clips whose header
states no length (MP3, Ogg) are counted apart: the server decodes them to decide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config import ChunkingConfig

if TYPE_CHECKING:
    from .results import CheckedRow


@dataclass(slots=True)
class LongAudioTally:
    config: ChunkingConfig
    rows_over_threshold: int = 0
    rows_split: int = 0
    pieces_fewest: int = 0
    pieces_most: int = 0
    rows_with_unknown_lengths: int = 0  # rows that would split if their clips are long

    def add(self, row: CheckedRow) -> None:
        lengths = [clip.seconds for clip in row.clips]
        if any(seconds is None for seconds in lengths):
            self.rows_with_unknown_lengths += self.config.enabled and len(lengths) == 1
        known = [seconds for seconds in lengths if seconds is not None]
        if not any(seconds > self.config.threshold_seconds for seconds in known):
            return
        self.rows_over_threshold += 1
        if self.config.enabled and len(lengths) == 1:
            # here, not at import: `serve` imports the tools, and plan loads numpy (~12 MiB)
            from ..chunking.plan import piece_count_range

            fewest, most = piece_count_range(known[0], self.config)
            self.rows_split += 1
            self.pieces_fewest += fewest
            self.pieces_most += most

    def to_json(self) -> dict[str, Any]:
        return {
            "chunking": self.config.enabled,
            "threshold_seconds": self.config.threshold_seconds,
            "rows_over_threshold": self.rows_over_threshold,
            "rows_split": self.rows_split,
            "pieces": {"fewest": self.pieces_fewest, "most": self.pieces_most},
            "rows_split_if_long": self.rows_with_unknown_lengths,
        }

    def render(self) -> tuple[str, str]:
        threshold = self.config.threshold_seconds
        over = f"{self.rows_over_threshold:,} row(s) with a clip over {threshold:g} s"
        if not self.config.enabled:
            return "long audio", f"{over} (chunking off: a model with that window truncates them)"
        pieces = f"{self.pieces_fewest:,}"
        if self.pieces_most != self.pieces_fewest:
            pieces += f"-{self.pieces_most:,}"
        unknown = (
            f"; {self.rows_with_unknown_lengths:,} more if long "
            "(one clip of unknown length: the server decodes it to know)"
        )
        return (
            "long audio",
            f"{over}; {self.rows_split:,} split into {pieces} pieces"
            + (unknown if self.rows_with_unknown_lengths else ""),
        )
