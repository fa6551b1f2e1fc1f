"""Audio the client inlined itself, by reference (`[splice] repeats = "reference"`): a data-URI
`audio_url` part or an `input_audio` part is a clip the gateway holds, named by the sha256 of
its bytes as a file's clip is; its first copy goes with its data and that uuid, later copies
uuid-only. A part with the client's own uuid, a uuid-only part, and a payload that is not
base64 go as they came."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.affinity import placed_digests
from gateway.clips.inline import inline_parts
from gateway.stub_upstream import StubState
from tests.conftest import GatewayFactory, b64_of, chat_body, sha256_of
from tests.test_references import (
    CHAT,
    REFERENCE,
    Client,
    data_part,
    reference_metrics,
    reference_part,
)


def uri_part(path: Path) -> dict[str, Any]:
    return {"type": "audio_url", "audio_url": {"url": f"data:audio/wav;base64,{b64_of(path)}"}}


def input_audio_part(path: Path) -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": b64_of(path), "format": "wav"}}


def with_parts(*parts: dict[str, Any]) -> dict[str, Any]:
    content = [*parts, {"type": "text", "text": "Transcribe."}]
    return chat_body(messages=[{"role": "user", "content": content}])


def sent_audio(stub: StubState, index: int = -1) -> list[dict[str, Any]]:
    body = json.loads(stub.requests[index].body)
    return [
        part
        for message in body["messages"]
        for part in message["content"]
        if isinstance(message["content"], list) and part.get("type") != "text"
    ]


async def post(client: Client, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    response = await client.post(CHAT, json=body)
    text = await response.text()
    assert response.status == status, text
    answer: dict[str, Any] = json.loads(text)
    return answer


async def test_an_inlined_data_uri_goes_once_with_its_data_then_by_reference(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    a = audio_dir / "a.wav"
    first = await post(client, with_parts(uri_part(a)))
    assert sent_audio(stub) == [data_part(a)]  # its data, and the sha256 of its bytes
    second = await post(client, with_parts(uri_part(a)))
    assert sent_audio(stub) == [reference_part(a)]
    assert second["stub"]["clips"][0]["sha256"] == first["stub"]["clips"][0]["sha256"]
    assert stub.decodes == 1
    figures = await reference_metrics(client)
    assert (figures["data"], figures["reference"], figures["clips"]) == (1, 1, 1)
    assert figures["saved"] == len(b64_of(a))


async def test_an_input_audio_part_goes_by_reference_as_input_audio(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    b = audio_dir / "b.wav"
    await post(client, with_parts(input_audio_part(b)))
    assert sent_audio(stub) == [{**input_audio_part(b), "uuid": sha256_of(b)}]
    await post(client, with_parts(input_audio_part(b)))
    assert sent_audio(stub) == [reference_part(b, "input_audio")]
    assert stub.decodes == 1


async def test_a_clip_named_by_path_and_inlined_is_one_clip(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    a = audio_dir / "a.wav"
    await post(client, chat_body({"audio_path": "a.wav"}))
    await post(client, with_parts(uri_part(a)))
    assert sent_audio(stub) == [reference_part(a)]
    await post(client, with_parts(input_audio_part(a)))
    assert sent_audio(stub) == [reference_part(a, "input_audio")]
    assert stub.decodes == 1


async def test_the_sidechannel_and_inlined_parts_share_one_request(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    a, b = audio_dir / "a.wav", audio_dir / "b.wav"
    body = {**with_parts(uri_part(b)), "metadata": {"audio_path": "a.wav"}}
    await post(client, body)
    assert sent_audio(stub) == [data_part(a), data_part(b)]
    await post(client, {**with_parts(uri_part(b)), "metadata": {"audio_path": "a.wav"}})
    assert sent_audio(stub) == [reference_part(a), reference_part(b)]


async def test_a_clients_own_uuid_is_kept_and_its_part_goes_as_sent(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    part = {**uri_part(audio_dir / "a.wav"), "uuid": "client-clip-1"}
    for _ in range(2):
        await post(client, with_parts(part))
        assert sent_audio(stub) == [part]
    assert (await reference_metrics(client))["clips"] == 0


async def test_a_uuid_only_part_from_the_client_is_relayed_as_it_is(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    a = audio_dir / "a.wav"
    await post(client, with_parts({**uri_part(a), "uuid": "mine"}))
    held = {"type": "audio_url", "audio_url": None, "uuid": "mine"}
    await post(client, with_parts(held))
    assert sent_audio(stub) == [held]
    assert stub.decodes == 1


async def test_two_parts_with_one_client_uuid_and_different_data_go_as_sent(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    a = {**uri_part(audio_dir / "a.wav"), "uuid": "same"}
    b = {**uri_part(audio_dir / "b.wav"), "uuid": "same"}
    await post(client, with_parts(a, b))  # vLLM decides (it takes the first clip's)
    assert sent_audio(stub) == [a, b]
    assert (await reference_metrics(client))["clips"] == 0


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param("not*base64!", id="invalid-base64"),
        pytest.param(base64.b64encode(b"plain text, not audio").decode(), id="not-audio"),
    ],
)
async def test_bad_inline_audio_is_vllms_400_and_never_recorded(
    make_gateway: GatewayFactory, stub: StubState, payload: str
) -> None:
    client = await make_gateway(splice=REFERENCE)
    part = {"type": "audio_url", "audio_url": {"url": f"data:audio/wav;base64,{payload}"}}
    for _ in range(2):
        answer = await post(client, with_parts(part), status=400)
        assert answer["error"]["type"] == "BadRequestError"  # vLLM's, relayed
        (sent,) = sent_audio(stub)
        assert sent["audio_url"] == part["audio_url"]  # never by reference
    figures = await reference_metrics(client)
    assert (figures["clips"], figures["reference"]) == (0, 0)


async def test_data_mode_relays_inlined_parts_untouched(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway()
    body = with_parts(uri_part(audio_dir / "a.wav"))
    for _ in range(2):
        await post(client, body)
        assert json.loads(stub.requests[-1].body) == body
    assert stub.decodes == 2


async def test_the_responses_bridge_sends_inlined_audio_by_reference(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    client = await make_gateway(splice=REFERENCE)
    b = audio_dir / "b.wav"
    audio = {"type": "input_audio", "input_audio": {"data": b64_of(b), "format": "wav"}}
    text = {"type": "input_text", "text": "Transcribe."}
    body = {"model": "m", "input": [{"role": "user", "content": [audio, text]}]}
    for _ in range(2):
        response = await client.post("/v1/responses", json=body)
        assert response.status == 200, await response.text()
        assert (await response.json())["object"] == "response"
    assert stub.requests[-1].path == CHAT
    assert sent_audio(stub) == [reference_part(b, "input_audio")]
    assert stub.decodes == 1


async def test_the_key_of_inlined_audio_is_the_same_by_reference(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    routing = {"affinity_headers": ["X-Session-ID"]}
    body = with_parts(uri_part(audio_dir / "a.wav"))
    keys = []
    for splice in ({}, REFERENCE):
        client = await make_gateway(splice=splice, routing=routing)
        await post(client, body)
        keys.append(stub.requests[-1].headers["X-Session-ID"])
    assert keys[0] == keys[1]


# --- the pure part: which parts are inline clips, and their uuid --------------------------------


@given(
    st.lists(
        st.tuples(
            st.binary(min_size=1, max_size=300), st.sampled_from(["uri", "input"]), st.booleans()
        ),
        min_size=1,
        max_size=5,
    )
)
def test_inline_parts_are_the_uuidless_ones_named_by_their_bytes(
    clips: list[tuple[bytes, str, bool]],
) -> None:
    content: list[dict[str, Any]] = [{"type": "text", "text": "hi"}]
    for data, form, own_uuid in clips:
        encoded = base64.b64encode(data).decode()
        if form == "uri":
            part = {"type": "audio_url", "audio_url": {"url": f"data:audio/wav;base64,{encoded}"}}
        else:
            part = {"type": "input_audio", "input_audio": {"data": encoded, "format": "wav"}}
        content.append({**part, "uuid": "client"} if own_uuid else part)
    items = [{"role": "user", "content": content}]
    found = inline_parts(items, placed_digests(items))
    expected = [hashlib.sha256(data).hexdigest() for data, _, own in clips if not own]
    assert [part.uuid for part in found] == expected
    assert all("uuid" not in part.part for part in found)  # set only once it goes by reference
    sizes = [len(base64.b64encode(data)) for data, _, own in clips if not own]
    assert [part.size for part in found] == sizes
