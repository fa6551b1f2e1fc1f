"""Voxtral, Audio Flamingo 3 and GLM-ASR behind the gateway, each on its own real vLLM server
(one per model for this module, started and stopped in turn): every sidechannel form and a
`file://` content part heard whole (the model's own placeholders in vLLM's prompt token ids),
waves of 16 seeds by reference costing one processing (vLLM's own processor cache counters), a
45 s clip in the model's own window, a row with more clips than the model takes, a 44.1 kHz
stereo clip normalized, and `/v1/audio/transcriptions` from a path where the model serves it."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from .audio_models import (
    MODELS,
    SECONDS,
    SEEDS,
    Served,
    body_for,
    data_uri,
    heard,
    serve,
    wave,
)
from .helpers import (
    BOUND_SECONDS,
    CHAT,
    GENERATED,
    MAX_TOKENS,
    MM_CACHE,
    Client,
    delta,
    engine_metrics,
    make_gateway_client,
    write_clip,
)
from .test_normalize import write_stereo

pytestmark = pytest.mark.timeout(300, func_only=True)
LONG_SECONDS = 45.0
STEREO_SECONDS = 3.0  # test_normalize's clips
UNPLACED = {"ask_upstream": False, "read_model_dirs": False}


@pytest.fixture(scope="module", params=list(MODELS))
def served(
    request: pytest.FixtureRequest,
    venv: Path,
    tiny_models: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Served]:
    workdir = tmp_path_factory.mktemp(request.param)
    yield from serve(MODELS[request.param], tiny_models, workdir, venv)


@pytest.fixture
def clip_dir(served: Served) -> Iterator[Path]:
    """A folder of the test's own under the server's allowed media root (the gateway's root)."""
    path = Path(tempfile.mkdtemp(prefix="t-", dir=served.media_root))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def gateway(served: Served, clip_dir: Path) -> AsyncIterator[Client]:
    client = await make_gateway_client(served.engine, clip_dir)
    yield client
    await client.close()


@pytest.mark.parametrize("form", ["audio_path", "audio_paths", "audio_data"])
async def test_every_sidechannel_form_is_heard_whole(
    served: Served, gateway: Client, clip_dir: Path, form: str
) -> None:
    clips = [write_clip(clip_dir, f"c{i}.wav", SECONDS + i) for i in range(2)]
    clips = clips[: served.model.clip_limit]
    forms: dict[str, dict[str, Any]] = {
        "audio_path": {"audio_path": clips[0].name},
        "audio_paths": {"audio_paths": [clip.name for clip in clips]},
        "audio_data": {"audio_data": data_uri(clips[0])},
    }
    metadata = forms[form]
    sent = clips if form == "audio_paths" else clips[:1]
    expected = sum(served.model.tokens(SECONDS + i) for i in range(len(sent)))
    assert await heard(gateway, served, body_for(served, metadata)) == expected


async def test_a_file_url_content_part_is_heard_whole(
    served: Served, gateway: Client, clip_dir: Path
) -> None:
    clip = write_clip(clip_dir, "part.wav", SECONDS)
    content = [
        {"type": "audio_url", "audio_url": {"url": clip.as_uri()}},
        {"type": "text", "text": "What is in the audio?"},
    ]
    body = body_for(served, messages=[{"role": "user", "content": content}])
    assert await heard(gateway, served, body) == served.model.tokens(SECONDS)


async def test_waves_of_seeds_by_reference_are_one_processing_each(
    served: Served, clip_dir: Path
) -> None:
    # A seed waits for the one carrying the clip (a 2-core engine takes longer than 100 ms).
    # The gateway is not told the model, nor looks for it: what it does is learned from vLLM.
    splice = {"repeats": "reference", "reference_wait_ms": 30_000}
    gateway = await make_gateway_client(served.engine, clip_dir, splice=splice, placement=UNPLACED)
    try:
        waves = []
        for number in range(2):
            write_clip(clip_dir, f"wave{number}.wav", SECONDS)
            waves.append(await wave(gateway, served, f"wave{number}.wav"))
        health = await (await gateway.get("/gateway/health")).json()
    finally:
        await gateway.close()
    one_processing = {MM_CACHE[0]: SEEDS, MM_CACHE[1]: SEEDS - 1}
    answered_once = {GENERATED[0]: SEEDS, GENERATED[1]: SEEDS * MAX_TOKENS}
    for _, engine in waves:
        assert engine == {**one_processing, **answered_once}
    first, second = (ours for ours, _ in waves)
    if served.model.references:
        by_reference = {"data": 1, "reference": SEEDS - 1, "refused": 0, "cache_miss": 0}
        assert first == second == by_reference
        assert "references" not in health or not health["references"]["models"]
        return
    # Refused (not a cache miss): each refused seed is sent again with the data into a 200, and
    # the model learned: the next wave goes with data (and uuid) from the start.
    assert 1 <= first["refused"] == first["reference"] <= SEEDS - 1
    assert first["data"] == 1 + first["refused"] and first["cache_miss"] == 0
    assert second == {"data": SEEDS, "reference": 0, "refused": 0, "cache_miss": 0}
    learned = health["references"]["models"][served.model.name]
    assert (learned["mode"], learned["reason"]) == ("data", "refused")


async def test_a_45_second_clip_is_heard_in_the_models_own_window(
    served: Served, gateway: Client, clip_dir: Path
) -> None:
    write_clip(clip_dir, "long.wav", LONG_SECONDS)
    body = body_for(served, {"audio_path": "long.wav"})
    assert await heard(gateway, served, body) == served.model.tokens(LONG_SECONDS)


async def test_more_clips_than_the_model_takes_is_a_400(
    served: Served, gateway: Client, clip_dir: Path
) -> None:
    names = [
        write_clip(clip_dir, f"m{i}.wav", 1.0).name for i in range(served.model.clip_limit + 1)
    ]
    body = body_for(served, {"audio_paths": names})
    response = await gateway.post(CHAT, json=body)
    text = await response.text()
    assert response.status == 400, text


async def test_a_44khz_stereo_clip_normalized_is_heard_whole(
    served: Served, clip_dir: Path
) -> None:
    write_stereo(clip_dir, "stereo44.wav", "PCM_16", "WAV")
    gateway = await make_gateway_client(served.engine, clip_dir, normalize={"enabled": True})
    try:
        body = body_for(served, {"audio_path": "stereo44.wav"})
        assert await heard(gateway, served, body) == served.model.tokens(STEREO_SECONDS)
    finally:
        await gateway.close()


async def test_a_transcription_from_a_path(served: Served, gateway: Client, clip_dir: Path) -> None:
    if not served.model.transcriptions:
        pytest.skip(f"{served.model.name} serves no transcriptions")
    write_clip(clip_dir, "speech.wav", SECONDS)
    before = await engine_metrics(served.engine)
    body = {
        "model": served.model.name,
        "max_completion_tokens": MAX_TOKENS,
        "metadata": {"audio_path": "speech.wav"},
    }
    response = await asyncio.wait_for(
        gateway.post("/v1/audio/transcriptions", json=body), BOUND_SECONDS
    )
    text = await response.text()
    assert response.status == 200, text
    answer = await response.json()
    assert isinstance(answer["text"], str)
    assert answer["usage"] == {"type": "duration", "seconds": SECONDS}
    served_total = "vllm:request_success_total"
    assert delta(before, await engine_metrics(served.engine), served_total) == {served_total: 1}
