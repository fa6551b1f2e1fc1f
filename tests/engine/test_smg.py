"""Two real replicas of the tiny Qwen2-Audio behind a real SMG (smg 1.13.0), started with the
"Many replicas" guide's SMG command in front of the guide's gateway (the clip key in
`X-Session-ID`, which the command names in `--routing-key-headers`): every seed of a wave
reaches one replica and the wave costs one processing in vLLM's own counters (summed over the
replicas), clips spread over both, a clip's next wave goes by reference with no miss, and SMG's
`x-smg-routed-worker-id` (a replica's address) stops at the gateway.

With SMG's defaults (the page's policy and key, every other flag SMG's own), SMG re-serialises
the bodies and drops the `uuid` of the part carrying the clip's data, so vLLM caches the clip by
its content and each reference misses: the gateway notices within the clip's first wave and
sends that model's clips with their data from then on, so later waves miss nothing.

Each SMG is started once for the module (its replicas are the session's), so the module costs
the waves and two SMG starts (a second or so each)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.smg import SmgServer

from .helpers import CHAT, Client, chat_body, reference_counters, write_clip
from .replicas import SECONDS, SEEDS, guide_gateway, readings, shares, wave
from .replicas_recipe import SMG_TITLE, router_command
from .specs import QWEN
from .test_replicas import MAX_CLIPS, Replicas

pytestmark = pytest.mark.timeout(600, func_only=True)


KEY_FLAG = "--routing-key-headers"  # takes the header names


def smg_for_the_module(
    replicas: Replicas, venv: Path, workdir: Path, *, defaults: bool
) -> Iterator[SmgServer]:
    """The page's SMG command in front of both replicas; `defaults`: its policy and key only."""
    command = router_command(SMG_TITLE)
    flags = command.flags
    if defaults:
        start = flags.index(KEY_FLAG)
        flags = [
            KEY_FLAG,
            *itertools.takewhile(lambda w: not w.startswith("--"), flags[start + 1 :]),
        ]
    urls = [replica.url for replica in replicas]
    smg = SmgServer(venv, urls, command.policy, workdir, flags)
    yield smg.start()
    smg.stop()


@pytest.fixture(scope="module")
def guide_smg(
    qwen_replicas: Replicas, smg_venv: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SmgServer]:
    """The page's SMG command in front of both replicas, for the module."""
    workdir = tmp_path_factory.mktemp("smg")
    yield from smg_for_the_module(qwen_replicas, smg_venv, workdir, defaults=False)


@pytest.fixture(scope="module")
def defaults_smg(
    qwen_replicas: Replicas, smg_venv: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SmgServer]:
    """SMG keyed as the page says, every other flag its default, for the module."""
    workdir = tmp_path_factory.mktemp("smg-defaults")
    yield from smg_for_the_module(qwen_replicas, smg_venv, workdir, defaults=True)


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
    assert ours == {"data": data, "reference": SEEDS - data, "refused": 0, "cache_miss": 0}, ours
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


async def test_with_smgs_defaults_the_gateway_notices_the_stripped_uuids(
    qwen_replicas: Replicas, defaults_smg: SmgServer, clip_dir: Path
) -> None:
    assert "--max-buffered-request-bytes" not in defaults_smg.command()
    gateway = await guide_gateway(defaults_smg, clip_dir)
    try:
        write_clip(clip_dir, "stripped.wav", SECONDS)
        before = await reference_counters(gateway)
        answers = await wave(gateway, "stripped.wav")
        first = {k: v - before[k] for k, v in (await reference_counters(gateway)).items()}
        assert [status for status, _, _ in answers] == [200] * SEEDS, answers
        assert first["cache_miss"] >= 1, first  # the data part reached vLLM without its uuid

        status = await health_references(gateway)
        assert status["mode"] == "data" and status["reason"] == "misses", status
        for _ in range(2):  # switched: the clip's data on every seed, no reference, no miss
            before = await reference_counters(gateway)
            answers = await wave(gateway, "stripped.wav")
            ours = {k: v - before[k] for k, v in (await reference_counters(gateway)).items()}
            assert [status for status, _, _ in answers] == [200] * SEEDS, answers
            assert ours == {"data": SEEDS, "reference": 0, "refused": 0, "cache_miss": 0}, ours
    finally:
        await gateway.close()


async def health_references(gateway: Client) -> dict[str, Any]:
    """The gateway's references state for the served model, from `/gateway/health`."""
    async with gateway.get("/gateway/health") as response:
        models: dict[str, dict[str, Any]] = (await response.json())["references"]["models"]
    assert list(models) == [QWEN], models
    return models[QWEN]
