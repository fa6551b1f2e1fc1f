"""The stub where the real vLLM 0.32 engine showed it wrong (held to it by
tests/engine/test_stub_vs_engine.py): `vllm:mm_cache_*` count every admitted item, uuid-only
hits included; identical data without a uuid is a content-hash hit; per-request multimodal
kwargs are vLLM's 400 unless the stub trusts them; streams say `charset=utf-8`; answers carry
vLLM's token-id fields (null unless asked)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.audio.samples import write_tone
from gateway.stub_upstream.mm_kwargs import REFUSALS
from tests.test_stub_mm_cache import body, chat, data_part, uuid_only

Client = TestClient[web.Request, web.Application]
KWARGS = {"mm_processor_kwargs": {"sampling_rate": 16000}, "media_io_kwargs": {"audio": {"x": 1}}}


@pytest.fixture
async def client(stub_server: TestServer) -> AsyncIterator[Client]:
    async with TestClient(stub_server) as test_client:
        yield test_client


@pytest.fixture
def clip(audio_dir: Path) -> Path:
    return write_tone(audio_dir / "tone.wav", 0.25, 440.0)


async def mm_counters(client: Client) -> tuple[float, float]:
    """(queries, hits) from the stub's /metrics, as vLLM exports them."""
    text = await (await client.get("/metrics")).text()
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name.startswith("vllm:mm_cache_"):
            assert name.endswith('{engine="0",model_name="stub-audio-model"}')
            values[name.partition("{")[0]] = float(value)
    return values["vllm:mm_cache_queries_total"], values["vllm:mm_cache_hits_total"]


async def ok(client: Client, *parts: dict[str, Any], **extra: Any) -> dict[str, Any]:
    response = await chat(client, *parts, **extra)
    assert response.status == 200, await response.text()
    answer: dict[str, Any] = await response.json()
    return answer


async def test_uuid_only_hits_count_as_queries_and_hits(client: Client, clip: Path) -> None:
    await ok(client, data_part(clip, "k"))
    assert await mm_counters(client) == (1, 0)
    for _ in range(3):
        await ok(client, uuid_only("k"))
    assert await mm_counters(client) == (4, 3)


async def test_a_miss_counts_nothing_but_a_4xx(client: Client) -> None:
    assert (await chat(client, uuid_only("never-sent"))).status == 400
    assert await mm_counters(client) == (0, 0)
    text = await (await client.get("/metrics")).text()
    assert 'http_requests_total{handler="/v1/chat/completions",method="POST",status="4xx"} 1.0' in (
        text
    )


async def test_identical_data_without_uuid_is_a_content_hash_hit(
    client: Client, clip: Path
) -> None:
    await ok(client, data_part(clip))
    await ok(client, data_part(clip, kind="input_audio"))  # the same bytes, the other part type
    assert await mm_counters(client) == (2, 1)


async def test_the_same_new_clip_twice_in_one_request_is_two_queries_one_hit(
    client: Client, clip: Path
) -> None:
    await ok(client, data_part(clip, "new"), data_part(clip, "new"))
    assert await mm_counters(client) == (2, 1)


@pytest.mark.parametrize("name", REFUSALS)
async def test_per_request_kwargs_are_vllms_400(client: Client, clip: Path, name: str) -> None:
    response = await chat(client, data_part(clip), **{name: KWARGS[name]})
    assert response.status == 400
    why = REFUSALS[name]
    message = (
        f"Per-request {name} are disabled by default because {why}. Start the server with "
        f"--trust-request-mm-kwargs only when clients are trusted. (parameter={name})"
    )
    assert await response.json() == {
        "error": {"message": message, "type": "BadRequestError", "param": name, "code": 400}
    }
    tokenized = await client.post("/tokenize", json={**body(data_part(clip)), name: KWARGS[name]})
    assert tokenized.status == 400


async def test_the_processor_kwargs_are_named_first(client: Client, clip: Path) -> None:
    response = await chat(client, data_part(clip), **KWARGS)
    assert (await response.json())["error"]["param"] == "mm_processor_kwargs"


async def test_empty_kwargs_are_no_kwargs(client: Client, clip: Path) -> None:
    await ok(client, data_part(clip), mm_processor_kwargs={}, media_io_kwargs=None)


@pytest.mark.stub(trust_request_mm_kwargs=True)
async def test_a_trusting_stub_takes_them(client: Client, clip: Path) -> None:
    await ok(client, data_part(clip), **KWARGS)


async def test_a_stream_is_vllms_sequence(client: Client, clip: Path) -> None:
    response = await chat(client, data_part(clip), stream=True, return_token_ids=True)
    assert response.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    events = [line[6:] for line in (await response.text()).split("\n") if line.startswith("data")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    first, *tokens = chunks
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert isinstance(first["prompt_token_ids"], list)
    reasons = [chunk["choices"][0]["finish_reason"] for chunk in tokens]
    assert reasons[-1] == "stop" and not any(reasons[:-1])
    assert all(len(chunk["choices"][0]["token_ids"]) == 1 for chunk in tokens)


async def test_a_required_call_over_a_tool_that_is_not_an_object_is_a_400(client: Client) -> None:
    """A malformed tool is refused as a bad request, not a stub crash (500)."""
    body = {
        "model": "stub-audio-model",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": ["set_mode"],
        "tool_choice": "required",
    }
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status == 400
    assert "tool" in (await response.json())["error"]["message"]
