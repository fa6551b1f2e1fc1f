"""Shared fixtures: a real stub upstream server and gateways in front of it, over real HTTP."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse, StreamReader, web
from aiohttp.test_utils import TestClient, TestServer
from blockbuster import BlockBuster, blockbuster_ctx
from hypothesis import settings

from bench.shared.samples import parse_metrics
from gateway.app import create_app
from gateway.audio.samples import write_tone
from gateway.config import Config
from gateway.stub_upstream import StubState, create_stub_app, stub_state_key


@contextmanager
def no_blocking_calls() -> Iterator[BlockBuster]:
    """Every blocking call on the loop thread raises, but one: the single `stat` with which a
    path checked moments ago is re-checked on a local file system (gateway/audio/recent.py)."""
    with blockbuster_ctx() as detector:
        detector.functions["os.stat"].can_block_in("gateway/audio/recent.py", "_recheck")
        yield detector


# Property tests check behaviour, not speed: on a loaded 2-core CI machine hypothesis's default
# 200 ms deadline fails correct code. Tests that set their own deadline keep it.
settings.register_profile("audio-gateway", deadline=None)
settings.load_profile("audio-gateway")

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
async def stub_server(audio_dir: Path, request: pytest.FixtureRequest) -> AsyncIterator[TestServer]:
    """The vLLM-faithful stub, allowed to read local media under the audio root's parent;
    `@pytest.mark.stub(**kwargs)` passes more `create_stub_app` arguments."""
    marker = request.node.get_closest_marker("stub")
    options = marker.kwargs if marker is not None else {}
    server = TestServer(create_stub_app(str(audio_dir.parent), **options))
    await server.start_server()
    yield server
    await server.close()


@pytest.fixture
def stub(stub_server: TestServer) -> StubState:
    """What the stub received: `stub.requests`, counters, and `stub.hold` for held streams."""
    return stub_server.app[stub_state_key]


def gateway_config(upstream_url: str, audio_dir: Path, **sections: dict[str, Any]) -> Config:
    """The gateway's config in front of the stub: `sections` merged over the defaults. The
    gateway does not ask the stub's /v1/models to place models (stub request counts stay
    exact) unless a test sets `placement={"ask_upstream": True}`."""
    data: dict[str, Any] = {
        "upstream": {"url": upstream_url},
        "audio": {"root": str(audio_dir)},
        "placement": {"ask_upstream": False},
    }
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    return Config.model_validate(data)


@pytest.fixture
async def make_gateway(stub_server: TestServer, audio_dir: Path) -> AsyncIterator[GatewayFactory]:
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


# --- helpers for the behaviour modules (sidechannel forms, errors, path security, relay) ------

ERROR_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    502: "upstream_error",
    504: "upstream_error",
}


def audio_part(path: Path, mime: str = "audio/wav") -> dict[str, Any]:
    """The part vLLM must receive for `path`: the file's exact bytes in a data URI."""
    payload = base64.b64encode(path.read_bytes()).decode()
    return {"type": "audio_url", "audio_url": {"url": f"data:{mime};base64,{payload}"}}


def forwarded_json(stub: StubState) -> dict[str, Any]:
    """The body the stub received last, parsed."""
    return json.loads(stub.requests[-1].body)


async def gateway_error(response: ClientResponse, status: int, param: str | None) -> dict[str, Any]:
    """Assert the gateway's one error shape, its status and `param`; return the `error` object."""
    text = await response.text()
    assert response.status == status, text
    assert response.content_type == "application/json", text
    payload = json.loads(text)
    assert list(payload) == ["error"], payload
    error = payload["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"], error
    assert error["type"] == ERROR_TYPE_BY_STATUS[status], error
    assert isinstance(error["code"], str) and error["code"], error
    assert error["param"] == param, error
    return error


# --- helpers for the cache, responses and modes modules ----------------------------------------


def b64_of(path: Path) -> str:
    """The bare base64 of a file's bytes, as an `input_audio.data` must carry it."""
    return base64.b64encode(path.read_bytes()).decode()


async def gateway_metrics(client: TestClient[web.Request, web.Application]) -> dict[str, float]:
    """The gateway's own metrics, read over HTTP from /gateway/metrics."""
    response = await client.get("/gateway/metrics")
    assert response.status == 200, await response.text()
    return parse_metrics(await response.text())


async def named_metrics(
    client: TestClient[web.Request, web.Application], names: dict[str, str]
) -> dict[str, float]:
    """`names` ({short: labelled sample name}) read from /gateway/metrics, 0 where absent."""
    samples = await gateway_metrics(client)
    return {short: samples.get(name, 0.0) for short, name in names.items()}


async def cache_stats(client: TestClient[web.Request, web.Application]) -> dict[str, int]:
    """The cache counters of /gateway/metrics: hits, misses, bytes, entries, encoded."""
    samples = await gateway_metrics(client)
    names = {
        "hits": "audio_gateway_cache_hits_total",
        "misses": "audio_gateway_cache_misses_total",
        "bytes": "audio_gateway_cache_bytes",
        "entries": "audio_gateway_cache_entries",
        "encoded": "audio_gateway_encoded_bytes_total",
    }
    return {short: int(samples[name]) for short, name in names.items()}


def write_encoded_tone(path: Path, seconds: float, frequency_hz: float, format: str) -> Path:
    """A tone in a soundfile container ("FLAC", "OGG"), e.g. to check `input_audio.format`."""
    import numpy
    import soundfile

    rate_hz = 16_000
    t = numpy.arange(int(seconds * rate_hz)) / rate_hz
    soundfile.write(path, 0.3 * numpy.sin(2 * numpy.pi * frequency_hz * t), rate_hz, format=format)
    return path


async def read_event(stream: StreamReader) -> dict[str, Any]:
    """One SSE event of a response body: its `event` name and parsed `data` ({} at the end)."""
    event: dict[str, Any] = {}
    while (line := (await stream.readline()).decode()) not in ("\n", "\r\n", ""):
        field, _, value = line.rstrip("\r\n").partition(": ")
        event[field] = json.loads(value) if field == "data" else value
    return event


def forced_call_events(deltas: int) -> list[str]:
    """The Responses event types of a streamed answer that is one function call whose
    arguments came in `deltas` pieces."""
    return [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        *["response.function_call_arguments.delta"] * deltas,
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
