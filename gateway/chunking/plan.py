"""Where a long clip is cut: piece boundaries in frames. Pure (numpy only, no I/O).

Rules (`[chunking]`):
- a clip of at most `threshold_seconds` is not split (one piece, the whole clip);
- no piece is longer than `max_chunk_seconds`;
- `split = "quiet"`: each cut is at the quietest point within the last `quiet_search_seconds`
  before the piece's limit (the middle of the quietest energy window; among equally quiet
  windows, the middle of the quiet stretch nearest the limit); `"fixed"`: at the limit itself
  (NeMo Skills' fixed windows);
- no last piece is shorter than `min_tail_seconds`: the cut before it moves earlier instead.

Energies are the mean square of the samples (all channels) in consecutive windows of
`window_frames(rate)` frames counted from frame 0 (the last window may be partial). `next_cut`
needs only the frames up to `start + max + min_tail + window`, so a streaming cutter
(`gateway.chunking.cutter`) and `plan_cuts` over a whole clip cut at the same frames.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..config import ChunkingConfig

ENERGY_WINDOW_SECONDS = 0.01  # 10 ms: fine enough to land inside a pause between words

Energies = npt.NDArray[np.float64]
Boundaries = tuple[tuple[int, int], ...]  # (start, end) frame pairs, end exclusive


def window_frames(sample_rate: int) -> int:
    return max(1, round(sample_rate * ENERGY_WINDOW_SECONDS))


@dataclass(frozen=True, slots=True)
class CutRules:
    """The `[chunking]` rules in frames at one sample rate."""

    threshold_frames: int  # a clip of more frames than this is split
    max_frames: int
    min_tail_frames: int
    search_frames: int
    quiet: bool
    window: int

    @classmethod
    def of(cls, config: ChunkingConfig, sample_rate: int) -> CutRules:
        max_frames = max(1, math.floor(config.max_chunk_seconds * sample_rate))
        return cls(
            threshold_frames=max(max_frames, math.floor(config.threshold_seconds * sample_rate)),
            max_frames=max_frames,
            # below max_frames, so a clip longer than max_frames always has room for its tail
            min_tail_frames=min(math.ceil(config.min_tail_seconds * sample_rate), max_frames - 1),
            search_frames=math.floor(config.quiet_search_seconds * sample_rate),
            quiet=config.split == "quiet",
            window=window_frames(sample_rate),
        )

    def splits(self, frames: int) -> bool:
        return frames > self.threshold_frames

    def lookahead(self, start: int) -> int:
        """Frames `next_cut` must see (unless the clip ends sooner) to cut the piece at `start`."""
        return start + self.max_frames + self.min_tail_frames + self.window + 1


def next_cut(rules: CutRules, start: int, known: int, ended: bool, energies: Energies) -> int:
    """The end of the piece that starts at `start`, given the clip's first `known` frames
    (all of them when `ended`) and the energies of their windows; `known` must reach
    `rules.lookahead(start)` unless `ended`. Returns `known` when the rest is the last piece."""
    if ended and known - start <= rules.max_frames:
        return known
    limit = start + rules.max_frames
    latest = min(limit, known - rules.min_tail_frames) if ended else limit
    if not rules.quiet:
        return latest
    earliest = max(limit - rules.search_frames, start + 1)
    return _quietest(rules.window, earliest, latest, energies)


def _quietest(window: int, earliest: int, latest: int, energies: Energies) -> int:
    """The middle of the quietest window whose middle lies in [earliest, latest]."""
    half = window // 2
    first = max(0, math.ceil((earliest - half) / window))
    last = min(len(energies) - 1, (latest - half) // window)
    if last < first:
        return latest
    span = energies[first : last + 1]
    quiet = span <= span.min()
    end = int(np.flatnonzero(quiet)[-1])  # the quietest stretch nearest the limit
    begin = end
    while begin > 0 and quiet[begin - 1]:
        begin -= 1
    return (first + (begin + end) // 2) * window + half


def plan_cuts(
    frames: int, sample_rate: int, config: ChunkingConfig, energies: Energies | None
) -> Boundaries:
    """The pieces of a clip of `frames` frames: one piece when it is not split. `energies` (one
    per window, see `window_energies`) is needed for `split = "quiet"` only."""
    rules = CutRules.of(config, sample_rate)
    if not rules.splits(frames):
        return ((0, frames),)
    if energies is None:
        if rules.quiet:
            raise ValueError("quiet cuts need the clip's window energies")
        energies = np.zeros(0)
    pieces: list[tuple[int, int]] = []
    start = 0
    while start < frames:
        end = next_cut(rules, start, frames, True, energies)
        pieces.append((start, end))
        start = end
    return tuple(pieces)


def window_energies(samples: npt.NDArray[np.generic], window: int) -> Energies:
    """The energies of `samples` (frames x channels, or frames) in windows of `window` frames
    from its first frame; the last window may be partial."""
    if samples.ndim == 1:
        samples = samples[:, np.newaxis]
    whole = len(samples) // window
    squares = np.square(samples, dtype=np.float64)
    energies = squares[: whole * window].reshape(whole, -1).mean(axis=1)
    if whole * window < len(samples):
        energies = np.append(energies, squares[whole * window :].mean())
    return np.asarray(energies, dtype=np.float64)


COUNT_RATE = 48_000  # frames per second for counting from a length in seconds (48/16/8 kHz exact)


def piece_count_range(
    seconds: float, config: ChunkingConfig, sample_rate: int = COUNT_RATE
) -> tuple[int, int]:
    """How many pieces a clip of `seconds` would be cut into, from its length alone (the
    dataset check reads headers, not samples): exact for fixed cuts; for quiet cuts the fewest
    (as fixed) and the most (every piece but the last at least max - search long). Counted at
    `sample_rate` (the lengths in frames round there)."""
    frames = round(seconds * sample_rate)
    rules = CutRules.of(config, sample_rate)
    if not rules.splits(frames):
        return 1, 1
    fixed = config.model_copy(update={"split": "fixed"})
    fewest = len(plan_cuts(frames, sample_rate, fixed, None))
    if not rules.quiet:
        return fewest, fewest
    shortest = max(1, rules.max_frames - rules.search_frames)
    return fewest, 1 + -(-(frames - rules.max_frames) // shortest)
