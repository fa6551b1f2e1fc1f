"""Decoding a clip into the target form in one streaming pass. Blocking: run it in a thread.

libsndfile (soundfile) decodes the clip block by block; each block is mixed to the target
channel count and fed to a soxr stream resampler, and what comes out is written to the WAV at
once, so about one block of samples is held whatever the clip's length (the WAV itself goes
to the file object the caller gives, which may spill to disk).

Channels: the target count is kept as it is; a mono target is the mean of the channels; a mono
clip is copied to every target channel; any other count is mixed to mono, then copied.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import numpy.typing as npt
import soundfile
import soxr

from .form import TargetForm

BLOCK_FRAMES = 64 * 1024  # source frames per decoded block (~1.5 s at 44.1 kHz)
# soxr's default and vLLM's own (librosa's "soxr_hq"); measured in bench/normalize/quality.py
RESAMPLE_QUALITY = "HQ"
OUTPUT_FORMAT = "WAV"

Samples = npt.NDArray[np.float32]


class Undecodable(Exception):
    """libsndfile cannot open or decode the clip; the message is its reason."""


class TooLong(Exception):
    """Decoding passed `max_seconds` of audio; it stopped there."""


@dataclass(frozen=True, slots=True)
class Converted:
    """What was written: frames per channel, at the target rate and this many channels."""

    frames: int
    channels: int
    sample_rate: int


def convert(file: Any, form: TargetForm, out: IO[bytes], *, max_seconds: float) -> Converted:
    """Decode `file` (a file descriptor or a seekable binary file object) and write it to
    `out` as a WAV in `form`. Raises `Undecodable`, or `TooLong` past `max_seconds`."""
    try:
        with soundfile.SoundFile(_rewound(file), closefd=False) as source:
            return _convert(source, form, out, max_seconds)
    except soundfile.SoundFileError as exc:  # libsndfile's open and decode errors
        # Its own words, without soundfile's "Error opening <the file object>: " lead.
        raise Undecodable(getattr(exc, "error_string", None) or str(exc)) from None


def _convert(
    source: soundfile.SoundFile, form: TargetForm, out: IO[bytes], max_seconds: float
) -> Converted:
    channels = form.channels_for(source.channels)
    rate = form.rate_for(source.samplerate)
    resampler = None
    if source.samplerate != rate:
        resampler = soxr.ResampleStream(
            source.samplerate, rate, channels, dtype="float32", quality=RESAMPLE_QUALITY
        )
    max_frames = max_seconds * source.samplerate
    decoded = written = 0
    with soundfile.SoundFile(
        out, "w", rate, channels, subtype=form.subtype, format=OUTPUT_FORMAT
    ) as target:
        while len(block := source.read(BLOCK_FRAMES, dtype="float32", always_2d=True)):
            decoded += len(block)
            if decoded > max_frames:
                raise TooLong(f"more than {max_seconds:g} s of audio")
            written += _write(target, _resampled(resampler, mix(block, channels), last=False))
        if resampler is not None:
            empty = np.zeros((0, channels), dtype=np.float32)
            written += _write(target, _resampled(resampler, empty, last=True))
    return Converted(written, channels, rate)


def mix(block: Samples, channels: int) -> Samples:
    """`block` (frames x source channels) as `channels` channels (see the module docstring)."""
    have = block.shape[1]
    if have == channels:
        return block
    mono = block if have == 1 else block.mean(axis=1, keepdims=True, dtype=np.float32)
    return mono if channels == 1 else np.repeat(mono, channels, axis=1)


def _resampled(resampler: soxr.ResampleStream | None, block: Samples, *, last: bool) -> Samples:
    if resampler is None:
        return block
    return resampler.resample_chunk(block, last=last)  # type: ignore[no-any-return]


def _write(target: soundfile.SoundFile, block: Samples) -> int:
    if target.subtype == "PCM_16":  # resampled audio may overshoot full scale; PCM would wrap
        np.clip(block, -1.0, 1.0, out=block)
    target.write(block)
    return len(block)


def _rewound(file: Any) -> Any:
    """libsndfile reads a file from where it stands: every open starts at the beginning."""
    if isinstance(file, int):
        os.lseek(file, 0, os.SEEK_SET)
    else:
        file.seek(0)
    return file
