"""The pure merge of a split clip's answers, by property: the pieces' texts joined in order,
usage summed, one finish_reason; streamed, the same text with one id, one role chunk and one
usage chunk; every output parsed by the openai SDK's own types. And the refusals."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from gateway.bridge import ChatStreamTranslator, ResponseIds, responses_to_chat
from gateway.chunking.merge import (
    PieceCompletion,
    StreamMerge,
    merge_completions,
    read_completion,
    sum_usage,
)
from gateway.chunking.refusals import CHUNKING_UNSUPPORTED, refuse_unmergeable
from gateway.errors import InvalidRequest

WORDS = st.text(alphabet="abcxyz .,\n", max_size=12)
REASONS = st.sampled_from(["stop", "length", "stop", "content_filter"])


@st.composite
def piece_answers(draw: st.DrawFn) -> dict[str, Any]:
    """A piece as vLLM answers it: its text cut into stream deltas, a reason, its usage."""
    deltas = draw(st.lists(WORDS, max_size=5))
    prompt, completion = draw(st.integers(0, 900)), draw(st.integers(0, 900))
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if draw(st.booleans()):
        usage["prompt_tokens_details"] = {"cached_tokens": draw(st.integers(0, prompt))}
    return {"deltas": deltas, "reason": draw(REASONS), "usage": usage, "id": draw(WORDS)}


def completion(piece: dict[str, Any]) -> dict[str, Any]:
    message = {"role": "assistant", "content": "".join(piece["deltas"]), "tool_calls": []}
    return {
        "id": f"chatcmpl-{piece['id']}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "m",
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": piece["reason"]}
        ],
        "usage": piece["usage"],
    }


def stream(piece: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """The chunks vLLM streams for one piece (the finish reason rides with the last delta)."""
    base = {"id": f"chatcmpl-{piece['id']}", "object": "chat.completion.chunk"}
    base |= {"created": 1_700_000_000, "model": "m"}

    def chunk(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        return {**base, "choices": [choice]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    deltas = piece["deltas"] or [""]
    chunks += [chunk({"content": text}) for text in deltas[:-1]]
    chunks.append(chunk({"content": deltas[-1]}, piece["reason"]))
    if include_usage:
        chunks.append({**base, "choices": [], "usage": piece["usage"]})
    return chunks


def merged_stream(pieces: list[dict[str, Any]], join: str, usage: bool) -> list[dict[str, Any]]:
    merge = StreamMerge(join, usage)
    out = []
    for index, piece in enumerate(pieces):
        for chunk in stream(piece, usage):
            out += merge.piece_chunk(index, chunk)
    return out + merge.finish()


def expected_reason(pieces: list[dict[str, Any]]) -> str:
    reasons = [piece["reason"] for piece in pieces]
    return "length" if "length" in reasons else reasons[-1]


PIECES = st.lists(piece_answers(), min_size=1, max_size=6)
JOINS = st.sampled_from([" ", "", "\n", " | "])


@settings(max_examples=150, deadline=None)
@given(pieces=PIECES, join=JOINS)
def test_merged_completion_joins_in_order_and_sums_usage(pieces: list[Any], join: str) -> None:
    merged = merge_completions([read_completion(completion(p)) for p in pieces], join)
    ChatCompletion.model_validate(merged, strict=False)
    message = merged["choices"][0]["message"]
    assert message["content"] == join.join("".join(p["deltas"]) for p in pieces)
    assert merged["choices"][0]["finish_reason"] == expected_reason(pieces)
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert merged["usage"][key] == sum(p["usage"][key] for p in pieces)
    cached = [p["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0) for p in pieces]
    if any("prompt_tokens_details" in p["usage"] for p in pieces):
        assert merged["usage"]["prompt_tokens_details"]["cached_tokens"] == sum(cached)
    assert merged["id"] == f"chatcmpl-{pieces[0]['id']}"


@settings(max_examples=150, deadline=None)
@given(pieces=PIECES, join=JOINS, usage=st.booleans())
def test_merged_stream_is_one_stream_with_the_same_text(
    pieces: list[Any], join: str, usage: bool
) -> None:
    out = merged_stream(pieces, join, usage)
    for chunk in out:
        ChatCompletionChunk.model_validate(chunk)
    assert {chunk["id"] for chunk in out} == {f"chatcmpl-{pieces[0]['id']}"}
    deltas = [c["choices"][0]["delta"] for c in out if c["choices"]]
    assert [d.get("role") for d in deltas if "role" in d] == ["assistant"]
    assert "".join(d.get("content") or "" for d in deltas) == join.join(
        "".join(p["deltas"]) for p in pieces
    )
    reasons = [c["choices"][0]["finish_reason"] for c in out if c["choices"]]
    assert reasons[-1] == expected_reason(pieces)
    assert all(reason is None for reason in reasons[:-1])
    usage_chunks = [c for c in out if c.get("usage") is not None]
    if usage:
        assert usage_chunks == [out[-1]] and out[-1]["choices"] == []
        total = sum(p["usage"]["total_tokens"] for p in pieces)
        assert out[-1]["usage"]["total_tokens"] == total
    else:
        assert usage_chunks == [] and out[-1]["choices"]


@settings(max_examples=60, deadline=None)
@given(pieces=PIECES, join=JOINS)
def test_the_bridge_maps_the_merged_stream_to_the_merged_text(pieces: list[Any], join: str) -> None:
    bridged = responses_to_chat({"model": "m", "input": "t", "stream": True})
    translator = ChatStreamTranslator(bridged, ResponseIds.from_hex("ab" * 16, 1), None)
    events = translator.start()
    for chunk in merged_stream(pieces, join, True):
        events += translator.feed(
            ChatCompletionChunk.model_validate(chunk).model_dump_json().encode()
        )
    events += translator.finish()
    final = events[-1]["response"]
    assert final["output"][-1]["content"][0]["text"] == join.join(
        "".join(p["deltas"]) for p in pieces
    )
    assert final["usage"]["total_tokens"] == sum(p["usage"]["total_tokens"] for p in pieces)
    kind = "response.completed" if expected_reason(pieces) == "stop" else "response.incomplete"
    assert events[-1]["type"] == kind


def test_reasoning_is_joined_like_the_content() -> None:
    answers = []
    for index in range(3):
        answer = completion({"deltas": [f"t{index}"], "reason": "stop", "usage": {}, "id": "x"})
        answer["choices"][0]["message"]["reasoning"] = f"r{index}"
        answers.append(read_completion(answer))
    message = merge_completions(answers, " ")["choices"][0]["message"]
    assert (message["content"], message["reasoning"]) == ("t0 t1 t2", "r0 r1 r2")


def test_usage_is_none_when_a_piece_gave_none() -> None:
    assert sum_usage([{"total_tokens": 3}, None]) is None
    assert sum_usage([{"total_tokens": 3}, {"total_tokens": 4}]) == {"total_tokens": 7}


@pytest.mark.parametrize(
    "answer, reason",
    [
        ({}, "no 'choices' list"),
        ({"choices": []}, "an empty 'choices' list"),
        ({"choices": [{"index": 0}]}, "no 'message' object"),
        ({"choices": [{"message": {"content": 3}}]}, "not a string"),
    ],
)
def test_a_piece_that_is_not_a_completion_is_named(answer: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        read_completion(answer)


def test_a_none_content_counts_as_empty() -> None:
    piece = read_completion({"choices": [{"message": {"content": None}, "finish_reason": "stop"}]})
    assert isinstance(piece, PieceCompletion) and piece.content == ""


# --- refusals ------------------------------------------------------------------------------------

REFUSED = [
    ({"n": 2}, "n"),
    ({"logprobs": True}, "logprobs"),
    ({"top_logprobs": 3}, "top_logprobs"),
    ({"return_token_ids": True}, "return_token_ids"),
    ({"return_tokens_as_token_ids": True}, "return_tokens_as_token_ids"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format"),
    ({"prompt_logprobs": 1}, "prompt_logprobs"),
    ({"echo": True}, "echo"),
    ({"structured_outputs": {"json": {}}}, "structured_outputs"),
    ({"stream_options": {"continuous_usage_stats": True}}, "stream_options.continuous_usage_stats"),
]
ACCEPTED = [
    {"n": 1},
    {"n": None},
    {"logprobs": False},
    {"top_logprobs": 0},
    {"tools": []},
    {"tools": None},
    {"response_format": {"type": "text"}},
    {"return_token_ids": False},
    {"stream_options": {"include_usage": True}},
    {"temperature": 0.0, "max_tokens": 20, "stream": True},
]


@pytest.mark.parametrize("fields, param", REFUSED)
def test_unmergeable_fields_are_refused_by_name(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        refuse_unmergeable({"model": "m", "messages": [], **fields}, "chat")
    assert (caught.value.param, caught.value.code) == (param, CHUNKING_UNSUPPORTED)
    assert caught.value.status == 400 and param in caught.value.message


@pytest.mark.parametrize("fields", ACCEPTED)
def test_mergeable_fields_pass(fields: dict[str, Any]) -> None:
    refuse_unmergeable({"model": "m", "messages": [], **fields}, "chat")


def test_the_bridge_names_text_format() -> None:
    with pytest.raises(InvalidRequest) as caught:
        refuse_unmergeable({"response_format": {"type": "json_object"}}, "responses")
    assert caught.value.param == "text.format"
