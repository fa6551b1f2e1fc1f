"""`[normalize]` against the real vLLM: 44.1 kHz stereo clips, which this CPU build cannot
resample (it has no torchaudio, vLLM's default resampler), are sent at the model's 16 kHz mono
and heard whole: 25 `<|AUDIO|>` placeholders a second, read from the engine's own prompt token
ids. The same clips unnormalized show why: this engine answers them with a 5xx."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import numpy
import pytest
import soundfile

from engine.server import EngineServer
from tests.conftest import gateway_metrics

from .helpers import (
    CHAT,
    MAX_TOKENS,
    Client,
    audio_tokens_for,
    chat_body,
    count,
    make_gateway_client,
    post_json,
)

pytestmark = pytest.mark.timeout(180, func_only=True)
SECONDS = 3.0
SOURCE_RATE_HZ = 44_100
NORMALIZED = "audio_gateway_normalized_clips_total"


def write_stereo(
    folder: Path, name: str, subtype: str, container: str, rate_hz: int = SOURCE_RATE_HZ
) -> Path:
    """A stereo clip (44.1 kHz unless told), different in each channel (a mean is not a copy of
    either)."""
    path = folder / name
    t = numpy.arange(int(SECONDS * rate_hz)) / rate_hz
    seed = sum(name.encode())
    left = 0.3 * numpy.sin(2 * numpy.pi * (220 + seed % 50) * t)
    right = 0.2 * numpy.sin(2 * numpy.pi * 330 * t) * (numpy.sin(2 * numpy.pi * 3 * t) > 0)
    frames = numpy.stack([left, right], axis=1).astype(numpy.float32)
    soundfile.write(path, frames, rate_hz, format=container, subtype=subtype)
    return path


@pytest.fixture
async def normalizing(qwen_engine: EngineServer, clip_dir: Path) -> AsyncIterator[Client]:
    client = await make_gateway_client(
        qwen_engine, clip_dir, normalize={"enabled": True}, splice={"repeats": "reference"}
    )
    yield client
    await client.close()


@pytest.mark.parametrize(
    ("name", "subtype", "container"),
    [("stereo44.wav", "PCM_16", "WAV"), ("stereo44.mp3", "MPEG_LAYER_III", "MP3")],
    ids=["wav", "mp3"],
)
async def test_a_44khz_stereo_clip_is_heard_whole_once_normalized(
    normalizing: Client,
    clip_dir: Path,
    qwen_tokens: dict[str, int],
    name: str,
    subtype: str,
    container: str,
) -> None:
    write_stereo(clip_dir, name, subtype, container)
    before = (await gateway_metrics(normalizing)).get(NORMALIZED, 0.0)
    body = chat_body({"audio_path": name}, return_token_ids=True)
    answers = await asyncio.gather(*(post_json(normalizing, CHAT, body) for _ in range(4)))
    audio = qwen_tokens["<|AUDIO|>"]
    expected = audio_tokens_for(SECONDS)
    for answer in answers:
        assert count(answer["prompt_token_ids"], audio) == expected
        assert len(answer["choices"][0]["token_ids"]) == MAX_TOKENS
    # Four seeds of one clip: one conversion, cached and single-flighted.
    assert (await gateway_metrics(normalizing)).get(NORMALIZED, 0.0) - before == 1


async def test_unnormalized_the_engine_cannot_take_them(
    qwen_engine: EngineServer, clip_dir: Path, venv: Path
) -> None:
    """The reason the test above needs `[normalize]`: this vLLM has no resampler."""
    if any(venv.glob("lib/python*/site-packages/torchaudio/__init__.py")):
        pytest.skip("this engine venv has torchaudio: it resamples by itself")
    write_stereo(clip_dir, "raw44.wav", "PCM_16", "WAV")
    gateway = await make_gateway_client(qwen_engine, clip_dir)
    try:
        response = await gateway.post(CHAT, json=chat_body({"audio_path": "raw44.wav"}))
        assert response.status >= 500, await response.text()
    finally:
        await gateway.close()
