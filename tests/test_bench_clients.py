"""The bench's clients: a keep-alive pool reuses its connections, `per-request` opens one per
request, and the count a session keeps is the number of connections the server accepted.
Checked against a real aiohttp server that records each request's connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from bench.shared.clients import (
    KEEP_ALIVE,
    PER_REQUEST,
    ClientPools,
    client_session,
    connections_mode,
    describe,
)

REQUESTS = 24
CONCURRENCY = 4
peers_key = web.AppKey("peers", list[object])


async def answer(request: web.Request) -> web.Response:
    assert request.transport is not None
    request.app[peers_key].append(request.transport.get_extra_info("peername"))
    await asyncio.sleep(0)
    return web.json_response({"ok": True})


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    app = web.Application()
    app[peers_key] = []
    app.router.add_post("/v1/chat/completions", answer)
    test_server = TestServer(app)
    await test_server.start_server()
    yield test_server
    await test_server.close()


async def send(server: TestServer, connections: str) -> int:
    """REQUESTS requests, CONCURRENCY at a time; the connections the client counted."""
    session, count = client_session(connections, limit=CONCURRENCY, timeout_s=30)
    url = str(server.make_url("/v1/chat/completions"))

    async def one() -> None:
        async with session.post(url, json={"model": "m"}) as reply:
            assert reply.status == 200
            await reply.read()

    async with session:
        for _ in range(REQUESTS // CONCURRENCY):
            await asyncio.gather(*(one() for _ in range(CONCURRENCY)))
    return count.opened


async def test_keep_alive_reuses_the_pool(server: TestServer) -> None:
    opened = await send(server, KEEP_ALIVE)
    peers = server.app[peers_key]
    assert len(peers) == REQUESTS
    assert opened == len(set(peers)) <= CONCURRENCY


async def test_per_request_opens_a_connection_for_every_request(server: TestServer) -> None:
    opened = await send(server, PER_REQUEST)
    peers = server.app[peers_key]
    assert opened == len(set(peers)) == REQUESTS


def test_the_flag_and_the_result_fields() -> None:
    assert connections_mode(False) == KEEP_ALIVE and connections_mode(True) == PER_REQUEST
    fields = describe(PER_REQUEST, 10, 10)
    assert fields["connections"] == "per-request" and fields["connections_per_request"] == 1.0
    assert describe(KEEP_ALIVE, 0, 0)["connections_per_request"] is None
    with pytest.raises(ValueError, match="unknown"):
        client_session("sometimes")


def test_the_system_bench_flag() -> None:
    from bench.system.run import parse_args

    assert parse_args([]).connections == KEEP_ALIVE
    assert parse_args(["--connection-per-request"]).connections == PER_REQUEST


async def test_pools_are_one_session_a_target_and_count_together(server: TestServer) -> None:
    pools = ClientPools(KEEP_ALIVE, timeout_s=30)
    url = str(server.make_url("/v1/chat/completions"))
    try:
        assert pools.session("gateway") is pools.session("gateway")
        for target in ("gateway", "vllm-direct", "gateway"):
            async with pools.session(target).post(url, json={}) as reply:
                assert reply.status == 200
        assert pools.opened == len(set(server.app[peers_key])) == 2  # one pool per target
        pools.restart_count()
        async with pools.session("gateway").post(url, json={}) as reply:
            assert reply.status == 200
        assert pools.opened == 0  # the gateway's pool reused its connection
    finally:
        await pools.close()
