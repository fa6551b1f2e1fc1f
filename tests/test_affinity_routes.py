"""`[routing] affinity_headers`: every request the gateway sends upstream with audio carries its
clips' key in those headers, on every route, alike for alike clips; other requests pass the
client's headers untouched. Over real HTTP, against the stub (which records every header)."""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp import FormData
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai import AsyncOpenAI

from gateway.stub_upstream import StubState
from tests.conftest import GatewayFactory, chat_body, sha256_of, write_encoded_tone

HEADER = "X-Session-ID"
ROUTING = {"affinity_headers": [HEADER]}
KEY = re.compile(r"[0-9a-f]{32}")


def data_uri(path: Path) -> str:
    return "data:audio/wav;base64," + base64.b64encode(path.read_bytes()).decode()


def sent_keys(stub: StubState, name: str = HEADER) -> list[str]:
    """The values of `name` on the last request the stub received."""
    return stub.requests[-1].header_values(name)


async def keyed(gateway: Any, stub: StubState, body: dict[str, Any], **kwargs: Any) -> str:
    """POST `body` to chat completions; the one key the upstream request carried."""
    response = await gateway.post("/v1/chat/completions", json=body, **kwargs)
    assert response.status == 200, await response.text()
    values = sent_keys(stub)
    assert len(values) == 1 and KEY.fullmatch(values[0]), values
    return values[0]


SPLICES = [
    {},
    {"chat_part": "input_audio"},
    {"part_uuid": True},
    {"repeats": "reference"},
    {"repeats": "reference", "chat_part": "input_audio"},
]


@pytest.mark.parametrize("splice", SPLICES)
async def test_same_clip_same_key_whatever_carried_it(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, splice: dict[str, Any]
) -> None:
    gateway = await make_gateway(routing=ROUTING, splice=splice)
    another = await make_gateway(routing=ROUTING, splice=splice)  # a fleet agrees
    path = audio_dir / "b.wav"
    keys = {
        await keyed(another, stub, chat_body({"audio_path": "b.wav"})),
        await keyed(gateway, stub, chat_body({"audio_path": "b.wav"}, seed=1)),
        await keyed(gateway, stub, chat_body({"audio_path": str(path)}, temperature=0.5)),
        await keyed(gateway, stub, chat_body({"audio_paths": ["b.wav"]})),
        await keyed(gateway, stub, chat_body({"audio_data": data_uri(path)})),
        await keyed(gateway, stub, file_part_body(path.as_uri())),
        await keyed(gateway, stub, file_part_body(data_uri(path))),
    }
    assert len(keys) == 1


@pytest.mark.parametrize("splice", [{"part_uuid": True}, {"repeats": "reference"}])
async def test_uuids_stay_the_clips_sha256_with_the_key_on(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, splice: dict[str, Any]
) -> None:
    """The key's digest of inline audio is reused for its uuid: the same sha256 either way."""
    gateway = await make_gateway(routing=ROUTING, splice=splice)
    for metadata in ({"audio_data": data_uri(audio_dir / "c.wav")}, {"audio_path": "c.wav"}):
        await keyed(gateway, stub, chat_body(metadata))
        part = json.loads(stub.requests[-1].body)["messages"][-1]["content"][0]
        assert part["uuid"] == sha256_of(audio_dir / "c.wav")


def file_part_body(url: str, text: str = "Transcribe the audio.") -> dict[str, Any]:
    part = {"type": "audio_url", "audio_url": {"url": url}}
    content = [{"type": "text", "text": text}, part]
    return {"model": "stub-audio-model", "messages": [{"role": "user", "content": content}]}


async def test_different_clips_different_keys(
    make_gateway: GatewayFactory, stub: StubState
) -> None:
    gateway = await make_gateway(routing=ROUTING)
    keys = [
        await keyed(gateway, stub, chat_body({"audio_path": "a.wav"})),
        await keyed(gateway, stub, chat_body({"audio_path": "b.wav"})),
        await keyed(gateway, stub, chat_body({"audio_paths": ["a.wav", "b.wav"]})),
        await keyed(gateway, stub, chat_body({"audio_paths": ["b.wav", "a.wav"]})),
    ]
    assert len(set(keys)) == len(keys)


async def test_the_key_replaces_the_clients_header_in_any_case(
    make_gateway: GatewayFactory, stub: StubState
) -> None:
    gateway = await make_gateway(routing=ROUTING)
    plain = await keyed(gateway, stub, chat_body({"audio_path": "a.wav"}))
    sent = await keyed(
        gateway,
        stub,
        chat_body({"audio_path": "a.wav"}),
        headers=[("x-session-id", "client-1"), ("X-SESSION-ID", "client-2")],
    )
    assert sent == plain
    assert len(stub.requests[-1].header_values(HEADER)) == 1


async def test_without_audio_the_clients_header_passes_untouched(
    make_gateway: GatewayFactory, stub: StubState
) -> None:
    gateway = await make_gateway(routing=ROUTING)
    response = await gateway.post(
        "/v1/chat/completions", json=chat_body(), headers={"X-Session-Id": "rollout-7"}
    )
    assert response.status == 200
    assert sent_keys(stub) == ["rollout-7"]
    response = await gateway.post("/v1/chat/completions", json=chat_body())
    assert response.status == 200
    assert sent_keys(stub) == []


async def test_off_by_default(gateway: Any, stub: StubState) -> None:
    response = await gateway.post(
        "/v1/chat/completions",
        json=chat_body({"audio_path": "a.wav"}),
        headers={HEADER: "client"},
    )
    assert response.status == 200
    assert sent_keys(stub) == ["client"]


@pytest.mark.parametrize("names", [["X-Session-ID", "X-SMG-Routing-Key"]])
async def test_every_named_header_carries_the_key(
    make_gateway: GatewayFactory, stub: StubState, names: list[str]
) -> None:
    gateway = await make_gateway(routing={"affinity_headers": names})
    response = await gateway.post("/v1/chat/completions", json=chat_body({"audio_path": "a.wav"}))
    assert response.status == 200
    values = [sent_keys(stub, name) for name in names]
    assert values[0] == values[1] and len(values[0]) == 1


# --- audio the client inlined itself -----------------------------------------------------------


def input_audio_body(path: Path) -> dict[str, Any]:
    part = {"type": "input_audio", "input_audio": {"data": data_uri(path).split(",")[1]}}
    part["input_audio"]["format"] = "wav"
    content = [part, {"type": "text", "text": "What is said?"}]
    return {"model": "stub-audio-model", "messages": [{"role": "user", "content": content}]}


async def test_inline_parts_are_keyed_as_the_same_clip_from_a_file(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(routing=ROUTING)
    from_file = await keyed(gateway, stub, chat_body({"audio_path": "c.wav"}))
    assert await keyed(gateway, stub, file_part_body(data_uri(audio_dir / "c.wav"))) == from_file
    assert await keyed(gateway, stub, input_audio_body(audio_dir / "c.wav")) == from_file
    assert await keyed(gateway, stub, input_audio_body(audio_dir / "a.wav")) != from_file


async def test_the_key_follows_clip_order_across_carriers(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    """The sidechannel's clips first, then the audio parts in message order, the gateway's
    path parts and the client's own alike."""
    gateway = await make_gateway(routing=ROUTING)
    both = await keyed(gateway, stub, chat_body({"audio_paths": ["a.wav", "b.wav"]}))
    mixed = file_part_body(data_uri(audio_dir / "b.wav"))
    mixed["metadata"] = {"audio_path": "a.wav"}
    assert await keyed(gateway, stub, mixed) == both
    parts = file_part_body("a.wav")
    parts["messages"][0]["content"].append(
        {"type": "audio_url", "audio_url": {"url": data_uri(audio_dir / "b.wav")}}
    )
    assert await keyed(gateway, stub, parts) == both


# --- clips the gateway does not hash: streamed, fetched by vLLM -------------------------------


async def test_a_streamed_clip_keys_alike_while_its_file_is_unchanged(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(routing=ROUTING, cache={"max_item_bytes": 1000})
    first = await keyed(gateway, stub, chat_body({"audio_path": "c.wav"}, seed=1))
    relative = file_part_body("c.wav")
    assert await keyed(gateway, stub, relative) == first
    assert await keyed(gateway, stub, chat_body({"audio_path": str(audio_dir / "c.wav")})) == first
    assert await keyed(gateway, stub, chat_body({"audio_path": "b.wav"})) != first
    (audio_dir / "c.wav").write_bytes((audio_dir / "b.wav").read_bytes())  # rewritten
    assert await keyed(gateway, stub, chat_body({"audio_path": "c.wav"})) != first


async def test_a_streamed_clip_keys_alike_on_a_copy_with_its_own_inode(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    """Another host's copy of a dataset has other inodes, devices and ctimes: the key of an
    unhashed clip holds only its real path, mtime and size, so gateways there agree."""
    gateway = await make_gateway(routing=ROUTING, cache={"max_item_bytes": 1000})
    clip = audio_dir / "c.wav"
    first = await keyed(gateway, stub, chat_body({"audio_path": "c.wav"}))
    before = clip.stat()
    copy = audio_dir / "c.copy"
    copy.write_bytes(clip.read_bytes())
    os.utime(copy, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(copy, clip)  # the same path, bytes, size and mtime; a new inode and ctime
    assert clip.stat().st_ino != before.st_ino
    assert await keyed(gateway, stub, chat_body({"audio_path": "c.wav"})) == first


async def test_file_url_mode_keys_files_by_their_identity(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(routing=ROUTING, splice={"mode": "file_url"})
    first = await keyed(gateway, stub, chat_body({"audio_path": "a.wav"}))
    assert await keyed(gateway, stub, file_part_body((audio_dir / "a.wav").as_uri())) == first
    assert await keyed(gateway, stub, chat_body({"audio_path": "b.wav"})) != first


async def test_a_url_part_for_vllm_is_keyed_by_its_url(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(routing=ROUTING, sidechannel={"content_parts": "pass"})
    url = (audio_dir / "a.wav").as_uri()
    first = await keyed(gateway, stub, file_part_body(url))
    assert await keyed(gateway, stub, file_part_body(url, text="Other text")) == first
    assert await keyed(gateway, stub, file_part_body((audio_dir / "b.wav").as_uri())) != first


# --- other ways a clip is sent ------------------------------------------------------------------


async def test_normalized_clips_are_keyed_by_what_is_sent(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    write_encoded_tone(audio_dir / "tone.flac", 0.5, 440.0, "FLAC")  # converted to WAV
    gateway = await make_gateway(routing=ROUTING, normalize={"enabled": True})
    first = await keyed(gateway, stub, chat_body({"audio_path": "tone.flac"}, seed=1))
    assert await keyed(gateway, stub, file_part_body("tone.flac")) == first
    assert await keyed(gateway, stub, chat_body({"audio_path": "a.wav"})) != first


async def test_references_carry_the_key_on_every_try(
    make_gateway: GatewayFactory, stub: StubState, stub_server: Any
) -> None:
    """By reference, with data after a miss, and by reference again: one key."""
    gateway = await make_gateway(routing=ROUTING, splice={"repeats": "reference"})
    metadata = {"audio_paths": ["a.wav", "b.wav"]}
    first = await keyed(gateway, stub, chat_body(metadata, seed=1))
    assert await keyed(gateway, stub, chat_body(metadata, seed=2)) == first
    stub.mm_cache.clear()  # vLLM forgot the clips behind the gateway's back
    before = len(stub.requests)
    assert await keyed(gateway, stub, chat_body(metadata, seed=3)) == first
    tries = stub.requests[before:]
    assert len(tries) == 2  # the miss and the retry with data
    assert [r.header_values(HEADER) for r in tries] == [[first], [first]]


# --- the Responses routes -----------------------------------------------------------------------


def responses_row(
    metadata: dict[str, Any] | None = None, *parts: Any, **fields: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "stub-audio-model", "input": "Transcribe.", **fields}
    if parts:
        body["input"] = [{"role": "user", "content": [*parts]}]
    if metadata is not None:
        body["metadata"] = metadata
    return body


async def keyed_response(gateway: Any, stub: StubState, body: dict[str, Any]) -> str:
    response = await gateway.post("/v1/responses", json=body)
    assert response.status == 200, await response.text()
    values = sent_keys(stub)
    assert len(values) == 1 and KEY.fullmatch(values[0]), values
    return values[0]


async def test_the_responses_bridge_keys_every_carrier_as_chat_does(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(routing=ROUTING)
    chat = await keyed(gateway, stub, chat_body({"audio_path": "b.wav"}))
    b64 = data_uri(audio_dir / "b.wav").split(",")[1]
    rows = [
        responses_row({"audio_path": "b.wav"}),
        responses_row(None, {"type": "input_audio", "input_audio": {"data": b64, "format": "wav"}}),
        responses_row(None, {"type": "input_file", "file_url": "b.wav"}),
        responses_row(None, {"type": "input_file", "file_data": data_uri(audio_dir / "b.wav")}),
    ]
    for row in rows:
        assert await keyed_response(gateway, stub, row) == chat, row


@pytest.mark.parametrize("splice", [{"repeats": "reference"}, {"chat_part": "input_audio"}])
async def test_the_bridge_keys_alike_in_every_splice(
    make_gateway: GatewayFactory, stub: StubState, splice: dict[str, Any]
) -> None:
    gateway = await make_gateway(routing=ROUTING, splice=splice)
    chat = await keyed(gateway, stub, chat_body({"audio_paths": ["a.wav", "c.wav"]}))
    for seed in range(2):  # by reference the second time
        row = responses_row({"audio_paths": ["a.wav", "c.wav"]}, temperature=seed / 10)
        assert await keyed_response(gateway, stub, row) == chat


async def test_a_responses_row_without_audio_passes_the_clients_header(
    make_gateway: GatewayFactory, stub: StubState
) -> None:
    gateway = await make_gateway(routing=ROUTING)
    response = await gateway.post(
        "/v1/responses", json=responses_row(), headers={HEADER: "conversation-1"}
    )
    assert response.status == 200
    assert sent_keys(stub) == ["conversation-1"]


@pytest.mark.stub(responses_accept_audio=True)
async def test_responses_input_audio_mode_keys_as_chat_does(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(routing=ROUTING, responses={"audio": "input_audio"})
    chat = await keyed(gateway, stub, chat_body({"audio_path": "a.wav"}))
    assert await keyed_response(gateway, stub, responses_row({"audio_path": "a.wav"})) == chat
    b64 = data_uri(audio_dir / "a.wav").split(",")[1]
    inline = {"type": "input_audio", "input_audio": {"data": b64, "format": "wav"}}
    assert await keyed_response(gateway, stub, responses_row(None, inline)) == chat


# --- speech-to-text -------------------------------------------------------------------------------

SPEECH_ROUTES = ["/v1/audio/transcriptions", "/v1/audio/translations"]


@pytest.mark.parametrize("route", SPEECH_ROUTES)
async def test_speech_uploads_made_by_the_gateway_key_as_chat_does(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, route: str
) -> None:
    gateway = await make_gateway(routing=ROUTING)
    chat = await keyed(gateway, stub, chat_body({"audio_path": "c.wav"}))
    bodies: list[dict[str, Any]] = [
        {"json": {"model": "m", "metadata": {"audio_path": "c.wav"}}},
        {"json": {"model": "m", "metadata": {"audio_data": data_uri(audio_dir / "c.wav")}}},
        {"data": FormData({"model": "m", "audio_path": "c.wav"}, default_to_multipart=True)},
        {"data": FormData({"model": "m", "audio_path": str(audio_dir / "c.wav")})},
    ]
    for kwargs in bodies:
        response = await gateway.post(route, headers={HEADER: "client"}, **kwargs)
        assert response.status == 200, await response.text()
        assert sent_keys(stub) == [chat], kwargs


async def test_a_streamed_speech_upload_keys_as_a_streamed_chat_clip(
    make_gateway: GatewayFactory, stub: StubState
) -> None:
    gateway = await make_gateway(routing=ROUTING, cache={"max_item_bytes": 1000})
    chat = await keyed(gateway, stub, chat_body({"audio_path": "c.wav"}))
    response = await gateway.post(SPEECH_ROUTES[0], json={"metadata": {"audio_path": "c.wav"}})
    assert response.status == 200, await response.text()
    assert sent_keys(stub) == [chat]


async def test_a_clients_own_file_upload_and_other_routes_pass_its_header(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    """An upload the client made itself is streamed through unread: no key (its header, if
    any, is the client's); so are the other routes."""
    gateway = await make_gateway(routing=ROUTING)
    form = FormData({"model": "m"})
    form.add_field("file", (audio_dir / "a.wav").read_bytes(), filename="a.wav")
    response = await gateway.post(SPEECH_ROUTES[0], data=form, headers={HEADER: "mine"})
    assert response.status == 200, await response.text()
    assert sent_keys(stub) == ["mine"]
    response = await gateway.get("/v1/models", headers={HEADER: "mine"})
    assert response.status == 200
    assert sent_keys(stub) == ["mine"]


# --- the official SDK ---------------------------------------------------------------------------


async def test_the_openai_sdk_gets_one_key_for_one_clip_on_chat_and_responses(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(routing=ROUTING)
    base_url = str(gateway.make_url("/v1"))
    headers = {HEADER: "sdk-session"}  # e.g. a rollout's session id: replaced by the key
    async with AsyncOpenAI(
        base_url=base_url, api_key="x", max_retries=0, timeout=10, default_headers=headers
    ) as sdk:
        await sdk.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "Hi"}],
            metadata={"audio_path": "a.wav"},
        )
        chat = sent_keys(stub)
        await sdk.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "Other text"}],
            seed=7,
            temperature=0.9,
            extra_body={"metadata": {"audio_data": data_uri(audio_dir / "a.wav")}},
        )
        inline = sent_keys(stub)
        await sdk.responses.create(
            model="m", input="Transcribe.", metadata={"audio_path": str(audio_dir / "a.wav")}
        )
        responses = sent_keys(stub)
        await sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hi"}])
        without_audio = sent_keys(stub)
    assert len(chat) == 1 and KEY.fullmatch(chat[0])
    assert chat == inline == responses
    assert without_audio == ["sdk-session"]


# --- properties over HTTP -------------------------------------------------------------------------

CLIP_NAMES = ["a.wav", "b.wav", "c.wav"]


@pytest.fixture
async def keyed_gateway(make_gateway: GatewayFactory) -> Any:
    return await make_gateway(routing=ROUTING)


SPELLINGS = ["audio_path", "absolute", "file_part", "relative_part", "audio_data", "data_part"]


def spelled(audio_dir: Path, names: list[str], spellings: list[str]) -> dict[str, Any]:
    """A chat body naming `names` in order, each clip its own way: sidechannel spellings take
    the clips up to the first part spelling (the sidechannel's clips come first), parts the
    rest, in one user message."""
    side = 0
    while side < len(names) and spellings[side] in ("audio_path", "absolute", "audio_data"):
        side += 1
    metadata: dict[str, Any] = {}
    if side:
        kinds = spellings[:side]
        if all(k == "audio_data" for k in kinds) and side == 1:
            metadata["audio_data"] = data_uri(audio_dir / names[0])
        else:  # audio_paths takes paths only: inline clips among them go as paths too
            metadata["audio_paths"] = [
                str(audio_dir / n) if k == "absolute" else n
                for n, k in zip(names[:side], kinds, strict=True)
            ]
    content: list[Any] = []
    for name, kind in zip(names[side:], spellings[side:], strict=True):
        url = {
            "file_part": (audio_dir / name).as_uri(),
            "relative_part": name,
            "data_part": data_uri(audio_dir / name),
        }.get(kind, name)
        content.append({"type": "audio_url", "audio_url": {"url": url}})
    return {"messages": [{"role": "user", "content": content}], "metadata": metadata}


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    names=st.lists(st.sampled_from(CLIP_NAMES), min_size=1, max_size=3),
    data=st.data(),
)
async def test_property_same_clips_same_key_different_clips_different_key(
    keyed_gateway: Any,
    stub: StubState,
    audio_dir: Path,
    names: list[str],
    data: st.DataObject,
) -> None:
    gateway = keyed_gateway  # one for every example
    spell = st.lists(st.sampled_from(SPELLINGS), min_size=len(names), max_size=len(names))
    keys = []
    for _ in range(2):
        body = spelled(audio_dir, names, data.draw(spell))
        body["model"] = "stub-audio-model"
        body["messages"][0]["content"].append({"type": "text", "text": data.draw(st.text())})
        body["seed"] = data.draw(st.integers(0, 2**31))
        body["temperature"] = data.draw(st.floats(0, 2))
        keys.append(await keyed(gateway, stub, body))
    assert keys[0] == keys[1]
    others = data.draw(st.lists(st.sampled_from(CLIP_NAMES), min_size=1, max_size=3))
    other_key = await keyed(gateway, stub, chat_body({"audio_paths": others}))
    assert (other_key == keys[0]) == (others == names)
