"""vLLM restarted under a running gateway: `/gateway/ready` says 503 while the engine is down
and 200 once it is back; a request while it is down is the gateway's 502; the clips the gateway
had sent by reference are gone from the new engine's cache, so the next references miss for
real and are retried with the data into a 200, plain and streamed, generated once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine.server import START_DEADLINE_S, EngineServer
from gateway.serving.readiness import RESULT_TTL_SECONDS

from .helpers import (
    CHAT,
    GENERATED,
    MAX_TOKENS,
    Client,
    audio_tokens_for,
    chat_4xx,
    chat_body,
    count,
    delta,
    engine_metrics,
    make_gateway_client,
    post_json,
    reference_counters,
    stream_chat,
)
from .helpers import write_clip as clip
from .test_references import REFERENCE, counters

READY = "/gateway/ready"
SECONDS = 2.0


async def ready(gateway: Client) -> tuple[int, dict[str, Any]]:
    await asyncio.sleep(RESULT_TTL_SECONDS + 0.1)  # past the kept result
    async with gateway.get(READY) as response:
        return response.status, await response.json()


async def restart_watching_readiness(engine: EngineServer, gateway: Client) -> list[int]:
    """Restart the engine; the readiness statuses seen until it was healthy again."""
    await asyncio.to_thread(engine.stop)
    seen = [(await ready(gateway))[0]]
    down = await post_json_status(gateway)
    assert down == 502, down
    await asyncio.to_thread(engine.start)
    healthy = asyncio.create_task(asyncio.to_thread(engine.wait_healthy))
    while not healthy.done():
        seen.append((await ready(gateway))[0])
    await healthy
    return seen


async def post_json_status(gateway: Client) -> int:
    async with gateway.post(CHAT, json=chat_body()) as response:
        return response.status


@pytest.mark.timeout(START_DEADLINE_S + 180, func_only=True)
async def test_a_restart_under_a_running_gateway(
    qwen_engine: EngineServer, clip_dir: Any, qwen_tokens: dict[str, int]
) -> None:
    gateway = await make_gateway_client(qwen_engine, clip_dir, **REFERENCE)
    try:
        for name in ("plain.wav", "streamed.wav"):
            clip(clip_dir, name, SECONDS)
            await post_json(gateway, CHAT, chat_body({"audio_path": name}))  # held as sent
        status, body = await ready(gateway)
        assert (status, body) == (200, {"status": "ready"})

        seen = await restart_watching_readiness(qwen_engine, gateway)
        # 503 from the stop on; the last poll may already see the engine back
        assert seen[0] == 503 and seen == sorted(seen, reverse=True), seen
        status, body = await ready(gateway)
        assert status == 200, body

        audio = qwen_tokens["<|AUDIO|>"]
        for name, stream in (("plain.wav", False), ("streamed.wav", True)):
            engine_before, ours_before = await counters(qwen_engine, gateway)
            refused_before = await chat_4xx(qwen_engine)
            body = chat_body({"audio_path": name}, return_token_ids=True)
            if stream:
                events = await stream_chat(gateway, body)
                assert events[-1] == "[DONE]"
                ids = events[0]["prompt_token_ids"]
            else:
                ids = (await post_json(gateway, CHAT, body))["prompt_token_ids"]
            assert count(ids, audio) == audio_tokens_for(SECONDS)
            ours_after = await reference_counters(gateway)
            ours = {k: ours_after[k] - ours_before[k] for k in ours_after}
            assert ours == {"data": 1, "reference": 1, "refused": 0, "cache_miss": 1}, name
            assert await chat_4xx(qwen_engine) - refused_before == 1
            assert delta(engine_before, await engine_metrics(qwen_engine), *GENERATED) == {
                GENERATED[0]: 1,
                GENERATED[1]: MAX_TOKENS,
            }
    finally:
        await gateway.close()
