"""References that cannot work are noticed and stop costing (`references/models.py`): a model
whose references miss right after their data was accepted (several vLLM API servers, a router
that drops uuids) gets data (and uuid) instead; a model that answers uuid-only parts with any
other 400 is sent the data once more and, when that succeeds, learned; a client's own bad
request is relayed and switches nothing. Against the stub's layouts (`api_servers.py`)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from gateway.audio.samples import write_tone
from gateway.stub_upstream import StubState
from gateway.stub_upstream.served import ServedModel
from gateway.stub_upstream.window import ModelWindow
from tests.conftest import GatewayFactory, chat_body, gateway_metrics
from tests.test_references import (
    CHAT,
    MISS,
    OK,
    REFERENCE,
    Client,
    chat,
    data_part,
    reference_metrics,
    reference_part,
    scripted_upstream,
    sent_parts,
    stream_events,
)
from tests.test_references_inline import uri_part, with_parts

TWO_API_SERVERS = {"api_server_count": 2, "api_server_per_request": True}
BAD = {"error": {"message": "bad field", "type": "BadRequestError", "param": None, "code": 400}}


async def switches(client: Client) -> dict[str, float]:
    samples = await gateway_metrics(client)
    prefix = "audio_gateway_reference_switches_total"
    found = {k[len(prefix) :]: v for k, v in samples.items() if k.startswith(prefix + "{")}
    found["data_models"] = samples.get("audio_gateway_reference_data_models", 0.0)
    return found


async def health_models(client: Client) -> dict[str, Any]:
    models: dict[str, Any] = (await (await client.get("/gateway/health")).json())["references"][
        "models"
    ]
    return models


def uuid_only_sent(stub: StubState, since: int) -> int:
    count = 0
    for request in stub.requests[since:]:
        body = json.loads(request.body)
        parts = body["messages"][-1]["content"]
        count += any(p.get("audio_url", "") is None for p in parts if isinstance(p, dict))
    return count


@pytest.mark.stub(**TWO_API_SERVERS)
async def test_two_api_servers_switch_the_model_to_data_and_stop_missing(
    make_gateway: GatewayFactory,
    stub: StubState,
    audio_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = await make_gateway(splice=REFERENCE)
    caplog.set_level(logging.WARNING, "gateway.references")
    for _ in range(12):  # every reference reaches the API server that does not hold the clip
        await chat(client, {"audio_path": "a.wav"})
    figures = await reference_metrics(client)
    assert figures["cache_miss"] == 8  # MIN_SAMPLES, then the switch
    seen = len(stub.requests)
    for _ in range(8):
        await chat(client, {"audio_path": "a.wav"})
        assert sent_parts(stub) == [data_part(audio_dir / "a.wav")]  # data, and the uuid
    assert len(stub.requests) == seen + 8  # no miss, no retry after the switch
    assert (await reference_metrics(client))["cache_miss"] == 8
    counted = await switches(client)
    assert counted['{reason="misses",to="data"}'] == 1 and counted["data_models"] == 1
    state = (await health_models(client))["stub-audio-model"]
    assert (state["mode"], state["reason"], state["switches"]) == ("data", "misses", 1)
    assert 0 < state["retry_in_seconds"] <= 300
    [warning] = [r for r in caplog.records if r.name == "gateway.references"]
    assert "API-server count" in warning.getMessage()
    assert "max-buffered-request-bytes" in warning.getMessage()


@pytest.mark.stub(api_server_count=2)
async def test_waves_over_two_api_servers_get_only_200s_and_no_miss_after_the_switch(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    """Each connection reaches one of two API servers, as the kernel spreads them: 16-seed
    waves of two new clips each."""
    client = await make_gateway(splice=REFERENCE)
    misses_after_switch = None
    for wave in range(6):
        names = [f"wave{wave}-{i}.wav" for i in range(2)]
        for i, name in enumerate(names):
            write_tone(audio_dir / name, 0.2, 300.0 + 50 * wave + 10 * i)
        bodies = [chat_body({"audio_path": name}) for name in names for _ in range(8)]
        answers = await asyncio.gather(*(client.post(CHAT, json=b) for b in bodies))
        assert [a.status for a in answers] == [200] * len(bodies)
        misses = (await reference_metrics(client))["cache_miss"]
        if misses_after_switch is None and await health_models(client):
            misses_after_switch = misses
    assert misses_after_switch is not None, "the layout was not noticed"
    assert (await reference_metrics(client))["cache_miss"] == misses_after_switch


@pytest.mark.stub(mm_processor_cache_gb=0)
async def test_a_forgetting_cache_is_learned_after_one_retry(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    await chat(client, {"audio_path": "a.wav"})
    await chat(client, {"audio_path": "a.wav"})  # refused by reference, 200 with the data
    before = len(stub.requests)
    for name in ("a.wav", "b.wav", "a.wav"):
        await chat(client, {"audio_path": name})
    assert len(stub.requests) == before + 3
    assert (await health_models(client))["stub-audio-model"]["reason"] == "refused"


@pytest.mark.stub(served=ServedModel(mistral=True))
@pytest.mark.parametrize("stream", [False, True])
async def test_a_model_refusing_uuid_only_parts_gives_the_client_only_200s(
    make_gateway: GatewayFactory,
    stub: StubState,
    audio_dir: Path,
    stream: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = await make_gateway(splice=REFERENCE)
    caplog.set_level(logging.WARNING, "gateway.references")
    a = audio_dir / "a.wav"
    for _ in range(4):
        response = await client.post(CHAT, json=with_parts(uri_part(a)) | {"stream": stream})
        assert response.status == 200, await response.text()
        if stream:
            events = await stream_events(response)
            assert events[-1]["data"] == "[DONE]"
            assert not any("error" in e["data"] for e in events if isinstance(e["data"], dict))
    assert len(stub.requests) == 5  # the data, one refused reference and its retry, 2 data
    assert uuid_only_sent(stub, 0) == 1
    assert sent_parts(stub) == [data_part(a)]  # data and uuid
    figures = await reference_metrics(client)
    assert figures["refused"] == 1
    counted = await switches(client)
    assert counted['{reason="refused",to="data"}'] == 1
    [warning] = [r for r in caplog.records if r.name == "gateway.references"]
    assert "AudioURLChunk" in warning.getMessage()
    assert "tokenizer-mode mistral" in warning.getMessage()


async def test_a_clients_own_bad_request_is_relayed_and_switches_nothing(
    make_gateway: GatewayFactory,
) -> None:
    answers = [(200, OK), (400, BAD), (400, BAD), (200, OK), (200, OK)]
    server, bodies = await scripted_upstream(answers)
    try:
        url = str(server.make_url("")).rstrip("/")
        client = await make_gateway(splice=REFERENCE, upstream={"url": url})
        await chat(client, {"audio_path": "a.wav"})
        response = await client.post(CHAT, json=chat_body({"audio_path": "a.wav"}))
        assert response.status == 400
        assert await response.json() == BAD  # the answer to the copy with data
        await chat(client, {"audio_path": "a.wav"})  # data: the failed retry recorded nothing
        await chat(client, {"audio_path": "a.wav"})
        parts = [json.loads(b)["messages"][-1]["content"][0] for b in bodies]
        assert [p["audio_url"] is None for p in parts] == [False, True, False, False, True]
        assert await health_models(client) == {}
        assert (await switches(client))["data_models"] == 0
    finally:
        await server.close()


async def test_the_retry_of_a_refusal_is_never_retried(make_gateway: GatewayFactory) -> None:
    server, bodies = await scripted_upstream([(200, OK), (400, BAD), (400, MISS)])
    try:
        url = str(server.make_url("")).rstrip("/")
        client = await make_gateway(splice=REFERENCE, upstream={"url": url})
        await chat(client, {"audio_path": "a.wav"})
        response = await client.post(CHAT, json=chat_body({"audio_path": "a.wav"}))
        assert (response.status, await response.json()) == (400, MISS)
        assert len(bodies) == 3
    finally:
        await server.close()


@pytest.mark.stub(window=ModelWindow(delay_seconds=0.001))
async def test_the_stubs_model_window_hears_a_uuid_only_part_as_its_held_clip(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    first = await chat(client, {"audio_path": "a.wav"})
    second = await chat(client, {"audio_path": "a.wav"})
    assert sent_parts(stub) == [reference_part(audio_dir / "a.wav")]
    text = first["choices"][0]["message"]["content"]
    assert text.startswith("pcm_sha256=")
    assert second["choices"][0]["message"]["content"] == text
