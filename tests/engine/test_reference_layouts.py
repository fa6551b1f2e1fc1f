"""References on the real engine where the client inlines the audio, and where the layout
forgets clips.

- Gym-shaped rows (the client inlines each clip as a data URI, NeMo Gym's default chat path):
  16 concurrent seeds of a new clip by reference cost vLLM one processing (its own
  `vllm:mm_cache_*` counters) and the gateway one data part.
- vLLM with `--api-server-count 2` (a module's own server; each API server keeps its own
  processor cache and the kernel spreads connections over them): waves by reference get only
  200s, the gateway notices the misses and sends data (+uuid), and no reference misses after."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.server import EngineServer, EngineStartError

from .helpers import (
    CHAT,
    MAX_TOKENS,
    MM_CACHE,
    Client,
    audio_tokens_for,
    chat_body,
    count,
    delta,
    engine_metrics,
    health_models,
    make_gateway_client,
    post_json,
    reference_counters,
    write_clip,
)
from .specs import QWEN, specs

pytestmark = pytest.mark.timeout(300, func_only=True)
SEEDS = 16
SECONDS = 2.0
# A seed waits for the one carrying the clip (a 2-core engine takes longer than 100 ms).
PATIENT = {"repeats": "reference", "reference_wait_ms": 30_000}
API_SERVERS = 2


def inline_body(path: Path) -> dict[str, Any]:
    """A chat row as NeMo Gym's chat path sends it: the clip inlined before the text."""
    url = "data:audio/wav;base64," + base64.b64encode(path.read_bytes()).decode()
    audio = {"type": "audio_url", "audio_url": {"url": url}}
    text = {"type": "text", "text": "What is in the audio?"}
    return chat_body(messages=[{"role": "user", "content": [audio, text]}], return_token_ids=True)


async def test_inlined_waves_by_reference_are_one_processing_a_clip(
    qwen_engine: EngineServer, clip_dir: Path, qwen_tokens: dict[str, int]
) -> None:
    gateway = await make_gateway_client(qwen_engine, clip_dir, splice=PATIENT)
    try:
        for wave in range(2):
            clip = write_clip(clip_dir, f"inline{wave}.wav", SECONDS)
            engine_before = await engine_metrics(qwen_engine)
            ours_before = await reference_counters(gateway)
            body = inline_body(clip)
            answers = await asyncio.gather(*(post_json(gateway, CHAT, body) for _ in range(SEEDS)))
            engine_after = await engine_metrics(qwen_engine)
            ours_after = await reference_counters(gateway)
            audio = qwen_tokens["<|AUDIO|>"]
            heard = [count(answer["prompt_token_ids"], audio) for answer in answers]
            assert heard == [audio_tokens_for(SECONDS)] * SEEDS
            assert all(len(a["choices"][0]["token_ids"]) == MAX_TOKENS for a in answers)
            ours = {k: ours_after[k] - ours_before[k] for k in ours_after}
            assert ours == {"data": 1, "reference": SEEDS - 1, "refused": 0, "cache_miss": 0}
            queries, hits = MM_CACHE
            assert delta(engine_before, engine_after, *MM_CACHE) == {
                queries: SEEDS,
                hits: SEEDS - 1,
            }
    finally:
        await gateway.close()


# --- two API servers ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_api_servers(
    venv: Path, tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[EngineServer, Path]]:
    """The tiny Qwen2-Audio with `--api-server-count 2` and vLLM's default processor cache, on a
    port of its own, for this module; with the folder its clips go in."""
    media_root = Path(tempfile.mkdtemp(prefix="engine-api2-")).resolve()
    spec = specs(tiny_models, media_root)[QWEN]
    flags = list(spec.flags)
    at = flags.index("--mm-processor-cache-gb")
    del flags[at : at + 2]  # the default cache: misses here are the layout's, not eviction
    flags += ["--api-server-count", str(API_SERVERS)]
    engine = EngineServer(
        dataclasses.replace(spec, flags=flags), venv, tmp_path_factory.mktemp("api2")
    )
    engine.start()
    try:
        try:
            engine.wait_healthy()
        except EngineStartError as error:
            pytest.fail(str(error), pytrace=False)
        yield engine, media_root
    finally:
        engine.stop()
        shutil.rmtree(media_root, ignore_errors=True)


@pytest.fixture
async def api2_gateway(two_api_servers: tuple[EngineServer, Path]) -> AsyncIterator[Client]:
    engine, root = two_api_servers
    client = await make_gateway_client(engine, root, splice=PATIENT)
    yield client
    await client.close()


async def test_two_api_servers_by_reference_get_only_200s_and_a_miss_per_clip_at_most(
    two_api_servers: tuple[EngineServer, Path], api2_gateway: Client
) -> None:
    """Waves of two new clips x 8 seeds: every answer a 200, at most one miss per clip over the
    run (the gateway switches the model to data where references to just-accepted clips miss),
    and none after a switch."""
    engine, root = two_api_servers
    gateway = api2_gateway
    misses_at_switch = None
    per_wave = []
    waves, clips_a_wave = 6, 2
    for wave in range(waves):
        names = [f"api2-{wave}-{i}.wav" for i in range(clips_a_wave)]
        for name in names:
            write_clip(root, name, SECONDS)
        engine_before = await engine_metrics(engine)
        per_clip = SEEDS // clips_a_wave
        bodies = [chat_body({"audio_path": name}) for name in names for _ in range(per_clip)]
        answers = await asyncio.gather(*(gateway.post(CHAT, json=body) for body in bodies))
        assert [answer.status for answer in answers] == [200] * len(bodies)
        for answer in answers:
            assert (await answer.json())["usage"]["completion_tokens"] == MAX_TOKENS
        engine_after = await engine_metrics(engine)
        ours = await reference_counters(gateway)
        queries, hits = delta(engine_before, engine_after, *MM_CACHE).values()
        per_wave.append((ours["cache_miss"], ours["reference"], queries - hits))
        if misses_at_switch is None and await health_models(gateway):
            misses_at_switch = ours["cache_miss"]
    print(f"two API servers, per wave (misses so far, references so far, processings): {per_wave}")
    misses = (await reference_counters(gateway))["cache_miss"]
    assert misses <= waves * clips_a_wave, per_wave
    if misses_at_switch is not None:
        assert misses == misses_at_switch, per_wave
