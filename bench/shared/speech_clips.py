"""The system bench's clips: speech-like synthetic audio in the forms audio benchmarks carry.

Every clip is new (its own seed), so the first copy of each wave is a real miss in vLLM's
processor cache whatever ran before it; `Form` names the container, rate and channels.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile

ENVELOPE_HZ = 3.0  # syllable-like loudness changes, so the clip is not a steady tone


@dataclass(frozen=True)
class Form:
    name: str
    extension: str
    rate_hz: int
    channels: int
    soundfile_format: str
    subtype: str | None

    @property
    def needs_resampling(self) -> bool:
        return self.rate_hz != 16_000


FORMS = {
    form.name: form
    for form in (
        Form("wav16", "wav", 16_000, 1, "WAV", "PCM_16"),
        Form("flac16", "flac", 16_000, 1, "FLAC", "PCM_16"),
        Form("wav44s", "wav", 44_100, 2, "WAV", "PCM_16"),
        Form("mp344s", "mp3", 44_100, 2, "MP3", "MPEG_LAYER_III"),
    )
}


def speech_like(seconds: float, rate_hz: int, channels: int, seed: int) -> np.ndarray:
    """Float32 frames x channels in [-0.5, 0.5]: harmonics under a moving envelope, plus noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate_hz), dtype=np.float64) / rate_hz
    pitch = 110.0 + 80.0 * rng.random()
    voice = sum(np.sin(2 * np.pi * pitch * k * t) / k for k in range(1, 6))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * ENVELOPE_HZ * t + rng.random() * 6.28)
    mono = 0.3 * envelope * voice / 2.3 + 0.02 * rng.standard_normal(t.size)
    frames = np.stack([mono * (1.0 - 0.2 * c) for c in range(channels)], axis=1)
    return np.clip(frames, -0.5, 0.5).astype(np.float32)


def write_clip(directory: Path, form: Form, seconds: float, seed: int) -> Path:
    path = directory / f"{form.name}-{seconds:g}s-{seed}.{form.extension}"
    frames = speech_like(seconds, form.rate_hz, form.channels, seed)
    soundfile.write(path, frames, form.rate_hz, format=form.soundfile_format, subtype=form.subtype)
    return path
