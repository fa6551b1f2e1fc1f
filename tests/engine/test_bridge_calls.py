"""The Responses bridge's calls, reasoning effort and logprobs on the real vLLM, through the
gateway, with the official `openai` SDK (every answer and event parsed into its SDK type).

The tiny Qwen2-Audio has random weights: a named `tool_choice` still gives a call because the
engine runs xgrammar with `disable_any_whitespace` (tests/engine/specs.py), which holds the
arguments to the schema, a schema of enums and booleans so that no free text can run on."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from openai import AsyncOpenAI

from engine.server import EngineServer
from tests.conftest import forced_call_events

from .helpers import MODE_SCHEMA, gateway_sdk, write_clip

pytestmark = pytest.mark.timeout(180, func_only=True)
MODEL = "tiny-qwen2-audio"
TOOL = {"type": "function", "name": "set_mode", "parameters": MODE_SCHEMA, "strict": True}
NAMED = {"type": "function", "name": "set_mode"}
CALL_TOKENS = 60  # the call is ~26 tokens (a character or two each)


@pytest.fixture
async def sdk(qwen_engine: EngineServer, clip_dir: Path) -> AsyncIterator[AsyncOpenAI]:
    async with gateway_sdk(qwen_engine, clip_dir) as client:
        yield client


@pytest.fixture
def turn(clip_dir: Path) -> dict[str, Any]:
    """A user turn with one second of audio as an `input_audio` part."""
    data = base64.b64encode(write_clip(clip_dir, "call.wav", 1.0).read_bytes()).decode()
    audio = {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}
    return {"role": "user", "content": [audio, {"type": "input_text", "text": "Set the mode."}]}


def fits(arguments: str) -> None:
    jsonschema.validate(json.loads(arguments), MODE_SCHEMA)


async def test_a_named_tool_choice_is_a_function_call(
    sdk: AsyncOpenAI, turn: dict[str, Any]
) -> None:
    response = await sdk.responses.create(
        model=MODEL, input=[turn], tools=[TOOL], tool_choice=NAMED, max_output_tokens=CALL_TOKENS
    )
    assert response.status == "completed"
    [call] = response.output
    assert call.type == "function_call" and call.name == "set_mode"
    assert call.call_id.startswith("chatcmpl-tool-") and call.status == "completed"
    fits(call.arguments)


async def test_a_named_tool_choice_streamed(sdk: AsyncOpenAI, turn: dict[str, Any]) -> None:
    stream = await sdk.responses.create(
        model=MODEL,
        input=[turn],
        tools=[TOOL],
        tool_choice=NAMED,
        max_output_tokens=CALL_TOKENS,
        stream=True,
    )
    events = [event async for event in stream]
    kinds = [event.type for event in events]
    deltas = kinds.count("response.function_call_arguments.delta")
    assert kinds == forced_call_events(deltas)
    assert [event.sequence_number for event in events] == list(range(len(events)))
    final = events[-1].response  # type: ignore[union-attr]
    [call] = final.output
    joined = "".join(e.delta for e in events if e.type.endswith("arguments.delta"))  # type: ignore[union-attr]
    assert call.arguments == joined == events[-3].arguments  # type: ignore[union-attr]
    fits(call.arguments)
    assert final.usage is not None and final.usage.output_tokens > deltas


async def test_the_next_turn_after_a_call_is_answered(
    sdk: AsyncOpenAI, turn: dict[str, Any]
) -> None:
    first = await sdk.responses.create(
        model=MODEL, input=[turn], tools=[TOOL], tool_choice=NAMED, max_output_tokens=CALL_TOKENS
    )
    [call] = first.output
    replay = [item.model_dump(exclude_none=True) for item in first.output]
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "set"}
    second = await sdk.responses.create(
        model=MODEL,
        input=[turn, *replay, output],
        tools=[TOOL],
        max_output_tokens=4,
        extra_body={"ignore_eos": True},
    )
    assert second.status == "incomplete" and second.output[-1].type == "message"
    assert second.usage is not None and second.usage.output_tokens == 4


@pytest.mark.parametrize("stream", [False, True])
async def test_reasoning_effort_and_logprobs(
    sdk: AsyncOpenAI, turn: dict[str, Any], stream: bool
) -> None:
    common: dict[str, Any] = {
        "model": MODEL,
        "input": [turn],
        "reasoning": {"effort": "low"},
        "top_logprobs": 2,
        "include": ["message.output_text.logprobs"],
        "max_output_tokens": 4,
        "extra_body": {"ignore_eos": True},
    }
    if not stream:
        response = await sdk.responses.create(**common)
    else:
        events = [event async for event in await sdk.responses.create(**common, stream=True)]
        deltas = [e for e in events if e.type == "response.output_text.delta"]
        assert sum(len(e.logprobs) for e in deltas) == 4  # type: ignore[union-attr]
        response = events[-1].response  # type: ignore[union-attr]
    assert response.reasoning is not None and response.reasoning.effort == "low"
    [message] = response.output
    [part] = message.content  # type: ignore[union-attr]
    assert len(part.logprobs) == 4  # type: ignore[union-attr]
    assert all(len(token.top_logprobs) == 2 for token in part.logprobs)  # type: ignore[union-attr]
