"""NeMo Gym 0.7.0's own `vllm_model` server in front of the gateway (skipped unless Gym imports).

Gym's model server (`responses_api_models/vllm_model/app.py`, its FastAPI app, its config
class, its aiohttp client and its response models) runs in process, driven over ASGI by an
httpx client the way a Gym agent calls it (`POST /v1/responses`), with `base_url` = a real
gateway on 127.0.0.1 in front of the project's stub upstream, which records what it got.

- RL training (the chat path, token capture on): the rows carry the sidechannel under the
  gateway's `[sidechannel] key_prefix` ("gateway_"), which Gym does not consume, so Gym forwards
  it in the chat body's metadata and the gateway reads it. Gym's answer must validate with
  Gym's own models and carry the token bundle; the upstream must get the audio parts before the
  text and no sidechannel key.
- Evaluation (the responses-native path): Gym forwards the row untouched to the gateway's
  Responses bridge, under whatever keys the gateway's config reads.

Run it with `.ci/gym-compat` (builds a venv with NeMo Gym 0.7.0's code and runs this module).
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("nemo_gym", reason="needs NeMo Gym 0.7.0's code (see .ci/gym-compat)")
from nemo_gym.package_info import __version__ as GYM_VERSION

if GYM_VERSION != "0.7.0":
    pytest.skip(f"written against NeMo Gym 0.7.0, found {GYM_VERSION}", allow_module_level=True)

import httpx
from aiohttp import web
from aiohttp.test_utils import TestClient
from nemo_gym import server_utils
from nemo_gym.config_types import BaseServerConfig
from nemo_gym.openai_utils import (
    NeMoGymChatCompletion,
    NeMoGymChatCompletionMessageForTraining,
    NeMoGymResponse,
    NeMoGymResponseOutputMessage,
    NeMoGymResponseOutputMessageForTraining,
)
from nemo_gym.server_utils import (
    GlobalAIOHTTPAsyncClientConfig,
    ServerClient,
    set_global_aiohttp_client,
)
from omegaconf import OmegaConf
from responses_api_models.vllm_model.app import VLLMModel, VLLMModelConfig

from gateway.stub_upstream import ClipReport, StubState
from gateway.stub_upstream.tokens import (
    AUDIO_BOS,
    AUDIO_EOS,
    AUDIO_PAD,
    audio_token_count,
    prompt_token_ids,
    word_token_id,
)
from tests.conftest import GatewayFactory, audio_part, gateway_metrics

PREFIX = "gateway_"
EXAMPLE = files("resources_servers.asr_with_pc") / "data" / "example.jsonl"

# The Gym guide's two recipes (docs/guides/gym.md), with Gym's own vllm_model config keys (plus
# the instance's identity).
SERVER = {"name": "policy_model", "entrypoint": "app.py", "host": "127.0.0.1", "port": 0}
RL_TRAINING = {
    **SERVER,
    "api_key": "EMPTY",
    "model": "stub-audio-model",
    "return_token_id_information": True,
    "request_prompt_and_generation_token_ids": True,
    "uses_reasoning_parser": False,
}
EVALUATION = {
    **SERVER,
    "api_key": "EMPTY",
    "model": "stub-audio-model",
    "is_responses_native": True,
    "return_token_id_information": False,
    "uses_reasoning_parser": False,
}


RECIPE_FLAGS = (
    "is_responses_native",
    "return_token_id_information",
    "request_prompt_and_generation_token_ids",
    "uses_reasoning_parser",
)


def readme_recipes() -> list[dict[str, Any]]:
    """The `vllm_model` blocks of the Gym guide (docs/guides/gym.md), in order."""
    guide = (Path(__file__).parents[1] / "docs" / "guides" / "gym.md").read_text()
    recipes = []
    for block in re.findall(r"```yaml\n(.*?)```", guide, re.DOTALL):
        config = OmegaConf.to_container(OmegaConf.create(block), resolve=False)
        assert isinstance(config, dict)
        recipes.append(config["policy_model"]["responses_api_models"]["vllm_model"])
    return recipes


def test_readme_recipes_are_what_this_suite_runs() -> None:
    """The guide's two recipes use Gym's own config keys, point at the gateway's `/v1` (Gym
    derives `/tokenize` from it), and set the flags this suite runs with."""
    evaluation, training = readme_recipes()
    for readme, ours in ((evaluation, EVALUATION), (training, RL_TRAINING)):
        assert set(readme) <= set(VLLMModelConfig.model_fields), readme
        assert readme["base_url"].endswith("/v1"), readme
        for flag in RECIPE_FLAGS:
            default = VLLMModelConfig.model_fields[flag].default
            assert readme.get(flag, default) == ours.get(flag, default), flag


# --- Gym's server, in process ------------------------------------------------------------------


@pytest.fixture
async def gym_http() -> AsyncIterator[None]:
    """Gym's process-wide aiohttp client, as `run_webserver` sets it up, on this test's loop."""
    session = set_global_aiohttp_client(GlobalAIOHTTPAsyncClientConfig())
    yield
    await session.close()
    # Gym's own teardown (global_aiohttp_client_exit) calls asyncio.run(), which cannot run
    # inside this loop; the session is closed, so only the global is left to clear.
    server_utils._GLOBAL_AIOHTTP_CLIENT = None


@asynccontextmanager
async def gym_server(base_url: str, recipe: dict[str, Any]) -> AsyncIterator[httpx.AsyncClient]:
    """Gym's `VLLMModel` built as `run_webserver` builds it (config, server client, FastAPI
    app, exception middleware), behind an httpx client over ASGI."""
    unknown = set(recipe) - set(VLLMModelConfig.model_fields)
    assert not unknown, f"not Gym's config keys (Gym would ignore them): {unknown}"
    config = VLLMModelConfig(**recipe, base_url=base_url)
    head = BaseServerConfig(host="127.0.0.1", port=server_utils.DEFAULT_HEAD_SERVER_PORT)
    client = ServerClient(head_server_config=head, global_config_dict=OmegaConf.create({}))
    model = VLLMModel(config=config, server_client=client)
    app = model.setup_webserver()
    model.setup_exception_middleware(app)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gym") as gym:
        yield gym


def base_url(gateway: TestClient[web.Request, web.Application]) -> str:
    return str(gateway.make_url("/v1"))


async def gym_responses(gym: httpx.AsyncClient, row: dict[str, Any]) -> dict[str, Any]:
    """What a Gym agent does with a row: POST its `responses_create_params` to the model."""
    response = await gym.post("/v1/responses", json=row["responses_create_params"])
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


# --- rows ---------------------------------------------------------------------------------------


def convert(source: Path, out: Path, *options: str) -> list[dict[str, Any]]:
    """`audio-gateway convert SOURCE OUT *options`, the CLI itself; OUT's rows."""
    command = [sys.executable, "-m", "gateway", "convert", str(source), str(out), *options]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def example_rows() -> list[dict[str, Any]]:
    """Gym's shipped asr_with_pc example rows (inline `audio_data` WAV data URIs)."""
    rows = [json.loads(line) for line in EXAMPLE.read_text().splitlines() if line.strip()]
    assert len(rows) == 5 and all("audio_data" in metadata(row) for row in rows)
    return rows


@pytest.fixture(scope="module")
def example_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("gym")
    (directory / "example.jsonl").write_text(EXAMPLE.read_text())
    return directory


@pytest.fixture(scope="module")
def prefixed_rows(example_dir: Path) -> list[dict[str, Any]]:
    """The example rows, `convert --to-key-prefix gateway_`: inline `gateway_audio_data`."""
    return convert(
        example_dir / "example.jsonl", example_dir / "prefixed.jsonl", "--to-key-prefix", PREFIX
    )


@pytest.fixture(scope="module")
def path_rows(example_dir: Path) -> list[dict[str, Any]]:
    """The example rows, `convert --extract-to DIR --to-key-prefix gateway_`: the clips as
    files under DIR, the rows naming them by `gateway_audio_path`."""
    return convert(
        example_dir / "example.jsonl",
        example_dir / "paths.jsonl",
        "--extract-to",
        str(example_dir / "clips"),
        "--to-key-prefix",
        PREFIX,
    )


def metadata(row: dict[str, Any]) -> dict[str, str]:
    found: dict[str, str] = row["responses_create_params"]["metadata"]
    return found


def gym_row(text: str, **meta: str) -> dict[str, Any]:
    """A Gym row of the asr_with_pc shape; `meta` is its (string-to-string) metadata."""
    return {
        "responses_create_params": {
            "input": [
                {"role": "system", "content": "You are a helpful assistant. /no_think"},
                {"role": "user", "content": text},
            ],
            "metadata": meta,
        }
    }


def user_text(row: dict[str, Any]) -> str:
    text: str = row["responses_create_params"]["input"][-1]["content"]
    return text


def data_uri_part(uri: str) -> dict[str, Any]:
    return {"type": "audio_url", "audio_url": {"url": uri}}


# --- what the upstream got ----------------------------------------------------------------------


def upstream_chat(stub: StubState) -> dict[str, Any]:
    """The one chat request the stub got for the last row."""
    request = stub.requests[-1]
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    body: dict[str, Any] = json.loads(request.body)
    return body


def assert_audio_before_text(body: dict[str, Any], parts: list[dict[str, Any]], text: str) -> None:
    """The last user message is the clips' parts, in order, then the row's text; no metadata
    key of the sidechannel (prefixed or not) reached the upstream."""
    user = [message for message in body["messages"] if message["role"] == "user"][-1]
    assert user["content"] == [*parts, {"type": "text", "text": text}]
    leftover = [key for key in body.get("metadata") or {} if "audio_" in key]
    assert leftover == [], leftover


# --- RL training: Gym's chat path with token capture ----------------------------------------------


@pytest.fixture
async def training_gateway(
    make_gateway: GatewayFactory,
) -> TestClient[web.Request, web.Application]:
    return await make_gateway(sidechannel={"key_prefix": PREFIX})


async def test_shipped_example_rows_prefixed_keep_token_capture(
    gym_http: None,
    training_gateway: TestClient[web.Request, web.Application],
    stub: StubState,
    example_rows: list[dict[str, Any]],
    prefixed_rows: list[dict[str, Any]],
) -> None:
    assert [metadata(row) for row in prefixed_rows] == [
        {PREFIX + "audio_data": metadata(row)["audio_data"]} for row in example_rows
    ]
    async with gym_server(base_url(training_gateway), RL_TRAINING) as gym:
        for original, row in zip(example_rows, prefixed_rows, strict=True):
            answer = await gym_responses(gym, row)
            body = upstream_chat(stub)
            part = data_uri_part(metadata(original)["audio_data"])
            assert_audio_before_text(body, [part], user_text(row))
            assert_token_capture_requested(body)
            assert_token_bundle(answer, stub, clips=1)
    assert len(stub.requests) == len(prefixed_rows)  # one upstream call a row, no /tokenize


async def test_extracted_path_rows_keep_token_capture(
    gym_http: None,
    make_gateway: GatewayFactory,
    stub: StubState,
    example_dir: Path,
    example_rows: list[dict[str, Any]],
    path_rows: list[dict[str, Any]],
) -> None:
    clips = example_dir / "clips"
    gateway = await make_gateway(sidechannel={"key_prefix": PREFIX}, audio={"root": str(clips)})
    async with gym_server(base_url(gateway), RL_TRAINING) as gym:
        for original, row in zip(example_rows, path_rows, strict=True):
            assert list(metadata(row)) == [PREFIX + "audio_path"]
            answer = await gym_responses(gym, row)
            # The file's bytes, sent as the row's own data URI was.
            part = audio_part(clips / metadata(row)[PREFIX + "audio_path"])
            assert part == data_uri_part(metadata(original)["audio_data"])
            body = upstream_chat(stub)
            assert_audio_before_text(body, [part], user_text(row))
            assert_token_capture_requested(body)
            assert_token_bundle(answer, stub, clips=1)


async def test_path_row_and_two_clip_row(
    gym_http: None,
    training_gateway: TestClient[web.Request, web.Application],
    stub: StubState,
    audio_dir: Path,
) -> None:
    one = gym_row("Transcribe the audio.", **{PREFIX + "audio_path": "a.wav"}, task="asr")
    # Gym's metadata is string-to-string: several clips are a JSON-array string.
    paths = json.dumps(["b.wav", "c.wav"])
    two = gym_row("Compare the two clips.", **{PREFIX + "audio_paths": paths})
    async with gym_server(base_url(training_gateway), RL_TRAINING) as gym:
        answer = await gym_responses(gym, one)
        body = upstream_chat(stub)
        assert_audio_before_text(body, [audio_part(audio_dir / "a.wav")], "Transcribe the audio.")
        assert body["metadata"] == {"task": "asr"}  # other metadata stays
        assert_token_bundle(answer, stub, clips=1)

        answer = await gym_responses(gym, two)
        body = upstream_chat(stub)
        parts = [audio_part(audio_dir / "b.wav"), audio_part(audio_dir / "c.wav")]
        assert_audio_before_text(body, parts, "Compare the two clips.")
        assert "metadata" not in body  # emptied by the gateway, so removed
        assert_token_bundle(answer, stub, clips=2)


async def test_gym_chat_endpoint_keeps_token_capture(
    gym_http: None,
    training_gateway: TestClient[web.Request, web.Application],
    stub: StubState,
    audio_dir: Path,
) -> None:
    """Gym's own `/v1/chat/completions` (for agents that speak chat to the model server) takes
    the same path: its answer is a chat completion whose message carries the token bundle."""
    paths = json.dumps(["c.wav", "a.wav"])
    body = {
        "messages": [{"role": "user", "content": "Compare the two clips."}],
        "metadata": {PREFIX + "audio_paths": paths},
    }
    async with gym_server(base_url(training_gateway), RL_TRAINING) as gym:
        response = await gym.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    parts = [audio_part(audio_dir / "c.wav"), audio_part(audio_dir / "a.wav")]
    assert_audio_before_text(upstream_chat(stub), parts, "Compare the two clips.")
    completion = NeMoGymChatCompletion.model_validate(response.json())
    message = completion.choices[0].message
    assert isinstance(message, NeMoGymChatCompletionMessageForTraining), message
    report = stub.last_report
    assert report is not None
    clips = [ClipReport(**clip) for clip in report["clips"]]
    assert [clip.duration_seconds for clip in clips] == [0.75, 0.25]
    messages = upstream_chat(stub)["messages"]
    assert message.prompt_token_ids == prompt_token_ids(messages, clips, generation=True)
    assert message.prompt_token_ids.count(AUDIO_BOS) == 2
    assert message.generation_token_ids == [word_token_id(w) for w in message.content.split(" ")]


async def test_gym_refuses_a_list_of_paths(
    gym_http: None,
    training_gateway: TestClient[web.Request, web.Application],
    stub: StubState,
) -> None:
    """Why `audio_paths` must be a JSON-array string in Gym rows: Gym's request model types
    metadata as string-to-string, so a list never leaves Gym."""
    row = gym_row("Compare.", **{PREFIX + "audio_paths": ["b.wav", "c.wav"]})  # type: ignore[arg-type]
    async with gym_server(base_url(training_gateway), RL_TRAINING) as gym:
        response = await gym.post("/v1/responses", json=row["responses_create_params"])
    assert response.status_code == 422, response.text
    assert stub.requests == []


async def test_missing_clip_costs_gym_three_calls(
    gym_http: None,
    training_gateway: TestClient[web.Request, web.Application],
    stub: StubState,
) -> None:
    """Gym's client retries a 404 (a missing clip) twice more before giving up with a 500."""
    row = gym_row("Transcribe.", **{PREFIX + "audio_path": "missing.wav"})
    async with gym_server(base_url(training_gateway), RL_TRAINING) as gym:
        response = await gym.post("/v1/responses", json=row["responses_create_params"])
    assert response.status_code == 500, response.text
    assert "audio_not_found" in response.text
    metrics = await gateway_metrics(training_gateway)
    assert metrics['audio_gateway_requests_total{route="chat_completions",status="404"}'] == 3
    assert stub.requests == []


async def test_gym_consumes_unprefixed_keys_itself(
    gym_http: None,
    training_gateway: TestClient[web.Request, web.Application],
    stub: StubState,
    audio_dir: Path,
) -> None:
    """Why the prefix: on its chat path Gym reads `audio_path` itself (the whole file, per
    request, in its event loop) and sends the audio inline, so the gateway does no audio work."""
    row = gym_row("Transcribe the audio.", audio_path=str(audio_dir / "a.wav"))
    async with gym_server(base_url(training_gateway), RL_TRAINING) as gym:
        await gym_responses(gym, row)
    body = upstream_chat(stub)
    assert_audio_before_text(body, [audio_part(audio_dir / "a.wav")], "Transcribe the audio.")
    metrics = await gateway_metrics(training_gateway)
    assert metrics['audio_gateway_requests_total{route="chat_completions",status="200"}'] == 1
    assert metrics["audio_gateway_cache_misses_total"] == 0
    assert metrics["audio_gateway_encoded_bytes_total"] == 0


async def test_gyms_default_path_by_reference_is_one_processing_a_clip_a_wave(
    gym_http: None, make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    """No prefix: Gym reads each clip and inlines it; with `repeats = "reference"` the gateway
    still sends the clip's data once a wave and references for the other seeds."""
    splice = {"repeats": "reference", "reference_wait_ms": 30_000}
    gateway = await make_gateway(splice=splice)
    seeds = 16
    async with gym_server(base_url(gateway), RL_TRAINING) as gym:
        for name in ("a.wav", "b.wav"):
            row = gym_row("Transcribe the audio.", audio_path=str(audio_dir / name))
            decodes = stub.decodes
            answers = await asyncio.gather(*(gym_responses(gym, row) for _ in range(seeds)))
            assert stub.decodes == decodes + 1  # one processing of the clip this wave
            for answer in answers:
                training_message(answer)  # token capture intact
    metrics = await gateway_metrics(gateway)
    assert metrics['audio_gateway_audio_parts_total{form="data"}'] == 2
    assert metrics['audio_gateway_audio_parts_total{form="reference"}'] == 2 * (seeds - 1)


async def test_tokenize_fallback_loses_the_audio(
    gym_http: None,
    training_gateway: TestClient[web.Request, web.Application],
    stub: StubState,
) -> None:
    """Without `request_prompt_and_generation_token_ids` Gym asks `/tokenize` for the prompt
    ids, with the messages as it built them: no metadata, so no audio, and prompt ids that do
    not match what generation saw."""
    recipe = {**RL_TRAINING, "request_prompt_and_generation_token_ids": False}
    row = gym_row("Transcribe the audio.", **{PREFIX + "audio_path": "a.wav"})
    async with gym_server(base_url(training_gateway), recipe) as gym:
        answer = await gym_responses(gym, row)
    generation, tokenize = stub.requests[-2:]
    assert generation.path == "/v1/chat/completions"
    assert tokenize.path == "/tokenize"
    sent = json.loads(tokenize.body)
    assert "metadata" not in sent
    assert sent["messages"][-1] == {"role": "user", "content": "Transcribe the audio."}
    message = training_message(answer)
    assert_no_audio_tokens(message.prompt_token_ids)
    # what generation saw (and what inline ids would have said): the clip's placeholders
    report = stub.last_report
    assert report is not None and len(report["clips"]) == 1, report
    clips = [ClipReport(**clip) for clip in report["clips"]]
    seen = prompt_token_ids(json.loads(generation.body)["messages"], clips, generation=True)
    assert AUDIO_PAD in seen and message.prompt_token_ids != seen


# --- evaluation: Gym's responses-native path, through the gateway's Responses bridge --------------


async def test_responses_native_shipped_rows_unprefixed(
    gym_http: None,
    gateway: TestClient[web.Request, web.Application],
    stub: StubState,
    example_rows: list[dict[str, Any]],
) -> None:
    """A gateway with the default config reads Gym's shipped rows as they are."""
    async with gym_server(base_url(gateway), EVALUATION) as gym:
        for row in example_rows:
            answer = await gym_responses(gym, row)
            body = upstream_chat(stub)
            part = data_uri_part(metadata(row)["audio_data"])
            assert_audio_before_text(body, [part], user_text(row))
            assert_bridge_answer(answer, stub)


async def test_responses_native_prefixed_rows(
    gym_http: None,
    training_gateway: TestClient[web.Request, web.Application],
    stub: StubState,
    audio_dir: Path,
    example_rows: list[dict[str, Any]],
    prefixed_rows: list[dict[str, Any]],
) -> None:
    """The training gateway (key_prefix) serves evaluation too, with the same prefixed rows."""
    paths = json.dumps(["a.wav", "b.wav"])
    two = gym_row("Compare the two clips.", **{PREFIX + "audio_paths": paths})
    async with gym_server(base_url(training_gateway), EVALUATION) as gym:
        answer = await gym_responses(gym, prefixed_rows[0])
        part = data_uri_part(metadata(example_rows[0])["audio_data"])
        assert_audio_before_text(upstream_chat(stub), [part], user_text(prefixed_rows[0]))
        assert_bridge_answer(answer, stub)

        answer = await gym_responses(gym, two)
        parts = [audio_part(audio_dir / "a.wav"), audio_part(audio_dir / "b.wav")]
        assert_audio_before_text(upstream_chat(stub), parts, "Compare the two clips.")
        assert_bridge_answer(answer, stub)


def assert_bridge_answer(answer: dict[str, Any], stub: StubState) -> None:
    """Gym's model validates the bridge's answer, whose text is the stub's."""
    response = NeMoGymResponse.model_validate(answer)
    message = response.output[-1]
    assert isinstance(message, NeMoGymResponseOutputMessage)
    chat = stub.last_report
    assert chat is not None and chat["clips"], chat
    assert message.content[0].text.startswith(chat["clips"][0]["container"])


# --- the token bundle ----------------------------------------------------------------------------


def assert_token_capture_requested(body: dict[str, Any]) -> None:
    """What Gym's chat path asks vLLM for, untouched by the gateway."""
    assert body["logprobs"] is True
    assert body["top_logprobs"] == 0
    assert body["return_tokens_as_token_ids"] is True
    assert body["return_token_ids"] is True


def training_message(answer: dict[str, Any]) -> NeMoGymResponseOutputMessageForTraining:
    response = NeMoGymResponse.model_validate(answer)
    message = response.output[-1]
    assert isinstance(message, NeMoGymResponseOutputMessageForTraining), message
    return message


def assert_token_bundle(answer: dict[str, Any], stub: StubState, clips: int) -> None:
    """Gym's answer validates as a training message whose token bundle is the stub's: the
    prompt ids of the messages it got (each clip's placeholder tokens included), the ids of
    the generated words, one log probability each."""
    message = training_message(answer)
    report = stub.last_report
    assert report is not None and len(report["clips"]) == clips, report
    received = [ClipReport(**clip) for clip in report["clips"]]
    prompt = message.prompt_token_ids
    assert prompt == prompt_token_ids(upstream_chat(stub)["messages"], received, generation=True)
    assert prompt.count(AUDIO_BOS) == prompt.count(AUDIO_EOS) == clips
    assert prompt.count(AUDIO_PAD) == sum(audio_token_count(clip) for clip in received) > 0
    text = message.content[0].text
    assert message.generation_token_ids == [word_token_id(word) for word in text.split(" ")]
    assert len(message.generation_log_probs) == len(message.generation_token_ids)
    assert all(-1 < logprob <= 0 for logprob in message.generation_log_probs)


def assert_no_audio_tokens(prompt: list[int]) -> None:
    assert {AUDIO_BOS, AUDIO_PAD, AUDIO_EOS}.isdisjoint(prompt), prompt
