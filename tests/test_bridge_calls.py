"""Function calls, logprobs and "nothing stored" through the Responses bridge, end to end: the
openai SDK's `client.responses.create(...)` (plain and `stream=True`, every event parsed into
its type by the SDK) through the gateway, against the stub, which answers a named or
`required` tool_choice with a call as vLLM does."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from openai import AsyncOpenAI

from gateway.stub_upstream import StubState
from tests.conftest import b64_of, forced_call_events, forwarded_json, gateway_error

Client = TestClient[web.Request, web.Application]
MODEL = "stub-audio-model"
SCHEMA = {
    "type": "object",
    "properties": {
        "mode": {"type": "string", "enum": ["loud", "quiet"]},
        "on": {"type": "boolean"},
        "heard": {"type": "string"},
    },
    "required": ["mode", "on", "heard"],
    "additionalProperties": False,
}
TOOL = {"type": "function", "name": "set_mode", "parameters": SCHEMA, "strict": True}
NAMED = {"type": "function", "name": "set_mode"}


@pytest.fixture
async def client(gateway: Client) -> AsyncIterator[AsyncOpenAI]:
    base_url = str(gateway.make_url("/v1"))
    async with AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=10) as sdk:
        yield sdk


def audio_turn(audio_dir: Path, text: str = "Set the mode from the clip.") -> dict[str, Any]:
    audio = {
        "type": "input_audio",
        "input_audio": {"data": b64_of(audio_dir / "a.wav"), "format": "wav"},
    }
    return {"role": "user", "content": [audio, {"type": "input_text", "text": text}]}


def assert_call(arguments: str, stub: StubState) -> None:
    """Arguments that parse, fit the schema, and carry what the stub heard (the audio arrived)."""
    parsed = json.loads(arguments)
    jsonschema.validate(parsed, SCHEMA)
    assert stub.last_report is not None and stub.last_report["clips"]
    assert parsed["heard"].startswith("wav ")


@pytest.mark.parametrize("tool_choice", [NAMED, "required"])
async def test_a_forced_call_is_a_function_call_item(
    client: AsyncOpenAI, stub: StubState, audio_dir: Path, tool_choice: Any
) -> None:
    response = await client.responses.create(
        model=MODEL, input=[audio_turn(audio_dir)], tools=[TOOL], tool_choice=tool_choice
    )
    [call] = response.output
    assert call.type == "function_call"
    assert call.call_id.startswith("chatcmpl-tool-") and call.name == "set_mode"
    assert call.status == "completed" and response.status == "completed"
    assert_call(call.arguments, stub)
    answered = stub.requests[-1]
    assert answered.path == "/v1/chat/completions"
    assert response.tool_choice == tool_choice or response.tool_choice.type == "function"


async def test_a_streamed_call_arrives_as_its_events(
    client: AsyncOpenAI, stub: StubState, audio_dir: Path
) -> None:
    stream = await client.responses.create(
        model=MODEL, input=[audio_turn(audio_dir)], tools=[TOOL], tool_choice=NAMED, stream=True
    )
    events = [event async for event in stream]  # each one parsed into its SDK type
    kinds = [event.type for event in events]
    deltas = kinds.count("response.function_call_arguments.delta")
    assert deltas > 1
    assert kinds == forced_call_events(deltas)
    assert [event.sequence_number for event in events] == list(range(len(events)))
    added, done = events[2].item, events[-2].item  # type: ignore[union-attr]
    assert (added.type, added.status, added.arguments) == ("function_call", "in_progress", "")
    arguments = "".join(e.delta for e in events if e.type.endswith("arguments.delta"))  # type: ignore[union-attr]
    assert events[-3].arguments == done.arguments == arguments  # type: ignore[union-attr]
    assert {e.output_index for e in events[2:-1]} == {0}  # type: ignore[union-attr]
    final = events[-1].response  # type: ignore[union-attr]
    assert final.output == [done] and done.call_id == added.call_id
    assert_call(arguments, stub)


async def test_the_next_turn_replays_the_call_and_its_output(
    client: AsyncOpenAI, stub: StubState, audio_dir: Path
) -> None:
    first_input: list[Any] = [audio_turn(audio_dir)]
    first = await client.responses.create(
        model=MODEL, input=first_input, tools=[TOOL], tool_choice=NAMED
    )
    [call] = first.output
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "done"}
    second = await client.responses.create(
        model=MODEL,
        input=[
            *first_input,
            *[item.model_dump(exclude_none=True) for item in first.output],
            output,
        ],
        tools=[TOOL],
    )
    assert second.status == "completed" and second.output_text.startswith("wav ")
    messages = forwarded_json(stub)["messages"]
    assert messages[-2]["tool_calls"][0]["id"] == call.call_id
    assert messages[-2]["tool_calls"][0]["function"]["arguments"] == call.arguments
    assert messages[-1] == {"role": "tool", "tool_call_id": call.call_id, "content": "done"}


# --- logprobs -----------------------------------------------------------------------------------


async def test_logprobs_come_back_on_the_text(client: AsyncOpenAI, audio_dir: Path) -> None:
    response = await client.responses.create(
        model=MODEL,
        input=[audio_turn(audio_dir, "Transcribe.")],
        top_logprobs=2,
        include=["message.output_text.logprobs"],
    )
    [message] = response.output
    [part] = message.content  # type: ignore[union-attr]
    tokens = part.logprobs  # type: ignore[union-attr]
    assert "".join(token.token for token in tokens) == response.output_text
    assert all(len(token.top_logprobs) == 2 and token.logprob <= 0 for token in tokens)
    assert all(bytes(token.bytes).decode() == token.token for token in tokens)


async def test_streamed_logprobs_ride_on_the_text_deltas(
    client: AsyncOpenAI, audio_dir: Path
) -> None:
    stream = await client.responses.create(
        model=MODEL,
        input=[audio_turn(audio_dir, "Transcribe.")],
        top_logprobs=1,
        include=["message.output_text.logprobs"],
        stream=True,
    )
    events = [event async for event in stream]
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert deltas and all(len(e.logprobs) == 1 for e in deltas)  # type: ignore[union-attr]
    assert [e.logprobs[0].token for e in deltas] == [e.delta for e in deltas]  # type: ignore[union-attr]
    final = events[-1].response  # type: ignore[union-attr]
    [part] = final.output[0].content
    assert [lp.token for lp in part.logprobs] == [e.delta for e in deltas]  # type: ignore[union-attr]


# --- nothing is stored --------------------------------------------------------------------------


async def test_a_bridged_answer_is_not_stored_and_says_so(
    client: AsyncOpenAI, gateway: Client, stub: StubState, audio_dir: Path
) -> None:
    response = await client.responses.create(model=MODEL, input=[audio_turn(audio_dir)], store=True)
    assert response.store is False and response.id.startswith("resp_bridge_")
    seen = len(stub.requests)
    with pytest.raises(openai.NotFoundError) as caught:
        await client.responses.retrieve(response.id)
    assert caught.value.body["code"] == "response_not_stored"  # type: ignore[index]
    lookups = [
        ("GET", ""),
        ("DELETE", ""),
        ("POST", "/cancel"),
        ("GET", "/input_items"),
    ]
    for method, tail in lookups:
        answer = await gateway.request(method, f"/v1/responses/{response.id}{tail}")
        error = await gateway_error(answer, 404, "response_id")
        assert error["code"] == "response_not_stored" and response.id in error["message"]
    assert len(stub.requests) == seen  # none of them reached the upstream


async def test_another_id_is_the_upstreams_to_answer(gateway: Client, stub: StubState) -> None:
    answer = await gateway.get("/v1/responses/resp_0123abcd/input_items?limit=2")
    assert answer.headers.get("X-Stub-Echo") == "1"
    assert stub.requests[-1].path == "/v1/responses/resp_0123abcd/input_items?limit=2"


@pytest.mark.parametrize("with_audio", [True, False])
async def test_a_bridged_id_as_previous_response_id_is_refused(
    gateway: Client, stub: StubState, audio_dir: Path, with_audio: bool
) -> None:
    turn = audio_turn(audio_dir) if with_audio else {"role": "user", "content": "Go on."}
    body = {"model": MODEL, "input": [turn], "previous_response_id": "resp_bridge_" + "0" * 32}
    seen = len(stub.requests)
    error = await gateway_error(
        await gateway.post("/v1/responses", json=body), 400, "previous_response_id"
    )
    assert error["code"] == "response_not_stored"
    assert len(stub.requests) == seen
