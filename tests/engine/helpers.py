"""What the real-engine tests share: 16 kHz clips of their own, gateways in front of an engine,
the engine's metrics and token counts."""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import numpy
import soundfile
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from openai import AsyncOpenAI

from engine.server import EngineServer
from gateway.app import create_app
from tests.conftest import gateway_config, named_metrics, parse_metrics

Client = TestClient[web.Request, web.Application]
GatewayFactory = Callable[..., Awaitable[Client]]
CHAT = "/v1/chat/completions"
RATE_HZ = 16_000  # the model's rate: this vLLM cannot resample (no torchaudio)
TOKENS_PER_SECOND = 25  # Qwen2-Audio: mel frames of 10 ms, halved twice
MAX_AUDIO_TOKENS = 750  # 30 s: the feature extractor's window
MAX_TOKENS = 4
BOUND_SECONDS = 60.0  # one request on a loaded 2-core machine, generously
# A tool's parameters random weights can fill: enums and booleans only, so that the grammar
# (xgrammar, no free whitespace) leaves no free text to run on until max_tokens.
MODE_SCHEMA = {
    "type": "object",
    "properties": {
        "mode": {"type": "string", "enum": ["loud", "quiet"]},
        "on": {"type": "boolean"},
    },
    "required": ["mode", "on"],
    "additionalProperties": False,
}


def write_clip(folder: Path, name: str, seconds: float) -> Path:
    """A 16 kHz mono PCM16 WAV of noise in bursts, seeded by its path: no two tests' clips
    share bytes, so the engine has never seen a test's clip before."""
    path = folder / name
    rng = numpy.random.default_rng(zlib.crc32(str(path).encode()))
    samples = rng.integers(-12000, 12000, int(seconds * RATE_HZ), dtype=numpy.int16)
    envelope = (numpy.arange(len(samples)) // int(0.7 * RATE_HZ)) % 3 != 2  # quiet gaps
    shaped = (samples * numpy.where(envelope, 1.0, 0.01)).astype(numpy.int16)
    soundfile.write(path, shaped, RATE_HZ, subtype="PCM_16")
    return path


def audio_tokens_for(seconds: float) -> int:
    return min(int(seconds * TOKENS_PER_SECOND), MAX_AUDIO_TOKENS)


def chat_body(metadata: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "tiny-qwen2-audio",
        "messages": [{"role": "user", "content": "What is in the audio?"}],
        "max_tokens": MAX_TOKENS,
        # Random weights may sample an end token anywhere: always MAX_TOKENS, the same ones.
        "ignore_eos": True,
        "temperature": 0.0,
    }
    if metadata is not None:
        body["metadata"] = metadata
    body.update(extra)
    return body


def count(token_ids: list[int], token: int) -> int:
    return sum(1 for t in token_ids if t == token)


@asynccontextmanager
async def engine_client(engine: EngineServer) -> AsyncIterator[aiohttp.ClientSession]:
    """A client session straight to the engine (TCP or its Unix socket)."""
    if engine.spec.uds:
        connector: aiohttp.BaseConnector = aiohttp.UnixConnector(path=engine.socket_path)
        base = "http://localhost"
    else:
        connector = aiohttp.TCPConnector()
        base = engine.url
    timeout = aiohttp.ClientTimeout(total=BOUND_SECONDS)
    async with aiohttp.ClientSession(base, connector=connector, timeout=timeout) as session:
        yield session


async def engine_metrics(engine: EngineServer) -> dict[str, float]:
    """The engine's Prometheus samples, without their `engine`/`model_name` labels."""
    async with engine_client(engine) as session, session.get("/metrics") as response:
        assert response.status == 200
        text = await response.text()
    samples: dict[str, float] = {}
    for key, value in parse_metrics(text).items():
        name, _, labels = key.partition("{")
        pairs = labels.rstrip("}").split(",")
        kept = [p for p in pairs if p and not p.startswith(("engine=", "model_name="))]
        short = f"{name}{{{','.join(kept)}}}" if kept else name
        samples[short] = samples.get(short, 0.0) + value
    return samples


MM_CACHE = ("vllm:mm_cache_queries_total", "vllm:mm_cache_hits_total")
GENERATED = ("vllm:request_success_total", "vllm:generation_tokens_total")


def delta(before: dict[str, float], after: dict[str, float], *names: str) -> dict[str, float]:
    """How much each named sample grew (summed over its remaining labels)."""

    def total(samples: dict[str, float], name: str) -> float:
        return sum(v for k, v in samples.items() if k == name or k.startswith(name + "{"))

    return {name: total(after, name) - total(before, name) for name in names}


async def chat_4xx(engine: EngineServer) -> float:
    """The engine's count of chat requests it refused with a 4xx."""
    samples = await engine_metrics(engine)
    return sum(
        value
        for key, value in samples.items()
        if key.startswith("http_requests_total{")
        and 'handler="/v1/chat/completions"' in key
        and 'status="4xx"' in key
    )


async def make_gateway_client(engine: EngineServer, root: Path, **sections: Any) -> Client:
    config = gateway_config(engine.url, root, **sections)
    client = TestClient(TestServer(create_app(config)))
    await client.start_server()
    return client


@asynccontextmanager
async def gateway_sdk(
    engine: EngineServer, root: Path, **sections: Any
) -> AsyncIterator[AsyncOpenAI]:
    """The openai SDK on a gateway in front of `engine` (config sections over the defaults)."""
    gateway = await make_gateway_client(engine, root, **sections)
    base_url = str(gateway.make_url("/v1"))
    try:
        async with AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=60) as client:
            yield client
    finally:
        await gateway.close()


async def reference_counters(gateway: Client) -> dict[str, float]:
    """The gateway's audio parts by form and its reference retries by reason, now."""
    names = {
        "data": 'audio_gateway_audio_parts_total{form="data"}',
        "reference": 'audio_gateway_audio_parts_total{form="reference"}',
        "refused": 'audio_gateway_reference_retries_total{reason="refused"}',
        "cache_miss": 'audio_gateway_reference_retries_total{reason="cache_miss"}',
    }
    return await named_metrics(gateway, names)


async def health_models(gateway: Client) -> dict[str, Any]:
    """`/gateway/health`'s `references.models`: the models switched to data at least once."""
    answer = await (await gateway.get("/gateway/health")).json()
    models: dict[str, Any] = answer["references"]["models"]
    return models


async def post_json(client: Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await asyncio.wait_for(client.post(path, json=body), BOUND_SECONDS)
    text = await response.text()
    assert response.status == 200, text
    answer: dict[str, Any] = json.loads(text)
    return answer


async def sse_events(response: aiohttp.ClientResponse) -> list[Any]:
    """The `data` of every SSE event, parsed (the final `[DONE]` as the string)."""
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"].startswith("text/event-stream")
    text = (await asyncio.wait_for(response.read(), BOUND_SECONDS)).decode()
    events = []
    for block in text.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                data = line[len("data: ") :]
                events.append(data if data == "[DONE]" else json.loads(data))
    return events


async def stream_chat(client: Client, body: dict[str, Any]) -> list[Any]:
    response = await asyncio.wait_for(
        client.post(CHAT, json={**body, "stream": True}), BOUND_SECONDS
    )
    return await sse_events(response)


def streamed_text(events: list[Any]) -> str:
    return "".join(
        choice["delta"].get("content") or ""
        for event in events
        if isinstance(event, dict)
        for choice in event.get("choices", [])
    )
