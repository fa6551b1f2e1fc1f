"""NeMo Gym 0.7.0's own `vllm_model` server, on its chat path with token capture, in front of the
gateway in front of the REAL vLLM engine (the tiny Qwen2-Audio of tests/engine).

The same Gym server, recipe and gateway config (`[sidechannel] key_prefix = "gateway_"`) as
tests/test_gym_compat.py's RL-training tests, with the stub upstream replaced by vLLM: Gym's
answer must validate as a training message whose prompt token ids are vLLM's own
(`return_token_ids`), holding each clip's `<|audio_bos|>`, 25 `<|AUDIO|>` placeholders a second
of 16 kHz audio and `<|audio_eos|>`, in the clips' order, and whose generation ids and log
probabilities are one per generated token.

Run by `.ci/gym-compat`, which builds the engine's venv first (`engine/install`); skipped unless
`nemo_gym` imports, and when `GYM_COMPAT_ENGINE=skip`. Otherwise a missing engine venv or an
engine that does not start fails the tests (with vLLM's log tail).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("nemo_gym", reason="needs NeMo Gym 0.7.0's code (see .ci/gym-compat)")
if os.environ.get("GYM_COMPAT_ENGINE") == "skip":
    pytest.skip("GYM_COMPAT_ENGINE=skip: Gym on the real engine not run", allow_module_level=True)

from nemo_gym.openai_utils import NeMoGymChatCompletion, NeMoGymChatCompletionMessageForTraining

from engine.server import EngineServer, EngineStartError, build_models, engine_venv, venv_problem
from tests import test_gym_compat as gym_compat
from tests.conftest import gateway_metrics
from tests.engine.helpers import (
    MM_CACHE,
    Client,
    audio_tokens_for,
    delta,
    engine_metrics,
    make_gateway_client,
    write_clip,
)
from tests.engine.specs import QWEN, special_tokens, specs
from tests.test_gym_compat import (
    PREFIX,
    RL_TRAINING,
    gym_responses,
    gym_row,
    gym_server,
    training_message,
)

# Engine start-up is the module fixture's (not timed); each test's own requests are.
pytestmark = pytest.mark.timeout(180, func_only=True)

gym_http = gym_compat.gym_http  # Gym's process-wide aiohttp client, on the test's loop

MAX_TOKENS = 4
# The RL-training recipe, served by the engine's model; random weights may sample an end
# token anywhere, so `ignore_eos` (Gym's own `extra_body`) makes every answer MAX_TOKENS long.
RECIPE = {**RL_TRAINING, "model": QWEN, "extra_body": {"ignore_eos": True}}


@dataclass(frozen=True)
class Qwen:
    """The running engine, the directory its clips go in (its allowed media root, also the
    gateway's audio root) and its special tokens by name."""

    server: EngineServer
    root: Path
    tokens: dict[str, int]


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Qwen]:
    """One tiny Qwen2-Audio server for the module, as tests/engine serves it."""
    venv = engine_venv()
    problem = venv_problem(venv)
    if problem is not None:
        pytest.fail(f"{problem}: run engine/install (or GYM_COMPAT_ENGINE=skip)", pytrace=False)
    models = build_models(venv, venv / "tiny-models")
    # resolved: vLLM compares real paths against --allowed-local-media-path
    root = tmp_path_factory.mktemp("gym-engine-audio").resolve()
    server = EngineServer(specs(models, root)[QWEN], venv, tmp_path_factory.mktemp("engine"))
    server.start()
    try:
        try:
            server.wait_healthy()
        except EngineStartError as error:
            pytest.fail(str(error), pytrace=False)
        yield Qwen(server, root, special_tokens(models["qwen2-audio"]))
    finally:
        server.stop()


@pytest.fixture
async def gateway(qwen: Qwen) -> AsyncIterator[Client]:
    """A gateway in front of the engine, configured as the Gym RL test's `training_gateway`."""
    client = await make_gateway_client(qwen.server, qwen.root, sidechannel={"key_prefix": PREFIX})
    yield client
    await client.close()


def gym_base_url(gateway: Client) -> str:
    return str(gateway.make_url("/v1"))


def clips(qwen: Qwen, test: str, *seconds: float) -> list[str]:
    """16 kHz mono WAV clips of these lengths under the engine's root; their relative paths."""
    folder = qwen.root / test
    folder.mkdir()
    return [
        str(write_clip(folder, f"clip{i}.wav", s).relative_to(qwen.root))
        for i, s in enumerate(seconds)
    ]


def audio_spans(prompt: list[int], tokens: dict[str, int]) -> list[int]:
    """For each `<|audio_bos|>` of the prompt, in order, how many tokens up to its
    `<|audio_eos|>` are `<|AUDIO|>` placeholders; -1 for a span holding anything else."""
    bos, eos, pad = (tokens[t] for t in ("<|audio_bos|>", "<|audio_eos|>", "<|AUDIO|>"))
    spans = []
    for start, token in enumerate(prompt):
        if token == bos:
            end = prompt.index(eos, start)
            inner = prompt[start + 1 : end]
            spans.append(len(inner) if set(inner) == {pad} else -1)
    return spans


def assert_vllm_bundle(
    prompt: list[int],
    generation: list[int],
    log_probs: list[float],
    qwen: Qwen,
    seconds: tuple[float, ...],
) -> None:
    """vLLM's token bundle, as Gym returns it: each clip's placeholders, in order, and nowhere
    else; one generation id and one log probability per generated token."""
    assert qwen.tokens["<|AUDIO|>"] == 415
    expected = [audio_tokens_for(s) for s in seconds]
    assert audio_spans(prompt, qwen.tokens) == expected, prompt
    assert prompt.count(qwen.tokens["<|AUDIO|>"]) == sum(expected)
    assert prompt.count(qwen.tokens["<|audio_eos|>"]) == len(seconds)
    assert len(generation) == MAX_TOKENS, generation
    assert len(log_probs) == len(generation)
    assert all(logprob <= 0 for logprob in log_probs), log_probs


def responses_row(text: str, **meta: str) -> dict[str, Any]:
    """A Gym row of the asr_with_pc shape, with short greedy generation."""
    row = gym_row(text, **meta)
    row["responses_create_params"] |= {"max_output_tokens": MAX_TOKENS, "temperature": 0.0}
    return row


async def test_gym_rows_keep_token_capture_on_vllm(
    gym_http: None, qwen: Qwen, gateway: Client
) -> None:
    """A one-clip `gateway_audio_path` row, then a two-clip `gateway_audio_paths` row (a
    JSON-array string), through Gym's `/v1/responses`."""
    one = (1.0,)
    two = (0.6, 2.0)
    first, *pair = clips(qwen, "responses", *one, *two)
    rows = [
        (responses_row("Transcribe the audio.", **{PREFIX + "audio_path": first}), one),
        (responses_row("Compare the clips.", **{PREFIX + "audio_paths": json.dumps(pair)}), two),
    ]
    async with gym_server(gym_base_url(gateway), RECIPE) as gym:
        for row, seconds in rows:
            message = training_message(await gym_responses(gym, row))
            assert_vllm_bundle(
                message.prompt_token_ids,
                message.generation_token_ids,
                message.generation_log_probs,
                qwen,
                seconds,
            )


async def test_gym_chat_endpoint_keeps_token_capture_on_vllm(
    gym_http: None, qwen: Qwen, gateway: Client
) -> None:
    """Gym's own `/v1/chat/completions`: a chat completion whose message carries vLLM's
    token bundle, the clips' placeholders in the metadata's order."""
    seconds = (1.4, 0.4)
    paths = clips(qwen, "chat", *seconds)
    body = {
        "messages": [{"role": "user", "content": "Compare the two clips."}],
        "metadata": {PREFIX + "audio_paths": json.dumps(paths)},
        "max_tokens": MAX_TOKENS,
        "temperature": 0.0,
    }
    async with gym_server(gym_base_url(gateway), RECIPE) as gym:
        response = await gym.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    message = NeMoGymChatCompletion.model_validate(response.json()).choices[0].message
    assert isinstance(message, NeMoGymChatCompletionMessageForTraining), message
    assert_vllm_bundle(
        message.prompt_token_ids,
        message.generation_token_ids,
        message.generation_log_probs,
        qwen,
        seconds,
    )


async def test_gyms_default_inline_path_by_reference_is_one_processing_a_wave(
    gym_http: None, qwen: Qwen
) -> None:
    """No key prefix: Gym reads the clip and inlines it on every seed; the gateway by reference
    sends its data once and references for the other 15 seeds (vLLM's own counters)."""
    splice = {"repeats": "reference", "reference_wait_ms": 30_000}
    gateway = await make_gateway_client(qwen.server, qwen.root, splice=splice)
    seeds = 16
    try:
        (path,) = clips(qwen, "inline", 1.0)
        row = responses_row("Transcribe the audio.", audio_path=str(qwen.root / path))
        before = await engine_metrics(qwen.server)
        async with gym_server(gym_base_url(gateway), RECIPE) as gym:
            answers = await asyncio.gather(*(gym_responses(gym, row) for _ in range(seeds)))
        after = await engine_metrics(qwen.server)
        for answer in answers:
            message = training_message(answer)
            assert_vllm_bundle(
                message.prompt_token_ids,
                message.generation_token_ids,
                message.generation_log_probs,
                qwen,
                (1.0,),
            )
        queries, hits = MM_CACHE
        assert delta(before, after, *MM_CACHE) == {queries: seeds, hits: seeds - 1}
        parts = await gateway_metrics(gateway)
        assert parts['audio_gateway_audio_parts_total{form="data"}'] == 1
        assert parts['audio_gateway_audio_parts_total{form="reference"}'] == seeds - 1
    finally:
        await gateway.close()
