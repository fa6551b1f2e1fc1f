"""The start of a chat answer, read as it arrives: what tells that the upstream took a request
(content, reasoning, a tool call), what tells it failed (an error event), and what tells
nothing (vLLM's role chunk with `"content": ""`), however the stream is cut into chunks."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.upstream.sse_watch import AnswerWatch, event_verdict, is_cache_miss

ROLE = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
CONTENT = {"choices": [{"index": 0, "delta": {"content": "Hello"}}]}
REASONING = {"choices": [{"index": 0, "delta": {"reasoning": "hmm"}}]}
REASONING_CONTENT = {"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}}]}
TOOL = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c"}]}}]}
FINISHED = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
ERROR = {"error": {"message": "Internal server error", "type": "InternalServerError", "code": 500}}


def sse(*events: dict[str, Any] | str) -> bytes:
    lines = [e if isinstance(e, str) else json.dumps(e) for e in events]
    return b"".join(f"data: {line}\n\n".encode() for line in lines)


@pytest.mark.parametrize(
    ("event", "verdict"),
    [
        (ROLE, None),
        ({"choices": [{"index": 0, "delta": {"content": None}}]}, None),
        ({"choices": [{"index": 0, "delta": {"tool_calls": []}}]}, None),
        ({"choices": []}, None),
        ({"choices": [], "usage": {"prompt_tokens": 1}}, None),
        (CONTENT, "content"),
        (REASONING, "content"),
        (REASONING_CONTENT, "content"),
        (TOOL, "content"),
        (FINISHED, "content"),
        ({"choices": [{"index": 0, "delta": {}, "finish_reason": "error"}]}, None),
        (ERROR, "error"),
        ([1, 2], None),
    ],
)
def test_event_verdicts(event: Any, verdict: str | None) -> None:
    assert event_verdict(event) == verdict


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def feed_all(chunks: list[bytes]) -> str | None:
    watch = AnswerWatch()
    verdict = None
    for chunk in chunks:
        verdict = watch.feed(chunk)
    return verdict


@given(st.lists(st.integers(0, 400), max_size=12))
def test_vllm_drift_stream_is_an_error_however_it_is_cut(cuts: list[int]) -> None:
    stream = sse(ROLE, ERROR, "[DONE]")
    assert feed_all(split(stream, cuts)) == "error"


@given(st.lists(st.integers(0, 400), max_size=12), st.sampled_from([CONTENT, REASONING, TOOL]))
def test_first_content_wins_however_it_is_cut(cuts: list[int], first: dict[str, Any]) -> None:
    stream = sse(ROLE, first, ERROR, "[DONE]")  # an error after content is not the verdict
    assert feed_all(split(stream, cuts)) == "content"


@given(st.lists(st.integers(0, 200), max_size=8))
def test_role_chunk_alone_tells_nothing(cuts: list[int]) -> None:
    assert feed_all(split(sse(ROLE), cuts)) is None


def test_done_without_content_ends_it() -> None:
    assert feed_all([sse(ROLE, "[DONE]")]) == "done"


def test_crlf_lines_and_comments() -> None:
    stream = b": keep-alive\r\n\r\ndata: " + json.dumps(CONTENT).encode() + b"\r\n\r\n"
    assert feed_all([stream]) == "content"


@pytest.mark.parametrize(
    ("body", "miss"),
    [
        (
            b'{"error":{"message":"Cache miss for audio at index 0 but data is not provided.",'
            b'"type":"BadRequestError","param":null,"code":400}}',
            True,
        ),
        (b'{"error":{"message":"Unknown part type: audio","code":400}}', False),
        (b'{"error":"Cache miss for"}', False),
        (b"Cache miss for audio", False),
        (b"[]", False),
    ],
)
def test_cache_miss_is_vllms_400_message(body: bytes, miss: bool) -> None:
    assert is_cache_miss(body) is miss
