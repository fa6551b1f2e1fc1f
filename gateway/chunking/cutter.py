"""Cutting a clip into WAV pieces in one streaming decode pass. Blocking: run it in a thread.

libsndfile (soundfile) decodes the clip block by block; window energies are computed as the
blocks arrive, and a piece is cut and written as soon as `plan.next_cut` has the look-ahead it
needs, so at most about one piece (plus a block) of decoded audio is held at a time, whatever
the clip's length. The length of a clip whose header states none (MP3, Ogg) is what decoding
finds.

Samples are read in the source's own integer or float form and written in the same sample
format, so for lossless sources (PCM/float WAV, FLAC) the pieces' samples concatenate to the
clip's exactly. Lossy sources (MP3, Vorbis, Opus, ADPCM...) are decoded to float and written
as 16-bit PCM.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import soundfile

from ..config import ChunkingConfig
from .plan import CutRules, Energies, next_cut, window_energies

BLOCK_WINDOWS = 100  # frames per decoded block, in energy windows (1 s): whole windows per read
PIECE_FORMAT = "WAV"
PIECE_MIME = "audio/wav"

# Source subtype -> (numpy dtype read, WAV subtype written); every pair is exact both ways.
_LOSSLESS: dict[str, tuple[str, str]] = {
    "PCM_S8": ("int16", "PCM_U8"),  # WAV stores 8-bit as unsigned; the values are the same
    "PCM_U8": ("int16", "PCM_U8"),
    "PCM_16": ("int16", "PCM_16"),
    "PCM_24": ("int32", "PCM_24"),
    "PCM_32": ("int32", "PCM_32"),
    "FLOAT": ("float32", "FLOAT"),
    "DOUBLE": ("float64", "DOUBLE"),
    "ULAW": ("int16", "ULAW"),
    "ALAW": ("int16", "ALAW"),
}
_LOSSY = ("float32", "PCM_16")

Samples = npt.NDArray[Any]


class Undecodable(Exception):
    """libsndfile cannot open or decode the clip; the message is its reason."""


class DecodedTooLong(Exception):
    """Decoding passed one of vLLM's decode limits (`key`); decoding stopped there."""

    def __init__(self, what: str, limit: str, key: str, code: str) -> None:
        super().__init__(f"{what} over {limit} ({key})")
        self.what = what
        self.limit = limit
        self.key = key
        self.code = code


@dataclass(frozen=True, slots=True)
class CutPiece:
    start: int  # frames, end exclusive
    end: int
    data: bytes  # a complete WAV file


@dataclass(frozen=True, slots=True)
class CutClip:
    """What decoding found; `pieces` is empty when the clip is not split."""

    frames: int
    sample_rate: int
    channels: int
    pieces: tuple[CutPiece, ...]


def cut_clip(
    file: Any,
    config: ChunkingConfig,
    *,
    max_seconds: float,
    max_decode_bytes: int,
    keep_data: bool = True,
) -> CutClip:
    """Decode `file` (a path, a file descriptor or a seekable binary file object) and cut it.
    Without `keep_data` only the cuts are found (each piece's `data` is empty: `read_piece`
    makes it later), so nothing but about one piece of decoded audio is ever held.

    Raises `Undecodable`, or `DecodedTooLong` past `max_seconds` of audio or `max_decode_bytes`
    of float32 samples (vLLM's decode limits, counted on what decoding finds)."""
    try:
        with soundfile.SoundFile(_rewound(file), closefd=False) as audio:
            dtype, subtype = _LOSSLESS.get(audio.subtype, _LOSSY)
            cutter = _StreamingCutter(
                CutRules.of(config, audio.samplerate),
                audio.samplerate,
                audio.channels,
                subtype if keep_data else None,
            )
            limits = _Limits(audio.samplerate, audio.channels, max_seconds, max_decode_bytes)
            block = cutter.rules.window * BLOCK_WINDOWS
            lossy = (dtype, subtype) == _LOSSY
            while len(samples := audio.read(block, dtype=dtype, always_2d=True)):
                limits.check(cutter.known + len(samples))
                cutter.feed(samples, clip=lossy)
            return cutter.finish()
    except soundfile.SoundFileError as exc:  # libsndfile's open and decode errors
        raise Undecodable(str(exc)) from None


def read_piece(file: Any, start: int, end: int) -> bytes:
    """Frames [start, end) of `file` as a WAV piece, exactly as `cut_clip` writes it (for a
    lossless source, its samples; libsndfile seeks WAV and FLAC to the exact frame)."""
    try:
        with soundfile.SoundFile(_rewound(file), closefd=False) as audio:
            dtype, subtype = _LOSSLESS.get(audio.subtype, _LOSSY)
            audio.seek(start)
            samples = audio.read(end - start, dtype=dtype, always_2d=True)
            if len(samples) != end - start:
                raise Undecodable(f"frames {start}-{end} could not be read again")
            if (dtype, subtype) == _LOSSY:
                np.clip(samples, -1.0, 1.0, out=samples)
            return encode_piece(samples, audio.samplerate, subtype)
    except soundfile.SoundFileError as exc:
        raise Undecodable(str(exc)) from None


def encode_piece(samples: Samples, sample_rate: int, subtype: str) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, sample_rate, subtype=subtype, format=PIECE_FORMAT)
    return buffer.getvalue()


def _rewound(file: Any) -> Any:
    """libsndfile reads a file from where it stands: every open starts at the beginning."""
    if isinstance(file, int):
        os.lseek(file, 0, os.SEEK_SET)
    elif not isinstance(file, str | os.PathLike):
        file.seek(0)
    return file


@dataclass(frozen=True, slots=True)
class _Limits:
    """vLLM's decode limits (audio.max_duration_seconds, audio.max_decode_bytes) in frames."""

    sample_rate: int
    channels: int
    max_seconds: float
    max_decode_bytes: int

    def check(self, frames: int) -> None:
        if frames > self.max_seconds * self.sample_rate:
            raise DecodedTooLong(
                f"more than {self.max_seconds:g} s of audio",
                f"{self.max_seconds:g} s",
                "audio.max_duration_seconds",
                "audio_too_long",
            )
        if frames * self.channels * 4 > self.max_decode_bytes:
            raise DecodedTooLong(
                f"more than {self.max_decode_bytes} bytes of float32 samples",
                f"{self.max_decode_bytes} bytes",
                "audio.max_decode_bytes",
                "audio_decode_too_large",
            )


class _StreamingCutter:
    """Holds the decoded frames from the current piece's start; cuts when it may."""

    def __init__(
        self, rules: CutRules, sample_rate: int, channels: int, subtype: str | None
    ) -> None:
        self.rules = rules
        self.sample_rate = sample_rate
        self.channels = channels
        self.subtype = subtype  # None: the cuts only, no piece written
        self.known = 0  # frames decoded so far
        self._start = 0  # the current piece's first frame: `_held` starts there
        self._held: list[Samples] = []
        self._carry: Samples | None = None  # the frames of a window not yet complete
        self._energies = np.empty(4096)
        self._windows = 0
        self._pieces: list[CutPiece] = []

    def feed(self, samples: Samples, *, clip: bool) -> None:
        if clip:  # decoded lossy audio may overshoot full scale; 16-bit PCM would wrap around
            np.clip(samples, -1.0, 1.0, out=samples)
        self._held.append(samples)
        self.known += len(samples)
        if self.rules.quiet:  # fixed cuts need no energies
            self._add_energies(samples)
        rules = self.rules
        while rules.splits(self.known) and self.known >= rules.lookahead(self._start):
            self._cut(next_cut(rules, self._start, self.known, False, self._energy_view()))

    def finish(self) -> CutClip:
        if self._carry is not None and len(self._carry):
            self._append_energies(window_energies(self._carry, len(self._carry)))
        if self.rules.splits(self.known):
            while self._start < self.known:
                self._cut(next_cut(self.rules, self._start, self.known, True, self._energy_view()))
        return CutClip(self.known, self.sample_rate, self.channels, tuple(self._pieces))

    def _cut(self, end: int) -> None:
        held = np.concatenate(self._held) if len(self._held) > 1 else self._held[0]
        length = end - self._start
        data = (
            b""
            if self.subtype is None
            else encode_piece(held[:length], self.sample_rate, self.subtype)
        )
        self._pieces.append(CutPiece(self._start, end, data))
        self._held = [held[length:]] if length < len(held) else []
        self._start = end

    def _add_energies(self, samples: Samples) -> None:
        window = self.rules.window
        if self._carry is not None and len(self._carry):
            samples = np.concatenate((self._carry, samples))
        whole = len(samples) - len(samples) % window
        if whole:
            self._append_energies(window_energies(samples[:whole], window))
        self._carry = samples[whole:]

    def _append_energies(self, energies: Energies) -> None:
        needed = self._windows + len(energies)
        if needed > len(self._energies):
            grown = np.empty(max(needed, 2 * len(self._energies)))
            grown[: self._windows] = self._energies[: self._windows]
            self._energies = grown
        self._energies[self._windows : needed] = energies
        self._windows = needed

    def _energy_view(self) -> Energies:
        return self._energies[: self._windows]
