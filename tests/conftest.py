"""Shared fixtures: a real stub upstream server and gateways in front of it, over real HTTP."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from gateway.config import Config
from gateway.samples import write_tone
from gateway.stub_upstream import StubState, create_stub_app, stub_state_key

GatewayFactory = Callable[..., Awaitable[TestClient[web.Request, web.Application]]]


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def audio_dir(tmp_path: Path) -> Path:
    """The audio root, with three short WAV clips of different lengths."""
    root = tmp_path / "audio"
    root.mkdir()
    write_tone(root / "a.wav", 0.25, 440.0)
    write_tone(root / "b.wav", 0.5, 660.0)
    write_tone(root / "c.wav", 0.75, 880.0)
    return root


@pytest.fixture
async def stub_server(audio_dir: Path) -> AsyncIterator[TestServer]:
    """The vLLM-faithful stub, allowed to read local media under the audio root's parent."""
    server = TestServer(create_stub_app(str(audio_dir.parent)))
    await server.start_server()
    yield server
    await server.close()


@pytest.fixture
def stub(stub_server: TestServer) -> StubState:
    """What the stub received: `stub.requests`, counters, and `stub.hold` for held streams."""
    return stub_server.app[stub_state_key]


def gateway_config(upstream_url: str, audio_dir: Path, **sections: dict[str, Any]) -> Config:
    data: dict[str, Any] = {"upstream": {"url": upstream_url}, "audio": {"root": str(audio_dir)}}
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    return Config.model_validate(data)


@pytest.fixture
async def make_gateway(
    stub_server: TestServer, audio_dir: Path
) -> AsyncIterator[GatewayFactory]:
    """`await make_gateway(cache={"max_bytes": 0}, ...)`: a client of a gateway in front of
    the stub, config sections merged over the defaults (audio root = `audio_dir`)."""
    clients: list[TestClient[web.Request, web.Application]] = []

    async def factory(**sections: dict[str, Any]) -> TestClient[web.Request, web.Application]:
        upstream = str(stub_server.make_url("")).rstrip("/")
        config = gateway_config(upstream, audio_dir, **sections)
        client = TestClient(TestServer(create_app(config)))
        await client.start_server()
        clients.append(client)
        return client

    yield factory
    for client in clients:
        await client.close()


@pytest.fixture
async def gateway(make_gateway: GatewayFactory) -> TestClient[web.Request, web.Application]:
    """A gateway with the default config in front of the stub."""
    return await make_gateway()


def chat_body(metadata: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "stub-audio-model",
        "messages": [{"role": "user", "content": "Transcribe the audio."}],
    }
    if metadata is not None:
        body["metadata"] = metadata
    body.update(extra)
    return body
