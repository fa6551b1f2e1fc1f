"""Two real replicas of the tiny Qwen2-Audio behind a real SMG (smg 1.13.0), started with the
"Many replicas" guide's SMG command in front of the guide's gateway (the clip key in
`X-Session-ID`, which the command names in `--routing-key-headers`): every seed of a wave
reaches one replica and the wave costs one processing in vLLM's own counters (summed over the
replicas), clips spread over both, a clip's next wave goes by reference with no miss, and SMG's
`x-smg-routed-worker-id` (a replica's address) stops at the gateway.

SMG is started once for the module (its replicas are the session's), so the module costs the
waves and one SMG start (a second or so)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.smg import SmgServer

from .helpers import CHAT, Client, chat_body, write_clip
from .replicas import SECONDS, SEEDS, guide_gateway, readings, shares, wave
from .replicas_recipe import SMG_TITLE, router_command
from .test_references import reference_counters
from .test_replicas import MAX_CLIPS, Replicas

pytestmark = pytest.mark.timeout(600, func_only=True)


@pytest.fixture(scope="module")
def guide_smg(
    qwen_replicas: Replicas, smg_venv: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SmgServer]:
    """The page's SMG command in front of both replicas, for the module."""
    command = router_command(SMG_TITLE)
    urls = [replica.url for replica in qwen_replicas]
    smg = SmgServer(smg_venv, urls, command.policy, tmp_path_factory.mktemp("smg"), command.flags)
    yield smg.start()
    smg.stop()


async def test_with_the_key_a_clips_seeds_reach_one_replica_and_later_waves_never_miss(
    qwen_replicas: Replicas, guide_smg: SmgServer, clip_dir: Path
) -> None:
    gateway = await guide_gateway(guide_smg, clip_dir)
    try:
        placed: list[int] = []
        for index in range(MAX_CLIPS):
            name = f"smg{index}.wav"
            write_clip(clip_dir, name, SECONDS)
            placed.append(await one_wave(gateway, qwen_replicas, guide_smg, name, new=True))
            # Again at once (the replica's cache holds two clips): every seed by reference,
            # on the same replica, and none misses.
            assert await one_wave(gateway, qwen_replicas, guide_smg, name, new=False) == placed[-1]
            if len(set(placed)) == 2:
                break
        assert set(placed) == {0, 1}, f"{len(placed)} clips all keyed onto replica {placed[0]}"
    finally:
        await gateway.close()


async def one_wave(
    gateway: Client, replicas: Replicas, smg: SmgServer, name: str, *, new: bool
) -> int:
    """A 16-seed wave of clip `name`: all 200s on one replica, SMG's own count agreeing; a new
    clip costs one processing and its data once, a clip seen before none and no data; never a
    miss. Returns the replica's index."""
    before, ours_before = await readings(replicas), await reference_counters(gateway)
    routed_before = smg.worker_samples("worker_requests_total")
    answers = await wave(gateway, name)
    after, ours_after = await readings(replicas), await reference_counters(gateway)
    routed = smg.worker_samples("worker_requests_total")

    assert [status for status, _, _ in answers] == [200] * SEEDS, answers
    by_replica = shares(before, after)
    assert sorted(share.requests for share in by_replica) == [0, SEEDS], by_replica
    assert sum(share.processings for share in by_replica) == (1 if new else 0), by_replica
    ours = {k: ours_after[k] - ours_before[k] for k in ours_after}
    data = 1 if new else 0
    assert ours == {"data": data, "reference": SEEDS - data, "cache_miss": 0}, ours
    held_by = next(i for i, share in enumerate(by_replica) if share.requests)
    url = replicas[held_by].url
    assert routed.get(url, 0) - routed_before.get(url, 0) == SEEDS, (routed_before, routed)
    return held_by


async def test_the_replicas_address_stops_at_the_gateway(
    guide_smg: SmgServer, clip_dir: Path
) -> None:
    gateway = await guide_gateway(guide_smg, clip_dir)
    try:
        write_clip(clip_dir, "headers.wav", SECONDS)
        async with gateway.post(CHAT, json=chat_body({"audio_path": "headers.wav"})) as response:
            assert response.status == 200, await response.text()
            assert "x-smg-routed-worker-id" not in response.headers, response.headers
            assert response.headers.get("x-request-id"), response.headers  # SMG's, relayed
    finally:
        await gateway.close()
