"""Long speech-like clips, 16 kHz mono, written a minute at a time (never whole in memory):
noise bursts with pauses, the shape quiet cuts look for (bench/chunker/, bench/longform/)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile

RATE_HZ = 16_000
FORMATS = {  # name: (container, subtype, extension)
    "WAV": ("WAV", "PCM_16", ".wav"),
    "FLAC": ("FLAC", "PCM_16", ".flac"),
    "MP3": ("MP3", "MPEG_LAYER_III", ".mp3"),
}
BLOCK_SECONDS = 60


def speech_like(frames: int, rng: np.random.Generator) -> np.ndarray:
    """Noise bursts of 0.3-3 s separated by pauses of 0.05-0.6 s, as float32 in [-0.5, 0.5]."""
    out = np.zeros(frames, dtype=np.float32)
    at = 0
    while at < frames:
        burst = int(rng.uniform(0.3, 3.0) * RATE_HZ)
        out[at : at + burst] = rng.uniform(-0.5, 0.5, min(burst, frames - at))
        at += burst + int(rng.uniform(0.05, 0.6) * RATE_HZ)
    return out


def write_long_clip(path: Path, minutes: float, name: str) -> None:
    """The clip, written a minute at a time (never whole in memory)."""
    container, subtype, _ = FORMATS[name]
    rng = np.random.default_rng(7)
    total = int(minutes * 60 * RATE_HZ)
    with soundfile.SoundFile(path, "w", RATE_HZ, 1, subtype=subtype, format=container) as clip:
        for start in range(0, total, BLOCK_SECONDS * RATE_HZ):
            clip.write(speech_like(min(BLOCK_SECONDS * RATE_HZ, total - start), rng))
