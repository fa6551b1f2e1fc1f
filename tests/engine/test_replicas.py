"""Two real replicas of the tiny Qwen2-Audio behind a real vllm-router (the "Many replicas"
guide's command and gateway config): with the clip key in `X-Session-ID` every seed of a wave
reaches one replica and the wave costs one processing in vLLM's own counters (summed over the
replicas), and clips spread over both; without the key, `round_robin` spreads a clip's seeds
(a processing and misses on each replica) and header-less `consistent_hash` sends everything to
one replica."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.router import RouterServer
from engine.server import EngineServer

from .conftest import RouterFactory
from .helpers import reference_counters, write_clip
from .replicas import SECONDS, SEEDS, guide_gateway, readings, shares, wave
from .replicas_recipe import router_command

pytestmark = pytest.mark.timeout(600, func_only=True)
# Clips keyed onto one replica until both have taken one: all MAX_CLIPS on one replica has a
# chance of 2**(1 - MAX_CLIPS) with a fair hash.
MAX_CLIPS = 12
Replicas = tuple[EngineServer, EngineServer]


async def guide_router(make_router: RouterFactory, policy: str = "") -> RouterServer:
    """The page's vllm-router (or its command with another policy) in front of the replicas."""
    command = router_command()
    return await make_router(policy or command.policy, command.flags)


async def test_with_the_key_a_clips_seeds_reach_one_replica_and_cost_one_processing(
    qwen_replicas: Replicas, make_router: RouterFactory, clip_dir: Path
) -> None:
    gateway = await guide_gateway(await guide_router(make_router), clip_dir)
    try:
        placed: list[int] = []
        for index in range(MAX_CLIPS):
            name = f"keyed{index}.wav"
            write_clip(clip_dir, name, SECONDS)
            before, ours_before = await readings(qwen_replicas), await reference_counters(gateway)
            answers = await wave(gateway, name)
            after, ours_after = await readings(qwen_replicas), await reference_counters(gateway)

            assert [status for status, _, _ in answers] == [200] * SEEDS, answers
            by_replica = shares(before, after)
            assert sorted(share.requests for share in by_replica) == [0, SEEDS], by_replica
            assert sum(share.processings for share in by_replica) == 1, by_replica
            ours = {k: ours_after[k] - ours_before[k] for k in ours_after}
            assert ours == {"data": 1, "reference": SEEDS - 1, "refused": 0, "cache_miss": 0}
            placed.append(next(i for i, share in enumerate(by_replica) if share.requests))
            if len(set(placed)) == 2:
                break
        assert set(placed) == {0, 1}, f"{len(placed)} clips all keyed onto replica {placed[0]}"
    finally:
        await gateway.close()


async def test_without_the_key_round_robin_spreads_a_clips_seeds(
    qwen_replicas: Replicas, make_router: RouterFactory, clip_dir: Path
) -> None:
    gateway = await guide_gateway(
        await guide_router(make_router, "round_robin"), clip_dir, key=False
    )
    try:
        write_clip(clip_dir, "spread.wav", SECONDS)
        before, ours_before = await readings(qwen_replicas), await reference_counters(gateway)
        answers = await wave(gateway, "spread.wav")
        after, ours_after = await readings(qwen_replicas), await reference_counters(gateway)
    finally:
        await gateway.close()

    assert [status for status, _, _ in answers] == [200] * SEEDS, answers
    by_replica = shares(before, after)
    assert all(share.requests > 0 for share in by_replica), by_replica
    assert all(share.processings >= 1 for share in by_replica), by_replica
    # references the other replica never saw: vLLM's miss, retried with the data
    assert ours_after["cache_miss"] - ours_before["cache_miss"] >= 1


async def test_without_the_key_consistent_hash_sends_every_clip_to_one_replica(
    qwen_replicas: Replicas, make_router: RouterFactory, clip_dir: Path
) -> None:
    gateway = await guide_gateway(await guide_router(make_router), clip_dir, key=False)
    try:
        before = await readings(qwen_replicas)
        for index in range(3):
            write_clip(clip_dir, f"herded{index}.wav", SECONDS)
            answers = await wave(gateway, f"herded{index}.wav")
            assert [status for status, _, _ in answers] == [200] * SEEDS, answers
        after = await readings(qwen_replicas)
    finally:
        await gateway.close()

    by_replica = shares(before, after)
    assert sorted(share.requests for share in by_replica) == [0, 3 * SEEDS], by_replica
