"""What the two-replica tests share: a gateway built from the "Many replicas" guide in front of
a real vllm-router, waves of seeds, and what each replica did by its own counters."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from engine.router import RouterServer
from engine.server import EngineServer
from gateway.app import create_app
from tests.conftest import gateway_config

from .helpers import BOUND_SECONDS, CHAT, GENERATED, MM_CACHE, Client, chat_body, delta
from .helpers import engine_metrics as metrics_of
from .replicas_recipe import gateway_sections

SEEDS = 16
SECONDS = 1.0
# A seed takes this 2-core engine longer than the default 100 ms: the wave's references wait
# for it (see test_references.patient_gateway).
PATIENCE = {"reference_wait_ms": 30_000}


async def guide_gateway(router: RouterServer, root: Path, *, key: bool = True) -> Client:
    """The page's gateway (with or without its `[routing]` key) in front of `router`."""
    sections = gateway_sections(key=key)
    sections["splice"] = {**sections.get("splice", {}), **PATIENCE}
    client = TestClient(TestServer(create_app(gateway_config(router.url, root, **sections))))
    await client.start_server()
    return client


@dataclass(frozen=True)
class Share:
    """What one replica did between two readings of its counters."""

    requests: float  # answered (vllm:request_success_total)
    processings: float  # clips processed: processor-cache queries that missed


async def readings(replicas: Sequence[EngineServer]) -> list[dict[str, float]]:
    return list(await asyncio.gather(*(metrics_of(replica) for replica in replicas)))


def shares(before: list[dict[str, float]], after: list[dict[str, float]]) -> list[Share]:
    found = []
    for old, new in zip(before, after, strict=True):
        grown = delta(old, new, *MM_CACHE, GENERATED[0])
        queries, hits = (grown[name] for name in MM_CACHE)
        found.append(Share(grown[GENERATED[0]], queries - hits))
    return found


async def answer(gateway: Client, body: dict[str, Any]) -> tuple[int, str, str]:
    """One request's status, Content-Type and body; bounded, so a hang fails the test."""
    async with asyncio.timeout(BOUND_SECONDS):
        async with gateway.post(CHAT, json=body) as response:
            return response.status, response.content_type, await response.text()


async def wave(gateway: Client, name: str, seeds: int = SEEDS) -> list[tuple[int, str, str]]:
    """`seeds` concurrent requests naming clip `name`, each with its own seed."""
    bodies = [chat_body({"audio_path": name}, seed=seed) for seed in range(seeds)]
    return list(await asyncio.gather(*(answer(gateway, body) for body in bodies)))
