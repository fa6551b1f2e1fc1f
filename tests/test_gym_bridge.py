"""The Responses bridge against NeMo Gym 0.7.0's own converter (skipped unless Gym imports).

Each body of `tests.bridge_corpus` goes two ways: through Gym's chat path (its
`responses_converter`, then `vllm_model`'s preprocessing, which strips `strict`, moves
reasoning onto `reasoning` and splices the `metadata.audio_data` clip into the last user
message) and through a real gateway's bridge to the stub upstream, which records the chat body
it got. The two chat bodies must be equal, modulo the differences the bridge's reference page
(docs/reference/responses-bridge.md, "Differences from NeMo Gym") lists; each is undone here by
a named normalisation. The bodies Gym cannot take must be refused by Gym and answered by the
bridge.

Run it with `.ci/gym-compat`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("nemo_gym", reason="needs NeMo Gym 0.7.0's code (see .ci/gym-compat)")

import pydantic
from aiohttp import web
from aiohttp.test_utils import TestClient
from nemo_gym.config_types import BaseServerConfig
from nemo_gym.openai_utils import NeMoGymResponseCreateParamsNonStreaming
from nemo_gym.server_utils import DEFAULT_HEAD_SERVER_PORT, ServerClient
from omegaconf import OmegaConf
from responses_api_models.vllm_model.app import VLLMModel, VLLMModelConfig

from gateway.stub_upstream import StubState
from tests import bridge_corpus

Chat = dict[str, Any]
CASES = bridge_corpus.cases()
# Gym's chat path with vLLM's reasoning parser, reasoning under vLLM's own key.
RECIPE = {
    "name": "policy_model",
    "entrypoint": "app.py",
    "host": "127.0.0.1",
    "port": 0,
    "base_url": "http://127.0.0.1:1/v1",  # never called: only the conversion runs
    "api_key": "EMPTY",
    "model": bridge_corpus.MODEL,
    "return_token_id_information": False,
    "uses_reasoning_parser": True,
    "reasoning_field": "reasoning",
}


@pytest.fixture(scope="module")
def gym_model() -> VLLMModel:
    head = BaseServerConfig(host="127.0.0.1", port=DEFAULT_HEAD_SERVER_PORT)
    client = ServerClient(head_server_config=head, global_config_dict=OmegaConf.create({}))
    return VLLMModel(config=VLLMModelConfig(**RECIPE), server_client=client)


def gym_chat(model: VLLMModel, body: dict[str, Any]) -> Chat:
    """The chat body Gym's chat path sends vLLM for a Responses body."""
    request = NeMoGymResponseCreateParamsNonStreaming.model_validate(copy.deepcopy(body))
    params = model._converter.responses_to_chat_completion_create_params(request)
    chat = params.model_dump(exclude_unset=True)
    chat = model._preprocess_chat_completion_create_params(None, chat)  # type: ignore[arg-type]
    loaded: Chat = json.loads(json.dumps(chat))
    return loaded


async def bridge_chat(
    gateway: TestClient[web.Request, web.Application], stub: StubState, body: dict[str, Any]
) -> Chat:
    """The chat body the stub got from the gateway's bridge for a Responses body."""
    response = await gateway.post("/v1/responses", json=body)
    assert response.status == 200, await response.text()
    request = stub.requests[-1]
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    chat: Chat = json.loads(request.body)
    return chat


# --- the documented differences, each undone on the bridge's body ------------------------------


def assistants(chat: Chat) -> list[dict[str, Any]]:
    return [message for message in chat["messages"] if message["role"] == "assistant"]


def gym_strips_strict(chat: Chat) -> None:
    """Gym strips `strict` from function tools; the bridge carries it (vLLM enforces it)."""
    for tool in chat.get("tools", []):
        tool["function"].pop("strict", None)


def gym_sends_top_logprobs_alone(chat: Chat, gym: Chat) -> None:
    """Gym sends `top_logprobs` without `logprobs: true`, which vLLM refuses; the bridge
    adds it."""
    if "top_logprobs" in gym and "logprobs" not in gym:
        assert chat.pop("logprobs") is True


def gym_sends_verbosity(gym: Chat) -> None:
    """Gym sends `verbosity`, which vLLM's chat request does not have (ignored); the bridge
    accepts only "medium" and sends nothing."""
    assert gym.pop("verbosity", "medium") == "medium"


def gym_empty_text(gym: Chat) -> None:
    """Gym's assistant turn without text has content "" once reasoning is taken out of it;
    the bridge's has null, as any assistant turn without text."""
    for message in assistants(gym):
        if message.get("content") == "":
            message["content"] = None


def gym_reads_only_the_summary(chat: Chat) -> None:
    """Gym replays a reasoning item's `summary` only: the bridge's own shape (text in
    `content[].reasoning_text`, empty summary) replays without its text."""
    for message in assistants(chat):
        message.pop("reasoning", None)


def gym_keeps_the_first_reasoning_text(chat: Chat) -> None:
    """Gym keeps only the first of a turn's reasoning texts; the bridge joins them."""
    for message in assistants(chat):
        if "reasoning" in message:
            message["reasoning"] = message["reasoning"].split("\n")[0]


def gym_drops_chat_shaped_tool_calls(chat: Chat) -> None:
    """Gym's request model drops an assistant item's chat-shaped `tool_calls` before its
    converter (which would map them) sees the item; the bridge carries them."""
    for message in assistants(chat):
        message.pop("tool_calls", None)


PER_CASE: dict[str, Callable[[Chat], None]] = {
    "chat_shaped_history": gym_drops_chat_shaped_tool_calls,
    "reasoning_bridge_replay": gym_reads_only_the_summary,
    "reasoning_two_parts": gym_keeps_the_first_reasoning_text,
}


def as_gym_sends(chat: Chat, gym: Chat, name: str) -> None:
    gym_strips_strict(chat)
    gym_sends_top_logprobs_alone(chat, gym)
    gym_sends_verbosity(gym)
    gym_empty_text(gym)
    PER_CASE.get(name, lambda chat: None)(chat)


# --- the tests -----------------------------------------------------------------------------------


def test_the_corpus_is_large_enough() -> None:
    assert len(CASES) >= 30
    assert set(bridge_corpus.GYM_REFUSES) < set(CASES)
    assert set(PER_CASE) < set(CASES) - set(bridge_corpus.GYM_REFUSES)


@pytest.mark.parametrize("name", sorted(set(CASES) - set(bridge_corpus.GYM_REFUSES)))
async def test_the_bridge_sends_what_gym_sends(
    gateway: TestClient[web.Request, web.Application],
    stub: StubState,
    gym_model: VLLMModel,
    name: str,
) -> None:
    body = CASES[name]
    gym = gym_chat(gym_model, body)
    chat = await bridge_chat(gateway, stub, body)
    as_gym_sends(chat, gym, name)
    assert chat["messages"] == gym["messages"]
    assert chat == gym


@pytest.mark.parametrize("name", sorted(bridge_corpus.GYM_REFUSES))
async def test_what_gym_cannot_convert_the_bridge_answers(
    gateway: TestClient[web.Request, web.Application],
    stub: StubState,
    gym_model: VLLMModel,
    name: str,
) -> None:
    body = CASES[name]
    with pytest.raises((NotImplementedError, pydantic.ValidationError)):
        gym_chat(gym_model, body)
    await bridge_chat(gateway, stub, body)
