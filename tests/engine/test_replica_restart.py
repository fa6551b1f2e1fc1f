"""A replica stopped in the middle of a wave and started again, under the "Many replicas"
guide's gateway (the key on) and vllm-router: every request gets exactly one answer, a 200 or
a 5xx, and none hangs; while the replica is out, the other serves its clip (references it never
saw miss and are retried with the data into 200s); once the router has it back, the clip's
seeds return to it, and the references its fresh cache misses are retried into 200s, or, where
the moved clip's misses made the gateway send that model's clips with their data (they look
like a layout that forgets clips), every seed goes with its data and nothing misses.

What reaches the client when vllm-router itself fails a request: its own 5xx, plain text,
relayed by the gateway as it is (status, `text/plain` and body)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from engine.router import RouterServer
from engine.server import START_DEADLINE_S, EngineServer
from gateway.affinity import bytes_digest, clip_key

from .conftest import RouterFactory
from .helpers import BOUND_SECONDS, CHAT, chat_body, health_models, reference_counters, write_clip
from .replicas import SECONDS, SEEDS, answer, guide_gateway, readings, shares, wave
from .replicas_recipe import router_command
from .specs import QWEN
from .test_replicas import Replicas, guide_router

STOP_AFTER_S = 0.5  # into the wave: its seed or its references are in flight


@pytest.mark.timeout(START_DEADLINE_S + 300, func_only=True)
async def test_a_replica_stopped_mid_wave_and_restarted(
    qwen_replicas: Replicas, make_router: RouterFactory, clip_dir: Path
) -> None:
    router = await guide_router(make_router)
    gateway = await guide_gateway(router, clip_dir)
    try:
        write_clip(clip_dir, "moved.wav", SECONDS)
        before = await readings(qwen_replicas)
        assert {status for status, _, _ in await wave(gateway, "moved.wav")} == {200}
        held_by = next(
            i
            for i, share in enumerate(shares(before, await readings(qwen_replicas)))
            if share.requests
        )
        replica, other = qwen_replicas[held_by], qwen_replicas[1 - held_by]

        in_flight = asyncio.create_task(wave(gateway, "moved.wav"))
        await asyncio.sleep(STOP_AFTER_S)
        await asyncio.to_thread(replica.stop)
        for status, content_type, text in await in_flight:  # one answer each, none hangs
            assert status == 200 or status >= 500, (status, content_type, text)

        await wait_out_of_ring(router, replica.url)
        misses = (await reference_counters(gateway))["cache_miss"]
        before = await readings([other])
        assert {status for status, _, _ in await wave(gateway, "moved.wav")} == {200}
        assert shares(before, await readings([other]))[0].requests == SEEDS
        assert (await reference_counters(gateway))["cache_miss"] > misses  # retried with data

        # The moved clip's references all missed moments after its data was accepted: what a
        # layout that forgets clips shows too, so the model may now take data (and uuid).
        switched = QWEN in await health_models(gateway)

        await asyncio.to_thread(restart, replica, router)
        await routed_back(router, replica, clip_dir / "moved.wav")
        counted = await reference_counters(gateway)
        before = await readings(qwen_replicas)
        assert {status for status, _, _ in await wave(gateway, "moved.wav")} == {200}
        by_replica = shares(before, await readings(qwen_replicas))
        assert by_replica[held_by].requests == SEEDS, by_replica
        grown = {k: v - counted[k] for k, v in (await reference_counters(gateway)).items()}
        if switched:  # every seed with its data: nothing to miss
            assert grown == {"data": SEEDS, "reference": 0, "refused": 0, "cache_miss": 0}, grown
        else:
            assert grown["cache_miss"] > 0, grown  # its fresh cache, retried with data
    finally:
        await gateway.close()


async def wait_out_of_ring(router: RouterServer, url: str) -> None:
    """Until vllm-router has taken the stopped replica out (health checks every second)."""
    async with asyncio.timeout(60):
        while await asyncio.to_thread(router.serving, url):
            await asyncio.sleep(0.2)


async def routed_back(router: RouterServer, replica: EngineServer, clip: Path) -> None:
    """Until the router sends the clip's key to `replica` again: text-only requests with the
    key the gateway gives the clip (its circuit may still be open, or half-open and waiting
    for a trial request)."""
    key = clip_key([bytes_digest(clip.read_bytes())])
    headers = {"X-Session-ID": key or ""}
    timeout = aiohttp.ClientTimeout(total=BOUND_SECONDS)
    async with aiohttp.ClientSession(timeout=timeout) as session, asyncio.timeout(60):
        while True:
            before = await readings([replica])
            async with session.post(router.url + CHAT, json=chat_body(), headers=headers) as got:
                await got.read()
            if shares(before, await readings([replica]))[0].requests:
                return
            await asyncio.sleep(0.5)


def restart(replica: EngineServer, router: RouterServer) -> None:
    replica.start()
    replica.wait_healthy()
    router.wait_serving(replica.url)


async def test_no_replica_left_the_routers_plain_5xx_is_relayed(
    router_venv: Path, stub_server: TestServer, audio_dir: Path, tmp_path: Path
) -> None:
    # The stub upstream as the one replica, stopped once the router serves it.
    replica = str(stub_server.make_url("")).rstrip("/")
    command = router_command()
    router = RouterServer(router_venv, [replica], command.policy, tmp_path, command.flags)
    await asyncio.to_thread(router.start)
    gateway = await guide_gateway(router, audio_dir)
    try:
        await stub_server.close()
        await wait_out_of_ring(router, replica)
        write_clip(audio_dir, "nowhere.wav", SECONDS)
        status, content_type, text = await answer(gateway, chat_body({"audio_path": "nowhere.wav"}))
    finally:
        await gateway.close()
        await asyncio.to_thread(router.stop)
    assert (status, content_type) == (503, "text/plain"), text
    assert text == "No available workers (all circuits open or unhealthy)"
