"""The stub's served model: its /v1/models card as vLLM writes it, and the refusals of a model's
front end (the clip limit, the mistral tokenizer mode's uuid-only and stereo 400s)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.audio.samples import tone_pcm, write_wav
from gateway.stub_upstream import StubState
from gateway.stub_upstream.served import AUDIO_URL_CHUNK_ERROR, ServedModel

# vLLM's ModelCard and ModelPermission fields (entrypoints/serve/engine/protocol.py)
CARD_FIELDS = {
    "id",
    "object",
    "created",
    "owned_by",
    "root",
    "parent",
    "max_model_len",
    "permission",
}
PERMISSION_FIELDS = {
    "id",
    "object",
    "created",
    "allow_create_engine",
    "allow_sampling",
    "allow_logprobs",
    "allow_search_indices",
    "allow_view",
    "allow_fine_tuning",
    "organization",
    "group",
    "is_blocking",
}


def part(path: Path, uuid: str | None = None) -> dict[str, Any]:
    data = base64.b64encode(path.read_bytes()).decode()
    found: dict[str, Any] = {
        "type": "audio_url",
        "audio_url": {"url": f"data:audio/wav;base64,{data}"},
    }
    if uuid is not None:
        found["uuid"] = uuid
    return found


def body(*parts: dict[str, Any]) -> dict[str, Any]:
    content = [*parts, {"type": "text", "text": "Transcribe."}]
    return {"model": "m", "messages": [{"role": "user", "content": content}]}


async def post(server: TestServer, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    url = server.make_url("/v1/chat/completions")
    async with aiohttp.ClientSession() as session, session.post(url, json=payload) as answer:
        return answer.status, await answer.json()


async def cards(server: TestServer) -> list[dict[str, Any]]:
    url = server.make_url("/v1/models")
    async with aiohttp.ClientSession() as session, session.get(url) as answer:
        listed = await answer.json()
    assert listed["object"] == "list"
    data: list[dict[str, Any]] = listed["data"]
    return data


async def test_the_default_card_is_vllms_shape(stub_server: TestServer) -> None:
    (card,) = await cards(stub_server)
    assert set(card) == CARD_FIELDS and set(card["permission"][0]) == PERMISSION_FIELDS
    assert (card["id"], card["root"], card["owned_by"]) == (
        "stub-audio-model",
        "stub-audio-model",
        "vllm",
    )


@pytest.mark.stub(served=ServedModel("voxtral", "/models/Voxtral-Mini-3B-2507", 5, mistral=True))
async def test_a_named_model_and_its_root(stub_server: TestServer) -> None:
    (card,) = await cards(stub_server)
    assert (card["id"], card["root"], card["parent"]) == (
        "voxtral",
        "/models/Voxtral-Mini-3B-2507",
        None,
    )


@pytest.mark.stub(served=ServedModel(clips_per_prompt=1))
async def test_more_clips_than_the_model_takes(
    stub_server: TestServer, stub: StubState, audio_dir: Path
) -> None:
    status, answer = await post(
        stub_server, body(part(audio_dir / "a.wav"), part(audio_dir / "b.wav"))
    )
    assert status == 400
    assert answer["error"]["message"] == "At most 1 audio(s) may be provided in one prompt."
    assert (await post(stub_server, body(part(audio_dir / "a.wav"))))[0] == 200


@pytest.mark.stub(served=ServedModel(mistral=True))
async def test_mistral_mode_refuses_uuid_only_parts_held_or_not(
    stub_server: TestServer, audio_dir: Path
) -> None:
    held = part(audio_dir / "a.wav", uuid="A")
    assert (await post(stub_server, body(held)))[0] == 200  # data and uuid: taken
    uuid_only = {"type": "audio_url", "audio_url": None, "uuid": "A"}
    status, answer = await post(stub_server, body(uuid_only))
    assert status == 400 and answer["error"]["message"] == AUDIO_URL_CHUNK_ERROR
    assert not answer["error"]["message"].startswith("Cache miss")


@pytest.mark.stub(served=ServedModel(mistral=True))
async def test_mistral_mode_refuses_stereo(stub_server: TestServer, tmp_path: Path) -> None:
    pcm = tone_pcm(0.5, 440.0)
    stereo = bytes(b for pair in zip(pcm[0::2], pcm[1::2], strict=True) for b in pair * 2)
    path = write_wav(tmp_path / "stereo.wav", stereo, channels=2)
    status, answer = await post(stub_server, body(part(path)))
    assert status == 400 and answer["error"]["message"] == "audio_array.ndim=2"
    mono = write_wav(tmp_path / "mono.wav", pcm)
    assert (await post(stub_server, body(part(mono))))[0] == 200
