"""Counters read from Prometheus text: every sample by its labelled name, or the samples a
benchmark names, each summed over the label sets that carry its labels; the gateway's reference
counters, named once."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

# (what the bench calls it, the sample's name, labels it must carry)
Samples = tuple[tuple[str, str, dict[str, str]], ...]
GATEWAY_SAMPLES: Samples = (
    ("data_parts", "audio_gateway_audio_parts_total", {"form": "data"}),
    ("reference_parts", "audio_gateway_audio_parts_total", {"form": "reference"}),
    ("misses", "audio_gateway_reference_retries_total", {"reason": "cache_miss"}),
    ("retries", "audio_gateway_reference_retries_total", {}),
)


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text as {sample: value}, a labelled sample keyed `name{k="v",...}`."""
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def pick(text: str, wanted: Samples) -> dict[str, float]:
    """Each wanted sample summed over the label sets that carry its labels."""
    found = dict.fromkeys((short for short, _, _ in wanted), 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for short, name, labels in wanted:
                if sample.name == name and labels.items() <= sample.labels.items():
                    found[short] += sample.value
    return found


async def read_samples(
    session: aiohttp.ClientSession, url: str, wanted: Samples
) -> dict[str, float]:
    """`pick` over the Prometheus text at `url`."""
    async with session.get(url) as response:
        return pick(await response.text(), wanted)
