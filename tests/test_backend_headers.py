"""A router in front of the replicas names the one that answered in a response header (SMG's
`x-smg-routed-worker-id: http://host:port`): a backend address the gateway does not relay to
its clients, whatever the route (a spliced chat, a reference, a miss retried with the data, a
stream, a passthrough, an error). SMG's `x-request-id` names the request, not a replica: relayed.

The upstream is the stub with a fake of SMG's answer headers on every answer, as SMG adds them,
over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import given
from hypothesis import strategies as st

from gateway.stub_upstream import StubState, create_stub_app
from gateway.upstream.relay import names_a_backend, response_headers_for_client

from .conftest import GatewayFactory, chat_body

WORKER = "http://10.0.0.11:8000"
REQUEST_ID = "chatcmpl-5fVgpiA7ASt75Bwao3OlyAwW"
REFERENCE = {"splice": {"repeats": "reference"}}


async def _as_smg_answers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["x-smg-routed-worker-id"] = WORKER
    response.headers["x-request-id"] = REQUEST_ID


@pytest.fixture
async def stub_server(audio_dir: Path) -> AsyncIterator[TestServer]:
    """The stub, every answer of it carrying SMG's two headers."""
    app = create_stub_app(str(audio_dir.parent))
    app.on_response_prepare.append(_as_smg_answers)
    server = TestServer(app)
    await server.start_server()
    yield server
    await server.close()


def assert_no_backend(response: aiohttp.ClientResponse) -> None:
    assert "x-smg-routed-worker-id" not in response.headers, response.headers
    assert all(WORKER not in value for value in response.headers.values()), response.headers
    assert response.headers.get("x-request-id") == REQUEST_ID, response.headers


async def test_the_fake_gives_the_backend_away_without_the_gateway(stub_server: TestServer) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(stub_server.make_url("/v1/models")) as response,
    ):
        assert response.headers["x-smg-routed-worker-id"] == WORKER


async def test_a_passthrough_answer_loses_the_backend_address(
    make_gateway: GatewayFactory,
) -> None:
    gateway = await make_gateway()
    response = await gateway.get("/v1/models")
    assert response.status == 200
    assert_no_backend(response)


async def test_data_a_reference_and_a_retried_miss_lose_it(
    make_gateway: GatewayFactory, stub: StubState
) -> None:
    gateway = await make_gateway(**REFERENCE)
    body = chat_body({"audio_path": "a.wav"})
    for _ in range(2):  # the clip's data, then a reference to it
        response = await gateway.post("/v1/chat/completions", json=body)
        assert response.status == 200, await response.text()
        assert_no_backend(response)
    stub.mm_cache.clear()  # vLLM forgot the clip: the reference misses, goes again with data
    before = len(stub.requests)
    response = await gateway.post("/v1/chat/completions", json=body)
    assert response.status == 200, await response.text()
    assert_no_backend(response)
    assert len(stub.requests) - before == 2  # the miss and the retry


async def test_a_stream_loses_it(make_gateway: GatewayFactory) -> None:
    gateway = await make_gateway(**REFERENCE)
    body = chat_body({"audio_path": "b.wav"}, stream=True)
    for _ in range(2):
        response = await gateway.post("/v1/chat/completions", json=body)
        assert response.status == 200
        assert response.content_type == "text/event-stream"
        assert_no_backend(response)
        assert (await response.text()).rstrip().endswith("data: [DONE]")


async def test_an_upstream_error_loses_it(make_gateway: GatewayFactory) -> None:
    gateway = await make_gateway()
    not_audio = {"type": "audio_url", "audio_url": {"url": "data:audio/wav;base64,AAAA"}}
    body = chat_body(messages=[{"role": "user", "content": [not_audio]}])
    response = await gateway.post("/v1/chat/completions", json=body)
    assert response.status == 400, await response.text()  # the stub's, as vLLM's
    assert_no_backend(response)


def any_case(name: str) -> st.SearchStrategy[str]:
    flips = st.lists(st.booleans(), min_size=len(name), max_size=len(name))
    return flips.map(
        lambda up: "".join(c.upper() if u else c for c, u in zip(name, up, strict=True))
    )


PLAIN_NAMES = st.from_regex(r"\Ax-[a-z0-9]{1,12}\Z").filter(lambda name: not names_a_backend(name))
HEADERS = st.lists(st.tuples(PLAIN_NAMES, st.from_regex(r"\A[ -~]{0,20}\Z")), max_size=6)


@given(any_case("x-smg-routed-worker-id"))
def test_the_backend_header_is_named_in_any_case(name: str) -> None:
    assert names_a_backend(name)


@given(HEADERS, st.lists(any_case("x-smg-routed-worker-id"), max_size=2), st.randoms())
def test_only_the_backend_header_is_left_out(
    plain: list[tuple[str, str]], backend: list[str], random: Any
) -> None:
    raw = [(n.encode(), v.encode()) for n, v in plain]
    for name in backend:
        raw.insert(random.randint(0, len(raw)), (name.encode(), WORKER.encode()))
    relayed = response_headers_for_client(raw)
    assert list(relayed.items()) == plain
