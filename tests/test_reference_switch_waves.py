"""A layout that forgets clips is caught by one clip's wave alone: its seeds' references all go
at once, and every one that misses counts toward the switch, not only the first (whose miss
makes the gateway forget the clip before its siblings' answers are in). Two API servers, each
with its own processor cache, requests alternating between them: about half of the wave's
references miss; the model then gets its clips with their data, and the next wave misses
nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from .conftest import GatewayFactory, chat_body, gateway_metrics

SEEDS = 16
REFERENCE = {"splice": {"repeats": "reference", "reference_wait_ms": 5000}}
PARTS = 'audio_gateway_audio_parts_total{form="%s"}'
MISSES = 'audio_gateway_reference_retries_total{reason="cache_miss"}'


async def wave(gateway: Any) -> list[int]:
    async def one(seed: int) -> int:
        response = await gateway.post(
            "/v1/chat/completions", json=chat_body({"audio_path": "a.wav"}, seed=seed)
        )
        await response.read()
        return int(response.status)

    return list(await asyncio.gather(*(one(seed) for seed in range(SEEDS))))


async def counted(gateway: Any) -> dict[str, float]:
    samples = await gateway_metrics(gateway)
    return {
        "data": samples.get(PARTS % "data", 0.0),
        "reference": samples.get(PARTS % "reference", 0.0),
        "cache_miss": samples.get(MISSES, 0.0),
    }


@pytest.mark.stub(api_server_count=2, api_server_per_request=True)
async def test_one_clips_wave_switches_a_forgetting_layout_to_data(
    make_gateway: GatewayFactory,
) -> None:
    gateway = await make_gateway(**REFERENCE)
    assert await wave(gateway) == [200] * SEEDS
    first = await counted(gateway)
    assert first["cache_miss"] >= 4, first  # about half of the 15 references

    health = await (await gateway.get("/gateway/health")).json()
    status = health["references"]["models"]["stub-audio-model"]
    assert (status["mode"], status["reason"]) == ("data", "misses"), status

    assert await wave(gateway) == [200] * SEEDS
    second = {k: v - first[k] for k, v in (await counted(gateway)).items()}
    assert second == {"data": SEEDS, "reference": 0, "cache_miss": 0}, second
