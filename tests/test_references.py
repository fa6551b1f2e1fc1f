"""`[splice] repeats = "reference"`, end to end against the stub, which keeps vLLM 0.33's
multimodal processor cache: a clip the upstream holds goes as its uuid alone, a miss or an
engine drift is answered by sending the request again with every clip's data, and the client
sees only that second answer."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.audio.samples import write_tone
from gateway.stub_upstream import StubState
from tests.conftest import (
    GatewayFactory,
    b64_of,
    cache_stats,
    chat_body,
    named_metrics,
    sha256_of,
)

Client = TestClient[web.Request, web.Application]
CHAT = "/v1/chat/completions"
REFERENCE = {"repeats": "reference"}
DRIFT = {"X-Stub-Mm-Drift": "1"}  # the stub's engine loses the clips this request names
BOUND_SECONDS = 10


def sent_parts(stub: StubState, index: int = -1) -> list[dict[str, Any]]:
    """The audio parts of the last user message of a chat body the stub received."""
    body = json.loads(stub.requests[index].body)
    content = body["messages"][-1]["content"]
    return [p for p in content if p.get("type") in ("audio_url", "input_audio")]


def data_part(path: Path) -> dict[str, Any]:
    url = f"data:audio/wav;base64,{b64_of(path)}"
    return {"type": "audio_url", "audio_url": {"url": url}, "uuid": sha256_of(path)}


def reference_part(path: Path, kind: str = "audio_url") -> dict[str, Any]:
    return {"type": kind, kind: None, "uuid": sha256_of(path)}


async def chat(client: Client, metadata: dict[str, Any], **extra: Any) -> dict[str, Any]:
    headers = extra.pop("headers", None)
    response = await client.post(CHAT, json=chat_body(metadata, **extra), headers=headers)
    text = await response.text()
    assert response.status == 200, text
    answer: dict[str, Any] = json.loads(text)
    return answer


async def reference_metrics(client: Client) -> dict[str, float]:
    names = {
        "data": 'audio_gateway_audio_parts_total{form="data"}',
        "reference": 'audio_gateway_audio_parts_total{form="reference"}',
        "cache_miss": 'audio_gateway_reference_retries_total{reason="cache_miss"}',
        "upstream_error": 'audio_gateway_reference_retries_total{reason="upstream_error"}',
        "stream_error": 'audio_gateway_reference_retries_total{reason="stream_error"}',
        "refused": 'audio_gateway_reference_retries_total{reason="refused"}',
        "saved": "audio_gateway_reference_bytes_saved_total",
        "clips": "audio_gateway_reference_clips",
    }
    return await named_metrics(client, names)


async def stream_events(response: Any) -> list[dict[str, Any]]:
    """Every SSE event of a response: its `event` name, if any, and `data` (parsed JSON, or
    the text `[DONE]`)."""
    text = (await asyncio.wait_for(response.read(), BOUND_SECONDS)).decode()
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        event: dict[str, Any] = {}
        for line in block.splitlines():
            name, _, value = line.partition(": ")
            event[name] = value if name != "data" or value == "[DONE]" else json.loads(value)
        if event:
            events.append(event)
    return events


# --- what goes upstream ------------------------------------------------------------------------


async def test_a_held_clip_goes_as_its_uuid_alone(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    first = await chat(client, {"audio_path": "a.wav"})
    assert sent_parts(stub) == [data_part(audio_dir / "a.wav")]
    second = await chat(client, {"audio_path": "a.wav"})
    assert sent_parts(stub) == [reference_part(audio_dir / "a.wav")]
    # vLLM answers from the clip it holds: the same audio, decoded once.
    assert second["stub"]["clips"][0]["sha256"] == first["stub"]["clips"][0]["sha256"]
    assert stub.decodes == 1
    figures = await reference_metrics(client)
    assert (figures["data"], figures["reference"], figures["clips"]) == (1, 1, 1)
    assert figures["saved"] == len(b64_of(audio_dir / "a.wav"))


async def test_data_mode_is_unchanged(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway()
    for _ in range(2):
        await chat(client, {"audio_path": "a.wav"})
        assert sent_parts(stub) == [
            {
                "type": "audio_url",
                "audio_url": {"url": data_part(audio_dir / "a.wav")["audio_url"]["url"]},
            }
        ]
    assert stub.decodes == 2
    assert (await reference_metrics(client))["reference"] == 0


async def test_input_audio_parts_go_as_their_data_less_shape(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice={**REFERENCE, "chat_part": "input_audio"})
    await chat(client, {"audio_path": "b.wav"})
    data = {"data": b64_of(audio_dir / "b.wav"), "format": "wav"}
    uuid = sha256_of(audio_dir / "b.wav")
    assert sent_parts(stub) == [{"type": "input_audio", "input_audio": data, "uuid": uuid}]
    await chat(client, {"audio_path": "b.wav"})
    assert sent_parts(stub) == [reference_part(audio_dir / "b.wav", "input_audio")]
    assert stub.decodes == 1


async def test_file_url_mode_names_held_clips_and_saves_no_base64(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice={**REFERENCE, "mode": "file_url"})
    await chat(client, {"audio_path": "c.wav"})
    url = Path(os.path.realpath(audio_dir / "c.wav")).as_uri()
    uuid = sha256_of(audio_dir / "c.wav")
    assert sent_parts(stub) == [{"type": "audio_url", "audio_url": {"url": url}, "uuid": uuid}]
    await chat(client, {"audio_path": "c.wav"})
    assert sent_parts(stub) == [reference_part(audio_dir / "c.wav")]
    figures = await reference_metrics(client)
    assert (figures["reference"], figures["saved"]) == (1, 0)


async def test_inline_audio_data_is_named_by_its_content(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    uri = f"data:audio/wav;base64,{b64_of(audio_dir / 'a.wav')}"
    await chat(client, {"audio_data": uri})
    await chat(client, {"audio_path": "a.wav"})  # the same bytes by path: the same clip
    assert sent_parts(stub) == [reference_part(audio_dir / "a.wav")]


async def test_the_same_unrecorded_clip_twice_in_a_row_sends_data_in_both_parts(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    paths = {"audio_paths": ["a.wav", "b.wav", "a.wav"]}
    await chat(client, paths)
    a, b = data_part(audio_dir / "a.wav"), data_part(audio_dir / "b.wav")
    assert sent_parts(stub) == [a, b, a]
    await chat(client, {"audio_paths": ["a.wav", "c.wav", "a.wav"]})
    ref_a = reference_part(audio_dir / "a.wav")
    assert sent_parts(stub) == [ref_a, data_part(audio_dir / "c.wav"), ref_a]
    assert stub.decodes == 4  # a, b, a (vLLM decodes every copy it is sent), c


@pytest.mark.stub(trust_request_mm_kwargs=True)  # vLLM refuses them otherwise
async def test_the_kwargs_are_part_of_the_key(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    await chat(client, {"audio_path": "a.wav"})
    kwargs = {"mm_processor_kwargs": {"sampling_rate": 16000}}
    await chat(client, {"audio_path": "a.wav"}, **kwargs)
    assert sent_parts(stub) == [data_part(audio_dir / "a.wav")]  # not held under these kwargs
    await chat(client, {"audio_path": "a.wav"}, **kwargs)
    assert sent_parts(stub) == [reference_part(audio_dir / "a.wav")]
    await chat(client, {"audio_path": "a.wav"})
    assert sent_parts(stub) == [reference_part(audio_dir / "a.wav")]
    assert (await reference_metrics(client))["cache_miss"] == 0


async def test_a_clip_changed_on_disk_gets_a_new_uuid(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    path = audio_dir / "a.wav"
    old_uuid = sha256_of(path)
    await chat(client, {"audio_path": "a.wav"})
    write_tone(path, 0.3, 523.0)
    os.utime(path, ns=(1, 1))  # a new mtime whatever the clock's resolution
    answer = await chat(client, {"audio_path": "a.wav"})
    assert sent_parts(stub) == [data_part(path)]
    assert sha256_of(path) != old_uuid
    assert answer["stub"]["clips"][0]["sha256"] == sha256_of(path)
    await chat(client, {"audio_path": "a.wav"})
    assert sent_parts(stub) == [reference_part(path)]
    sent_uuids = [p["uuid"] for i in range(1, 3) for p in sent_parts(stub, -i)]
    assert old_uuid not in sent_uuids


async def test_a_clip_the_gateway_streams_always_goes_with_its_data(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    # Over cache.max_item_bytes: its bytes are read while sent, and could not be sent again
    # for a retry without reading it again, so its request carries no reference.
    client = await make_gateway(splice=REFERENCE, cache={"max_item_bytes": 1024})
    for _ in range(2):
        await chat(client, {"audio_path": "a.wav"})
        assert sent_parts(stub) == [data_part(audio_dir / "a.wav")]


# --- the Responses bridge, and the routes left alone -------------------------------------------


async def test_the_responses_bridge_sends_references(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    body = {"model": "m", "input": "Transcribe.", "metadata": {"audio_path": "b.wav"}}
    for _ in range(2):
        response = await client.post("/v1/responses", json=body)
        assert response.status == 200, await response.text()
        assert (await response.json())["object"] == "response"
    assert stub.requests[-1].path == CHAT
    assert sent_parts(stub) == [reference_part(audio_dir / "b.wav")]
    assert stub.decodes == 1


async def test_the_bridge_retries_a_streamed_drift_before_any_event(
    make_gateway: GatewayFactory, stub: StubState
) -> None:
    client = await make_gateway(splice=REFERENCE)
    body = {"model": "m", "input": "Transcribe.", "metadata": {"audio_path": "b.wav"}}
    await client.post("/v1/responses", json=body)
    response = await client.post("/v1/responses", json={**body, "stream": True}, headers=DRIFT)
    assert response.status == 200
    events = await stream_events(response)
    names = [e.get("event") for e in events]
    assert names[0] == "response.created" and names[-1] == "response.completed", names
    assert not any("error" in (n or "") or n == "response.failed" for n in names), names
    assert (await reference_metrics(client))["stream_error"] == 1


@pytest.mark.stub(responses_accept_audio=True)
async def test_the_responses_input_audio_splice_carries_no_uuid(
    make_gateway: GatewayFactory, stub: StubState
) -> None:
    client = await make_gateway(splice=REFERENCE, responses={"audio": "input_audio"})
    body = {"model": "m", "input": "Transcribe.", "metadata": {"audio_path": "b.wav"}}
    for _ in range(2):
        response = await client.post("/v1/responses", json=body)
        assert response.status == 200, await response.text()
        part = json.loads(stub.requests[-1].body)["input"][-1]["content"][0]
        assert part["type"] == "input_audio" and "uuid" not in part
        assert part["input_audio"]["data"]


async def test_speech_to_text_is_unaffected(make_gateway: GatewayFactory, stub: StubState) -> None:
    client = await make_gateway(splice=REFERENCE)
    body = {"model": "m", "metadata": {"audio_path": "a.wav"}}
    for _ in range(2):
        response = await client.post("/v1/audio/transcriptions", json=body)
        assert response.status == 200, await response.text()
    assert b"uuid" not in stub.requests[-1].body
    assert (await reference_metrics(client))["reference"] == 0


# --- misses and drift: sent again with the data ------------------------------------------------


async def clear_upstream_cache(stub_client_url: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(stub_client_url + "/reset_mm_cache") as reply,
    ):
        assert reply.status == 200


async def test_a_cache_miss_is_sent_again_with_the_data(
    make_gateway: GatewayFactory, stub: StubState, stub_server: Any, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    await chat(client, {"audio_paths": ["a.wav", "b.wav"]})
    await clear_upstream_cache(str(stub_server.make_url("")).rstrip("/"))  # behind its back
    before = stub.request_count
    reads = (await cache_stats(client))["misses"]
    answer = await chat(client, {"audio_paths": ["a.wav", "b.wav"]})
    assert (await cache_stats(client))["misses"] == reads  # the retry read no file again
    chats = [r for r in stub.requests[before:] if r.path == CHAT]
    assert len(chats) == 2
    assert sent_parts(stub, -2) == [reference_part(audio_dir / n) for n in ("a.wav", "b.wav")]
    assert sent_parts(stub) == [data_part(audio_dir / n) for n in ("a.wav", "b.wav")]
    assert [c["source"] for c in answer["stub"]["clips"]] == ["data", "data"]
    figures = await reference_metrics(client)
    assert figures["cache_miss"] == 1 and figures["clips"] == 2
    await chat(client, {"audio_paths": ["a.wav", "b.wav"]})  # held again
    assert sent_parts(stub) == [reference_part(audio_dir / n) for n in ("a.wav", "b.wav")]


async def test_an_engine_drift_500_is_sent_again_with_the_data(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    await chat(client, {"audio_path": "a.wav"})
    answer = await chat(client, {"audio_path": "a.wav"}, headers=DRIFT)
    assert answer["object"] == "chat.completion"
    assert sent_parts(stub, -2) == [reference_part(audio_dir / "a.wav")]
    assert sent_parts(stub) == [data_part(audio_dir / "a.wav")]
    assert (await reference_metrics(client))["upstream_error"] == 1


async def test_a_streamed_drift_is_sent_again_and_the_client_sees_one_clean_stream(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    await chat(client, {"audio_path": "a.wav"})
    response = await client.post(
        CHAT, json=chat_body({"audio_path": "a.wav"}, stream=True), headers=DRIFT
    )
    assert response.status == 200
    events = await stream_events(response)
    assert events[-1]["data"] == "[DONE]"
    data = [e["data"] for e in events[:-1]]
    assert not any("error" in d for d in data), data
    roles = [d for d in data if d["choices"] and d["choices"][0]["delta"].get("role")]
    assert len(roles) == 1  # the failed attempt's role chunk never reached the client
    text = "".join(d["choices"][0]["delta"].get("content") or "" for d in data if d["choices"])
    assert "sha256=" in text
    assert sent_parts(stub) == [data_part(audio_dir / "a.wav")]
    assert (await reference_metrics(client))["stream_error"] == 1


async def held_back_stream(
    make_gateway: GatewayFactory, stub: StubState
) -> tuple[Any, asyncio.Task[Any], int]:
    """A reference-mode gateway whose clip is recorded, a streamed request for it that the
    stub holds after its role chunk (`X-Stub-Hold: 1`), once the stub has received it, and the
    stub's request count before that request."""
    client = await make_gateway(splice=REFERENCE)
    await chat(client, {"audio_path": "a.wav"})
    before = stub.request_count
    request = asyncio.create_task(
        client.post(
            CHAT,
            json=chat_body({"audio_path": "a.wav"}, stream=True),
            headers={"X-Stub-Hold": "1"},
        )
    )
    while stub.request_count == before:
        await asyncio.sleep(0.01)
    return client, request, before


async def test_a_held_back_stream_shows_nothing_until_content(
    make_gateway: GatewayFactory, stub: StubState
) -> None:
    _client, request, before = await held_back_stream(make_gateway, stub)
    # The role chunk came from upstream and is held back: the client has not even a status.
    await asyncio.sleep(0.3)
    assert not request.done()
    stub.hold.set()
    response = await asyncio.wait_for(request, BOUND_SECONDS)
    assert response.status == 200
    events = await stream_events(response)
    assert events[0]["data"]["choices"][0]["delta"]["role"] == "assistant"
    assert events[1]["data"]["choices"][0]["delta"]["content"]
    assert events[-1]["data"] == "[DONE]"
    assert stub.request_count == before + 1


async def test_data_mode_streams_the_role_chunk_at_once(
    make_gateway: GatewayFactory, stub: StubState
) -> None:
    client = await make_gateway()
    response = await client.post(
        CHAT, json=chat_body({"audio_path": "a.wav"}, stream=True), headers={"X-Stub-Hold": "1"}
    )
    first = await asyncio.wait_for(response.content.readuntil(b"\n\n"), BOUND_SECONDS)
    assert b'"role": "assistant"' in first or b'"role":"assistant"' in first
    stub.hold.set()
    await response.read()


async def test_nothing_is_retried_once_content_reached_the_client(
    make_gateway: GatewayFactory, stub: StubState
) -> None:
    client = await make_gateway(splice=REFERENCE, upstream={"read_timeout_seconds": 0.3})
    await chat(client, {"audio_path": "a.wav"})
    before = stub.request_count
    response = await client.post(
        CHAT, json=chat_body({"audio_path": "a.wav"}, stream=True), headers={"X-Stub-Hold": "2"}
    )
    assert response.status == 200
    first = await asyncio.wait_for(response.content.readuntil(b"\n\n"), BOUND_SECONDS)
    assert b"role" in first
    with pytest.raises(aiohttp.ClientPayloadError):  # cut short, after content
        await asyncio.wait_for(response.read(), BOUND_SECONDS)
    assert stub.request_count == before + 1
    figures = await reference_metrics(client)
    assert figures["stream_error"] == 0


async def test_client_disconnect_during_a_held_back_stream_cancels_it(
    make_gateway: GatewayFactory, stub: StubState
) -> None:
    client, request, before = await held_back_stream(make_gateway, stub)
    await asyncio.sleep(0.1)
    request.cancel()  # the client goes away while the gateway holds the stream back
    with pytest.raises(asyncio.CancelledError):
        await request
    await asyncio.sleep(0.3)
    stub.hold.set()  # an upstream stream still attached would now run to its end
    await asyncio.sleep(0.1)
    assert stub.streams_finished == 0
    assert stub.request_count == before + 1  # nothing retried
    assert (await reference_metrics(client))["stream_error"] == 0


@pytest.mark.stub(mm_processor_cache_gb=0)
async def test_an_upstream_refusing_uuid_parts_otherwise_is_learned_after_one_retry(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    await chat(client, {"audio_path": "a.wav"})
    before = stub.request_count
    await chat(client, {"audio_path": "a.wav"})  # refused by reference, then 200 with data
    assert stub.request_count == before + 2
    await chat(client, {"audio_path": "a.wav"})  # learned: data (and uuid) at once
    assert stub.request_count == before + 3
    assert sent_parts(stub) == [data_part(audio_dir / "a.wav")]
    figures = await reference_metrics(client)
    assert (figures["cache_miss"], figures["upstream_error"], figures["refused"]) == (0, 0, 1)


# --- a scripted upstream: a retry that misses too ----------------------------------------------


async def scripted_upstream(answers: list[tuple[int, dict[str, Any]]]) -> tuple[Any, list[bytes]]:
    """A real server answering chat requests in turn with `answers` (the last one repeats)."""
    from aiohttp.test_utils import TestServer

    bodies: list[bytes] = []

    async def handle(request: web.Request) -> web.Response:
        bodies.append(await request.read())
        status, payload = answers[min(len(bodies), len(answers)) - 1]
        return web.json_response(payload, status=status)

    app = web.Application()
    app.router.add_post(CHAT, handle)
    server = TestServer(app)
    await server.start_server()
    return server, bodies


MISS = {
    "error": {
        "message": "Cache miss for audio at index 0 but data is not provided.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
}
OK = {"object": "chat.completion", "choices": []}


@pytest.mark.parametrize(("status", "payload"), [(400, MISS), (500, {"error": {"code": 500}})])
async def test_a_miss_on_the_retry_is_relayed(
    make_gateway: GatewayFactory, status: int, payload: dict[str, Any]
) -> None:
    server, bodies = await scripted_upstream([(200, OK), (status, payload)])
    try:
        url = str(server.make_url("")).rstrip("/")
        client = await make_gateway(splice=REFERENCE, upstream={"url": url})
        await chat(client, {"audio_path": "a.wav"})
        response = await client.post(CHAT, json=chat_body({"audio_path": "a.wav"}))
        assert response.status == status
        assert await response.json() == payload
        assert len(bodies) == 3  # the seed, the reference, the one retry with data
        parts = [json.loads(b)["messages"][-1]["content"][0] for b in bodies]
        assert [p["audio_url"] is None for p in parts] == [False, True, False]
    finally:
        await server.close()


async def test_a_request_without_references_is_never_retried(
    make_gateway: GatewayFactory,
) -> None:
    server, bodies = await scripted_upstream([(400, MISS)])
    try:
        url = str(server.make_url("")).rstrip("/")
        client = await make_gateway(splice=REFERENCE, upstream={"url": url})
        response = await client.post(CHAT, json=chat_body({"audio_path": "a.wav"}))
        assert response.status == 400
        assert len(bodies) == 1
        assert (await reference_metrics(client))["clips"] == 0
    finally:
        await server.close()


# --- forgetting: the upstream's caches cleared -------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/pause", "/sleep", "/reset_mm_cache", "/sleep?level=1", "/release_kv_cache_memory"]
)
async def test_a_relayed_cache_clear_forgets_every_clip(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, path: str
) -> None:
    client = await make_gateway(splice=REFERENCE)
    await chat(client, {"audio_paths": ["a.wav", "b.wav"]})
    assert (await reference_metrics(client))["clips"] == 2
    response = await client.post(path)
    assert response.status == 200, await response.text()
    assert (await reference_metrics(client))["clips"] == 0
    await chat(client, {"audio_path": "a.wav"})
    assert sent_parts(stub) == [data_part(audio_dir / "a.wav")]
    assert (await reference_metrics(client))["cache_miss"] == 0


async def test_a_failed_pause_forgets_nothing(
    make_gateway: GatewayFactory, stub: StubState
) -> None:
    client = await make_gateway(splice=REFERENCE)
    await chat(client, {"audio_path": "a.wav"})
    response = await client.post("/pause?mode=bogus")
    assert response.status == 400
    assert (await reference_metrics(client))["clips"] == 1


# --- concurrent seeds --------------------------------------------------------------------------


@pytest.mark.stub(mm_preprocess_delay_seconds=0.2)
async def test_followers_wait_for_the_seed_then_go_by_reference(
    make_gateway: GatewayFactory, stub: StubState
) -> None:
    client = await make_gateway(splice={**REFERENCE, "reference_wait_ms": 5000})
    seed = asyncio.create_task(chat(client, {"audio_path": "a.wav"}))
    while stub.request_count == 0:
        await asyncio.sleep(0.005)
    followers = [chat(client, {"audio_path": "a.wav"}) for _ in range(4)]
    await asyncio.gather(seed, *followers)
    assert stub.decodes == 1
    figures = await reference_metrics(client)
    assert (figures["data"], figures["reference"], figures["cache_miss"]) == (1, 4, 0)


@pytest.mark.stub(mm_preprocess_delay_seconds=0.2)
async def test_without_a_wait_followers_send_the_data(
    make_gateway: GatewayFactory, stub: StubState
) -> None:
    client = await make_gateway(splice={**REFERENCE, "reference_wait_ms": 0})
    seed = asyncio.create_task(chat(client, {"audio_path": "a.wav"}))
    while stub.request_count == 0:
        await asyncio.sleep(0.005)
    await asyncio.gather(seed, *[chat(client, {"audio_path": "a.wav"}) for _ in range(3)])
    figures = await reference_metrics(client)
    assert (figures["data"], figures["reference"]) == (4, 0)


@pytest.mark.stub(mm_preprocess_delay_seconds=0.3)
async def test_a_wait_shorter_than_preprocessing_costs_a_retry_not_an_error(
    make_gateway: GatewayFactory, stub: StubState
) -> None:
    client = await make_gateway(splice={**REFERENCE, "reference_wait_ms": 20})
    seed = asyncio.create_task(chat(client, {"audio_path": "a.wav"}))
    while stub.request_count == 0:
        await asyncio.sleep(0.005)
    await asyncio.gather(seed, chat(client, {"audio_path": "a.wav"}))
    figures = await reference_metrics(client)
    assert figures["reference"] == 1 and figures["cache_miss"] == 1


async def test_a_streamed_seed_releases_its_followers_when_its_stream_starts(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    # vLLM starts a stream only after preprocessing: the seed's 2xx head means it holds the
    # clip, so followers go by reference while the seed is still streaming (held by the stub).
    client = await make_gateway(splice={**REFERENCE, "reference_wait_ms": 60_000})
    seed = await client.post(
        CHAT, json=chat_body({"audio_path": "a.wav"}, stream=True), headers={"X-Stub-Hold": "1"}
    )
    assert seed.status == 200
    follower = await asyncio.wait_for(chat(client, {"audio_path": "a.wav"}), BOUND_SECONDS)
    assert follower["stub"]["clips"][0]["source"] == "uuid"
    assert sent_parts(stub) == [reference_part(audio_dir / "a.wav")]
    stub.hold.set()
    await seed.read()
    figures = await reference_metrics(client)
    assert (figures["data"], figures["reference"], figures["cache_miss"]) == (1, 1, 0)


async def test_the_record_is_bounded_by_reference_max_clips(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice={**REFERENCE, "reference_max_clips": 1})
    await chat(client, {"audio_path": "a.wav"})
    await chat(client, {"audio_path": "b.wav"})  # evicts a from the record (not from vLLM)
    await chat(client, {"audio_path": "a.wav"})
    assert sent_parts(stub) == [data_part(audio_dir / "a.wav")]
    await chat(client, {"audio_path": "a.wav"})
    assert sent_parts(stub) == [reference_part(audio_dir / "a.wav")]
    assert (await reference_metrics(client))["clips"] == 1
