"""Audio duration from a container's header, without decoding. Pure.

Formats whose header states the length: WAV (RIFF `fmt ` + `data` chunk sizes) and FLAC
(STREAMINFO total samples). Everything else (MP3, Ogg/Opus, M4A), or a header that does not
say (a streamed WAV with a placeholder size, a FLAC with 0 total samples), gives None:
unknown, never a guess.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pybase64

from ..errors import PayloadTooLarge

HEADER_BYTES = 64 * 1024  # enough for the fmt/data chunks of any sane WAV and FLAC's STREAMINFO
HEADER_BASE64_CHARS = HEADER_BYTES // 3 * 4  # whole base64 quanta: a prefix decodes on its own
FLOAT32_BYTES = 4  # vLLM decodes every sample to float32
_WAV_UNKNOWN_SIZES = (0, 0xFFFFFFFF)  # what streaming writers put before they know the length


@dataclass(frozen=True, slots=True)
class AudioHeader:
    """What a header says: frames per channel, channels and sample rate."""

    frames: int
    channels: int
    sample_rate: int

    @property
    def seconds(self) -> float:
        return self.frames / self.sample_rate

    @property
    def decoded_bytes(self) -> int:
        """What vLLM 0.33 counts against VLLM_MAX_AUDIO_DECODE_BYTES before it decodes:
        float32 samples at the native rate, every channel (frames x channels x 4)."""
        return self.frames * self.channels * FLOAT32_BYTES


def read_header(head: bytes, total_bytes: int | None = None) -> AudioHeader | None:
    """The header of a WAV or FLAC file whose first bytes are `head`; None when unknown.

    `total_bytes` (the file's size, when known) bounds a WAV `data` chunk whose declared size
    runs past the end of the file, as truncated or streamed files have."""
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return _wav_header(head, total_bytes)
    if head[:4] == b"fLaC":
        return _flac_header(head)
    return None


def read_base64_header(payload: str, total_bytes: int) -> AudioHeader | None:
    """The header of validated base64 audio, decoding only its first HEADER_BYTES."""
    return read_header(pybase64.b64decode(payload[:HEADER_BASE64_CHARS]), total_bytes)


def _wav_header(head: bytes, total_bytes: int | None) -> AudioHeader | None:
    offset = 12
    channels = rate = block_align = 0
    while offset + 8 <= len(head):
        chunk_id = head[offset : offset + 4]
        (size,) = struct.unpack_from("<I", head, offset + 4)
        body = offset + 8
        if chunk_id == b"fmt ":
            if body + 16 > len(head):
                return None
            _, channels, rate, _, block_align = struct.unpack_from("<HHIIH", head, body)
        elif chunk_id == b"data":
            if not (channels and rate and block_align):
                return None  # no usable fmt chunk before the data
            available = None if total_bytes is None else max(0, total_bytes - body)
            if size in _WAV_UNKNOWN_SIZES:
                if available is None:
                    return None
                size = available
            elif available is not None:
                size = min(size, available)
            return AudioHeader(size // block_align, channels, rate)
        offset = body + size + (size & 1)  # chunks are padded to an even length
    return None


def _flac_header(head: bytes) -> AudioHeader | None:
    # "fLaC", then the first metadata block, which must be STREAMINFO (type 0, 34 bytes).
    if len(head) < 8 + 34 or head[4] & 0x7F != 0:
        return None
    (packed,) = struct.unpack_from(">Q", head, 8 + 10)
    rate = packed >> 44
    channels = ((packed >> 41) & 0x7) + 1
    frames = packed & 0xFFFFFFFFF
    if not rate or not frames:
        return None
    return AudioHeader(frames, channels, rate)


def check_duration(
    header: AudioHeader | None, max_seconds: float, *, label: str, given: str, param: str
) -> None:
    """413 `audio_too_long` when the header says the clip runs past `max_seconds` (vLLM's
    VLLM_MAX_AUDIO_DECODE_DURATION_S); a clip of unknown length passes (vLLM decides)."""
    if header is not None and header.seconds > max_seconds:
        raise PayloadTooLarge(
            f"{label}: {given!r} is {header.seconds:.1f} s of audio, over the limit of "
            f"{max_seconds:g} s (audio.max_duration_seconds; vLLM refuses longer audio)",
            param=param,
            code="audio_too_long",
        )


def check_decoded_bytes(
    header: AudioHeader | None, max_bytes: int, *, label: str, given: str, param: str
) -> None:
    """413 `audio_decode_too_large` when the clip would decode to more than `max_bytes` of
    float32 samples (vLLM's VLLM_MAX_AUDIO_DECODE_BYTES); unknown sizes pass (vLLM decides)."""
    if header is not None and header.decoded_bytes > max_bytes:
        raise PayloadTooLarge(
            f"{label}: {given!r} decodes to {header.decoded_bytes} bytes of float32 samples "
            f"({header.frames} frames x {header.channels} channels x 4), over the limit of "
            f"{max_bytes} bytes (audio.max_decode_bytes; vLLM refuses larger audio)",
            param=param,
            code="audio_decode_too_large",
        )


def check_decode_limits(
    header: AudioHeader | None,
    max_seconds: float,
    max_bytes: int,
    *,
    label: str,
    given: str,
    param: str,
) -> None:
    """Both of vLLM's decode limits, as `serve` and `check` apply them: duration, then size."""
    check_duration(header, max_seconds, label=label, given=given, param=param)
    check_decoded_bytes(header, max_bytes, label=label, given=given, param=param)
