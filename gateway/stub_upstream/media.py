"""What the stub does with one clip: take it from a data URI, a file:// URL or an http(s) URL
and decode it the way vLLM's audio loader would (by content), or reject it as vLLM would."""

from __future__ import annotations

import asyncio
import binascii
import hashlib
import io
import os
import re
import wave
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

import aiohttp
import pybase64

try:  # soundfile reads WAV/FLAC/Ogg as vLLM does; without it WAV falls back to `wave`.
    import soundfile
except (ImportError, OSError):  # pragma: no cover - depends on the machine
    soundfile = None

# The OpenAI type's `input_audio.format` literal, which vLLM 0.33 validates requests against.
INPUT_AUDIO_FORMATS = frozenset({"wav", "mp3"})
# vLLM 0.33's decode limits (vllm/envs.py), read from the same environment variables.
DURATION_LIMIT_ENV, DEFAULT_MAX_DURATION_S = "VLLM_MAX_AUDIO_DECODE_DURATION_S", 600
DECODE_LIMIT_ENV, DEFAULT_MAX_DECODE_BYTES = "VLLM_MAX_AUDIO_DECODE_BYTES", 256 * 1024**2
SOUNDFILE_CONTAINERS = ("wav", "flac", "ogg")
DATA_URI = re.compile(r"^data:([^;,]+)((?:;[^;,]+)*);base64,", re.ASCII)


AUDIO_FETCH_TIMEOUT_SECONDS = 10.0  # vLLM's default VLLM_AUDIO_FETCH_TIMEOUT


class StubRejection(Exception):
    """What vLLM would answer 400 to; `param` names the field when vLLM's error does, `kind`
    is the error's type ("Bad Request" for FastAPI's validation of query parameters)."""

    def __init__(
        self, message: str, param: str | None = None, kind: str = "BadRequestError"
    ) -> None:
        super().__init__(message)
        self.param = param
        self.kind = kind


@dataclass(frozen=True)
class ClipReport:
    source: str  # "data", "file" or "url"
    mime: str
    container: str
    bytes: int
    sha256: str
    duration_seconds: float | None
    sample_rate: int | None
    channels: int | None
    uuid: str | None

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def b64_bytes(payload: str) -> bytes:
    try:
        return pybase64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise StubRejection("audio data is not valid base64") from None


async def read_local_media(url: str, allowed_path: str | None) -> bytes:
    """As vLLM's --allowed-local-media-path: only files under that directory are read."""
    if allowed_path is None:
        raise StubRejection("Cannot load local files without `--allowed-local-media-path`.")
    return await asyncio.to_thread(_read_local_file, unquote(urlparse(url).path), allowed_path)


async def fetch_remote_media(
    url: str, allowed_domains: tuple[str, ...] | None, timeout_seconds: float
) -> bytes:
    """As vLLM's MediaConnector: GET an http(s) URL, only from `--allowed-media-domains` when
    that is set, within VLLM_AUDIO_FETCH_TIMEOUT."""
    host = urlparse(url).hostname
    if allowed_domains is not None and host not in allowed_domains:
        raise StubRejection(
            f"The URL must be from one of the allowed domains: {list(allowed_domains)}. "
            f"Input URL domain: {host}"
        )
    timeout = aiohttp.ClientTimeout(total=timeout_seconds)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url) as response,
        ):
            if response.status != 200:
                raise StubRejection(f"failed to fetch audio from {host}: HTTP {response.status}")
            return await response.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise StubRejection(f"failed to fetch audio from {host}: {exc!r}") from None


def _read_local_file(path: str, root: str) -> bytes:
    """Blocking (realpath and read): runs on a worker thread."""
    real = os.path.realpath(path)
    if not (real == root or real.startswith(root.rstrip(os.sep) + os.sep)):
        raise StubRejection(
            f"The file path {real} must be a subpath of `--allowed-local-media-path` {root}."
        )
    try:
        with open(real, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise StubRejection(f"cannot read {real}: {exc.strerror}") from None


def decode_audio(data: bytes, source: str, mime: str, uuid: str | None) -> ClipReport:
    """Decode the clip as vLLM's audio loader would, by content; raise when it cannot."""
    if not data:
        raise StubRejection("empty audio")
    container = _container(data[:12])
    if container is None:
        raise StubRejection("failed to decode audio: no known audio container")
    shape = _shape(data, container)
    rate, channels = (shape[1], shape[2]) if shape else (None, None)
    return ClipReport(
        source=source,
        mime=mime,
        container=container,
        bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        duration_seconds=shape[0] / shape[1] if shape else None,
        sample_rate=rate,
        channels=channels,
        uuid=uuid,
    )


def _shape(data: bytes, container: str) -> tuple[int, int, int] | None:
    """(frames, sample rate, channels), checked against vLLM's limits; None when the stub
    cannot read this container (no soundfile here, or MP3/MP4)."""
    if soundfile is not None and container in SOUNDFILE_CONTAINERS:
        try:
            with soundfile.SoundFile(io.BytesIO(data)) as clip:
                shape = (clip.frames, clip.samplerate, clip.channels)
                check_decode_limits(*shape)  # as vLLM: before a single sample is decoded
                clip.read(16)
                return shape
        except RuntimeError as exc:
            raise StubRejection(f"failed to decode {container} audio: {exc}") from None
    if container == "wav":
        try:
            with wave.open(io.BytesIO(data)) as clip:
                shape = (clip.getnframes(), clip.getframerate(), clip.getnchannels())
                check_decode_limits(*shape)
                clip.readframes(16)
                return shape
        except (wave.Error, EOFError) as exc:
            raise StubRejection(f"failed to decode WAV audio: {exc}") from None
    return None


def check_decode_limits(frames: int, rate: int, channels: int) -> None:
    """vLLM 0.33's soundfile loader: refuse a clip longer than VLLM_MAX_AUDIO_DECODE_DURATION_S
    or one whose float32 samples (frames x channels x 4) exceed VLLM_MAX_AUDIO_DECODE_BYTES."""
    max_seconds = int(os.environ.get(DURATION_LIMIT_ENV, DEFAULT_MAX_DURATION_S))
    if frames / rate > max_seconds:
        raise StubRejection(
            f"Audio exceeds maximum allowed duration of {max_seconds}s (file contains "
            f"{frames / rate:.1f}s at {rate}Hz). Set {DURATION_LIMIT_ENV} to increase this limit."
        )
    max_bytes = int(os.environ.get(DECODE_LIMIT_ENV, DEFAULT_MAX_DECODE_BYTES))
    estimated = frames * channels * 4
    if estimated > max_bytes:
        raise StubRejection(
            f"Audio would allocate {estimated / 2**20:.0f} MiB of PCM ({frames} frames x "
            f"{channels} channels x 4B), exceeding the {max_bytes / 2**20:.0f} MiB limit. "
            f"Set {DECODE_LIMIT_ENV} to increase this limit."
        )


def _container(head: bytes) -> str | None:
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "ogg"
    if head[4:8] == b"ftyp":
        return "mp4"
    if head[:3] == b"ID3" or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "mp3"
    return None
