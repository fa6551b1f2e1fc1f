"""Voxtral, Audio Flamingo 3 and GLM-ASR behind the gateway, each on its own real vLLM server
(one per model for this module, started and stopped in turn). The gateway places each model
itself (vLLM's /v1/models names the model directory it reads), and the tests hold it to the
model's profile: every sidechannel form and a `file://` content part heard whole (the model's
own placeholders in vLLM's prompt token ids); two waves of 16 seeds by reference, only 200s
and one processing a wave in vLLM's processor cache counters (Voxtral, which refuses uuid-only
parts, gets data and uuid: by its profile from the start; told wrongly that it takes them, once
vLLM refused a reference); a 45 s clip sent whole with `[chunking]` at 30 s (each keeps long
audio); one clip more than the model takes, the gateway's 400 before any clip is read (and
vLLM's own, straight to it); a 16 kHz stereo clip with `[normalize]` off (mono for Voxtral,
which refuses stereo) and a 44.1 kHz one with it on; `/v1/audio/transcriptions` from a path
where the model serves it."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import gateway_metrics

from .audio_models import (
    MODELS,
    SECONDS,
    SEEDS,
    Served,
    body_for,
    data_uri,
    heard,
    make_gateway,
    serve,
    wave,
)
from .helpers import (
    BOUND_SECONDS,
    CHAT,
    GENERATED,
    MAX_TOKENS,
    MM_CACHE,
    RATE_HZ,
    Client,
    chat_4xx,
    delta,
    engine_client,
    engine_metrics,
    write_clip,
)
from .test_normalize import write_stereo

pytestmark = pytest.mark.timeout(300, func_only=True)
LONG_SECONDS = 45.0
STEREO_SECONDS = 3.0  # test_normalize's clips
CHUNKING = {"enabled": True, "threshold_seconds": 30.0, "max_chunk_seconds": 30.0}


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
    client = await make_gateway(served, clip_dir)
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


@pytest.mark.parametrize("told", [False, True], ids=["profile", "told-wrong"])
async def test_waves_of_seeds_by_reference_are_one_processing_each(
    served: Served, clip_dir: Path, told: bool
) -> None:
    # A seed waits for the one carrying the clip (a 2-core engine takes longer than 100 ms).
    # Told wrong: the operator's table says the model takes uuid-only parts; the gateway learns
    # otherwise from vLLM's answers.
    splice = {"repeats": "reference", "reference_wait_ms": 30_000}
    models = {served.model.name: {"accepts_uuid_only_parts": True}} if told else {}
    gateway = await make_gateway(served, clip_dir, splice=splice, models=models)
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
    with_data = {"data": SEEDS, "reference": 0, "refused": 0, "cache_miss": 0}
    if served.model.references:
        by_reference = {"data": 1, "reference": SEEDS - 1, "refused": 0, "cache_miss": 0}
        assert first == second == by_reference
        assert not health.get("references", {}).get("models")
        return
    if not told:  # its profile refuses them: every part goes with its data and uuid at once
        assert first == second == with_data
        return
    # Refused (not a cache miss): each refused seed is sent again with the data into a 200, and
    # the model learned: the next wave goes with data (and uuid) from the start.
    assert 1 <= first["refused"] == first["reference"] <= SEEDS - 1
    assert first["data"] == 1 + first["refused"] and first["cache_miss"] == 0
    assert second == with_data
    learned = health["references"]["models"][served.model.name]
    assert (learned["mode"], learned["reason"]) == ("data", "refused")


async def test_a_45_second_clip_is_sent_whole_in_the_models_own_window(
    served: Served, clip_dir: Path
) -> None:
    # [chunking] cuts at 30 s, as Qwen2-Audio needs (tests/engine/test_chunking.py); these
    # models keep long audio, and the gateway (which placed each by vLLM's /v1/models) knows.
    write_clip(clip_dir, "long.wav", LONG_SECONDS)
    gateway = await make_gateway(served, clip_dir, chunking=CHUNKING)
    try:
        body = body_for(served, {"audio_path": "long.wav"})
        assert await heard(gateway, served, body) == served.model.tokens(LONG_SECONDS)
        chunks = (await gateway_metrics(gateway)).get("audio_gateway_audio_chunks_total", 0.0)
        placed = (await (await gateway.get("/gateway/health")).json())["models"]
    finally:
        await gateway.close()
    assert chunks == 0
    assert placed[served.model.name]["architecture"] == served.model.architecture
    assert placed[served.model.name]["placed_by"].startswith("model directory ")


async def test_more_clips_than_the_model_takes_is_the_gateways_400_before_any_read(
    served: Served, gateway: Client
) -> None:
    # The clips do not exist: a gateway that read one would answer 404.
    names = [f"never-written{i}.wav" for i in range(served.model.clip_limit + 1)]
    refused_before = await chat_4xx(served.engine)
    response = await gateway.post(CHAT, json=body_for(served, {"audio_paths": names}))
    assert response.status == 400, await response.text()
    error = (await response.json())["error"]
    assert error["code"] == "too_many_clips"
    assert error["param"].startswith("metadata.audio_paths")
    assert f"limit of {served.model.clip_limit} " in error["message"]
    assert served.model.name in error["message"]
    assert await chat_4xx(served.engine) == refused_before  # nothing reached vLLM


async def test_one_more_clip_than_the_model_takes_straight_to_vllm_is_its_400(
    served: Served, clip_dir: Path
) -> None:
    """What the gateway's 400 spares the client (after reading and encoding every clip)."""
    names = [write_clip(clip_dir, f"m{i}.wav", 1.0) for i in range(served.model.clip_limit + 1)]
    parts = [{"type": "audio_url", "audio_url": {"url": data_uri(p)}} for p in names]
    body = body_for(served, messages=[{"role": "user", "content": parts}])
    async with engine_client(served.engine) as session, session.post(CHAT, json=body) as answer:
        assert answer.status == 400, await answer.text()


async def test_a_44khz_stereo_clip_normalized_is_heard_whole(
    served: Served, clip_dir: Path
) -> None:
    write_stereo(clip_dir, "stereo44.wav", "PCM_16", "WAV")
    gateway = await make_gateway(served, clip_dir, normalize={"enabled": True})
    try:
        body = body_for(served, {"audio_path": "stereo44.wav"})
        assert await heard(gateway, served, body) == served.model.tokens(STEREO_SECONDS)
    finally:
        await gateway.close()


async def test_a_16khz_stereo_clip_with_normalize_off_is_heard_whole(
    served: Served, gateway: Client, clip_dir: Path
) -> None:
    # Voxtral refuses stereo (mistral-common's 400 `audio_array.ndim=2`): the gateway, which
    # knows it, sends the clip mono; the other models downmix it themselves.
    write_stereo(clip_dir, "stereo16.wav", "PCM_16", "WAV", RATE_HZ)
    body = body_for(served, {"audio_path": "stereo16.wav"})
    assert await heard(gateway, served, body) == served.model.tokens(STEREO_SECONDS)


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
