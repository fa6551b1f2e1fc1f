"""`[splice] repeats = "reference"` against the real vLLM's multimodal processor cache.

A wave of concurrent seeds of a new clip costs the engine one processing (its own
`vllm:mm_cache_*` counters) while the gateway sent one data part and references for the rest.
Identical data would be a content-hash hit in vLLM too, so only the gateway's part counters tell
the two modes apart. Misses are forced for real, by eviction from a small processor cache and by
`/reset_mm_cache`; each is retried with the data into a 200, plain and streamed, and the engine
generates every answer once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from engine.server import EngineServer

from .helpers import (
    CHAT,
    GENERATED,
    MAX_TOKENS,
    MM_CACHE,
    Client,
    audio_tokens_for,
    chat_4xx,
    chat_body,
    count,
    delta,
    engine_client,
    engine_metrics,
    make_gateway_client,
    post_json,
    reference_counters,
    stream_chat,
    write_clip,
)

pytestmark = pytest.mark.timeout(180, func_only=True)
REFERENCE = {"splice": {"repeats": "reference"}}
SEEDS = 16
SECONDS = 3.0


async def counters(
    engine: EngineServer, gateway: Client
) -> tuple[dict[str, float], dict[str, float]]:
    """The engine's metrics and the gateway's reference counters, now."""
    return await engine_metrics(engine), await reference_counters(gateway)


@pytest.fixture
async def gateway(qwen_engine: EngineServer, clip_dir: Path) -> AsyncIterator[Client]:
    client = await make_gateway_client(qwen_engine, clip_dir, **REFERENCE)
    yield client
    await client.close()


@pytest.fixture
async def patient_gateway(qwen_engine: EngineServer, clip_dir: Path) -> AsyncIterator[Client]:
    """Requests for a clip whose seed is in flight wait for its answer (up to 30 s), not the
    default 100 ms: a seed takes this 2-core engine longer than that, and a reference sent
    before vLLM has stored the seed is a real miss (retried into a 200, but not one data
    part and 15 references)."""
    splice = {**REFERENCE["splice"], "reference_wait_ms": 30_000}
    client = await make_gateway_client(qwen_engine, clip_dir, splice=splice)
    yield client
    await client.close()


async def ask(gateway: Client, name: str, stream: bool) -> list[int]:
    """One request for clip `name`, its prompt token ids (a 200 asserted, streamed or not)."""
    body = chat_body({"audio_path": name}, return_token_ids=True)
    if not stream:
        answer = await post_json(gateway, CHAT, body)
        assert len(answer["choices"][0]["token_ids"]) == MAX_TOKENS
        ids: list[int] = answer["prompt_token_ids"]
        return ids
    events = await stream_chat(gateway, body)
    assert events[-1] == "[DONE]"
    assert [e["choices"][0]["finish_reason"] for e in events[:-1] if e["choices"]][-1] == "length"
    streamed_ids: list[int] = events[0]["prompt_token_ids"]
    return streamed_ids


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_a_wave_of_seeds_is_one_data_part_and_one_processing(
    qwen_engine: EngineServer,
    patient_gateway: Client,
    clip_dir: Path,
    qwen_tokens: dict[str, int],
    stream: bool,
) -> None:
    gateway = patient_gateway
    write_clip(clip_dir, "wave.wav", SECONDS)
    engine_before, ours_before = await counters(qwen_engine, gateway)
    prompts = await asyncio.gather(*(ask(gateway, "wave.wav", stream) for _ in range(SEEDS)))
    engine_after, ours_after = await counters(qwen_engine, gateway)

    audio = qwen_tokens["<|AUDIO|>"]
    assert [count(ids, audio) for ids in prompts] == [audio_tokens_for(SECONDS)] * SEEDS
    ours = {k: ours_after[k] - ours_before[k] for k in ours_after}
    assert ours == {"data": 1, "reference": SEEDS - 1, "refused": 0, "cache_miss": 0}
    queries, hits = MM_CACHE
    assert delta(engine_before, engine_after, *MM_CACHE) == {queries: SEEDS, hits: SEEDS - 1}
    assert delta(engine_before, engine_after, *GENERATED) == {
        GENERATED[0]: SEEDS,
        GENERATED[1]: SEEDS * MAX_TOKENS,
    }


async def evict(gateway: Client, clip_dir: Path) -> None:
    """Fill the engine's small processor cache (about two clips) with three new clips."""
    for index in range(3):
        write_clip(clip_dir, f"filler{index}.wav", 1.0)
        await ask(gateway, f"filler{index}.wav", stream=False)


async def reset_mm_cache(engine: EngineServer) -> None:
    """vLLM's own POST /reset_mm_cache (VLLM_SERVER_DEV_MODE=1), straight to the engine."""
    async with engine_client(engine) as session, session.post("/reset_mm_cache") as response:
        assert response.status == 200, await response.text()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("forced_by", ["eviction", "reset_mm_cache"])
async def test_a_real_miss_is_retried_into_a_200_generated_once(
    qwen_engine: EngineServer,
    gateway: Client,
    clip_dir: Path,
    qwen_tokens: dict[str, int],
    forced_by: str,
    stream: bool,
) -> None:
    write_clip(clip_dir, "held.wav", SECONDS)
    await ask(gateway, "held.wav", stream=False)  # data: the gateway now holds it as sent
    if forced_by == "eviction":
        await evict(gateway, clip_dir)
    else:
        await reset_mm_cache(qwen_engine)

    engine_before, ours_before = await counters(qwen_engine, gateway)
    refused_before = await chat_4xx(qwen_engine)
    ids = await ask(gateway, "held.wav", stream)
    engine_after, ours_after = await counters(qwen_engine, gateway)

    assert count(ids, qwen_tokens["<|AUDIO|>"]) == audio_tokens_for(SECONDS)
    ours = {k: ours_after[k] - ours_before[k] for k in ours_after}
    # the reference, then the data
    assert ours == {"data": 1, "reference": 1, "refused": 0, "cache_miss": 1}
    assert await chat_4xx(qwen_engine) - refused_before == 1  # vLLM's "Cache miss" 400
    assert delta(engine_before, engine_after, *GENERATED) == {
        GENERATED[0]: 1,
        GENERATED[1]: MAX_TOKENS,
    }


async def test_the_engine_refuses_an_unknown_reference_as_the_gateway_expects(
    qwen_engine: EngineServer,
) -> None:
    # The 400 the gateway's retry is built on, straight from the engine.
    part: dict[str, Any] = {"type": "audio_url", "audio_url": None, "uuid": "never-sent-" * 4}
    body = chat_body()
    body["messages"] = [{"role": "user", "content": [part, {"type": "text", "text": "Hi"}]}]
    async with engine_client(qwen_engine) as session, session.post(CHAT, json=body) as response:
        assert response.status == 400
        error = (await response.json())["error"]
    assert error["message"] == "Cache miss for audio at index 0 but data is not provided."
