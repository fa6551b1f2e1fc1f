"""The official `openai` SDK in front of the gateway: `metadata=` and `extra_body` carry the
sidechannel, plain and streamed."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest
from openai import AsyncOpenAI

from gateway.stub_upstream import StubState
from tests.conftest import forwarded_json, sha256_of

MODEL = "stub-audio-model"
PROMPT = [{"role": "user", "content": "Transcribe the audio."}]


@pytest.fixture
async def client(gateway) -> AsyncIterator[AsyncOpenAI]:
    base_url = str(gateway.make_url("/v1"))
    async with AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=10) as sdk:
        yield sdk


async def test_metadata_audio_path(client: AsyncOpenAI, stub: StubState, audio_dir: Path) -> None:
    completion = await client.chat.completions.create(
        model=MODEL, messages=PROMPT, metadata={"audio_path": "b.wav", "run": "sdk"}
    )
    report = completion.model_extra["stub"]
    assert [clip["sha256"] for clip in report["clips"]] == [sha256_of(audio_dir / "b.wav")]
    assert report["metadata"] == {"run": "sdk"}
    assert completion.choices[0].message.content.startswith("wav ")
    assert stub.requests[-1].headers["Authorization"] == "Bearer x"


async def test_metadata_audio_paths_as_json_string(
    client: AsyncOpenAI, stub: StubState, audio_dir: Path
) -> None:
    # The SDK types metadata as string-to-string, so the list travels as its JSON text.
    names = ["c.wav", "a.wav"]
    completion = await client.chat.completions.create(
        model=MODEL, messages=PROMPT, metadata={"audio_paths": json.dumps(names)}
    )
    clips = completion.model_extra["stub"]["clips"]
    assert [clip["sha256"] for clip in clips] == [sha256_of(audio_dir / n) for n in names]
    assert completion.model_extra["stub"]["has_metadata"] is False


async def test_extra_body_audio_paths_list(client: AsyncOpenAI, audio_dir: Path) -> None:
    names = ["a.wav", "b.wav", "c.wav"]
    completion = await client.chat.completions.create(
        model=MODEL, messages=PROMPT, extra_body={"metadata": {"audio_paths": names}}
    )
    clips = completion.model_extra["stub"]["clips"]
    assert [clip["sha256"] for clip in clips] == [sha256_of(audio_dir / n) for n in names]


async def test_extra_body_audio_data(client: AsyncOpenAI, stub, audio_dir: Path) -> None:
    uri = "data:audio/wav;base64," + base64.b64encode((audio_dir / "c.wav").read_bytes()).decode()
    completion = await client.chat.completions.create(
        model=MODEL, messages=PROMPT, extra_body={"metadata": {"audio_data": uri}}
    )
    assert completion.model_extra["stub"]["clips"][0]["sha256"] == sha256_of(audio_dir / "c.wav")
    assert forwarded_json(stub)["messages"][-1]["content"][0]["audio_url"]["url"] == uri


async def test_streamed(client: AsyncOpenAI, stub: StubState, audio_dir: Path) -> None:
    stub.hold.set()
    stream = await client.chat.completions.create(
        model=MODEL, messages=PROMPT, metadata={"audio_path": "c.wav"}, stream=True
    )
    chunks = [chunk async for chunk in stream]
    report = chunks[0].model_extra["stub"]
    assert [clip["sha256"] for clip in report["clips"]] == [sha256_of(audio_dir / "c.wav")]
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
    assert text.startswith("wav ")
    assert f"sha256={sha256_of(audio_dir / 'c.wav')[:12]}" in text
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert stub.streams_finished == 1


async def test_gateway_error_surfaces_as_sdk_error(client: AsyncOpenAI, stub: StubState) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        await client.chat.completions.create(
            model=MODEL, messages=PROMPT, metadata={"audio_path": "missing.wav"}
        )
    error = raised.value
    assert error.status_code == 404
    assert error.param == "metadata.audio_path"
    assert error.type == "not_found_error"
    assert "'missing.wav'" in error.message
    assert stub.request_count == 0


async def test_models_passthrough(client: AsyncOpenAI) -> None:
    models = await client.models.list()
    assert [model.id for model in models.data] == [MODEL]
