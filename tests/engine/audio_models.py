"""The audio chat models besides Qwen2-Audio that the real-engine suite serves (Voxtral, Audio
Flamingo 3, GLM-ASR): what each does with a clip, as vLLM 0.32 does it, and one server of each
started for a test module and stopped after it (`served_model`).

A model's facts are what the tests assert: its audio placeholder and how many of them a clip of
S seconds becomes (its own window: Voxtral pads to 30 s blocks and keeps them all, Audio
Flamingo 3 and GLM-ASR window 30 s pieces up to 600 s / 655 s), how many clips a prompt takes,
whether it takes uuid-only parts (a reference) and whether it serves transcriptions. The
requests the tests send are here too: a chat body for a model, what vLLM heard of it, a wave of
16 seeds and what it cost the gateway and vLLM.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine.server import EngineServer, EngineStartError
from tests.engine.helpers import (
    BOUND_SECONDS,
    CHAT,
    GENERATED,
    MAX_TOKENS,
    MM_CACHE,
    Client,
    chat_body,
    count,
    delta,
    engine_metrics,
    make_gateway_client,
    reference_counters,
)
from tests.engine.specs import AUDIO_FLAMINGO3, GLM_ASR, VOXTRAL, model_specs, special_tokens

SEEDS = 16
SECONDS = 2.0  # a wave's clip
PLACED = {"ask_upstream": True}  # as deployed: the gateway reads vLLM's /v1/models


def voxtral_tokens(seconds: float) -> int:
    """375 `[AUDIO]` per started 30 s block: 12.5 frames a second, padded to 30 s."""
    return 375 * math.ceil(seconds / 30)


def flamingo_tokens(seconds: float) -> int:
    """The mel frames (100 a second) halved by the encoder's convolution, then by its pooling."""
    frames = int(seconds * 100)
    return ((frames - 1) // 2 + 1 - 2) // 2 + 1


def glm_asr_tokens(seconds: float) -> int:
    """The mel frames halved by the encoder's convolution, then merged 4 to a token."""
    frames = int(seconds * 100)
    return ((frames - 1) // 2 + 1 - 4) // 4 + 1


@dataclass(frozen=True)
class AudioModel:
    name: str  # the served model name
    architecture: str  # the HF `architectures` name
    built: str  # its key in engine.server.build_models
    audio_token: str
    tokens: Callable[[float], int]  # audio placeholders for a clip of that many seconds
    clip_limit: int  # clips a prompt takes
    references: bool  # uuid-only parts accepted
    transcriptions: bool

    def audio_token_id(self, model_dir: Path) -> int:
        if self.name == VOXTRAL:  # tekken: a special token's rank is its id
            ranks = json.loads((model_dir / "tekken.json").read_text())["special_tokens"]
            rank: int = next(t["rank"] for t in ranks if t["token_str"] == self.audio_token)
            return rank
        return special_tokens(model_dir)[self.audio_token]


MODELS = {
    VOXTRAL: AudioModel(
        VOXTRAL,
        "VoxtralForConditionalGeneration",
        "voxtral",
        "[AUDIO]",
        voxtral_tokens,
        5,
        references=False,
        transcriptions=True,
    ),
    AUDIO_FLAMINGO3: AudioModel(
        AUDIO_FLAMINGO3,
        "AudioFlamingo3ForConditionalGeneration",
        "audio-flamingo3",
        "<sound>",
        flamingo_tokens,
        1,
        references=True,
        transcriptions=False,
    ),
    # vLLM declares no limit, but more than one clip it has not processed yet fails
    # GlmAsrProcessor (a 400): one in practice.
    GLM_ASR: AudioModel(
        GLM_ASR,
        "GlmAsrForConditionalGeneration",
        "glm-asr",
        "<|pad|>",
        glm_asr_tokens,
        1,
        references=True,
        transcriptions=True,
    ),
}


@dataclass
class Served:
    """One model's server, its facts, the id of its audio placeholder and the folder
    `--allowed-local-media-path` names (each test's clips go in a folder under it)."""

    model: AudioModel
    engine: EngineServer
    audio_token_id: int
    media_root: Path


def serve(
    model: AudioModel, models: dict[str, Path], workdir: Path, venv: Path
) -> Iterator[Served]:
    """Start `model`'s server, yield it once healthy (a failed start fails the test with vLLM's
    log tail), stop it after."""
    media_root = Path(tempfile.mkdtemp(prefix=f"engine-{model.built}-")).resolve()
    spec = model_specs(models, media_root)[model.name]
    engine = EngineServer(spec, venv, workdir)
    engine.start()
    try:
        try:
            engine.wait_healthy()
        except EngineStartError as error:
            pytest.fail(str(error), pytrace=False)
        token = model.audio_token_id(models[model.built])
        yield Served(model, engine, token, media_root)
    finally:
        engine.stop()
        shutil.rmtree(media_root, ignore_errors=True)


def body_for(
    served: Served, metadata: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    return chat_body(metadata, model=served.model.name, return_token_ids=True, **extra)


async def heard(gateway: Client, served: Served, body: dict[str, Any]) -> int:
    """The audio placeholders in the prompt vLLM built (a 200 asserted, MAX_TOKENS generated)."""
    response = await asyncio.wait_for(gateway.post(CHAT, json=body), BOUND_SECONDS)
    text = await response.text()
    assert response.status == 200, text
    answer = await response.json()
    assert len(answer["choices"][0]["token_ids"]) == MAX_TOKENS
    return count(answer["prompt_token_ids"], served.audio_token_id)


def data_uri(path: Path) -> str:
    return "data:audio/wav;base64," + base64.b64encode(path.read_bytes()).decode()


async def wave(gateway: Client, served: Served, name: str) -> tuple[dict[str, float], ...]:
    """16 concurrent seeds of a new clip, each heard whole; what they cost the gateway's
    parts and vLLM's processor cache and generation."""
    engine_before, ours_before = (
        await engine_metrics(served.engine),
        await reference_counters(gateway),
    )
    body = body_for(served, {"audio_path": name})
    heard_by_seed = await asyncio.gather(*(heard(gateway, served, body) for _ in range(SEEDS)))
    assert heard_by_seed == [served.model.tokens(SECONDS)] * SEEDS
    engine_after, ours_after = (
        await engine_metrics(served.engine),
        await reference_counters(gateway),
    )
    ours = {k: ours_after[k] - ours_before[k] for k in ours_after}
    return ours, delta(engine_before, engine_after, *MM_CACHE, *GENERATED)


async def make_gateway(served: Served, root: Path, **sections: Any) -> Client:
    """A gateway in front of the model's server that places the model as deployed (vLLM's
    /v1/models names its directory), config sections over the defaults."""
    sections.setdefault("placement", PLACED)
    return await make_gateway_client(served.engine, root, **sections)
