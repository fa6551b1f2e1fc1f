"""`[server] workers = 2` with `[routing] affinity_headers`: both worker processes (real ones,
`python -m gateway serve`) give one clip one key, as any fleet of gateways does."""

from __future__ import annotations

from pathlib import Path

from aiohttp.test_utils import TestServer

from gateway.stub_upstream import StubState
from tests.conftest import chat_body
from tests.test_affinity_routes import HEADER, KEY, ROUTING
from tests.test_drain import fresh_session, until
from tests.test_workers import chat, serve_workers, served_by, until_ready

BOUND_REQUESTS = 200  # SO_REUSEPORT spreads fresh connections; both workers long before this


async def test_every_worker_gives_one_clip_one_key(
    stub_server: TestServer, stub: StubState, tmp_path: Path, audio_dir: Path
) -> None:
    sections = {"routing": ROUTING, "audio": {"root": str(audio_dir)}}
    async with (
        serve_workers(stub_server, tmp_path, sections=sections) as gateway,
        fresh_session() as session,
    ):
        await until_ready(session, gateway)
        sent = 0
        while set(served_by(gateway, "chat_completions")) != {1, 2}:
            await chat(session, gateway, chat_body({"audio_path": "b.wav"}, seed=sent))
            sent += 1
            await until(lambda n=sent: sum(served_by(gateway, "chat_completions").values()) == n)
            assert sent < BOUND_REQUESTS, "SO_REUSEPORT never spread the requests"
    keys = {value for r in stub.requests for value in r.header_values(HEADER)}
    assert len(keys) == 1 and KEY.fullmatch(keys.pop())
