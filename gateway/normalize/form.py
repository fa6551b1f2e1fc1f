"""The form clips are normalized to, and whether a WAV header already says that form. Pure."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..config import NormalizeConfig

WAVE_FORMAT_PCM = 1
WAVE_FORMAT_IEEE_FLOAT = 3
# sample_format -> (WAV format tag, bits per sample) of a WAV already in that form.
_WAV_TAGS = {"PCM_16": (WAVE_FORMAT_PCM, 16), "FLOAT": (WAVE_FORMAT_IEEE_FLOAT, 32)}


@dataclass(frozen=True, slots=True)
class TargetForm:
    """`channels` 0 keeps each clip's own count; `subtype` is libsndfile's name."""

    sample_rate: int
    channels: int
    subtype: str

    @classmethod
    def of(cls, config: NormalizeConfig) -> TargetForm:
        return cls(config.sample_rate, config.channels, config.sample_format)

    def channels_for(self, source_channels: int) -> int:
        return self.channels or source_channels


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
    """Whether a clip starting with `head` is a WAV in `form` already (sent as it is).
    WAVE_FORMAT_EXTENSIBLE headers are not: they are rewritten as plain PCM or float."""
    return format_in_form(wav_format(head), form)


def format_in_form(found: WavFormat | None, form: TargetForm) -> bool:
    """`in_form`, from what `wav_format` found (None: not a WAV, so not in form)."""
    if found is None:
        return False
    channels_match = form.channels in (0, found.channels)
    kind = (found.tag, found.bits) == _WAV_TAGS[form.subtype]
    return kind and channels_match and found.sample_rate == form.sample_rate
