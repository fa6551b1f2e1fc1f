"""What the Responses bridge sends, judged by vLLM's own code (0.33 and 0.34).

Every body of the bridge's corpus (tests/bridge_corpus.py: tools and every `tool_choice`,
function calls and their outputs, reasoning replay, instructions, effort, images, logprobs,
audio by sidechannel or in place), plain and streamed, goes through a real gateway
(`responses.audio = "chat_bridge"`) to the stub, which records the chat body it received. That
body then runs through what vLLM's chat route runs before its engine: `ChatCompletionRequest`
(its tool, logprobs and format checks), `parse_chat_messages_async` with its media loading,
the tool-call schema a named or required `tool_choice` compiles to (`get_json_schema_from_tools`),
`to_sampling_params` and `build_chat_params`. What comes out is held to what the Responses body
asked for, read from the Responses body alone: the clips (decoded bit for bit as vLLM decodes
the original), the images, the call ids of the assistant calls and tool answers, the forced
tool's schema, the effort, the logprobs, the token cap.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import numpy
import pytest

from tests.vllm_compat.versions import require_vllm

require_vllm()

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from vllm.multimodal.media.audio import AudioMediaIO
    from vllm.tool_parsers.utils import get_json_schema_from_tools

from gateway.stub_upstream import StubState  # noqa: E402
from tests.bridge_corpus import cases, wav_bytes  # noqa: E402
from tests.conftest import GatewayFactory  # noqa: E402
from tests.vllm_compat.conftest import VllmChat, VllmResult  # noqa: E402

BRIDGE = {"audio": "chat_bridge"}
LOGPROBS_INCLUDE = "message.output_text.logprobs"


def parts(body: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """Every content part of `kind` in the body's input items."""
    items = body["input"] if isinstance(body["input"], list) else []
    return [
        part
        for item in items
        if isinstance(item.get("content"), list)
        for part in item["content"]
        if part.get("type") == kind
    ]


def call_ids(body: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(ids of the assistant's calls, ids the tool answers name), in input order, from both
    the Responses items and chat-shaped history."""
    calls: list[str] = []
    answers: list[str] = []
    for item in body["input"] if isinstance(body["input"], list) else []:
        if item.get("type") == "function_call":
            calls.append(item["call_id"])
        elif item.get("type") == "function_call_output":
            answers.append(item["call_id"])
        calls += [call["id"] for call in item.get("tool_calls") or []]
        if item.get("role") == "tool":
            answers.append(item["tool_call_id"])
    return calls, answers


def assert_clips_and_images(body: dict[str, Any], result: VllmResult) -> None:
    clips = len(parts(body, "input_audio")) + ("audio_data" in body.get("metadata", {}))
    expected, rate = AudioMediaIO().load_bytes(wav_bytes())  # every corpus clip is this WAV
    assert len(result.audio) == clips >= 1
    for samples, got_rate in result.audio:
        assert got_rate == rate and numpy.array_equal(samples, expected)
    assert len(result.images) == len(parts(body, "input_image"))


def assert_calls(body: dict[str, Any], result: VllmResult) -> None:
    calls, answers = call_ids(body)
    conversation = result.conversation
    sent_calls = [c["id"] for m in conversation for c in m.get("tool_calls") or []]
    assert sent_calls == calls
    assert [m["tool_call_id"] for m in conversation if m["role"] == "tool"] == answers
    for message in conversation:  # vLLM parsed each call's arguments as JSON objects
        assert all(
            isinstance(c["function"]["arguments"], dict) for c in message.get("tool_calls") or []
        )


def assert_tool_choice(body: dict[str, Any], result: VllmResult) -> None:
    request = result.request
    tools = {tool["name"]: tool for tool in body.get("tools") or []}
    assert [t.function.name for t in request.tools or []] == list(tools)
    if "parallel_tool_calls" in body and tools:
        assert request.parallel_tool_calls == body["parallel_tool_calls"]
    schema = get_json_schema_from_tools(
        request.tool_choice, request.tools, request.parallel_tool_calls
    )
    choice = body.get("tool_choice", "auto" if tools else None)
    if isinstance(choice, dict):
        assert schema == tools[choice["name"]]["parameters"]
    elif choice == "required":
        assert len(schema["items"]["anyOf"]) == len(tools)
        assert ("maxItems" in schema) == (body.get("parallel_tool_calls") is False)
    else:
        assert schema is None


def assert_parameters(body: dict[str, Any], result: VllmResult) -> None:
    request = result.request
    sampling = request.to_sampling_params(16, {})
    if "top_logprobs" in body:
        assert sampling.logprobs == body["top_logprobs"]
    elif LOGPROBS_INCLUDE in body.get("include", []):
        assert sampling.logprobs is not None
    else:
        assert sampling.logprobs is None
    kwargs = request.build_chat_params(None, "string").chat_template_kwargs
    assert kwargs.get("reasoning_effort") == (body.get("reasoning") or {}).get("effort")
    if "max_output_tokens" in body:
        with warnings.catch_warnings():  # reading max_tokens warns; vLLM reads it all the same
            warnings.simplefilter("ignore", DeprecationWarning)
            caps = (request.max_tokens, request.max_completion_tokens)
        assert body["max_output_tokens"] in caps
    fmt = (body.get("text") or {}).get("format", {})
    if fmt.get("type") == "json_schema":
        assert sampling.structured_outputs.json == fmt["schema"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("name", list(cases()))
async def test_vllm_takes_what_the_bridge_sends_for_every_corpus_body(
    make_gateway: GatewayFactory, stub: StubState, vllm_chat: VllmChat, name: str, stream: bool
) -> None:
    body = cases()[name]
    gateway = await make_gateway(responses=BRIDGE)
    response = await gateway.post("/v1/responses", json={**body, "stream": stream})
    assert response.status == 200, await response.text()
    await response.read()
    received = stub.requests[-1]
    assert received.path == "/v1/chat/completions"
    result = await vllm_chat(json.loads(received.body))
    assert result.request.stream is stream
    assert_clips_and_images(body, result)
    assert_calls(body, result)
    assert_tool_choice(body, result)
    assert_parameters(body, result)
