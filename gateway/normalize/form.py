"""The form clips are normalized to, and whether a WAV header already says that form. Pure."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..audio.durations import read_header
from ..config import NormalizeConfig

WAVE_FORMAT_PCM = 1
WAVE_FORMAT_IEEE_FLOAT = 3
# sample_format -> (WAV format tag, bits per sample) of a WAV already in that form.
_WAV_TAGS = {"PCM_16": (WAVE_FORMAT_PCM, 16), "FLOAT": (WAVE_FORMAT_IEEE_FLOAT, 32)}


@dataclass(frozen=True, slots=True)
class TargetForm:
    """`channels` 0 keeps each clip's own count, `sample_rate` 0 its own rate; `subtype` is
    libsndfile's name. `any_container`: a clip whose header (WAV, FLAC) already says the rate
    and channel count is in form, whatever its container and sample format (a model that only
    needs mono clips, with `[normalize]` off)."""

    sample_rate: int
    channels: int
    subtype: str
    any_container: bool = False

    @classmethod
    def of(cls, config: NormalizeConfig) -> TargetForm:
        return cls(config.sample_rate, config.channels, config.sample_format)

    @classmethod
    def for_model(
        cls, config: NormalizeConfig, sample_rate: int, accepts_stereo: bool
    ) -> TargetForm | None:
        """The form a model's clips go in: with `[normalize]` on, its rate (and mono where it
        refuses stereo); off, mono only where it refuses stereo (else None: as stored)."""
        if config.enabled:
            channels = config.channels if accepts_stereo else 1
            return cls(sample_rate, channels, config.sample_format)
        return None if accepts_stereo else cls(0, 1, config.sample_format, any_container=True)

    def channels_for(self, source_channels: int) -> int:
        return self.channels or source_channels

    def rate_for(self, source_rate: int) -> int:
        return self.sample_rate or source_rate


@dataclass(frozen=True, slots=True)
class WavFormat:
    """What a WAV's `fmt ` chunk says."""

    tag: int
    channels: int
    sample_rate: int
    bits: int


def wav_format(head: bytes) -> WavFormat | None:
    """The `fmt ` chunk of a RIFF/WAVE file whose first bytes are `head`; None for anything
    else (another container, RF64, a header cut before its fmt chunk)."""
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    offset = 12
    while offset + 8 <= len(head):
        chunk_id = head[offset : offset + 4]
        (size,) = struct.unpack_from("<I", head, offset + 4)
        body = offset + 8
        if chunk_id == b"fmt ":
            if size < 16 or body + 16 > len(head):
                return None
            tag, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", head, body)
            return WavFormat(tag, channels, rate, bits)
        if chunk_id == b"data":
            return None  # no fmt chunk before the samples
        offset = body + size + (size & 1)  # chunks are padded to an even length
    return None


def in_form(head: bytes, form: TargetForm) -> bool:
    """Whether a clip starting with `head` is a WAV in `form` already (sent as it is), or,
    for a form of `any_container`, any clip whose header says its rate and channels fit.
    WAVE_FORMAT_EXTENSIBLE headers are not: they are rewritten as plain PCM or float."""
    if form.any_container:
        header = read_header(head)
        return header is not None and _fits(header.channels, header.sample_rate, form)
    return format_in_form(wav_format(head), form)


def _fits(channels: int, sample_rate: int, form: TargetForm) -> bool:
    return form.channels in (0, channels) and form.sample_rate in (0, sample_rate)


def format_in_form(found: WavFormat | None, form: TargetForm) -> bool:
    """`in_form`, from what `wav_format` found (None: not a WAV, so not in form)."""
    if found is None:
        return False
    kind = (found.tag, found.bits) == _WAV_TAGS[form.subtype]
    return kind and _fits(found.channels, found.sample_rate, form)
