"""Where vLLM 0.33 and 0.34 differ in what they take or answer, and what the gateway does.

Each test states both versions' behaviour and runs against the one installed:
- `tools: []` on chat: 0.33 refuses it (400, param `tools`); 0.34 takes it as no tools. The
  bridge never sends an empty list, so a Responses body with `tools: []` works on both.
- A chat answer: 0.33 writes `message.annotations: null` and `usage.prompt_tokens_details:
  null`; 0.34 leaves both out. The bridge answers the same Responses object for either.
- A `file://` URL without `--allowed-local-media-path`: 0.33 raises a RuntimeError (500
  InternalServerError); 0.34 a VLLMValidationError (400). The stub answers 0.34's 400.
- A named `tool_choice` naming no tool: 0.34's message names the tool; both 400 `tool_choice`.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.vllm_compat.versions import is_034, require_vllm

vllm = require_vllm()
V034 = is_034(vllm)

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from vllm.entrypoints.openai.chat_completion.protocol import (
        ChatCompletionRequest,
        ChatCompletionResponse,
        ChatCompletionResponseChoice,
        ChatMessage,
    )
    from vllm.entrypoints.serve.engine.protocol import UsageInfo
    from vllm.entrypoints.serve.exception_handling.error_response import create_error_response
    from vllm.exceptions import VLLMValidationError

from gateway.app import create_app  # noqa: E402
from gateway.stub_upstream import StubState, create_stub_app  # noqa: E402
from tests.conftest import GatewayFactory, gateway_config  # noqa: E402
from tests.vllm_compat.conftest import VllmChat, starlette_json  # noqa: E402

BRIDGE = {"audio": "chat_bridge"}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "Hi."}], **fields}


# --- what they take --------------------------------------------------------------------------


@pytest.mark.parametrize("choice", [None, "auto", "required", "none"])
def test_an_empty_tools_list_is_refused_by_033_and_no_tools_for_034(choice: str | None) -> None:
    body = chat(tools=[], **({} if choice is None else {"tool_choice": choice}))
    if not V034:
        with pytest.raises(VLLMValidationError, match="`tools` must not be an empty array"):
            ChatCompletionRequest.model_validate(body)
        return
    request = ChatCompletionRequest.model_validate(body)
    assert (request.tools, request.tool_choice) == (None, "none")


async def test_the_bridge_sends_no_empty_tools_list(
    make_gateway: GatewayFactory, stub: StubState, vllm_chat: VllmChat
) -> None:
    gateway = await make_gateway(responses=BRIDGE)
    body = {
        "model": "stub-audio-model",
        "input": "Transcribe the audio.",
        "metadata": {"audio_path": "a.wav"},
        "tools": [],
        "tool_choice": "auto",
    }
    response = await gateway.post("/v1/responses", json=body)
    assert response.status == 200, await response.text()
    sent = json.loads(stub.requests[-1].body)
    assert "tools" not in sent and "tool_choice" not in sent
    assert (await vllm_chat(sent)).request.tools is None


def test_a_named_tool_choice_naming_no_tool_is_400_tool_choice_in_both() -> None:
    body = chat(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}})
    with pytest.raises(VLLMValidationError) as caught:
        ChatCompletionRequest.model_validate(body)
    assert caught.value.parameter == "tool_choice"
    assert ("`nope`" in str(caught.value)) is V034


async def test_a_local_file_without_the_flag_is_500_in_033_and_400_in_034(
    make_vllm_chat: Callable[[str | None], VllmChat], audio_dir: Path
) -> None:
    url = (audio_dir / "a.wav").as_uri()
    body = chat(
        messages=[{"role": "user", "content": [{"type": "audio_url", "audio_url": {"url": url}}]}]
    )
    with pytest.raises(Exception, match="--allowed-local-media-path") as caught:
        await make_vllm_chat(None)(body)
    error = create_error_response(caught.value)
    assert (error.error.code, type(caught.value)) == (
        (400, VLLMValidationError) if V034 else (500, RuntimeError)
    )
    async with TestClient(TestServer(create_stub_app(None))) as stub:
        answer = await stub.post("/v1/chat/completions", json=body)
        assert answer.status == 400  # the stub answers as 0.34 does
        if V034:
            assert await answer.text() == starlette_json(error)


# --- what they answer ------------------------------------------------------------------------


def vllm_answer(model: str) -> dict[str, Any]:
    """A chat answer as this vLLM writes it (`JSONResponse(content=response.model_dump())`)."""
    message = ChatMessage(role="assistant", content="A tone.")
    choice = ChatCompletionResponseChoice(index=0, message=message, finish_reason="stop")
    usage = UsageInfo(prompt_tokens=5, completion_tokens=2, total_tokens=7)
    return ChatCompletionResponse(model=model, choices=[choice], usage=usage).model_dump()


def test_033_writes_null_annotations_and_prompt_token_details_and_034_leaves_them_out() -> None:
    answer = vllm_answer("m")
    message, usage = answer["choices"][0]["message"], answer["usage"]
    if V034:
        assert "annotations" not in message and "prompt_tokens_details" not in usage
    else:
        assert message["annotations"] is None and usage["prompt_tokens_details"] is None


@pytest.fixture
async def vllm_shaped_upstream() -> AsyncIterator[TestServer]:
    """A real upstream answering every chat request with this vLLM's own answer model."""

    async def answer(request: web.Request) -> web.Response:
        return web.json_response(vllm_answer((await request.json())["model"]))

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    async with TestServer(app) as server:
        yield server


async def test_the_bridge_reads_this_versions_answer(
    vllm_shaped_upstream: TestServer, audio_dir: Path
) -> None:
    upstream = str(vllm_shaped_upstream.make_url("")).rstrip("/")
    config = gateway_config(upstream, audio_dir, responses=BRIDGE)
    async with TestClient(TestServer(create_app(config))) as gateway:
        body = {"model": "m", "input": "Transcribe.", "metadata": {"audio_path": "a.wav"}}
        response = await gateway.post("/v1/responses", json=body)
        assert response.status == 200, await response.text()
        answer = await response.json()
    assert answer["status"] == "completed"
    [message] = [item for item in answer["output"] if item["type"] == "message"]
    assert [part["text"] for part in message["content"]] == ["A tone."]
    assert answer["usage"]["input_tokens"] == 5 and answer["usage"]["output_tokens"] == 2
    assert answer["usage"]["input_tokens_details"]["cached_tokens"] == 0
