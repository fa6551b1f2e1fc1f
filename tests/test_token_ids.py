"""vLLM's token-id fields through the gateway: what NeMo Gym's chat path asks for on RL rollouts.

The stub upstream produces vLLM 0.33's `prompt_token_ids`, `choices[].token_ids` and
`logprobs` (`token_id:N` tokens) when asked, counting each clip's audio placeholder tokens in
the prompt; the gateway must hand them to the client byte for byte, streamed or not.
"""

from __future__ import annotations

import json
import math
import re

import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st

from gateway.stub_upstream import StubState
from gateway.stub_upstream.media import ClipReport
from gateway.stub_upstream.tokens import (
    AUDIO_BOS,
    AUDIO_EOS,
    AUDIO_PAD,
    AUDIO_TOKENS_PER_SECOND,
    TokenFields,
    TokenRequest,
    audio_token_count,
    word_token_id,
)
from tests.conftest import GatewayFactory, chat_body, forwarded_json, gateway_error

Client = TestClient[web.Request, web.Application]
CHAT = "/v1/chat/completions"
# What NeMo Gym 0.7.0's vllm_model adds on its chat path with token capture on
# (`return_token_id_information: true`, `request_prompt_and_generation_token_ids: true`).
GYM_CAPTURE = {
    "logprobs": True,
    "top_logprobs": 0,
    "return_tokens_as_token_ids": True,
    "return_token_ids": True,
}


@pytest.fixture
async def gateway(make_gateway: GatewayFactory) -> Client:
    return await make_gateway(sidechannel={"key_prefix": "gateway_"})


def audio_tokens(seconds: float) -> int:
    return math.ceil(seconds * AUDIO_TOKENS_PER_SECOND)


def audio_runs(ids: list[int]) -> list[int]:
    """The lengths of the audio placeholder runs in a prompt, in order."""
    text = " ".join(map(str, ids))
    runs = re.findall(rf"\b{AUDIO_BOS}((?: {AUDIO_PAD})*) {AUDIO_EOS}\b", text)
    return [len(run.split()) for run in runs]


def without_identity(raw: bytes) -> bytes:
    """An answer's bytes minus what differs between two calls (its id and creation time)."""
    return re.sub(rb'"(id|created)": ?("[^"]*"|\d+)', b'"\\1": _', raw)


async def direct(stub_server: TestServer, body: bytes) -> bytes:
    """What the stub answers to `body` when called directly, not through the gateway."""
    async with ClientSession() as session:
        url = stub_server.make_url(CHAT)
        async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
            assert r.status == 200
            return await r.read()


async def test_a_gym_capture_answer_reaches_the_client_byte_for_byte(
    gateway: Client, stub: StubState, stub_server: TestServer
) -> None:
    metadata = {"gateway_audio_paths": '["a.wav", "b.wav"]', "row": "3"}
    response = await gateway.post(CHAT, json=chat_body(metadata, **GYM_CAPTURE))
    assert response.status == 200, await response.text()
    through_gateway = await response.read()
    sent = stub.requests[-1].body
    assert without_identity(through_gateway) == without_identity(await direct(stub_server, sent))

    answer = json.loads(through_gateway)
    assert audio_runs(answer["prompt_token_ids"]) == [audio_tokens(0.25), audio_tokens(0.5)]
    choice = answer["choices"][0]
    entries = choice["logprobs"]["content"]
    # Gym's checks: every token written token_id:N, agreeing with choices[].token_ids
    assert [int(e["token"].removeprefix("token_id:")) for e in entries] == choice["token_ids"]
    assert all(e["top_logprobs"] == [] and e["logprob"] <= 0 for e in entries)
    words = choice["message"]["content"].split(" ")
    assert choice["token_ids"] == [word_token_id(word) for word in words]
    assert answer["usage"]["prompt_tokens"] == len(answer["prompt_token_ids"])
    assert forwarded_json(stub)["metadata"] == {"row": "3"}


async def test_the_audio_comes_before_the_text_in_the_prompt_ids(gateway: Client) -> None:
    body = chat_body({"gateway_audio_path": "c.wav"}, **GYM_CAPTURE)
    answer = await (await gateway.post(CHAT, json=body)).json()
    prompt = answer["prompt_token_ids"]
    text = [word_token_id(word) for word in ["Transcribe", "the", "audio."]]
    audio_end = prompt.index(AUDIO_EOS)
    assert prompt[prompt.index(AUDIO_BOS) + 1 : audio_end] == [AUDIO_PAD] * audio_tokens(0.75)
    assert prompt[audio_end + 1 : audio_end + 1 + len(text)] == text


async def test_a_streamed_answer_reaches_the_client_byte_for_byte(
    gateway: Client, stub: StubState, stub_server: TestServer
) -> None:
    options = {**GYM_CAPTURE, "stream": True, "stream_options": {"include_usage": True}}
    body = chat_body({"gateway_audio_path": "b.wav"}, **options)
    response = await gateway.post(CHAT, json=body)
    assert response.status == 200
    streamed = await response.read()
    assert streamed == await direct(stub_server, stub.requests[-1].body)

    chunks = [json.loads(event[6:]) for event in streamed.decode().split("\n\n")[:-2]]
    assert [("prompt_token_ids" in chunk) for chunk in chunks] == [True] + [False] * (
        len(chunks) - 1
    )
    assert audio_runs(chunks[0]["prompt_token_ids"]) == [audio_tokens(0.5)]
    deltas = [c["choices"][0] for c in chunks[1:] if c["choices"]]
    generated = [i for d in deltas for i in d["token_ids"]]
    logprob_ids = [int(e["token"][9:]) for d in deltas for e in d["logprobs"]["content"]]
    assert generated == logprob_ids
    whole = await gateway.post(CHAT, json=chat_body({"gateway_audio_path": "b.wav"}, **GYM_CAPTURE))
    answer = await whole.json()
    assert generated == answer["choices"][0]["token_ids"]
    assert chunks[0]["prompt_token_ids"] == answer["prompt_token_ids"]
    # as vLLM: the last token's chunk carries the finish_reason
    assert deltas[-1]["finish_reason"] == "stop"
    assert deltas[-1]["token_ids"] == answer["choices"][0]["token_ids"][-1:]


async def test_top_logprobs_and_decoded_tokens_keep_vllms_shape(gateway: Client) -> None:
    body = chat_body({"gateway_audio_path": "a.wav"}, logprobs=True, top_logprobs=2)
    answer = await (await gateway.post(CHAT, json=body)).json()
    assert answer["prompt_token_ids"] is None and answer["choices"][0]["token_ids"] is None
    (first, *_) = answer["choices"][0]["logprobs"]["content"]
    assert set(first) == {"token", "logprob", "bytes", "top_logprobs"}
    assert first["bytes"] == list(first["token"].encode())
    assert len(first["top_logprobs"]) == 2
    assert first["top_logprobs"][0] == {k: first[k] for k in ("token", "logprob", "bytes")}


async def test_without_the_fields_they_are_null_as_in_vllm(gateway: Client) -> None:
    answer = await (
        await gateway.post(CHAT, json=chat_body({"gateway_audio_path": "a.wav"}))
    ).json()
    assert answer["prompt_token_ids"] is None
    choice = answer["choices"][0]
    assert set(choice) == {
        "index", "message", "logprobs", "finish_reason", "stop_reason", "token_ids"
    }  # fmt: skip
    assert choice["logprobs"] is choice["token_ids"] is choice["stop_reason"] is None


async def test_the_stub_refuses_top_logprobs_without_logprobs_as_vllm_does(
    gateway: Client, stub: StubState
) -> None:
    body = chat_body({"gateway_audio_path": "a.wav"}, top_logprobs=3)
    response = await gateway.post(CHAT, json=body)
    assert response.status == 400
    assert "`logprobs` must be set to true" in (await response.json())["error"]["message"]


async def test_gyms_tokenize_fallback_gets_prompt_ids_without_the_audio(
    gateway: Client, stub: StubState
) -> None:
    """Gym's fallback (`request_prompt_and_generation_token_ids: false`) posts /tokenize with
    the messages only, no metadata: nothing tells the gateway about the audio, so the ids
    differ from the generation's. The recipe asks for the ids inline instead."""
    messages = chat_body()["messages"]
    body = chat_body({"gateway_audio_path": "a.wav"}, **GYM_CAPTURE)
    generation = await (await gateway.post(CHAT, json=body)).json()
    spliced = forwarded_json(stub)["messages"]
    fallback = await (
        await gateway.post("/tokenize", json={"model": "m", "messages": messages})
    ).json()
    assert audio_runs(fallback["tokens"]) == []
    assert fallback["tokens"] != generation["prompt_token_ids"]
    # vLLM's /tokenize of the spliced messages is the generation's prompt: the stub is consistent.
    full = await (await gateway.post("/tokenize", json={"model": "m", "messages": spliced})).json()
    assert full["tokens"] == generation["prompt_token_ids"]
    assert (full["count"], full["token_strs"]) == (len(full["tokens"]), None)


async def test_the_bridge_refuses_vllms_responses_token_output(
    gateway: Client, stub: StubState
) -> None:
    """Evaluation goes through the bridge, training through chat: the bridge refuses the
    Responses route's token output rather than drop it."""
    body = {
        "model": "m",
        "input": "Transcribe.",
        "metadata": {"gateway_audio_path": "a.wav"},
        "enable_response_messages": True,
    }
    response = await gateway.post("/v1/responses", json=body)
    error = await gateway_error(response, 400, "enable_response_messages")
    assert error["code"] == "unsupported_by_audio_bridge"
    assert not stub.requests


# --- the stub's token fields, pure --------------------------------------------------------------

words = st.text(alphabet="abcdefg.,", min_size=1, max_size=6)


def clip_of(seconds: float | None, size: int) -> ClipReport:
    return ClipReport("data", "audio/wav", "wav", size, "0" * 64, seconds, 16_000, 1, None)


@given(
    st.lists(words, min_size=1, max_size=8),
    st.lists(st.tuples(st.none() | st.floats(0.01, 30.0), st.integers(1, 10**6)), max_size=3),
    st.booleans(),
    st.booleans(),
    st.integers(0, 3),
)
def test_streamed_fields_add_up_to_the_whole_answers(
    pieces: list[str],
    clips_spec: list[tuple[float | None, int]],
    as_ids: bool,
    ids: bool,
    top: int,
) -> None:
    clips = [clip_of(seconds, size) for seconds, size in clips_spec]
    content = [{"type": "input_audio", "input_audio": {}} for _ in clips]
    messages = [{"role": "user", "content": [*content, {"type": "text", "text": "Say it."}]}]
    asked = TokenRequest(token_ids=ids, logprobs=True, top_logprobs=top, as_token_ids=as_ids)
    whole = TokenFields(asked, messages, clips, pieces).answer(
        {"choices": [{"index": 0, "message": {}}], "usage": {"completion_tokens": len(pieces)}}
    )
    stream = TokenFields(asked, messages, clips, pieces)
    chunks = [stream.chunk({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})]
    chunks += [stream.chunk({"choices": [{"index": 0, "delta": {"content": p}}]}) for p in pieces]
    chunks.append(stream.chunk({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    choice = whole["choices"][0]
    entries = [e for c in chunks[1:] for e in c["choices"][0]["logprobs"]["content"]]
    assert entries == choice["logprobs"]["content"]
    assert all(len(e["top_logprobs"]) == top for e in entries)
    if as_ids:
        assert [e["token"] for e in entries] == [f"token_id:{word_token_id(p)}" for p in pieces]
    if ids:
        assert [i for c in chunks[1:] for i in c["choices"][0]["token_ids"]] == choice["token_ids"]
        assert chunks[0]["prompt_token_ids"] == whole["prompt_token_ids"]
        expected = [audio_token_count(clip) for clip in clips]
        assert audio_runs(whole["prompt_token_ids"]) == expected
        assert whole["usage"]["prompt_tokens"] == len(whole["prompt_token_ids"])
    else:
        assert "prompt_token_ids" not in whole and "token_ids" not in choice
