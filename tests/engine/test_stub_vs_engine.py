"""The stub upstream held to the real vLLM: the same bodies go to both, and what a client or the
gateway can see must agree.

Compared: the status; error bodies byte for byte; the headers a client decodes by
(`Content-Type`); answer and stream-chunk fields (the stub may leave out fields of vLLM's it
does not model, never add one, its own `stub` report aside); the SSE sequence (the role chunk
first, carrying `prompt_token_ids` only when asked, a delta a token, `finish_reason` on the
last, `[DONE]`); token-id fields and their counts (prompt ids = `usage.prompt_tokens`, the
audio placeholders 25 a second, the generated ids = `usage.completion_tokens`); and what each
request does to `vllm:mm_cache_queries_total` / `vllm:mm_cache_hits_total`.

Normalized away, as engine-specific: ids, `created`, the model name, `system_fingerprint`,
the token ids' values (random weights; the stub's toy tokenizer), the answer's text (and the
empty delta of a token that decodes to no text yet), and which stop token ended a call. The
stub is started with the engine's processor-cache size and runs in this process.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import jsonschema
import pytest
from aiohttp.test_utils import TestServer

from engine.server import EngineServer
from gateway.stub_upstream import create_stub_app
from gateway.stub_upstream.tokens import AUDIO_PAD
from tests.conftest import parse_metrics

from .conftest import MM_CACHE_GB, QWEN
from .helpers import BOUND_SECONDS, CHAT, MAX_TOKENS, MODE_SCHEMA, write_clip

pytestmark = pytest.mark.timeout(180, func_only=True)
SECONDS = 1.0  # 25 placeholders on both sides (no rounding to tell apart)
METRICS_WAIT_SECONDS = 10.0  # the engine's counters follow its output loop, not the answer
STUB_ONLY_FIELDS = {"stub"}  # the stub's report of what it heard


@dataclass
class Answer:
    status: int
    content_type: str
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def events(self) -> list[Any]:
        """The `data` of each SSE event, parsed; `[DONE]` as the string."""
        found: list[Any] = []
        for line in self.body.decode().split("\n"):
            if line.startswith("data: "):
                data = line[len("data: ") :]
                found.append(data if data == "[DONE]" else json.loads(data))
        return found


class Side:
    """One upstream (the engine or the stub) over HTTP, and its audio placeholder id."""

    def __init__(self, name: str, url: str, placeholder: int) -> None:
        self.name, self.url, self.placeholder = name, url, placeholder
        self.session = aiohttp.ClientSession(
            url, timeout=aiohttp.ClientTimeout(total=BOUND_SECONDS)
        )

    async def post(self, path: str, body: dict[str, Any]) -> Answer:
        async with self.session.post(path, json=body) as response:
            return Answer(
                response.status, response.headers.get("Content-Type", ""), await response.read()
            )

    async def mm_cache(self) -> tuple[float, float]:
        async with self.session.get("/metrics") as response:
            samples = parse_metrics(await response.text())
        queries = sum(v for k, v in samples.items() if k.startswith("vllm:mm_cache_queries_total"))
        hits = sum(v for k, v in samples.items() if k.startswith("vllm:mm_cache_hits_total"))
        return queries, hits


@pytest.fixture
async def sides(
    qwen_engine: EngineServer, qwen_tokens: dict[str, int], clip_dir: Path
) -> AsyncIterator[list[Side]]:
    stub = TestServer(create_stub_app(str(clip_dir), mm_processor_cache_gb=float(MM_CACHE_GB)))
    await stub.start_server()
    pair = [
        Side("engine", qwen_engine.url, qwen_tokens["<|AUDIO|>"]),
        Side("stub", str(stub.make_url("")).rstrip("/"), AUDIO_PAD),
    ]
    try:
        yield pair
    finally:
        for side in pair:
            await side.session.close()
        await stub.close()


@pytest.fixture
def new_clip(clip_dir: Path) -> Any:
    """A clip neither side has seen, as a data URI."""

    def make() -> str:
        path = write_clip(clip_dir, f"{uuid.uuid4().hex}.wav", SECONDS)
        return "data:audio/wav;base64," + base64.b64encode(path.read_bytes()).decode()

    return make


def data_part(uri: str, key: str | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "audio_url", "audio_url": {"url": uri}}
    return part if key is None else {**part, "uuid": key}


def uuid_part(key: str) -> dict[str, Any]:
    return {"type": "audio_url", "audio_url": None, "uuid": key}


def chat(*parts: dict[str, Any], **extra: Any) -> dict[str, Any]:
    content = [*parts, {"type": "text", "text": "What is in the audio?"}]
    return {
        "model": QWEN,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": MAX_TOKENS,
        **extra,
    }


async def both(sides: list[Side], body: dict[str, Any], path: str = CHAT) -> list[Answer]:
    return [await side.post(path, body) for side in sides]  # one at a time: 2 cores


async def cache_effects(
    sides: list[Side], new_clip: Any, body: dict[str, Any], expected: tuple[int, int]
) -> list[tuple[Answer, tuple[float, float]]]:
    """Each side's answer and the growth of its (queries, hits). A fence follows the request (a
    new clip with data: one query, no hit), so the counters are read once they have caught
    up with both: until they show `expected` plus the fence, or METRICS_WAIT_SECONDS."""
    results = []
    for side in sides:
        before = await side.mm_cache()
        answer = await side.post(CHAT, body)
        fence = await side.post(CHAT, chat(data_part(new_clip())))
        assert fence.status == 200, fence.body
        results.append((answer, await _growth(side, before, expected)))
    return results


async def _growth(
    side: Side, before: tuple[float, float], expected: tuple[int, int]
) -> tuple[float, float]:
    """The growth, the fence's query taken off."""
    deadline = asyncio.get_running_loop().time() + METRICS_WAIT_SECONDS
    while True:
        queries, hits = await side.mm_cache()
        grown = (queries - before[0] - 1, hits - before[1])
        if grown == expected or asyncio.get_running_loop().time() > deadline:
            return grown
        await asyncio.sleep(0.1)


# --- what is compared -----------------------------------------------------------------------


def assert_fields_are_vllms(stub: Any, engine: Any, where: str) -> None:
    """The stub's keys are vLLM's (bar its report), recursively through dicts and the first
    element of lists; a null in one is a null in the other."""
    if isinstance(stub, dict) and isinstance(engine, dict):
        extra = set(stub) - set(engine) - STUB_ONLY_FIELDS
        assert not extra, f"{where}: the stub adds {sorted(extra)} (vLLM has {sorted(engine)})"
        for key in set(stub) & set(engine):
            assert (stub[key] is None) == (engine[key] is None), f"{where}.{key}: null in one"
            assert_fields_are_vllms(stub[key], engine[key], f"{where}.{key}")
    elif isinstance(stub, list) and isinstance(engine, list) and stub and engine:
        assert_fields_are_vllms(stub[0], engine[0], f"{where}[0]")


def textless(stub: Any, engine: Any) -> tuple[Any, Any]:
    """Both chunks without their delta when the engine's is empty: a random model's token that
    decodes to no text yet (part of a multi-byte character) is an empty delta under a tool
    parser, and the stub, one word a token, has no such token."""
    delta = engine["choices"][0].get("delta") if engine.get("choices") else None
    if delta != {}:
        return stub, engine
    drop = [
        {**chunk, "choices": [{**chunk["choices"][0], "delta": None}]} for chunk in (stub, engine)
    ]
    return drop[0], drop[1]


def placeholders(ids: list[int], side: Side) -> int:
    return sum(1 for token in ids if token == side.placeholder)


def stream_shape(events: list[Any]) -> list[str]:
    """The sequence as kinds: role, token, finish (a token's chunk with the finish_reason),
    usage, DONE."""
    kinds = []
    for event in events:
        if event == "[DONE]":
            kinds.append("DONE")
        elif not event["choices"]:
            kinds.append("usage")
        elif "role" in event["choices"][0]["delta"]:
            kinds.append("role")
        elif event["choices"][0]["finish_reason"] is not None:
            kinds.append("finish")
        else:
            kinds.append("token")
    return kinds


# --- plain answers ----------------------------------------------------------------------------


async def test_a_plain_answer_and_its_token_ids(sides: list[Side], new_clip: Any) -> None:
    body = chat(data_part(new_clip()), return_token_ids=True)
    engine, stub = await both(sides, body)
    assert (engine.status, stub.status) == (200, 200), (engine.body, stub.body)
    assert stub.content_type == engine.content_type == "application/json"
    assert_fields_are_vllms(stub.json(), engine.json(), "answer")
    for side, answer in zip(sides, (engine.json(), stub.json()), strict=True):
        choice, usage = answer["choices"][0], answer["usage"]
        assert answer["object"] == "chat.completion", side.name
        assert placeholders(answer["prompt_token_ids"], side) == 25, side.name
        assert len(answer["prompt_token_ids"]) == usage["prompt_tokens"], side.name
        assert len(choice["token_ids"]) == usage["completion_tokens"] == MAX_TOKENS, side.name
        assert choice["finish_reason"] == "length", side.name
        assert choice["message"]["role"] == "assistant", side.name


async def test_without_return_token_ids_the_fields_are_null(
    sides: list[Side], new_clip: Any
) -> None:
    engine, stub = await both(sides, chat(data_part(new_clip())))
    assert_fields_are_vllms(stub.json(), engine.json(), "answer")
    for answer in (engine.json(), stub.json()):
        assert answer["prompt_token_ids"] is None and answer["choices"][0]["token_ids"] is None


# --- streams --------------------------------------------------------------------------------


@pytest.mark.parametrize("token_ids", [True, False])
@pytest.mark.parametrize("usage", [True, False])
async def test_a_stream_is_the_same_sequence(
    sides: list[Side], new_clip: Any, token_ids: bool, usage: bool
) -> None:
    options = {"stream_options": {"include_usage": True}} if usage else {}
    body = chat(data_part(new_clip()), stream=True, return_token_ids=token_ids, **options)
    engine, stub = await both(sides, body)
    assert (engine.status, stub.status) == (200, 200), (engine.body, stub.body)
    assert stub.content_type == engine.content_type == "text/event-stream; charset=utf-8"
    shapes = [stream_shape(answer.events()) for answer in (engine, stub)]
    tail = ["finish", "usage", "DONE"] if usage else ["finish", "DONE"]
    for side, shape in zip(sides, shapes, strict=True):
        assert shape[0] == "role" and shape[-len(tail) :] == tail, (side.name, shape)
        assert set(shape[1 : -len(tail)]) <= {"token"}, (side.name, shape)
    last_of_kind = [
        dict(zip(shape, a.events(), strict=True))
        for shape, a in zip(shapes, (engine, stub), strict=True)
    ]
    for kind in set(shapes[0]) & set(shapes[1]) - {"DONE"}:
        stub_chunk, engine_chunk = textless(last_of_kind[1][kind], last_of_kind[0][kind])
        assert_fields_are_vllms(stub_chunk, engine_chunk, kind)
    for side, answer in zip(sides, (engine, stub), strict=True):
        events = answer.events()[:-1]
        role = events[0]
        assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}, side.name
        carries = [("prompt_token_ids" in e and e["prompt_token_ids"] is not None) for e in events]
        assert carries == [token_ids] + [False] * (len(events) - 1), side.name
        if token_ids:
            assert placeholders(role["prompt_token_ids"], side) == 25, side.name
            generated = [
                t for e in events[1:] if e["choices"] for t in e["choices"][0]["token_ids"]
            ]
            assert len(generated) == MAX_TOKENS, side.name
        if usage:
            assert events[-1]["usage"]["completion_tokens"] == MAX_TOKENS, side.name


# --- errors ---------------------------------------------------------------------------------


def error_cases() -> dict[str, Any]:
    held, fresh = f"never-sent-{uuid.uuid4().hex}", f"k-{uuid.uuid4().hex}"
    return {
        "cache miss": lambda clip: chat(uuid_part(held)),
        "cache miss, streamed": lambda clip: chat(uuid_part(held), stream=True),
        "data then uuid-only of the same new uuid": lambda clip: chat(
            data_part(clip, fresh), uuid_part(fresh)
        ),
        "a uuid part without its media key": lambda clip: chat({"type": "audio_url", "uuid": "k"}),
        "mm_processor_kwargs": lambda clip: chat(
            data_part(clip), mm_processor_kwargs={"sampling_rate": 16000}
        ),
        "media_io_kwargs": lambda clip: chat(
            data_part(clip), media_io_kwargs={"audio": {"audio_backend": "soundfile"}}
        ),
        "tools: []": lambda clip: chat(data_part(clip), tools=[]),
        "tool_choice without tools": lambda clip: chat(data_part(clip), tool_choice="required"),
        "a named tool_choice no tool has": lambda clip: chat(
            data_part(clip),
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
            tool_choice={"type": "function", "function": {"name": "g"}},
        ),
        "both kwargs": lambda clip: chat(
            data_part(clip),
            mm_processor_kwargs={"sampling_rate": 16000},
            media_io_kwargs={"audio": {"audio_backend": "soundfile"}},
        ),
    }


@pytest.mark.parametrize("case", list(error_cases()))
async def test_an_error_is_vllms_byte_for_byte(sides: list[Side], new_clip: Any, case: str) -> None:
    body = error_cases()[case](new_clip())
    results = await cache_effects(sides, new_clip, body, (0, 0))
    (engine, engine_counts), (stub, stub_counts) = results
    assert engine.status == stub.status == 400, (engine.body, stub.body)
    assert stub.body == engine.body
    assert stub.content_type == engine.content_type == "application/json"
    assert stub_counts == engine_counts == (0, 0)  # a refused request counts nothing


# --- the processor cache --------------------------------------------------------------------


async def test_cache_effects_of_each_kind_of_item(sides: list[Side], new_clip: Any) -> None:
    key = f"k-{uuid.uuid4().hex}"
    clip = new_clip()
    steps = {
        "data + new uuid": (chat(data_part(clip, key)), (1, 0)),
        "uuid-only hit": (chat(uuid_part(key)), (1, 1)),
        "held uuid with data": (chat(data_part(clip, key)), (1, 1)),
        "new data, no uuid": (chat(data_part(clip)), (1, 0)),  # its content hash, not the uuid
        "the same data again": (chat(data_part(clip)), (1, 1)),
    }
    twice = f"k-{uuid.uuid4().hex}"
    steps["a new uuid with data twice in one request"] = (
        chat(data_part(clip, twice), data_part(clip, twice)),
        (2, 1),
    )
    for step, (body, expected) in steps.items():
        results = await cache_effects(sides, new_clip, body, expected)
        (engine, engine_counts), (stub, stub_counts) = results
        assert engine.status == stub.status == 200, (step, engine.body, stub.body)
        assert engine_counts == stub_counts == expected, step


# --- forced tool calls ------------------------------------------------------------------------

TOOLS = [{"type": "function", "function": {"name": "set_mode", "parameters": MODE_SCHEMA}}]
NAMED = {"type": "function", "function": {"name": "set_mode"}}
CALL_MAX_TOKENS = 60  # the call is ~26 tokens on the tiny engine (a character or two each)
# (tool_choice, extra fields, finish_reason, how vLLM writes the arguments)
CHOICES = {
    "named": (NAMED, {}, "stop", {"separators": (",", ":")}),
    # one call only: without it the random model never closes the array of calls
    "required": ("required", {"parallel_tool_calls": False}, "tool_calls", {}),
}


def ended(answer: Any) -> Any:
    """An answer or chunk without `stop_reason`: whether the random model ends a call with the
    tokenizer's end of turn (null) or another stop token (its id) is chance."""
    if isinstance(answer, dict) and answer.get("choices"):
        answer["choices"][0].pop("stop_reason", None)
    return answer


def tool_body(clip: str, choice: str, **extra: Any) -> dict[str, Any]:
    tool_choice, more, _, _ = CHOICES[choice]
    fields = {"tools": TOOLS, "tool_choice": tool_choice, **more, **extra}
    return chat(data_part(clip), **{**fields, "max_tokens": CALL_MAX_TOKENS})


def assert_arguments(arguments: str, choice: str, where: str) -> None:
    """Arguments that parse, fit the schema, and are written as vLLM writes them."""
    parsed = json.loads(arguments)
    jsonschema.validate(parsed, MODE_SCHEMA)
    assert arguments == json.dumps(parsed, **CHOICES[choice][3]), where


@pytest.mark.parametrize("choice", list(CHOICES))
async def test_a_forced_call_is_vllms_message(
    sides: list[Side], new_clip: Any, choice: str
) -> None:
    engine, stub = await both(sides, tool_body(new_clip(), choice))
    assert (engine.status, stub.status) == (200, 200), (engine.body, stub.body)
    assert_fields_are_vllms(ended(stub.json()), ended(engine.json()), "answer")
    for side, answer in zip(sides, (engine.json(), stub.json()), strict=True):
        choice_data = answer["choices"][0]
        message = choice_data["message"]
        assert message["content"] == "", side.name
        [call] = message["tool_calls"]
        assert set(call) == {"id", "type", "function"}, side.name
        assert call["id"].startswith("chatcmpl-tool-") and call["type"] == "function", side.name
        assert call["function"]["name"] == "set_mode", side.name
        assert_arguments(call["function"]["arguments"], choice, side.name)
        assert choice_data["finish_reason"] == CHOICES[choice][2], side.name


def call_shape(events: list[Any]) -> list[str]:
    """The stream as kinds: role, first (the call's id and name), args, finish, usage, DONE."""
    kinds = []
    for event in events:
        delta = event["choices"][0]["delta"] if event != "[DONE]" and event["choices"] else {}
        if event == "[DONE]" or not event["choices"] or "role" in delta:
            kinds.append(stream_shape([event])[0])
        elif event["choices"][0]["finish_reason"] is not None:
            kinds.append("finish")
        else:
            kinds.append("first" if "id" in delta["tool_calls"][0] else "args")
    return kinds


@pytest.mark.parametrize("choice", list(CHOICES))
async def test_a_streamed_forced_call_is_vllms_sequence(
    sides: list[Side], new_clip: Any, choice: str
) -> None:
    options = {"stream": True, "stream_options": {"include_usage": True}}
    engine, stub = await both(sides, tool_body(new_clip(), choice, **options))
    assert (engine.status, stub.status) == (200, 200), (engine.body, stub.body)
    shapes = [call_shape(answer.events()) for answer in (engine, stub)]
    for side, shape in zip(sides, shapes, strict=True):
        assert shape[:2] == ["role", "first"], (side.name, shape)
        assert shape[-3:] == ["finish", "usage", "DONE"], (side.name, shape)
        assert set(shape[2:-3]) == {"args"}, (side.name, shape)
    last_of_kind = [
        dict(zip(shape, a.events(), strict=True))
        for shape, a in zip(shapes, (engine, stub), strict=True)
    ]
    for kind in set(shapes[0]) - {"DONE"}:
        stub_chunk, engine_chunk = last_of_kind[1][kind], last_of_kind[0][kind]
        assert_fields_are_vllms(ended(stub_chunk), ended(engine_chunk), kind)
    for side, answer in zip(sides, (engine, stub), strict=True):
        chunks = answer.events()[1:-2]
        calls = [c["choices"][0]["delta"].get("tool_calls", []) for c in chunks]
        assert all(call[0]["index"] == 0 for call in calls if call), side.name
        first, *rest = (call[0] for call in calls if call)
        assert first["function"]["name"] == "set_mode", side.name
        assert all(set(r) == {"index", "function"} for r in rest), side.name
        arguments = "".join(call["function"]["arguments"] for call in (first, *rest))
        parsed = json.loads(arguments)
        jsonschema.validate(parsed, MODE_SCHEMA)
        assert chunks[-1]["choices"][0]["finish_reason"] == CHOICES[choice][2], side.name


async def test_a_forced_call_cut_by_max_tokens(sides: list[Side], new_clip: Any) -> None:
    engine, stub = await both(sides, {**tool_body(new_clip(), "named"), "max_tokens": 3})
    assert (engine.status, stub.status) == (200, 200), (engine.body, stub.body)
    assert_fields_are_vllms(stub.json(), engine.json(), "answer")
    for side, answer in zip(sides, (engine.json(), stub.json()), strict=True):
        choice_data = answer["choices"][0]
        assert choice_data["finish_reason"] == "length", side.name
        assert choice_data["stop_reason"] is None, side.name
        [call] = choice_data["message"]["tool_calls"]
        assert answer["usage"]["completion_tokens"] == 3, side.name
        with pytest.raises(json.JSONDecodeError):
            json.loads(call["function"]["arguments"])
