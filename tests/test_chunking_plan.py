"""Where long clips are cut (gateway.chunking.plan, pure): quiet and fixed cuts, tails, clips
that are not split; properties over random lengths, rates, settings and energies; and the
streaming cutter cuts exactly where the whole-clip plan does."""

from __future__ import annotations

import io
import itertools

import numpy as np
import pytest
import soundfile
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.chunking.cutter import cut_clip
from gateway.chunking.plan import (
    CutRules,
    Energies,
    piece_count_range,
    plan_cuts,
    window_energies,
    window_frames,
)
from gateway.config import ChunkingConfig

RATE = 1000  # frames per second: seconds read as thousands of frames


def chunking(**values: object) -> ChunkingConfig:
    return ChunkingConfig.model_validate(values)


def energies_with_quiet(seconds: float, quiet_at: list[float], rate: int = RATE) -> Energies:
    """Loud everywhere (1.0) but one quiet window (0.0) at each of `quiet_at` seconds."""
    window = window_frames(rate)
    energies = np.ones(-(-round(seconds * rate) // window))
    for at in quiet_at:
        energies[round(at * rate) // window] = 0.0
    return energies


def lengths(pieces: tuple[tuple[int, int], ...]) -> list[int]:
    return [end - start for start, end in pieces]


class TestExamples:
    def test_a_clip_up_to_the_threshold_is_one_piece(self) -> None:
        config = chunking()
        assert plan_cuts(30 * RATE, RATE, config, None) == ((0, 30 * RATE),)
        assert len(plan_cuts(30 * RATE + 1, RATE, chunking(split="fixed"), None)) == 2

    def test_fixed_windows_are_skills_windows(self) -> None:
        pieces = plan_cuts(75 * RATE, RATE, chunking(split="fixed"), None)
        assert pieces == ((0, 30_000), (30_000, 60_000), (60_000, 75_000))

    def test_fixed_short_tail_moves_the_cut_before_it_earlier(self) -> None:
        pieces = plan_cuts(60_200, RATE, chunking(split="fixed"), None)
        assert pieces == ((0, 30_000), (30_000, 59_700), (59_700, 60_200))

    def test_quiet_cuts_land_in_the_quiet_windows(self) -> None:
        energies = energies_with_quiet(75, [27.0, 52.0])
        pieces = plan_cuts(75 * RATE, RATE, chunking(), energies)
        assert pieces == ((0, 27_005), (27_005, 52_005), (52_005, 75_000))

    def test_quiet_ignores_silence_before_the_search_window(self) -> None:
        energies = energies_with_quiet(50, [20.0, 26.0])  # 20 s is outside [25, 30]
        pieces = plan_cuts(50 * RATE, RATE, chunking(), energies)
        assert pieces[0] == (0, 26_005)

    def test_quiet_stretch_is_cut_in_its_middle(self) -> None:
        energies = np.ones(4000)
        energies[2700:2800] = 0.0  # 27.0 s to 28.0 s silent
        pieces = plan_cuts(40 * RATE, RATE, chunking(), energies)
        assert pieces[0] == (0, 27_495)

    def test_quiet_short_tail_moves_the_last_cut_earlier(self) -> None:
        energies = energies_with_quiet(30.3, [29.95])  # the quietest point leaves 0.35 s
        pieces = plan_cuts(30_300, RATE, chunking(), energies)
        assert lengths(pieces)[-1] >= 500
        assert pieces[0][1] <= 29_800

    def test_threshold_above_the_piece_length(self) -> None:
        config = chunking(threshold_seconds=40, max_chunk_seconds=20, split="fixed")
        assert plan_cuts(40 * RATE, RATE, config, None) == ((0, 40_000),)
        assert lengths(plan_cuts(41 * RATE, RATE, config, None)) == [20_000, 20_000, 1000]

    def test_quiet_needs_energies(self) -> None:
        with pytest.raises(ValueError, match="energies"):
            plan_cuts(60 * RATE, RATE, chunking(), None)


@st.composite
def plans(draw: st.DrawFn) -> tuple[int, int, ChunkingConfig, Energies]:
    rate = draw(st.sampled_from([100, 1000, 8000, 16000, 44100]))
    max_chunk = draw(st.floats(0.05, 3.0))
    threshold = draw(st.floats(max_chunk, max_chunk * 2))
    config = chunking(
        threshold_seconds=threshold,
        max_chunk_seconds=max_chunk,
        min_tail_seconds=draw(st.floats(0.0, max_chunk * 0.99)),
        quiet_search_seconds=draw(st.floats(0.001, max_chunk * 0.99)),
        split=draw(st.sampled_from(["quiet", "fixed"])),
    )
    frames = draw(st.integers(1, int(rate * max_chunk * 8) + 2))
    windows = -(-frames // window_frames(rate))
    seed = draw(st.integers(0, 2**32 - 1))
    energies = np.random.default_rng(seed).random(windows)
    if draw(st.booleans()):
        energies = np.round(energies, 1)  # many ties
    return frames, rate, config, energies


@settings(max_examples=400, deadline=None)
@given(plans())
def test_pieces_cover_the_clip_within_the_rules(
    plan: tuple[int, int, ChunkingConfig, Energies],
) -> None:
    frames, rate, config, energies = plan
    rules = CutRules.of(config, rate)
    pieces = plan_cuts(frames, rate, config, energies)
    assert pieces[0][0] == 0 and pieces[-1][1] == frames
    assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))  # contiguous
    assert all(start < end for start, end in pieces)  # no empty piece, no overlap
    if not rules.splits(frames):
        assert len(pieces) == 1
        return
    assert len(pieces) >= 2
    assert all(length <= rules.max_frames for length in lengths(pieces))
    assert lengths(pieces)[-1] >= rules.min_tail_frames
    tail_cut = frames - rules.min_tail_frames
    for start, end in pieces[:-1]:
        limit = start + rules.max_frames
        if config.split == "fixed":
            assert end in (limit, tail_cut)
        else:  # within the search window, or moved earlier for the tail
            assert limit - rules.search_frames <= end <= limit or end == tail_cut


def write_wav(samples: np.ndarray, rate: int, subtype: str) -> io.BytesIO:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, subtype=subtype, format="WAV")
    buffer.seek(0)
    return buffer


@settings(max_examples=60, deadline=None)
@given(
    seconds=st.floats(0.5, 6.0),
    quiet=st.lists(st.floats(0.0, 6.0), max_size=6),
    split=st.sampled_from(["quiet", "fixed"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_streaming_cuts_where_the_whole_clip_plan_cuts(
    seconds: float, quiet: list[float], split: str, seed: int
) -> None:
    rate = 8000
    config = chunking(
        threshold_seconds=1.0,
        max_chunk_seconds=1.0,
        min_tail_seconds=0.3,
        quiet_search_seconds=0.4,
        split=split,
    )
    samples = (np.random.default_rng(seed).standard_normal(int(seconds * rate)) * 4000).astype(
        np.int16
    )
    for at in quiet:
        samples[int(at * rate) : int(at * rate) + 200] //= 50
    expected = plan_cuts(len(samples), rate, config, window_energies(samples, window_frames(rate)))
    cut = cut_clip(
        write_wav(samples, rate, "PCM_16"), config, max_seconds=60, max_decode_bytes=2**30
    )
    assert cut.frames == len(samples)
    if len(expected) == 1:
        assert cut.pieces == ()
    else:
        assert tuple((piece.start, piece.end) for piece in cut.pieces) == expected


@settings(max_examples=300, deadline=None)
@given(plans())
def test_the_piece_count_from_a_length_bounds_the_cut(
    plan: tuple[int, int, ChunkingConfig, Energies],
) -> None:
    frames, rate, config, energies = plan
    fewest, most = piece_count_range(frames / rate, config, rate)
    actual = len(plan_cuts(frames, rate, config, energies))
    assert fewest <= actual <= most
    if config.split == "fixed":
        assert fewest == actual == most


def test_piece_counts_of_round_lengths() -> None:
    assert piece_count_range(30.0, chunking()) == (1, 1)
    assert piece_count_range(75.0, chunking(split="fixed")) == (3, 3)
    assert piece_count_range(75.0, chunking()) == (3, 3)  # 25 s pieces at the shortest: 3
    assert piece_count_range(3600.0, chunking()) == (120, 144)
