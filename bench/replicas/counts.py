"""The replicas bench's readings: each vLLM replica's own counters, its API server's CPU, and
the gateway's reference counters, read before and after a wave."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp

from bench.shared.samples import GATEWAY_SAMPLES, Samples, pick

REPLICA_SAMPLES: Samples = (
    ("queries", "vllm:mm_cache_queries_total", {}),
    ("hits", "vllm:mm_cache_hits_total", {}),
    ("answered", "vllm:request_success_total", {}),
    ("refused", "http_requests_total", {"handler": "/v1/chat/completions", "status": "4xx"}),
)


async def scrape(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as response:
        return await response.text()


async def replica_counts(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    return pick(await scrape(session, f"{url}/metrics"), REPLICA_SAMPLES)


async def gateway_counts(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    return pick(await scrape(session, f"{url}/gateway/metrics"), GATEWAY_SAMPLES)


@dataclass(frozen=True)
class Reading:
    replicas: list[dict[str, float]]  # per replica, REPLICA_SAMPLES
    api_cpu_s: list[float]  # per replica, its API-server process
    gateway: dict[str, float]  # GATEWAY_SAMPLES ({} without a gateway)
    at_s: float

    def since(self, before: Reading, requests: int) -> dict[str, Any]:
        """What happened between `before` and this reading, for a wave of `requests`."""
        grown = [
            {k: new[k] - old[k] for k in new}
            for old, new in zip(before.replicas, self.replicas, strict=True)
        ]
        cpu = sum(self.api_cpu_s) - sum(before.api_cpu_s)
        return {
            "requests": requests,
            "wall_s": self.at_s - before.at_s,
            "processings": sum(r["queries"] - r["hits"] for r in grown),
            "answered_per_replica": [r["answered"] for r in grown],
            "refused_per_replica": [r["refused"] for r in grown],
            "processings_per_replica": [r["queries"] - r["hits"] for r in grown],
            "api_cpu_ms_per_request": 1000 * cpu / requests,
            **{k: self.gateway[k] - before.gateway.get(k, 0.0) for k in self.gateway},
        }
