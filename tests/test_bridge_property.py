"""Nothing dropped silently, by property: a random Responses body built from the spec's item,
part and tool types (openai 3.60's `ResponseInputItemParam` and `FunctionToolParam`, every
optional field sometimes set, untranslatable ones included) either maps every field onto the
chat body or is refused with a 400 naming a field it holds. Every free-text value is a unique
token, so "carried" means found in the chat body; the only values allowed to stay behind are
the ones that describe a replayed output item (`id`, `status`, `annotations`, `logprobs`, a
file's `filename`), a reasoning item's `summary` when its `content` is sent, and settings at
their "off" or default value."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st
from openai.types.responses import FunctionToolParam, ResponseInputItemParam
from pydantic import TypeAdapter

from gateway.bridge import responses_to_chat
from gateway.errors import InvalidRequest
from tests import bridge_corpus as corpus

ITEM = TypeAdapter(ResponseInputItemParam)
TOOL = TypeAdapter(FunctionToolParam)
TEXT = "TEXT"  # replaced by a unique token once the body is drawn
REPLAY_KEYS = frozenset({"id", "status", "annotations", "logprobs", "filename"})


def maybe(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Each field sometimes set, sometimes absent (null as absent is tested elsewhere)."""
    return st.fixed_dictionaries({}, optional=fields)


def with_fields(required: dict[str, Any], **optional: st.SearchStrategy[Any]) -> Any:
    return maybe(**optional).map(lambda extra: {**required, **extra})


text_part = with_fields(
    {"type": "input_text", "text": TEXT}, prompt_cache_breakpoint=st.just({"mode": "explicit"})
)
image_part = st.builds(
    lambda detail, extra: {"type": "input_image", "image_url": TEXT, "detail": detail, **extra},
    st.sampled_from(["auto", "low", "high", "original"]),
    maybe(file_id=st.just(TEXT)),
)
audio_part = st.just(
    {"type": "input_audio", "input_audio": {"data": corpus.WAV_BASE64, "format": "wav"}}
)
file_part = with_fields(
    {"type": "input_file", "file_url": "clip.wav"}, filename=st.just(TEXT), file_id=st.just(TEXT)
)
output_text = with_fields(
    {"type": "output_text", "text": TEXT, "annotations": []}, logprobs=st.just([])
)
refusal_part = st.just({"type": "refusal", "refusal": TEXT})

user_message = with_fields(
    {"role": "user"},
    content=st.one_of(
        st.just(TEXT), st.lists(st.one_of(text_part, image_part, audio_part, file_part), max_size=3)
    ),
    type=st.just("message"),
).filter(lambda item: item.get("content") is not None)
leading_message = st.builds(
    lambda role, content: {"role": role, "content": content},
    st.sampled_from(["system", "developer"]),
    st.one_of(st.just(TEXT), st.lists(text_part, max_size=2)),
)
assistant_message = st.builds(
    lambda content, extra: {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": content,
        **extra,
    },
    st.lists(st.one_of(output_text, refusal_part), max_size=2),
    maybe(phase=st.sampled_from(["commentary", "final_answer"])),
)
function_call = with_fields(
    {"type": "function_call", "call_id": TEXT, "name": TEXT, "arguments": TEXT},
    id=st.just("fc_1"),
    status=st.just("completed"),
    namespace=st.just(TEXT),
)
call_output = with_fields(
    {"type": "function_call_output", "call_id": TEXT},
    output=st.one_of(st.just(TEXT), st.lists(st.one_of(text_part, image_part), max_size=2)),
).filter(lambda item: item.get("output") is not None)
reasoning = with_fields(
    {"type": "reasoning", "id": "rs_1", "summary": []},
    summary=st.lists(st.just({"type": "summary_text", "text": TEXT}), max_size=2),
    content=st.lists(st.just({"type": "reasoning_text", "text": TEXT}), max_size=2),
    encrypted_content=st.just(TEXT),
    status=st.just("completed"),
).map(lambda item: {**item, "summary": item.get("summary") or []})  # required by the spec
other_item = st.sampled_from(
    [
        {"type": "item_reference", "id": "msg_0"},
        {"type": "custom_tool_call_output", "call_id": "c", "output": "x"},
        {"type": "mcp_approval_response", "approval_request_id": "a", "approve": True},
    ]
)
items = st.lists(
    st.one_of(user_message, assistant_message, function_call, call_output, reasoning, other_item),
    max_size=5,
)
tool = with_fields(
    {"type": "function", "name": TEXT, "parameters": {"type": "object"}, "strict": True},
    description=st.just(TEXT),
    defer_loading=st.booleans(),
    output_schema=st.just({"type": "object"}),
)
# Each format sometimes with a key of no format (`x`): carried nowhere, so refused by name.
text_format = st.one_of(
    with_fields({"type": "text"}, x=st.just(TEXT)),
    with_fields({"type": "json_object"}, x=st.just(TEXT)),
    with_fields(
        {"type": "json_schema", "name": TEXT, "schema": {"type": "object", "title": TEXT}},
        description=st.just(TEXT),
        strict=st.booleans(),
        x=st.just(TEXT),
    ),
)
bodies = st.fixed_dictionaries(
    {"model": st.just("m"), "input": st.tuples(st.lists(leading_message, max_size=2), items)},
    optional={
        "instructions": st.just(TEXT),
        "tools": st.lists(tool, max_size=2),
        "tool_choice": st.sampled_from(["auto", "none", "required"]),
        "reasoning": st.sampled_from([{"effort": "low"}, {"effort": "low", "summary": "auto"}]),
        "top_logprobs": st.integers(0, 5),
        "text": maybe(format=text_format, verbosity=st.sampled_from(["medium", "low"])),
    },
).map(lambda body: {**body, "input": [*body["input"][0], *body["input"][1]]})


def without_audio(item: dict[str, Any]) -> dict[str, Any]:
    """The spec's content union has no `input_audio` part (the bridge takes chat's)."""
    content = item.get("content")
    if not isinstance(content, list):
        return item
    return {**item, "content": [part for part in content if part.get("type") != "input_audio"]}


def label(value: Any, tokens: Iterator[str]) -> Any:
    """`value` with each TEXT placeholder replaced by the next unique token."""
    if value == TEXT:
        return next(tokens)
    if isinstance(value, dict):
        return {key: label(item, tokens) for key, item in value.items()}
    if isinstance(value, list):
        return [label(item, tokens) for item in value]
    return value


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """(path, key, value) of every scalar in `value`."""
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            yield from leaves(item, where)
            if not isinstance(item, dict | list):
                yield (where, key, item)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from leaves(item, f"{path}[{index}]")


def holds(body: dict[str, Any], param: str) -> bool:
    """Whether `param` (`input[3].content[1].foo`) names a non-null, non-false field of `body`."""
    node: Any = body
    for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", param):
        try:
            node = node[int(index)] if index else node[name]
        except (KeyError, IndexError, TypeError):
            return False
    return node is not None and node is not False


def may_stay_behind(body: dict[str, Any], path: str, key: str) -> bool:
    if key in REPLAY_KEYS:
        return True
    summary = re.fullmatch(r"(input\[\d+\])\.summary\[\d+\]\.text", path)
    if summary:
        item = body["input"][int(summary.group(1)[6:-1])]
        return bool(item.get("content"))  # the reasoning's content is sent instead
    return False


@settings(max_examples=300, deadline=None)
@given(bodies)
def test_every_field_is_carried_or_named_in_a_400(drawn: dict[str, Any]) -> None:
    body = label(drawn, (f"tok{n}z" for n in itertools.count()))
    for item in body["input"]:
        ITEM.validate_python(without_audio(item))  # built from the spec's types
    for spec_tool in body.get("tools") or []:
        TOOL.validate_python(spec_tool)
    try:
        chat = responses_to_chat(body).chat
    except InvalidRequest as error:
        event("refused")
        assert error.param is not None and holds(body, error.param), (error.param, body)
        return
    event("carried")
    sent = json.dumps(chat)
    for path, key, value in leaves(body):
        if isinstance(value, str) and value.startswith("tok") and value.endswith("z"):
            assert value in sent or may_stay_behind(body, path, key), (path, body, chat)
