"""Content-part clips get what sidechannel clips get: objects (`s3://`, presigned), a long clip
split into pieces ([chunking]), the cache. Over real HTTP: the stub (a 3 s model for the
chunking tests) and moto as the S3 API."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.stub_upstream import StubState
from tests.chunking_helpers import (
    CHUNKING,
    assert_pieces_are_the_clip,
    heard,
    windowed_stub,
    write_long_clips,
)
from tests.conftest import GatewayFactory, cache_stats, forwarded_json, gateway_error
from tests.objectstore import S3Server, aws_environment, s3_config, s3_server, silent_store

__all__ = ["aws_environment", "s3_server", "silent_store"]  # fixtures, used by name

Client = TestClient[web.Request, web.Application]
CHAT = "/v1/chat/completions"
PROMPT = {"type": "text", "text": "Transcribe."}


def chat(content: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": content},
    ]
    return {"model": "stub-audio-model", "messages": messages, **extra}


def url_part(url: str) -> dict[str, Any]:
    return {"type": "audio_url", "audio_url": {"url": url}}


# --- objects ------------------------------------------------------------------------------------


@pytest.fixture
async def s3_gateway(
    make_gateway: GatewayFactory, s3_server: S3Server, audio_dir: Path, aws_environment: None
) -> AsyncIterator[tuple[Client, str]]:
    bucket = s3_server.bucket()
    client = await make_gateway(
        audio={
            "root": f"s3://{bucket}/data/",
            "allowed_roots": [f"s3://{bucket}/data/", str(audio_dir)],
        },
        storage={"s3": s3_config(s3_server)},
    )
    yield client, bucket


async def test_object_parts_and_relative_parts_under_an_object_root(
    s3_gateway: tuple[Client, str], s3_server: S3Server, audio_dir: Path, stub: StubState
) -> None:
    client, bucket = s3_gateway
    a = s3_server.put(bucket, "data/a.wav", audio_dir / "a.wav")
    b = s3_server.put(bucket, "data/sub/b.wav", audio_dir / "b.wav")
    local = audio_dir / "c.wav"
    content = [url_part(f"s3://{bucket}/data/a.wav"), PROMPT, url_part("sub/b.wav")]
    content.append(url_part("file://" + quote(str(local))))
    response = await client.post(CHAT, json=chat(content))
    assert response.status == 200, await response.text()
    clips = (await response.json())["stub"]["clips"]
    expected = [hashlib.sha256(data).hexdigest() for data in (a, b, local.read_bytes())]
    assert [clip["sha256"] for clip in clips] == expected
    assert forwarded_json(stub)["messages"][1]["content"][1] == PROMPT


async def test_an_object_part_outside_the_prefixes_is_403(
    s3_gateway: tuple[Client, str], stub: StubState
) -> None:
    client, bucket = s3_gateway
    response = await client.post(CHAT, json=chat([url_part(f"s3://{bucket}/private/a.wav")]))
    error = await gateway_error(response, 403, "messages[1].content[0].audio_url.url")
    assert f"'s3://{bucket}/private/a.wav'" in error["message"]
    assert stub.requests == []


async def test_presigned_mode_hands_vllm_the_url_in_the_parts_place(
    make_gateway: GatewayFactory,
    s3_server: S3Server,
    audio_dir: Path,
    stub: StubState,
    aws_environment: None,
) -> None:
    bucket = s3_server.bucket()
    data = s3_server.put(bucket, "data/b.wav", audio_dir / "b.wav")
    client = await make_gateway(
        audio={"allowed_roots": [f"s3://{bucket}/data/"]},
        splice={"remote": "presigned_url"},
        storage={"s3": s3_config(s3_server)},
    )
    response = await client.post(CHAT, json=chat([PROMPT, url_part(f"s3://{bucket}/data/b.wav")]))
    assert response.status == 200, await response.text()
    (clip,) = (await response.json())["stub"]["clips"]
    assert (clip["source"], clip["sha256"]) == ("url", hashlib.sha256(data).hexdigest())
    sent = forwarded_json(stub)["messages"][1]["content"]
    assert sent[0] == PROMPT
    assert sent[1]["audio_url"]["url"].startswith(f"{s3_server.endpoint}/{bucket}/data/b.wav?")


# --- the cache ----------------------------------------------------------------------------------


async def test_parts_and_the_sidechannel_share_the_cache(gateway: Client, audio_dir: Path) -> None:
    body = chat([url_part("a.wav")])
    assert (await gateway.post(CHAT, json=body)).status == 200
    body = {**chat([PROMPT]), "metadata": {"audio_path": str(audio_dir / "a.wav")}}
    assert (await gateway.post(CHAT, json=body)).status == 200
    stats = await cache_stats(gateway)
    assert (stats["misses"], stats["hits"]) == (1, 1)


# --- chunking -----------------------------------------------------------------------------------


@pytest.fixture
async def stub_server(audio_dir: Path) -> AsyncIterator[TestServer]:
    async for server in windowed_stub(audio_dir):
        yield server


@pytest.fixture
def long_pcm(audio_dir: Path) -> numpy.ndarray:
    return write_long_clips(audio_dir)


async def test_one_long_part_is_split_and_each_piece_sits_in_its_place(
    make_gateway: GatewayFactory, long_pcm: numpy.ndarray, stub: StubState
) -> None:
    client = await make_gateway(chunking=CHUNKING)
    response = await client.post(CHAT, json=chat([PROMPT, url_part("long.wav")]))
    answer = await response.json()
    assert response.status == 200, answer
    assert_pieces_are_the_clip(heard(answer["choices"][0]["message"]["content"]), long_pcm)
    for request in stub.requests:
        content = json.loads(request.body)["messages"][1]["content"]
        assert content[0] == PROMPT
        assert content[1]["audio_url"]["url"].startswith("data:audio/wav;base64,")


async def test_a_long_part_keeps_the_chunking_refusals(
    make_gateway: GatewayFactory, long_pcm: numpy.ndarray, stub: StubState
) -> None:
    client = await make_gateway(chunking=CHUNKING)
    response = await client.post(CHAT, json=chat([url_part("long.wav")], n=2))
    error = await gateway_error(response, 400, "n")
    assert error["code"] == "chunking_unsupported"
    assert stub.requests == []
