"""The bridge's pure mapping, by property: Responses request -> chat request, chat answer ->
Responses object, chat SSE -> Responses events. Outputs are validated strictly against the
openai SDK's own pydantic types (`Response`, `ResponseStreamEvent`), so the SDK parses them."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent
from openai.types.responses.response_create_params import ResponseCreateParamsStreaming
from pydantic import TypeAdapter

from gateway.bridge import (
    UNSUPPORTED,
    ChatStreamTranslator,
    ResponseIds,
    SSEDecoder,
    chat_to_response,
    encode_event,
    responses_to_chat,
)
from gateway.bridge.request import (
    CARRIED_FIELDS,
    IGNORED_FIELDS,
    OFF_VALUES,
    REFUSED_FIELDS,
    TRANSLATED_FIELDS,
)
from gateway.errors import InvalidRequest, UpstreamUnavailable

EVENT = TypeAdapter(ResponseStreamEvent)
IDS = ResponseIds.from_hex("0f" * 16, 1_700_000_000)
KNOWN = CARRIED_FIELDS | TRANSLATED_FIELDS | IGNORED_FIELDS | set(OFF_VALUES) | REFUSED_FIELDS

# vLLM 0.33.0's ResponsesRequest fields (vllm/entrypoints/openai/responses/protocol.py)
# fmt: off
VLLM_0_33_FIELDS = [
    "background", "cache_salt", "chat_template_kwargs", "ec_transfer_params",
    "enable_response_messages", "frequency_penalty", "ignore_eos", "include", "include_reasoning",
    "include_stop_str_in_output", "input", "instructions", "kv_transfer_params", "logit_bias",
    "max_output_tokens", "max_tool_calls", "media_io_kwargs", "metadata", "min_p", "mm_payload",
    "mm_processor_kwargs", "model", "parallel_tool_calls", "presence_penalty",
    "previous_input_messages", "previous_response_id", "priority", "prompt", "prompt_cache_key",
    "prompt_cache_options", "prompt_cache_retention", "reasoning", "repetition_penalty",
    "request_id", "return_mm_kwargs", "safety_identifier", "seed", "service_tier", "session_id",
    "skip_special_tokens", "spaces_between_special_tokens", "stop", "stop_token_ids", "store",
    "stream", "structured_outputs", "temperature", "text", "tool_choice", "tools", "top_k",
    "top_logprobs", "top_p", "truncation", "user", "vllm_xargs", "watermarking",
]
# fmt: on


def test_every_field_of_the_sdk_and_of_vllm_is_classified_once() -> None:
    tables = [CARRIED_FIELDS, TRANSLATED_FIELDS, IGNORED_FIELDS, set(OFF_VALUES), REFUSED_FIELDS]
    assert sum(map(len, tables)) == len(KNOWN)  # no field in two tables
    sdk = ResponseCreateParamsStreaming
    assert sdk.__required_keys__ | sdk.__optional_keys__ <= KNOWN
    assert set(VLLM_0_33_FIELDS) <= KNOWN


text = st.text(max_size=30)
roles = st.sampled_from(["user", "system", "developer", "assistant"])
text_part = st.builds(
    lambda kind, value: {"type": kind, "text": value},
    st.sampled_from(["input_text", "output_text"]),
    text,
)
message = st.fixed_dictionaries(
    {"role": roles, "content": st.one_of(text, st.lists(text_part, max_size=3))},
    optional={"type": st.just("message"), "id": st.just("msg_x")},
)
scalars = st.one_of(st.integers(0, 100), st.floats(0, 2), text, st.booleans())
carried = st.dictionaries(st.sampled_from(sorted(CARRIED_FIELDS - {"metadata"})), scalars)
requests = st.builds(
    lambda fields, items, instructions: {
        **fields,
        **({"input": items} if items is not None else {}),
        **({"instructions": instructions} if instructions is not None else {}),
    },
    carried,
    st.one_of(st.none(), text, st.lists(message, max_size=4)),
    st.one_of(st.none(), text),
)


def joined_text(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(part["text"] for part in content)


def expected_messages(body: dict[str, Any]) -> list[list[str]]:
    """(role, text) of each chat message: `instructions` first with the leading system and
    developer messages folded in, consecutive assistant items merged into one turn."""
    instructions = body.get("instructions")
    folding = bool(instructions)
    out = [["system", instructions]] if folding else []
    items = body.get("input")
    for item in [{"role": "user", "content": items}] if isinstance(items, str) else items or []:
        role, text = item["role"], joined_text(item["content"])
        if folding and role in ("system", "developer"):
            out[0][1] += "\n\n" + text
            continue
        folding = False
        if role == "assistant" and out and out[-1][0] == "assistant":
            out[-1][1] += text
        else:
            out.append([role, text])
    return out


@given(requests)
def test_every_message_and_carried_field_arrives_in_order(body: dict[str, Any]) -> None:
    original = copy.deepcopy(body)
    chat = responses_to_chat(body).chat
    assert body == original  # the caller's body is not modified
    got = [[m["role"], joined_text(m["content"])] for m in chat["messages"]]
    assert got == expected_messages(body)
    for message in chat["messages"]:
        if message["role"] == "assistant":  # one string, as NeMo Gym sends it
            assert message["content"] is None or isinstance(message["content"], str)
        elif isinstance(message["content"], list):
            assert {part["type"] for part in message["content"]} <= {"text"}
    for key in CARRIED_FIELDS & set(body):
        assert chat[key] == body[key]
    assert set(chat) - {"messages"} <= CARRIED_FIELDS


@given(st.integers(1, 10**6), st.booleans())
def test_max_output_tokens_and_stream(limit: int, stream: bool) -> None:
    bridged = responses_to_chat({"input": "x", "max_output_tokens": limit, "stream": stream})
    assert bridged.chat["max_tokens"] == limit
    assert "max_output_tokens" not in bridged.chat
    assert bridged.stream is stream
    assert bridged.chat.get("stream_options") == ({"include_usage": True} if stream else None)


@given(st.text(min_size=1, max_size=20).filter(lambda key: key not in KNOWN), scalars)
def test_an_unknown_field_is_refused_by_name(key: str, value: Any) -> None:
    with pytest.raises(InvalidRequest) as raised:
        responses_to_chat({"input": "x", key: value})
    assert (raised.value.code, raised.value.param) == (UNSUPPORTED, key)


@given(st.sampled_from(sorted(REFUSED_FIELDS)), st.one_of(text, st.just({"effort": "low"})))
def test_a_refused_field_is_refused_unless_null(key: str, value: Any) -> None:
    with pytest.raises(InvalidRequest) as raised:
        responses_to_chat({"input": "x", key: value})
    assert (raised.value.code, raised.value.param) == (UNSUPPORTED, key)
    assert "messages" in responses_to_chat({"input": "x", key: None}).chat


@pytest.mark.parametrize("key", sorted(OFF_VALUES))
def test_off_values_are_accepted_and_others_refused(key: str) -> None:
    for value in OFF_VALUES[key]:
        assert key not in responses_to_chat({"input": "x", key: value}).chat
    with pytest.raises(InvalidRequest) as raised:
        responses_to_chat({"input": "x", key: ["on"]})
    assert raised.value.param == key


@given(st.sampled_from(sorted(IGNORED_FIELDS)), scalars)
def test_ignored_fields_never_reach_the_chat_body(key: str, value: Any) -> None:
    assert key not in responses_to_chat({"input": "x", key: value}).chat


def test_text_format_becomes_response_format() -> None:
    schema = {"type": "object"}
    text_config = {"format": {"type": "json_schema", "name": "n", "schema": schema}}
    chat = responses_to_chat({"input": "x", "text": text_config}).chat
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "n", "schema": schema},
    }
    chat = responses_to_chat({"input": "x", "text": {"format": {"type": "json_object"}}}).chat
    assert chat["response_format"] == {"type": "json_object"}
    assert "response_format" not in responses_to_chat({"input": "x", "text": {}}).chat
    plain = {"format": {"type": "text", "x": None}}  # null as absent
    assert "response_format" not in responses_to_chat({"input": "x", "text": plain}).chat
    assert responses_to_chat({"input": "x", "truncation": "auto"}).chat["truncate_prompt_tokens"]


# --- chat answer -> Responses object ---------------------------------------------------------

finish_reasons = st.sampled_from(["stop", "length", "content_filter", "abort", None])
usages = st.one_of(
    st.none(),
    st.builds(
        lambda p, c, details: {
            "prompt_tokens": p,
            "completion_tokens": c,
            "total_tokens": p + c,
            "prompt_tokens_details": details,
            "completion_tokens_details": details,
        },
        st.integers(0, 10**6),
        st.integers(0, 10**6),
        st.one_of(
            st.none(),
            st.text(max_size=3),
            st.fixed_dictionaries({"cached_tokens": st.integers(0, 9)}),
        ),
    ),
)


@given(st.one_of(st.none(), text), st.one_of(st.none(), text), finish_reasons, usages)
def test_a_chat_answer_is_a_response_the_sdk_validates(
    content: str | None, reasoning: str | None, finish: str | None, usage: Any
) -> None:
    bridged = responses_to_chat({"model": "m", "input": "x", "temperature": 0.5})
    reply: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        reply["reasoning"] = reasoning
    answer = {"model": "m", "choices": [{"message": reply, "finish_reason": finish}]}
    if usage is not None:
        answer["usage"] = usage
    response = Response.model_validate(chat_to_response(answer, bridged, IDS, {"k": "v"}))
    assert response.output_text == (content or "")
    assert [item.type for item in response.output] == (
        ["reasoning", "message"] if reasoning is not None else ["message"]
    )
    expected = {"length": "max_output_tokens", "content_filter": "content_filter"}.get(finish or "")
    assert response.status == ("incomplete" if expected else "completed")
    assert (response.incomplete_details.reason if response.incomplete_details else None) == expected
    assert (response.temperature, response.metadata, response.id) == (0.5, {"k": "v"}, IDS.response)
    if usage is not None:
        assert response.usage is not None
        assert response.usage.input_tokens == usage["prompt_tokens"]
        assert response.usage.output_tokens == usage["completion_tokens"]


@pytest.mark.parametrize("answer", [{}, {"choices": []}, {"choices": [{}]}, [], "x"])
def test_an_answer_without_a_message_is_a_502(answer: Any) -> None:
    with pytest.raises(UpstreamUnavailable):
        chat_to_response(answer, responses_to_chat({"input": "x"}), IDS, None)


# --- chat SSE -> Responses events ------------------------------------------------------------


def chat_sse(thoughts: list[str], words: list[str], finish: str) -> bytes:
    def chunk(delta: dict[str, Any], **more: Any) -> bytes:
        body = {"model": "m", "choices": [{"index": 0, "delta": delta, **more}]}
        return b"data: " + msgspec.json.encode(body) + b"\n\n"

    out = [chunk({"role": "assistant"})]
    out += [chunk({"reasoning": piece}) for piece in thoughts]
    out += [chunk({"content": piece}) for piece in words]
    out.append(chunk({}, finish_reason=finish))
    usage = {"prompt_tokens": 3, "completion_tokens": len(words), "total_tokens": 3 + len(words)}
    out.append(b"data: " + msgspec.json.encode({"choices": [], "usage": usage}) + b"\n\n")
    return b"".join(out) + b"data: [DONE]\n\n"


def cut(data: bytes, points: list[int]) -> list[bytes]:
    edges = [0, *sorted({p % (len(data) + 1) for p in points}), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


pieces = st.lists(st.text(min_size=1, max_size=8), max_size=5)
ODD_CHUNKS = [
    b"[DONE]",
    b"null",
    b"[1, 2]",
    b'{"choices": {"0": {}}}',
    b'{"choices": [null]}',
    b'{"choices": [{"delta": "text"}]}',
    b'{"choices": [{"delta": {"content": 7, "reasoning": ["x"]}}]}',
    b'{"usage": "lots", "model": 3}',
    b'{"error": "plain string"}',
]


@given(pieces, pieces, st.sampled_from(["stop", "length"]), st.lists(st.integers(0, 10**6)))
def test_a_chat_stream_becomes_events_the_sdk_validates(
    thoughts: list[str], words: list[str], finish: str, points: list[int]
) -> None:
    bridged = responses_to_chat({"model": "m", "input": "x", "stream": True})
    translator = ChatStreamTranslator(bridged, IDS, None)
    events = translator.start()
    for piece in cut(chat_sse(thoughts, words, finish), points):  # any split of the bytes
        events += translator.feed_sse(piece)
    events += translator.finish()
    wire = [encode_event(event).partition(b"\ndata: ") for event in events]
    assert all(
        head == b"event: " + event["type"].encode()
        for (head, _, _), event in zip(wire, events, strict=True)
    )
    parsed = [EVENT.validate_python(msgspec.json.decode(data)) for _, _, data in wire]
    assert [e.sequence_number for e in parsed] == list(range(len(parsed)))
    kinds = [e.type for e in parsed]
    reasoning = (
        ["response.output_item.added", "response.content_part.added"]
        + ["response.reasoning_text.delta"] * len(thoughts)
        + [
            "response.reasoning_text.done",
            "response.content_part.done",
            "response.output_item.done",
        ]
        if thoughts
        else []
    )
    final = "response.completed" if finish == "stop" else "response.incomplete"
    assert kinds == [
        "response.created",
        "response.in_progress",
        *reasoning,
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * len(words),
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        final,
    ]
    last = parsed[-1].response  # type: ignore[union-attr]
    assert last.output_text == "".join(words)
    deltas = [e.delta for e in parsed if e.type == "response.output_text.delta"]
    assert "".join(deltas) == "".join(words)
    assert last.usage is not None and last.usage.output_tokens == len(words)


@given(
    st.lists(st.binary(max_size=40), max_size=6),
    st.lists(st.integers(0, 500)),
    st.sampled_from([b"\n", b"\r\n"]),
)
def test_sse_decoding_does_not_depend_on_how_the_bytes_are_cut(
    payloads: list[bytes], points: list[int], newline: bytes
) -> None:
    lines = [p.replace(b"\n", b" ").replace(b"\r", b" ") for p in payloads]
    stream = b"".join(b"data: " + line + newline * 2 for line in lines)
    decoder = SSEDecoder()
    got = [data for piece in cut(stream, points) for data in decoder.feed(piece)]
    assert got + decoder.close() == lines


@given(st.lists(st.one_of(st.binary(max_size=30), st.sampled_from(ODD_CHUNKS)), max_size=6))
def test_odd_upstream_chunks_still_end_in_a_valid_response(payloads: list[bytes]) -> None:
    translator = ChatStreamTranslator(responses_to_chat({"input": "x"}), IDS, None)
    events = translator.start()
    for payload in payloads:
        events += translator.feed(payload)
    events += translator.finish()
    parsed = [EVENT.validate_python(event) for event in events]
    assert parsed[-1].type in ("response.completed", "response.failed")


def test_a_mid_stream_error_ends_in_response_failed() -> None:
    translator = ChatStreamTranslator(responses_to_chat({"input": "x"}), IDS, None)
    events = translator.start()
    events += translator.feed_sse(b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n')
    events += translator.feed_sse(b'data: {"error": {"message": "engine died", "code": 500}}\n\n')
    events += translator.finish()
    parsed = [EVENT.validate_python(e) for e in events]
    assert [e.type for e in parsed][-2:] == ["error", "response.failed"]
    assert parsed[-1].response.error.message == "engine died"  # type: ignore[union-attr]
