"""Chunked requests streamed, through the Responses bridge, failing, and abandoned: one
stream per request whatever the pieces do, the failing piece named, the others cancelled."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy
import pytest
from aiohttp.test_utils import TestServer
from openai import AsyncOpenAI

from gateway.stub_upstream.window import Action, HeardClip, ModelWindow, window_key
from tests.chunking_helpers import (
    CHUNKING,
    assert_pieces_are_the_clip,
    heard,
    pcm_digest,
    post_chat,
    windowed_stub,
    write_long_clips,
)
from tests.conftest import gateway_error, no_blocking_calls

TAIL = "piece 4 of 4 (9.000-10.400 s of metadata.audio_path 'long.wav')"
BOUND_SECONDS = 10.0


@pytest.fixture
async def stub_server(audio_dir: Path) -> AsyncIterator[TestServer]:
    async for server in windowed_stub(audio_dir):
        yield server


@pytest.fixture
def window(stub_server: TestServer) -> ModelWindow:
    return stub_server.app[window_key]


@pytest.fixture
def long_pcm(audio_dir: Path) -> numpy.ndarray:
    return write_long_clips(audio_dir)


@pytest.fixture
async def chunking(make_gateway: Any) -> Any:
    return await make_gateway(chunking=CHUNKING)


@pytest.fixture
async def sdk(chunking: Any) -> AsyncIterator[AsyncOpenAI]:
    base_url = str(chunking.make_url("/v1"))
    async with AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=10) as client:
        yield client


async def poll(condition: Any) -> None:
    async with asyncio.timeout(BOUND_SECONDS):
        while not condition():
            await asyncio.sleep(0.01)


def sse_data(text: str) -> list[str]:
    return [line[6:] for line in text.split("\n") if line.startswith("data: ")]


def fail_the_tail(status: int = 500, others_delay: float = 0.0) -> Any:
    """A rule: the last piece (the only one under 3 s) fails, the others wait first."""

    def rule(clips: list[HeardClip], arrival: int) -> Action:
        if clips[0].frames < 48000:
            return Action(delay_seconds=0.05, fail_status=status)
        return Action(delay_seconds=others_delay)

    return rule


# --- streamed -------------------------------------------------------------------------------


@pytest.mark.parametrize("include_usage", [True, False])
async def test_one_stream_in_piece_order(
    chunking: Any, long_pcm: numpy.ndarray, window: ModelWindow, include_usage: bool
) -> None:
    window.rule = lambda clips, arrival: Action(delay_seconds=0.3 - 0.1 * arrival)
    options = {"stream_options": {"include_usage": True}} if include_usage else {}
    response = await post_chat(chunking, stream=True, **options)
    assert response.status == 200
    assert response.content_type == "text/event-stream"
    data = sse_data(await response.text())
    assert data[-1] == "[DONE]" and data.count("[DONE]") == 1
    chunks = [json.loads(item) for item in data[:-1]]
    assert len({chunk["id"] for chunk in chunks}) == 1
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]
    assert [delta["role"] for delta in deltas if "role" in delta] == ["assistant"]
    text = "".join(delta.get("content") or "" for delta in deltas)
    assert_pieces_are_the_clip(heard(text), long_pcm)
    reasons = [chunk["choices"][0]["finish_reason"] for chunk in chunks if chunk["choices"]]
    assert reasons[-1] == "stop" and not any(reasons[:-1])
    usage = [chunk for chunk in chunks if chunk.get("usage")]
    if include_usage:
        assert usage == [chunks[-1]] and chunks[-1]["choices"] == []
        assert chunks[-1]["usage"] == {
            "prompt_tokens": 4,
            "completion_tokens": 4,
            "total_tokens": 8,
        }
    else:
        assert usage == []


async def test_the_sdk_streams_the_merged_answer(sdk: AsyncOpenAI, long_pcm: numpy.ndarray) -> None:
    stream = await sdk.chat.completions.create(
        model="stub-audio-model",
        messages=[{"role": "user", "content": "Transcribe the audio."}],
        metadata={"audio_path": "long.wav"},
        stream=True,
        stream_options={"include_usage": True},
    )
    parts, usage = [], None
    async for chunk in stream:
        parts += [choice.delta.content or "" for choice in chunk.choices]
        usage = chunk.usage or usage
    assert_pieces_are_the_clip(heard("".join(parts)), long_pcm)
    assert usage is not None and usage.total_tokens == 8


# --- the Responses bridge -------------------------------------------------------------------


async def test_bridge_not_streamed(sdk: AsyncOpenAI, long_pcm: numpy.ndarray) -> None:
    response = await sdk.responses.create(
        model="stub-audio-model", input="Transcribe the audio.", metadata={"audio_path": "long.wav"}
    )
    assert response.status == "completed"
    assert_pieces_are_the_clip(heard(response.output_text), long_pcm)
    assert response.usage is not None and response.usage.total_tokens == 8


async def test_bridge_streamed(
    sdk: AsyncOpenAI, long_pcm: numpy.ndarray, window: ModelWindow
) -> None:
    window.rule = lambda clips, arrival: Action(delay_seconds=0.3 - 0.1 * arrival)
    stream = await sdk.responses.create(
        model="stub-audio-model",
        input="Transcribe the audio.",
        metadata={"audio_path": "long.wav"},
        stream=True,
    )
    events = [event async for event in stream]
    assert [e.type for e in events].count("response.completed") == 1
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert_pieces_are_the_clip(heard(deltas), long_pcm)
    final = events[-1].response
    assert final.output_text == deltas and final.usage is not None
    assert final.usage.total_tokens == 8


async def test_bridge_refuses_a_structured_format_naming_text_format(
    chunking: Any, stub: Any, long_pcm: numpy.ndarray
) -> None:
    body = {
        "model": "m",
        "input": "Transcribe.",
        "metadata": {"audio_path": "long.wav"},
        "text": {"format": {"type": "json_object"}},
    }
    error = await gateway_error(await chunking.post("/v1/responses", json=body), 400, "text.format")
    assert error["code"] == "chunking_unsupported" and stub.request_count == 0


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "function", "name": "f", "parameters": {}}]}, "tools"),
        ({"include": ["message.output_text.logprobs"]}, "include"),
        ({"top_logprobs": 2}, "top_logprobs"),
    ],
)
async def test_bridge_refuses_tools_and_logprobs_on_a_split_clip(
    chunking: Any, stub: Any, long_pcm: numpy.ndarray, fields: dict[str, Any], param: str
) -> None:
    """The pieces' tool calls and log probabilities cannot be merged: refused, named as the
    client wrote them."""
    body = {"model": "m", "input": "Transcribe.", "metadata": {"audio_path": "long.wav"}, **fields}
    error = await gateway_error(await chunking.post("/v1/responses", json=body), 400, param)
    assert error["code"] == "chunking_unsupported" and stub.request_count == 0


# --- failures -------------------------------------------------------------------------------


async def test_a_failing_piece_fails_the_request_and_cancels_the_others(
    chunking: Any, long_pcm: numpy.ndarray, window: ModelWindow
) -> None:
    window.rule = fail_the_tail(500, others_delay=30)
    response = await post_chat(chunking)
    assert response.status == 500
    error = (await response.json())["error"]
    assert error["message"].startswith(f"{TAIL}: stub failure")
    assert error["code"] == 500
    await poll(lambda: window.cancelled == 3 and window.in_flight == 0)


async def test_a_piece_that_times_out_is_the_relays_504_naming_it(
    make_gateway: Any, long_pcm: numpy.ndarray, window: ModelWindow
) -> None:
    window.rule = lambda clips, arrival: Action(delay_seconds=30 if clips[0].frames < 48000 else 0)
    gateway = await make_gateway(chunking=CHUNKING, upstream={"read_timeout_seconds": 0.5})
    error = await gateway_error(await post_chat(gateway), 504, None)
    assert error["code"] == "upstream_timeout" and error["message"].startswith(TAIL)


async def test_a_model_that_refuses_long_audio_fails_each_piece_with_its_400(
    make_gateway: Any, long_pcm: numpy.ndarray, window: ModelWindow
) -> None:
    window.mode, window.seconds = "refuse", 2.0  # pieces are 3 s: every one is refused
    gateway = await make_gateway(chunking={**CHUNKING, "max_concurrent_chunks": 1})
    response = await post_chat(gateway)
    assert response.status == 400
    error = (await response.json())["error"]
    assert error["message"] == (
        "piece 1 of 4 (0.000-3.000 s of metadata.audio_path 'long.wav'): Audio duration 3.00s "
        "exceeds the maximum supported duration of 2s for this model."
    )


async def test_streamed_failure_before_any_content_is_an_error_answer(
    chunking: Any, long_pcm: numpy.ndarray, window: ModelWindow
) -> None:
    window.rule = fail_the_tail(503, others_delay=30)
    response = await post_chat(chunking, stream=True)
    assert response.status == 503
    assert (await response.json())["error"]["message"].startswith(TAIL)
    await poll(lambda: window.cancelled == 3)


async def test_streamed_failure_after_content_cuts_the_stream(
    chunking: Any, long_pcm: numpy.ndarray, window: ModelWindow
) -> None:
    def rule(clips: list[HeardClip], arrival: int) -> Action:
        if clips[0].frames < 48000:
            return Action(delay_seconds=0.3, fail_status=500)  # after piece 1 was relayed
        first = clips[0].pcm_sha256 == heard_first[0]
        return Action(delay_seconds=0.0 if first else 30)

    heard_first = [pcm_digest(long_pcm[:48000])]
    window.rule = rule
    response = await post_chat(chunking, stream=True)
    assert response.status == 200
    first = await asyncio.wait_for(response.content.readuntil(b"\n\n"), BOUND_SECONDS)
    assert b'"role"' in first
    with pytest.raises(aiohttp.ClientPayloadError):
        await asyncio.wait_for(response.read(), BOUND_SECONDS)
    await poll(lambda: window.cancelled == 2)


@pytest.mark.parametrize("route", ["chat", "bridge"])
async def test_an_in_stream_error_after_content_is_relayed_named_then_the_stream_ends(
    chunking: Any, long_pcm: numpy.ndarray, window: ModelWindow, route: str
) -> None:
    first = pcm_digest(long_pcm[:48000])

    def rule(clips: list[HeardClip], arrival: int) -> Action:
        if clips[0].frames < 48000:
            return Action(delay_seconds=0.3, stream_error=True)  # after piece 1 was relayed
        return Action(delay_seconds=0.0 if clips[0].pcm_sha256 == first else 30)

    window.rule = rule
    if route == "chat":
        response = await post_chat(chunking, stream=True)
    else:
        body = {"model": "m", "input": "t", "metadata": {"audio_path": "long.wav"}}
        response = await chunking.post("/v1/responses", json={**body, "stream": True})
    assert response.status == 200
    data = sse_data(await asyncio.wait_for(response.text(), BOUND_SECONDS))
    if route == "chat":
        assert data[-1] == "[DONE]"
        error = json.loads(data[-2])["error"]
        assert error["message"] == f"{TAIL}: stub engine failure" and error["code"] == 500
        assert heard(json.loads(data[1])["choices"][0]["delta"]["content"])  # piece 1 came
    else:
        events = [json.loads(item) for item in data]
        assert [e["type"] for e in events][-2:] == ["error", "response.failed"]
        assert events[-1]["response"]["error"]["message"] == f"{TAIL}: stub engine failure"
    await poll(lambda: window.cancelled == 2)


async def test_an_in_stream_error_before_content_is_an_error_answer(
    chunking: Any, long_pcm: numpy.ndarray, window: ModelWindow
) -> None:
    def rule(clips: list[HeardClip], arrival: int) -> Action:
        if clips[0].frames < 48000:
            return Action(stream_error=True)
        return Action(delay_seconds=30)

    window.rule = rule
    response = await post_chat(chunking, stream=True)
    assert response.status == 500
    error = (await response.json())["error"]
    assert error["message"] == f"{TAIL}: stub engine failure"


# --- the client goes away -------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_client_disconnect_cancels_every_piece(
    chunking: Any, long_pcm: numpy.ndarray, window: ModelWindow, stream: bool
) -> None:
    window.delay_seconds = 30
    request = asyncio.create_task(post_chat(chunking, stream=stream))
    await poll(lambda: window.in_flight == 4)
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    await poll(lambda: window.cancelled == 4 and window.in_flight == 0)


async def test_no_chunked_answer_blocks_the_event_loop(
    chunking: Any, long_pcm: numpy.ndarray
) -> None:
    """Cut, bodies, fan-out and merge, streamed or not, chat or bridged: nothing blocks."""
    bridged = {"model": "m", "input": "Transcribe.", "metadata": {"audio_path": "long.wav"}}
    with no_blocking_calls():
        for stream in (False, True):
            response = await post_chat(chunking, stream=stream)
            assert response.status == 200, await response.text()
            response = await chunking.post("/v1/responses", json={**bridged, "stream": stream})
            assert response.status == 200, await response.text()
