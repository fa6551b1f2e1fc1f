"""`[routing] affinity_headers`: every request the gateway sends upstream with audio carries its
clips' key in those headers, on every route, alike for alike clips; other requests pass the
client's headers untouched. Over real HTTP, against the stub (which records every header)."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest

from gateway.stub_upstream import StubState
from tests.conftest import GatewayFactory, chat_body

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


async def test_same_clip_same_key_whatever_carried_it(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(routing=ROUTING)
    path = audio_dir / "b.wav"
    keys = {
        await keyed(gateway, stub, chat_body({"audio_path": "b.wav"}, seed=1)),
        await keyed(gateway, stub, chat_body({"audio_path": str(path)}, temperature=0.5)),
        await keyed(gateway, stub, chat_body({"audio_paths": ["b.wav"]})),
        await keyed(gateway, stub, chat_body({"audio_data": data_uri(path)})),
        await keyed(gateway, stub, file_part_body(path.as_uri())),
        await keyed(gateway, stub, file_part_body(data_uri(path))),
    }
    assert len(keys) == 1


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
