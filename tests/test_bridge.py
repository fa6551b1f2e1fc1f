"""The Responses -> chat bridge (`[responses] audio = "chat_bridge"`, the default), end to end:
the official openai SDK's `client.responses.create(...)` through the gateway, plain and
streamed, against the stub, which (like vLLM 0.33) refuses audio parts on /v1/responses and
proves on /v1/chat/completions that the audio bytes arrived (the sha256 it decoded)."""

from __future__ import annotations

import asyncio
import base64
import json
import wave
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from openai import AsyncOpenAI

from gateway.bridge import UNSUPPORTED
from gateway.stub_upstream import StubState
from tests.conftest import (
    b64_of,
    forwarded_json,
    gateway_error,
    gateway_metrics,
    read_event,
    sha256_of,
)

Client = TestClient[web.Request, web.Application]
MODEL = "stub-audio-model"
CHAT_PATH = "/v1/chat/completions"
STREAM_ORDER = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


@pytest.fixture
async def client(gateway: Client) -> AsyncIterator[AsyncOpenAI]:
    base_url = str(gateway.make_url("/v1"))
    async with AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=10) as sdk:
        yield sdk


def stub_answer(*paths: Path) -> str:
    """What the stub answers for these clips: container, size, duration and sha256 prefix."""
    described = []
    for path in paths:
        with wave.open(str(path)) as clip:
            seconds = clip.getnframes() / clip.getframerate()
        size = path.stat().st_size
        described.append(f"wav {size} B {seconds:.2f} s sha256={sha256_of(path)[:12]}")
    return "; ".join(described)


def arrived_on_chat(stub: StubState, *paths: Path) -> None:
    """The last upstream request was a chat completion whose audio parts hold these files'
    exact bytes, and the stub decoded exactly them."""
    assert stub.requests[-1].path == CHAT_PATH
    parts = forwarded_json(stub)["messages"][-1]["content"]
    urls = [part["audio_url"]["url"] for part in parts if part["type"] == "audio_url"]
    sent = [base64.b64decode(url.partition(";base64,")[2]) for url in urls]
    assert sent == [path.read_bytes() for path in paths]
    assert stub.last_report is not None
    assert [clip["sha256"] for clip in stub.last_report["clips"]] == list(map(sha256_of, paths))


# --- the openai SDK, plain and streamed ------------------------------------------------------


async def test_sdk_response_carries_what_the_stub_answered(
    client: AsyncOpenAI, stub: StubState, audio_dir: Path
) -> None:
    response = await client.responses.create(
        model=MODEL, input="Transcribe the audio.", metadata={"audio_path": "a.wav", "run": "7"}
    )
    arrived_on_chat(stub, audio_dir / "a.wav")
    assert response.output_text == stub_answer(audio_dir / "a.wav")
    assert (response.object, response.status, response.model) == ("response", "completed", MODEL)
    assert response.id.startswith("resp_")
    assert response.incomplete_details is None
    assert [item.type for item in response.output] == ["message"]
    assert response.metadata == {"run": "7"}  # the sidechannel key is consumed
    assert response.usage is not None
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    assert response.usage.output_tokens == len(response.output_text.split(" "))


async def test_sdk_stream_deltas_join_to_the_answer(
    client: AsyncOpenAI, stub: StubState, audio_dir: Path
) -> None:
    stub.hold.set()
    names = ["c.wav", "a.wav"]
    stream = await client.responses.create(
        model=MODEL,
        input="Transcribe.",
        metadata={"audio_paths": json.dumps(names)},
        stream=True,
    )
    events = [event async for event in stream]
    paths = [audio_dir / name for name in names]
    arrived_on_chat(stub, *paths)
    kinds = [event.type for event in events]
    deltas = kinds.count("response.output_text.delta")
    assert deltas > 1
    assert kinds == STREAM_ORDER[:4] + ["response.output_text.delta"] * deltas + STREAM_ORDER[5:]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response  # type: ignore[union-attr]
    assert text == final.output_text == stub_answer(*paths)
    assert final.status == "completed"
    assert final.usage is not None and final.usage.output_tokens == deltas
    assert stub.streams_finished == 1


async def test_events_are_relayed_as_the_chunks_arrive(gateway: Client, stub: StubState) -> None:
    body = {"model": MODEL, "input": "x", "metadata": {"audio_path": "b.wav"}, "stream": True}
    # the stub holds its stream after the first content delta until released
    response = await gateway.post("/v1/responses", json=body, headers={"X-Stub-Hold": "2"})
    try:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert response.headers["X-Accel-Buffering"] == "no"
        async with asyncio.timeout(5):
            first = [await read_event(response.content) for _ in range(5)]
        assert stub.streams_finished == 0
        assert [event["event"] for event in first] == STREAM_ORDER[:5]
        assert [event["data"]["type"] for event in first] == STREAM_ORDER[:5]
        assert first[4]["data"]["delta"] == "wav "
    finally:
        stub.hold.set()
    async with asyncio.timeout(5):
        rest = []
        while event := await read_event(response.content):
            rest.append(event)
    assert [event["event"] for event in rest][-4:] == STREAM_ORDER[-4:]
    assert stub.streams_finished == 1


async def test_an_upstream_that_stalls_mid_stream_cuts_the_client_off(
    make_gateway: Any, stub: StubState
) -> None:
    # The events so far are sent: a clean end would look like a complete answer, so the
    # connection is cut instead.
    gateway = await make_gateway(upstream={"read_timeout_seconds": 0.3})
    body = {"model": MODEL, "input": "x", "metadata": {"audio_path": "b.wav"}, "stream": True}
    response = await gateway.post("/v1/responses", json=body, headers={"X-Stub-Hold": "2"})
    assert response.status == 200
    with pytest.raises(aiohttp.ClientPayloadError):
        async with asyncio.timeout(5):
            await response.read()
    assert stub.streams_finished == 0


async def test_a_client_that_leaves_mid_stream_cancels_the_upstream_stream(
    gateway: Client, stub: StubState
) -> None:
    body = {"model": MODEL, "input": "x", "metadata": {"audio_path": "a.wav"}, "stream": True}
    response = await gateway.post("/v1/responses", json=body, headers={"X-Stub-Hold": "1"})
    async with asyncio.timeout(5):
        assert (await read_event(response.content))["event"] == "response.created"
    response.close()
    await asyncio.sleep(0.3)
    stub.hold.set()  # a stream still attached upstream would now run to its end
    await asyncio.sleep(0.1)
    assert stub.streams_finished == 0
    assert (await gateway.get("/v1/models")).status == 200


# --- status and output items -----------------------------------------------------------------


async def test_an_answer_cut_at_max_output_tokens_is_incomplete(
    client: AsyncOpenAI, stub: StubState, audio_dir: Path
) -> None:
    response = await client.responses.create(
        model=MODEL, input="x", metadata={"audio_path": "a.wav"}, max_output_tokens=2
    )
    assert forwarded_json(stub)["max_tokens"] == 2
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == " ".join(stub_answer(audio_dir / "a.wav").split(" ")[:2])
    assert response.max_output_tokens == 2


async def test_a_streamed_answer_cut_short_ends_with_response_incomplete(
    client: AsyncOpenAI, stub: StubState
) -> None:
    stub.hold.set()
    stream = await client.responses.create(
        model=MODEL, input="x", metadata={"audio_path": "a.wav"}, max_output_tokens=3, stream=True
    )
    events = [event async for event in stream]
    assert events[-1].type == "response.incomplete"
    final = events[-1].response
    assert final.status == "incomplete"
    assert final.incomplete_details is not None
    assert final.incomplete_details.reason == "max_output_tokens"
    assert len(final.output_text.split(" ")) == 3


async def test_reasoning_becomes_a_reasoning_item(client: AsyncOpenAI, audio_dir: Path) -> None:
    thought = "a short tone, so say what it is"
    response = await client.responses.create(
        model=MODEL,
        input="x",
        metadata={"audio_path": "b.wav"},
        extra_headers={"X-Stub-Reasoning": thought},
    )
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and message.type == "message"
    assert reasoning.content is not None
    assert [part.text for part in reasoning.content] == [thought]
    assert response.output_text == stub_answer(audio_dir / "b.wav")


async def test_streamed_reasoning_comes_before_the_message(
    client: AsyncOpenAI, stub: StubState, audio_dir: Path
) -> None:
    stub.hold.set()
    thought = "listen first then answer"
    stream = await client.responses.create(
        model=MODEL,
        input="x",
        metadata={"audio_path": "b.wav"},
        stream=True,
        extra_headers={"X-Stub-Reasoning": thought},
    )
    events = [event async for event in stream]
    pieces = [e.delta for e in events if e.type == "response.reasoning_text.delta"]
    assert "".join(pieces) == thought
    added = [e.item for e in events if e.type == "response.output_item.added"]
    assert [(item.type, e_index) for e_index, item in enumerate(added)] == [
        ("reasoning", 0),
        ("message", 1),
    ]
    final = events[-1].response  # type: ignore[union-attr]
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert final.output_text == stub_answer(audio_dir / "b.wav")
    assert [event.sequence_number for event in events] == list(range(len(events)))


# --- the request mapping ---------------------------------------------------------------------


async def test_the_chat_request_the_upstream_receives(
    gateway: Client, stub: StubState, audio_dir: Path
) -> None:
    carried = {"temperature": 0.2, "top_p": 0.9, "user": "u-1", "seed": 3, "top_k": 5}
    body = {
        "model": MODEL,
        "instructions": "Answer in one line.",
        "input": [
            {"role": "developer", "content": "Be exact."},
            {"type": "message", "role": "user", "content": "earlier"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "noted"}]},
            {"role": "user", "content": [{"type": "input_text", "text": "What is it?"}]},
        ],
        "metadata": {"audio_path": "c.wav", "trace": "t1"},
        "max_output_tokens": 50,
        **carried,
        "store": True,  # ignored: cannot change the answer
        "tools": [],
    }
    response = await gateway.post("/v1/responses", json=body, headers={"Accept-Encoding": "gzip"})
    assert response.status == 200, await response.text()
    assert "Accept-Encoding" not in stub.requests[-1].headers  # the gateway reads the answer
    uri = f"data:audio/wav;base64,{b64_of(audio_dir / 'c.wav')}"
    audio = {"type": "audio_url", "audio_url": {"url": uri}}
    assert forwarded_json(stub) == {
        "model": MODEL,
        "messages": [
            # instructions and the leading developer message folded into one
            {"role": "system", "content": "Answer in one line.\n\nBe exact."},
            {"role": "user", "content": "earlier"},
            {"role": "assistant", "content": "noted"},
            {"role": "user", "content": [audio, {"type": "text", "text": "What is it?"}]},
        ],
        "metadata": {"trace": "t1"},
        "max_tokens": 50,
        **carried,
    }
    answer = await response.json()
    assert (answer["instructions"], answer["temperature"], answer["user"]) == (
        "Answer in one line.",
        0.2,
        "u-1",
    )


async def test_chat_part_and_part_uuid_apply_to_bridged_rows(
    make_gateway: Any, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(splice={"chat_part": "input_audio", "part_uuid": True})
    body = {"model": MODEL, "input": "Say it.", "metadata": {"audio_path": "b.wav"}}
    response = await gateway.post("/v1/responses", json=body)
    assert response.status == 200, await response.text()
    clip = audio_dir / "b.wav"
    assert forwarded_json(stub)["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "input_audio",
                    "input_audio": {"data": b64_of(clip), "format": "wav"},
                    "uuid": sha256_of(clip),
                },
                {"type": "text", "text": "Say it."},
            ],
        }
    ]


FUNCTION = {"type": "function", "name": "f", "parameters": {}}
UNSUPPORTED_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "hosted-tool": ({"tools": [FUNCTION, {"type": "web_search"}]}, "tools[1].type"),
    "custom-tool": ({"tools": [{"type": "custom", "name": "g"}]}, "tools[0].type"),
    "tool-field": ({"tools": [{**FUNCTION, "output_schema": {}}]}, "tools[0].output_schema"),
    "allowed-tools": (
        {"tools": [FUNCTION], "tool_choice": {"type": "allowed_tools", "mode": "auto"}},
        "tool_choice.type",
    ),
    "max_tool_calls": ({"max_tool_calls": 2}, "max_tool_calls"),
    "previous_response_id": ({"previous_response_id": "resp_1"}, "previous_response_id"),
    "reasoning-summary": ({"reasoning": {"effort": "low", "summary": "auto"}}, "reasoning.summary"),
    "conversation": ({"conversation": "conv_1"}, "conversation"),
    "background": ({"background": True}, "background"),
    "include": ({"include": ["reasoning.encrypted_content"]}, "include[0]"),
    "prompt": ({"prompt": {"id": "pmpt_1"}}, "prompt"),
    "unknown-field": ({"n": 2}, "n"),
    "item-reference": ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
    "call-namespace": (
        {
            "input": [
                {
                    "type": "function_call",
                    "call_id": "c",
                    "name": "f",
                    "arguments": "{}",
                    "namespace": "ns",
                }
            ]
        },
        "input[0].namespace",
    ),
    "message-phase": (
        {"input": [{"role": "assistant", "content": "a", "phase": "commentary"}]},
        "input[0].phase",
    ),
    "encrypted-reasoning": (
        {"input": [{"type": "reasoning", "summary": [], "encrypted_content": "gAAA"}]},
        "input[0].encrypted_content",
    ),
    "image-file-id": (
        {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file_1"}]}]},
        "input[0].content[0].file_id",
    ),
    "output-image": (
        {
            "input": [
                {
                    "type": "function_call_output",
                    "call_id": "c",
                    "output": [{"type": "input_image", "image_url": "x"}],
                }
            ]
        },
        "input[0].output[0].type",
    ),
    "nested-unknown": (
        {"input": [{"role": "user", "content": [{"type": "input_text", "text": "a", "foo": 1}]}]},
        "input[0].content[0].foo",
    ),
    "verbosity": ({"text": {"verbosity": "low"}}, "text.verbosity"),
    "text-format": ({"text": {"format": {"type": "grammar"}}}, "text.format"),
    "text-format-key": ({"text": {"format": {"type": "text", "x": 1}}}, "text.format.x"),
    "json-object-key": ({"text": {"format": {"type": "json_object", "x": 1}}}, "text.format.x"),
    "json-schema-key": (
        {"text": {"format": {"type": "json_schema", "name": "n", "schema": {}, "x": 1}}},
        "text.format.x",
    ),
}


@pytest.mark.parametrize("case", list(UNSUPPORTED_CASES))
async def test_what_the_bridge_cannot_carry_is_refused(
    gateway: Client, stub: StubState, case: str
) -> None:
    fields, param = UNSUPPORTED_CASES[case]
    body = {"model": MODEL, "input": "x", "metadata": {"audio_path": "a.wav"}, **fields}
    error = await gateway_error(await gateway.post("/v1/responses", json=body), 400, param)
    assert error["code"] == UNSUPPORTED
    assert param in error["message"]
    assert stub.request_count == 0


async def test_the_sdk_sees_the_refusal(client: AsyncOpenAI, stub: StubState) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        await client.responses.create(
            model=MODEL, input="x", metadata={"audio_path": "a.wav"}, previous_response_id="r"
        )
    assert (raised.value.code, raised.value.param) == (UNSUPPORTED, "previous_response_id")
    assert stub.request_count == 0


async def test_sidechannel_errors_are_the_chat_routes(gateway: Client, stub: StubState) -> None:
    body = {"model": MODEL, "input": "x", "metadata": {"audio_path": "missing.wav"}}
    chat = {"model": MODEL, "messages": [], "metadata": {"audio_path": "missing.wav"}}
    param = "metadata.audio_path"
    error = await gateway_error(await gateway.post("/v1/responses", json=body), 404, param)
    assert error == await gateway_error(await gateway.post(CHAT_PATH, json=chat), 404, param)
    assert stub.request_count == 0


# --- what is not bridged ---------------------------------------------------------------------


async def test_upstream_errors_are_relayed_as_they_are(gateway: Client, stub: StubState) -> None:
    for stream in (False, True):
        body = {
            "model": MODEL,
            "input": "x",
            "metadata": {"audio_path": "a.wav"},
            "max_output_tokens": 0,  # vLLM (and the stub) refuse this: 400 on the chat route
            "stream": stream,
        }
        response = await gateway.post("/v1/responses", json=body)
        assert response.status == 400
        error = (await response.json())["error"]
        assert error["type"] == "BadRequestError"  # vLLM's shape, not the gateway's
        assert "max_tokens" in error["message"]
        assert stub.requests[-1].path == CHAT_PATH
    assert stub.rejected == 2


async def test_a_row_without_the_sidechannel_goes_to_responses_untouched(
    gateway: Client, stub: StubState
) -> None:
    raw = b'{"model":"m",  "input":"hello", "tools":[{"type":"function"}], "metadata":{"k":"v"}}'
    response = await gateway.post(
        "/v1/responses", data=raw, headers={"Content-Type": "application/json"}
    )
    assert response.status == 200
    assert (stub.requests[-1].path, stub.requests[-1].body) == ("/v1/responses", raw)
    assert (await response.json())["id"].startswith("resp-stub-")  # the stub's own answer


async def test_bridged_requests_count_under_the_responses_route(gateway: Client) -> None:
    body = {"model": MODEL, "input": "x", "metadata": {"audio_path": "a.wav"}}
    assert (await gateway.post("/v1/responses", json=body)).status == 200
    assert (await gateway.post("/v1/responses", json={**body, "tools": [{}]})).status == 400
    samples = await gateway_metrics(gateway)
    requests = 'audio_gateway_requests_total{route="%s",status="%s"}'
    assert samples[requests % ("responses", "200")] == 1
    assert samples[requests % ("responses", "400")] == 1
    assert requests % ("chat_completions", "200") not in samples
    assert samples['audio_gateway_added_latency_seconds_count{route="responses"}'] == 1
