"""Synthetic WAV clips for the demo, the tests and the benchmark."""

from __future__ import annotations

import array
import math
import wave
from pathlib import Path

SAMPLE_RATE_HZ = 16_000


def tone_pcm(seconds: float, frequency_hz: float, rate_hz: int = SAMPLE_RATE_HZ) -> bytes:
    """16-bit mono PCM of a sine tone; one period is computed and tiled, so long clips are cheap."""
    frames = int(seconds * rate_hz)
    period = max(1, round(rate_hz / frequency_hz))
    cycle = array.array(
        "h", (int(12000 * math.sin(2 * math.pi * i / period)) for i in range(period))
    ).tobytes()
    repeats = frames // period + 1
    return (cycle * repeats)[: frames * 2]


def write_wav(
    path: str | Path, pcm: bytes, rate_hz: int = SAMPLE_RATE_HZ, channels: int = 1
) -> Path:
    path = Path(path)
    with wave.open(str(path), "wb") as clip:
        clip.setnchannels(channels)
        clip.setsampwidth(2)
        clip.setframerate(rate_hz)
        clip.writeframes(pcm)
    return path


def write_tone(path: str | Path, seconds: float, frequency_hz: float = 440.0) -> Path:
    return write_wav(path, tone_pcm(seconds, frequency_hz))


def wav_bytes_for_size(target_bytes: int) -> float:
    """Seconds of 16 kHz mono 16-bit audio whose WAV file is about `target_bytes` long."""
    return max(0.0, (target_bytes - 44) / (2 * SAMPLE_RATE_HZ))
