"""The clip key of a long clip's pieces (`[chunking]`): each piece is its own clip, so piece j
of every seed carries one key (the key of those bytes however sent) and the pieces of one clip
spread; the stub acts as a 3 s model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from gateway.stub_upstream import StubState
from tests.chunking_helpers import CHUNKING, windowed_stub, write_long_clips
from tests.conftest import GatewayFactory, chat_body
from tests.test_affinity_routes import HEADER, KEY, ROUTING, keyed


@pytest.fixture
async def stub_server(audio_dir: Path) -> AsyncIterator[TestServer]:
    async for server in windowed_stub(audio_dir):
        yield server


async def keys_by_piece(gateway: Any, stub: StubState, body: dict[str, Any]) -> dict[str, str]:
    """The key each piece's upstream request carried, by the piece's data URI."""
    before = len(stub.requests)
    response = await gateway.post("/v1/chat/completions", json=body)
    assert response.status == 200, await response.text()
    keys = {}
    for request in stub.requests[before:]:
        values = request.header_values(HEADER)
        assert len(values) == 1 and KEY.fullmatch(values[0]), values
        part = json.loads(request.body)["messages"][-1]["content"][0]
        keys[part["audio_url"]["url"]] = values[0]
    return keys


@pytest.mark.parametrize("carrier", ["audio_path", "content_part"])
async def test_each_piece_of_a_long_clip_is_its_own_clip(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, carrier: str
) -> None:
    write_long_clips(audio_dir)
    gateway = await make_gateway(chunking=CHUNKING, routing=ROUTING)
    seeds = []
    for seed in range(3):
        if carrier == "audio_path":
            body = chat_body({"audio_path": "long.wav"}, seed=seed)
        else:
            part = {"type": "audio_url", "audio_url": {"url": "long.wav"}}
            body = chat_body(None, seed=seed, messages=[{"role": "user", "content": [part]}])
        seeds.append(await keys_by_piece(gateway, stub, body))
    assert seeds[0] == seeds[1] == seeds[2]
    assert len(seeds[0]) == 4 and len(set(seeds[0].values())) == 4  # 4 pieces, 4 keys
    # A piece is keyed as its bytes are anywhere: sent whole as inline audio, the same key.
    uri, key = next(iter(seeds[0].items()))
    assert await keyed(gateway, stub, chat_body({"audio_data": uri})) == key
