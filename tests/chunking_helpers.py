"""Shared by the chunking tests: a long speech-like clip, the stub as a 3 s model that
answers with what it heard, and the check that the pieces heard are the clip's samples."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy
import soundfile
from aiohttp.test_utils import TestServer

from gateway.stub_upstream import create_stub_app
from gateway.stub_upstream.window import ModelWindow, parse_word
from tests.conftest import chat_body

WINDOW_SECONDS = 3.0
RATE = 16_000
CHAT = "/v1/chat/completions"
CHUNKING = {
    "enabled": True,
    "threshold_seconds": WINDOW_SECONDS,
    "max_chunk_seconds": WINDOW_SECONDS,
    "min_tail_seconds": 0.5,
    "quiet_search_seconds": 1.0,
    "split": "fixed",
    "max_concurrent_chunks": 4,
}
BOUND_SECONDS = 10.0


def speech_like(seconds: float, seed: int) -> numpy.ndarray:
    """Noise in bursts with quiet gaps: no two pieces share samples by accident."""
    rng = numpy.random.default_rng(seed)
    samples = rng.integers(-12000, 12000, int(seconds * RATE), dtype=numpy.int16)
    envelope = (numpy.arange(len(samples)) // int(0.7 * RATE)) % 3 != 2  # every third 0.7 s
    return (samples * numpy.where(envelope, 1.0, 0.01)).astype(numpy.int16)


def pcm_digest(samples: numpy.ndarray) -> str:
    """As the stub digests what it heard: int32 frames x channels."""
    frames = (samples.astype(numpy.int32) << 16).reshape(-1, 1)  # soundfile's int32 scaling
    return hashlib.sha256(numpy.ascontiguousarray(frames).tobytes()).hexdigest()


def write_long_clips(audio_dir: Path) -> numpy.ndarray:
    """`long.wav` (10.4 s: pieces 3+3+3+1.4 s) and `long2.wav` in the audio root."""
    samples = speech_like(10.4, seed=1)
    soundfile.write(audio_dir / "long.wav", samples, RATE, subtype="PCM_16")
    soundfile.write(audio_dir / "long2.wav", speech_like(7.0, seed=2), RATE, subtype="PCM_16")
    return samples


async def windowed_stub(audio_dir: Path) -> AsyncIterator[TestServer]:
    """The stub as a 3 s model that truncates longer clips (each test its own window)."""
    app = create_stub_app(str(audio_dir.parent), window=ModelWindow(seconds=WINDOW_SECONDS))
    server = TestServer(app)
    await server.start_server()
    yield server
    await server.close()


def heard(content: str, join: str = " ") -> list[dict[str, str]]:
    return [parse_word(word) for word in content.split(join)]


def assert_pieces_are_the_clip(words: list[dict[str, str]], samples: numpy.ndarray) -> None:
    """Each piece heard whole (within the window), in order, the cuts losing and repeating
    nothing: the pieces' PCM digests are those of consecutive slices of the clip."""
    start = 0
    for word in words:
        frames = int(word["frames"])
        assert frames == int(word["total_frames"]) <= WINDOW_SECONDS * RATE
        assert word["pcm_sha256"] == pcm_digest(samples[start : start + frames])
        start += frames
    assert start == len(samples)


async def post_chat(gateway: Any, **extra: Any) -> aiohttp.ClientResponse:
    response: aiohttp.ClientResponse = await gateway.post(
        CHAT, json=chat_body({"audio_path": "long.wav"}, **extra)
    )
    return response
