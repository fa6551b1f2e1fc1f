"""The bridge's answer side, pure: a chat answer (plain or streamed) with tool calls, refusals,
reasoning and logprobs becomes Responses output items and events that the openai SDK's own
types validate, in generation order, nothing of the answer lost. The streamed and the plain
translation of the same answer end in the same output."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.bridge import ChatStreamTranslator, ResponseIds, chat_to_response, responses_to_chat
from gateway.bridge.answer import MAPPED, NOT_CARRIED
from gateway.errors import UpstreamUnavailable

EVENT = TypeAdapter(ResponseStreamEvent)
IDS = ResponseIds.from_hex("0f" * 16, 1_700_000_000)
BRIDGED = responses_to_chat({"model": "m", "input": "x"})

# What vLLM 0.32 answered a named tool_choice with (the tiny engine, copied from its wire).
ENGINE_CALL = {
    "id": "chatcmpl-8777f6ab14609700",
    "object": "chat.completion",
    "created": 1796364584,
    "model": "tiny-qwen2-audio",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "",
                "refusal": None,
                "annotations": None,
                "audio": None,
                "function_call": None,
                "tool_calls": [
                    {
                        "id": "chatcmpl-tool-b5c7aa99e6600fad",
                        "type": "function",
                        "function": {"name": "set_mode", "arguments": '{"mode":"quiet","on":true}'},
                    }
                ],
                "reasoning": None,
            },
            "logprobs": None,
            "finish_reason": "stop",
            "stop_reason": 412,
            "token_ids": None,
            "routed_experts": None,
        }
    ],
    "service_tier": None,
    "system_fingerprint": "vllm-0.32.0-0b52f7ed",
    "usage": {
        "prompt_tokens": 52,
        "total_tokens": 78,
        "completion_tokens": 26,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    },
    "prompt_logprobs": None,
    "prompt_token_ids": None,
    "prompt_text": None,
    "kv_transfer_params": None,
    "ec_transfer_params": None,
    "metrics": None,
}


def without_nulls(value: Any) -> Any:
    """vLLM 0.34 leaves null fields out where 0.33 sends them."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


@pytest.mark.parametrize("version", ["0.33 (nulls sent)", "0.34 (nulls left out)"])
def test_the_engines_call_becomes_a_function_call_item(version: str) -> None:
    answer = ENGINE_CALL if version.startswith("0.33") else without_nulls(ENGINE_CALL)
    response = Response.model_validate(chat_to_response(answer, BRIDGED, IDS, None))
    [item] = response.output
    assert item.type == "function_call"
    assert (item.call_id, item.name, item.arguments, item.status) == (
        "chatcmpl-tool-b5c7aa99e6600fad",
        "set_mode",
        '{"mode":"quiet","on":true}',
        "completed",
    )
    assert response.status == "completed" and response.output_text == ""
    assert response.usage is not None and response.usage.output_tokens == 26


def test_carried_fields_and_usage_details() -> None:
    answer = {
        "model": "m",
        "choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 9,
            "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 4, "created_cache_tokens": 5},
            "completion_tokens_details": {"reasoning_tokens": 1},
        },
        "kv_transfer_params": {"remote": "x"},
        "metrics": {"time_to_first_token_ms": 3.5},
        "service_tier": "default",
    }
    body = chat_to_response(answer, BRIDGED, IDS, None)
    response = Response.model_validate(body)
    assert response.usage is not None
    assert response.usage.input_tokens_details.cached_tokens == 4
    assert response.usage.input_tokens_details.cache_write_tokens == 5
    assert response.usage.output_tokens_details.reasoning_tokens == 1
    assert response.usage.total_tokens == 11
    assert body["kv_transfer_params"] == {"remote": "x"}
    assert body["metrics"] == {"time_to_first_token_ms": 3.5}
    assert response.service_tier == "default"
    assert response.store is False and response.id.startswith("resp_bridge_")


def leaves(value: Any, path: str = "") -> list[str]:
    """The field paths of an answer, down to the ones the tables name (`choices` by its first)."""
    if path in MAPPED or path in NOT_CARRIED:
        return [path]
    if isinstance(value, list) and path == "choices":
        return leaves(value[0], "choices[0]")
    if not isinstance(value, dict):
        return [path]
    return [leaf for key, sub in value.items() for leaf in leaves(sub, f"{path}.{key}".lstrip("."))]


def test_every_field_of_vllms_answer_is_mapped_or_says_why_not() -> None:
    """Each field vLLM 0.32 sends (the engine's answer, every null filled in; a stream's
    `delta` is its `message`) is in one of answer.py's two tables."""
    full = json.loads(json.dumps(ENGINE_CALL))
    full["usage"]["prompt_tokens_details"] = {
        "cached_tokens": 0,
        "created_cache_tokens": 0,
        "multimodal_tokens": {"audio": 25},
    }
    full["usage"]["completion_tokens_details"] = {"reasoning_tokens": 0}
    full["choices"][0]["message"]["reasoning_content"] = "older vLLM"
    found = leaves(full)
    assert not set(found) - set(MAPPED) - set(NOT_CARRIED), found
    assert not set(MAPPED) & set(NOT_CARRIED)
    assert all(NOT_CARRIED.values()) and all(MAPPED.values())


@pytest.mark.parametrize(
    "message",
    [
        {"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]},
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {}}}],
        },
        {"role": "assistant", "tool_calls": "f()"},
        {"role": "assistant", "content": "x", "annotations": [{"type": "file_path"}]},
        {"role": "assistant", "content": "x", "annotations": "cite"},
    ],
)
def test_what_cannot_be_mapped_is_a_502_not_a_silent_drop(message: dict[str, Any]) -> None:
    answer = {"model": "m", "choices": [{"message": message, "finish_reason": "stop"}]}
    with pytest.raises(UpstreamUnavailable):
        chat_to_response(answer, BRIDGED, IDS, None)


def test_a_url_citation_is_flattened() -> None:
    citation = {"start_index": 0, "end_index": 2, "title": "t", "url": "https://x"}
    message = {
        "role": "assistant",
        "content": "hi",
        "annotations": [{"type": "url_citation", "url_citation": citation}],
    }
    answer = {"model": "m", "choices": [{"message": message, "finish_reason": "stop"}]}
    response = Response.model_validate(chat_to_response(answer, BRIDGED, IDS, None))
    [part] = response.output[0].content  # type: ignore[union-attr]
    assert part.annotations[0].model_dump() == {"type": "url_citation", **citation}  # type: ignore[union-attr]


# --- one answer, plain and streamed -------------------------------------------------------------

words = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=6)
pieces = st.lists(words, max_size=4)
entries = st.builds(
    lambda token, logprob, tops: {
        "token": token,
        "logprob": logprob,
        "bytes": list(token.encode()),
        "top_logprobs": [{"token": t, "logprob": logprob, "bytes": None} for t in tops],
    },
    words,
    st.floats(-9999.0, 0.0),
    st.lists(words, max_size=2),
)
calls = st.lists(
    st.tuples(
        st.from_regex(r"chatcmpl-tool-[0-9a-f]{16}", fullmatch=True),
        st.from_regex(r"[a-z_]{1,10}", fullmatch=True),
        st.lists(words, min_size=1, max_size=4),
    ),
    max_size=3,
)


def chunk(delta: dict[str, Any], logprobs: list[Any] | None = None, **more: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": {"content": logprobs} if logprobs else None}
    body = {"model": "m", "choices": [{**choice, **more}]}
    return b"data: " + msgspec.json.encode(body) + b"\n\n"


def stream_of(
    thoughts: list[str],
    text: list[tuple[str, Any]],
    refusal: list[str],
    tool_calls: list[tuple[str, str, list[str]]],
    finish: str,
) -> bytes:
    """vLLM's chunk shapes, in generation order: reasoning, text, refusal, the calls."""
    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"reasoning": piece}) for piece in thoughts]
    out += [chunk({"content": piece}, [entry]) for piece, entry in text]
    out += [chunk({"refusal": piece}) for piece in refusal]
    for index, (call_id, name, args) in enumerate(tool_calls):
        head = {"id": call_id, "type": "function", "index": index}
        out.append(
            chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": args[0]}}]})
        )
        out += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": a}}]})
            for a in args[1:]
        ]
    out.append(chunk({}, finish_reason=finish))
    return b"".join(out) + b"data: [DONE]\n\n"


def message_of(
    thoughts: list[str],
    text: list[tuple[str, Any]],
    refusal: list[str],
    tool_calls: list[tuple[str, str, list[str]]],
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "".join(p for p, _ in text)}
    if thoughts:
        message["reasoning"] = "".join(thoughts)
    if refusal:
        message["refusal"] = "".join(refusal)
    if tool_calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": "".join(a)}}
            for i, n, a in tool_calls
        ]
    return message


def translate(stream: bytes, cut_every: int) -> list[Any]:
    translator = ChatStreamTranslator(BRIDGED, IDS, None)
    events = translator.start()
    for start in range(0, len(stream), cut_every):
        events += translator.feed_sse(stream[start : start + cut_every])
    events += translator.finish()
    return [EVENT.validate_python(msgspec.json.decode(msgspec.json.encode(e))) for e in events]


def assert_items_whole_and_in_order(events: list[Any]) -> None:
    """Each item's events lie between its added and its done, items one after another."""
    open_index = None
    for event in events:
        index = getattr(event, "output_index", None)
        if event.type == "response.output_item.added":
            assert open_index is None, event
            open_index = index
        elif event.type == "response.output_item.done":
            assert index == open_index
            open_index = None
        elif index is not None:
            assert index == open_index, event
    assert open_index is None


@settings(deadline=None)  # a loaded 2-core machine: time is not the property
@given(
    pieces,
    st.lists(st.tuples(words, entries), max_size=4),
    pieces,
    calls,
    st.sampled_from(["stop", "tool_calls", "length"]),
    st.integers(1, 300),
)
def test_a_streamed_answer_and_the_same_answer_plain_agree(
    thoughts: list[str],
    text: list[tuple[str, Any]],
    refusal: list[str],
    tool_calls: list[tuple[str, str, list[str]]],
    finish: str,
    cut_every: int,
) -> None:
    events = translate(stream_of(thoughts, text, refusal, tool_calls, finish), cut_every)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert_items_whole_and_in_order(events)
    added = [e.item for e in events if e.type == "response.output_item.added"]
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [i.id for i in added] == [i.id for i in done]
    assert [e.output_index for e in events if e.type == "response.output_item.done"] == list(
        range(len(done))
    )
    final = events[-1].response  # type: ignore[union-attr]
    assert final.output == done
    choice = {"message": message_of(thoughts, text, refusal, tool_calls), "finish_reason": finish}
    choice["logprobs"] = {"content": [entry for _, entry in text]} if text else None
    plain = Response.model_validate(
        chat_to_response({"model": "m", "choices": [choice]}, BRIDGED, IDS, None)
    )
    assert plain.output == final.output
    calls_done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [e.arguments for e in calls_done] == ["".join(args) for _, _, args in tool_calls]
    for event in calls_done:
        deltas = [
            e.delta
            for e in events
            if e.type == "response.function_call_arguments.delta" and e.item_id == event.item_id
        ]
        assert "".join(deltas) == event.arguments
    text_deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert [lp.token for e in text_deltas for lp in e.logprobs] == [e["token"] for _, e in text]
    refusals = [e.refusal for e in events if e.type == "response.refusal.done"]
    assert refusals == (["".join(refusal)] if refusal else [])


def test_items_come_in_the_order_they_were_generated() -> None:
    stream = b"".join(
        [
            chunk({"content": "Let me check. "}),
            chunk(
                {
                    "tool_calls": [
                        {"id": "c1", "index": 0, "function": {"name": "f", "arguments": "{}"}}
                    ]
                }
            ),
            chunk({"content": "Done."}),
            chunk({}, finish_reason="stop"),
        ]
    )
    events = translate(stream + b"data: [DONE]\n\n", 1000)
    final = events[-1].response  # type: ignore[union-attr]
    assert [(i.type, i.id) for i in final.output] == [
        ("message", IDS.message),
        ("function_call", IDS.item("fc", 1)),
        ("message", IDS.item("msg", 2)),
    ]
    assert final.output_text == "Let me check. Done."


def test_a_token_without_text_keeps_its_logprobs() -> None:
    """vLLM sends a chunk with `"delta": {}` and the logprobs of a token that decodes to nothing
    yet (part of a multi-byte character): they stay on the message's text."""
    entry = {"token": "", "logprob": -6.2, "bytes": [], "top_logprobs": []}
    stream = chunk({"content": "a"}, [{**entry, "token": "a", "bytes": [97]}]) + chunk({}, [entry])
    events = translate(stream + chunk({"content": "b"}, [{**entry, "token": "b"}]), 1000)
    final = events[-1].response  # type: ignore[union-attr]
    part = final.output[0].content[0]
    assert [lp.token for lp in part.logprobs] == ["a", "", "b"]
    assert final.output_text == "ab"


def test_a_call_streamed_again_after_the_next_began_fails_the_stream() -> None:
    def call(index: int, **function: Any) -> bytes:
        return chunk({"tool_calls": [{"id": f"c{index}", "index": index, "function": function}]})

    stream = call(0, name="f", arguments="{") + call(1, name="g", arguments="{}")
    events = translate(stream + call(0, arguments="}"), 1000)
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    assert "tool call 0" in events[-1].response.error.message  # type: ignore[union-attr]


def test_a_call_that_never_gets_its_name_fails_the_stream() -> None:
    stream = chunk({"tool_calls": [{"id": "c", "index": 0, "function": {"arguments": "{}"}}]})
    events = translate(stream, 1000)
    assert [e.type for e in events][-2:] == ["error", "response.failed"]


def test_call_arguments_that_are_not_a_string_fail_the_stream() -> None:
    """As the plain answer's 502: the stream ends with `response.failed`, not a crash."""
    function = {"name": "f", "arguments": "{"}
    stream = chunk({"tool_calls": [{"id": "c", "index": 0, "function": function}]})
    stream += chunk({"tool_calls": [{"index": 0, "function": {"arguments": {"a": 1}}}]})
    events = translate(stream, 1000)
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    assert "not a string" in events[-1].response.error.message  # type: ignore[union-attr]


def test_a_name_that_comes_after_arguments_still_opens_the_call_with_them() -> None:
    stream = chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]})
    stream += chunk(
        {"tool_calls": [{"id": "c", "index": 0, "function": {"name": "f", "arguments": ":1}"}}]}
    )
    events = translate(stream, 1000)
    final = events[-1].response  # type: ignore[union-attr]
    [item] = final.output
    assert (item.call_id, item.name, json.loads(item.arguments)) == ("c", "f", {"a": 1})


def test_a_streamed_call_cut_by_max_tokens_is_incomplete() -> None:
    head = {"id": "c", "type": "function", "index": 0}
    stream = chunk({"tool_calls": [{**head, "function": {"name": "f", "arguments": '{"m'}}]})
    events = translate(stream + chunk({}, finish_reason="length"), 1000)
    assert events[-1].type == "response.incomplete"
    [item] = events[-1].response.output  # type: ignore[union-attr]
    assert (item.type, item.status, item.arguments) == ("function_call", "incomplete", '{"m')
