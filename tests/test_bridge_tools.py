"""An audio agent's turns through the Responses bridge, end to end: the openai SDK -> a real
gateway -> the stub upstream, which records the chat body it got."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from openai import AsyncOpenAI

from gateway.stub_upstream import StubState
from tests import bridge_corpus as corpus
from tests.conftest import audio_part

Client = TestClient[web.Request, web.Application]
MODEL = "stub-audio-model"


@pytest.fixture
async def sdk(gateway: Client) -> AsyncIterator[AsyncOpenAI]:
    base_url = str(gateway.make_url("/v1"))
    async with AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=10) as client:
        yield client


def received(stub: StubState) -> dict[str, Any]:
    request = stub.requests[-1]
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    body: dict[str, Any] = json.loads(request.body)
    return body


async def test_a_tool_turn_with_the_sidechannel_clip(
    sdk: AsyncOpenAI, stub: StubState, audio_dir: Path
) -> None:
    """Turn 2 of an agent: its call and the call's output replayed, tools offered again, the
    clip by path. The clip goes to the last user message, before its text."""
    response = await sdk.responses.create(
        model=MODEL,
        input=[corpus.ASK, corpus.CALL, corpus.OUTPUT],  # type: ignore[list-item]
        tools=[corpus.WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
        reasoning={"effort": "low"},
        top_logprobs=2,
        metadata={"audio_path": "a.wav"},
    )
    assert response.status == "completed"
    sent = received(stub)
    assert sent["messages"] == [
        {
            "role": "user",
            "content": [
                audio_part(audio_dir / "a.wav"),
                {"type": "text", "text": corpus.ASK["content"]},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21}'},
    ]
    function = {k: v for k, v in corpus.WEATHER.items() if k != "type"}
    assert sent["tools"] == [{"type": "function", "function": function}]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert (sent["parallel_tool_calls"], sent["reasoning_effort"]) == (False, "low")
    assert (sent["logprobs"], sent["top_logprobs"]) == (True, 2)
    # the answer repeats what was asked, in the Responses shape
    assert response.tool_choice.type == "function"  # type: ignore[union-attr]
    assert response.reasoning is not None and response.reasoning.effort == "low"
    assert response.top_logprobs == 2 and response.parallel_tool_calls is False
    assert [tool.name for tool in response.tools] == ["get_weather"]  # type: ignore[union-attr]


async def test_turn_two_replays_turn_ones_output(sdk: AsyncOpenAI, stub: StubState) -> None:
    """`input += response.output` works with reasoning in the output: the bridge's own
    reasoning item replays onto the assistant message (the stub answers with reasoning)."""
    first_input: list[Any] = [
        {"role": "user", "content": [corpus.audio_part(), {"type": "input_text", "text": "What?"}]}
    ]
    first = await sdk.responses.create(
        model=MODEL, input=first_input, extra_headers={"X-Stub-Reasoning": "the clip is a tone"}
    )
    assert [item.type for item in first.output] == ["reasoning", "message"]
    replay = [item.model_dump(exclude_none=True) for item in first.output]
    second_input = [*first_input, *replay, {"role": "user", "content": "How long?"}]
    second = await sdk.responses.create(model=MODEL, input=second_input)
    assert second.status == "completed"
    assistant = received(stub)["messages"][1]
    assert assistant == {
        "role": "assistant",
        "content": first.output_text,
        "reasoning": "the clip is a tone",
    }


async def test_a_hosted_tool_is_refused_before_anything_is_sent(
    sdk: AsyncOpenAI, stub: StubState
) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        await sdk.responses.create(
            model=MODEL,
            input="Search.",
            tools=[corpus.WEATHER, {"type": "web_search"}],  # type: ignore[list-item]
            metadata={"audio_path": "a.wav"},
        )
    assert (raised.value.code, raised.value.param) == (
        "unsupported_by_audio_bridge",
        "tools[1].type",
    )
    assert "does not translate" in raised.value.message
    assert stub.request_count == 0
