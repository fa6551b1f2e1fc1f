"""POST /v1/responses in `[responses] audio = "input_audio"` mode (the splice into Responses
input, for an upstream whose Responses API takes `input_audio`; the stub here emulates one):
where the audio goes, what metadata is left, errors identical to chat, and SSE relayed event by
event. Checked on the body the stub received and on the sha256 of the audio it decoded. The
default stub, like vLLM 0.33, refuses audio parts on /v1/responses (the last tests). The default
mode, the chat bridge, is tests/test_bridge.py."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.stub_upstream import StubState
from tests.conftest import (
    GatewayFactory,
    b64_of,
    chat_body,
    forwarded_json,
    gateway_error,
    read_event,
    sha256_of,
    write_encoded_tone,
)

Client = TestClient[web.Request, web.Application]
MODEL = "stub-audio-model"
INPUT_AUDIO_MODE = {"audio": "input_audio"}

pytestmark = pytest.mark.stub(responses_accept_audio=True)


@pytest.fixture
async def gateway(make_gateway: GatewayFactory) -> Client:
    """A gateway splicing `input_audio` parts into Responses input."""
    return await make_gateway(responses=INPUT_AUDIO_MODE)


def responses_body(metadata: dict[str, Any] | None, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "input": "Transcribe the audio.", **fields}
    if metadata is not None:
        body["metadata"] = metadata
    return body


def input_audio(path: Path, format: str = "wav") -> dict[str, Any]:
    """The part the stub must receive for `path`: its exact bytes as bare base64."""
    return {"type": "input_audio", "input_audio": {"data": b64_of(path), "format": format}}


def input_text(text: str) -> dict[str, str]:
    return {"type": "input_text", "text": text}


async def respond(client: Client, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/v1/responses", json=body)
    assert response.status == 200, await response.text()
    answer: dict[str, Any] = await response.json()
    return answer


def clip_shas(answer: dict[str, Any]) -> list[str]:
    return [clip["sha256"] for clip in answer["stub"]["clips"]]


# --- where the audio goes --------------------------------------------------------------------


async def test_string_input_becomes_one_user_message_audio_first(
    gateway: Client, stub: StubState, audio_dir: Path
) -> None:
    question = "What is it? — ¿Qué es? 何ですか"
    answer = await respond(gateway, responses_body({"audio_path": "a.wav"}, input=question))
    clip = audio_dir / "a.wav"
    assert forwarded_json(stub)["input"] == [
        {"role": "user", "content": [input_audio(clip), input_text(question)]}
    ]
    assert clip_shas(answer) == [sha256_of(clip)]
    assert answer["stub"]["last_message_part_types"] == ["input_audio", "input_text"]


async def test_string_content_of_a_message_becomes_parts(
    gateway: Client, stub: StubState, audio_dir: Path
) -> None:
    items = [
        {"role": "system", "content": "Answer briefly."},
        {"type": "message", "role": "user", "content": "What is said?"},
    ]
    answer = await respond(gateway, responses_body({"audio_path": "b.wav"}, input=items))
    clip = audio_dir / "b.wav"
    assert forwarded_json(stub)["input"] == [
        {"role": "system", "content": "Answer briefly."},
        {
            "type": "message",
            "role": "user",
            "content": [input_audio(clip), input_text("What is said?")],
        },
    ]
    assert clip_shas(answer) == [sha256_of(clip)]


async def test_list_content_keeps_its_parts_after_the_audio(
    gateway: Client, stub: StubState, audio_dir: Path
) -> None:
    parts = [input_text("first"), input_text("second")]
    items = [{"role": "user", "content": parts}]
    await respond(gateway, responses_body({"audio_path": "c.wav"}, input=items))
    assert forwarded_json(stub)["input"] == [
        {"role": "user", "content": [input_audio(audio_dir / "c.wav"), *parts]}
    ]


@pytest.mark.parametrize(
    "items",
    [
        [{"role": "system", "content": "Be terse."}],
        [
            {"role": "developer", "content": "Be terse."},
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Send it.", "annotations": []}],
            },
        ],
        [],
    ],
    ids=["system-only", "developer-and-assistant", "empty"],
)
async def test_without_a_user_message_one_is_appended(
    gateway: Client, stub: StubState, audio_dir: Path, items: list[dict[str, Any]]
) -> None:
    answer = await respond(gateway, responses_body({"audio_path": "a.wav"}, input=items))
    clip = audio_dir / "a.wav"
    assert forwarded_json(stub)["input"] == [
        *items,
        {"role": "user", "content": [input_audio(clip)]},
    ]
    assert clip_shas(answer) == [sha256_of(clip)]


async def test_without_input_the_audio_is_the_whole_input(
    gateway: Client, stub: StubState, audio_dir: Path
) -> None:
    body = responses_body({"audio_path": "a.wav"})
    del body["input"]
    await respond(gateway, body)
    assert forwarded_json(stub)["input"] == [
        {"role": "user", "content": [input_audio(audio_dir / "a.wav")]}
    ]


async def test_only_the_last_user_message_receives_the_audio(
    gateway: Client, stub: StubState, audio_dir: Path
) -> None:
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "earlier question"},
        {"role": "assistant", "content": "earlier answer"},
        {"role": "user", "content": [input_text("this one")]},
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
    ]
    answer = await respond(gateway, responses_body({"audio_path": "b.wav"}, input=items))
    sent = forwarded_json(stub)["input"]
    assert sent[:2] == items[:2]
    assert sent[2] == {
        "role": "user",
        "content": [input_audio(audio_dir / "b.wav"), *items[2]["content"]],
    }
    assert sent[3] == items[3]
    assert clip_shas(answer) == [sha256_of(audio_dir / "b.wav")]


async def test_several_clips_arrive_in_the_order_given(
    gateway: Client, stub: StubState, audio_dir: Path
) -> None:
    names = ["c.wav", "a.wav", "b.wav", "a.wav"]
    answer = await respond(gateway, responses_body({"audio_paths": names}, input="Compare."))
    paths = [audio_dir / name for name in names]
    assert forwarded_json(stub)["input"] == [
        {"role": "user", "content": [*map(input_audio, paths), input_text("Compare.")]}
    ]
    assert clip_shas(answer) == [sha256_of(path) for path in paths]


# --- the input_audio part --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "format", "container"),
    [("tone.wav", "wav", "wav"), ("tone.mp3", "mp3", "mp3")],
)
async def test_input_audio_carries_bare_base64_and_its_format(
    gateway: Client,
    stub: StubState,
    audio_dir: Path,
    name: str,
    format: str,
    container: str,
) -> None:
    path = audio_dir / name
    if format == "wav":
        path.write_bytes((audio_dir / "b.wav").read_bytes())
    else:
        write_encoded_tone(path, 0.4, 550.0, format.upper())
    answer = await respond(gateway, responses_body({"audio_path": name}))
    part = forwarded_json(stub)["input"][0]["content"][0]
    assert part == input_audio(path, format)
    assert not part["input_audio"]["data"].startswith("data:")
    [clip] = answer["stub"]["clips"]
    assert (clip["sha256"], clip["container"], clip["source"]) == (
        sha256_of(path),
        container,
        "data",
    )


@pytest.mark.parametrize(("mime", "format"), [("audio/wav", "wav"), ("audio/mpeg", "mp3")])
async def test_inline_audio_data_becomes_bare_base64(
    gateway: Client, stub: StubState, audio_dir: Path, mime: str, format: str
) -> None:
    path = write_encoded_tone(audio_dir / "inline.mp3", 0.3, 700.0, "MP3")
    if format == "wav":
        path = audio_dir / "a.wav"
    payload = base64.b64encode(path.read_bytes()).decode()
    answer = await respond(gateway, responses_body({"audio_data": f"data:{mime};base64,{payload}"}))
    assert forwarded_json(stub)["input"][0]["content"][0] == {
        "type": "input_audio",
        "input_audio": {"data": payload, "format": format},
    }
    assert clip_shas(answer) == [sha256_of(path)]


# --- metadata --------------------------------------------------------------------------------


async def test_the_consumed_key_is_removed_and_other_metadata_kept(
    gateway: Client, audio_dir: Path
) -> None:
    metadata = {"trace_id": "t-17", "audio_paths": ["a.wav", "b.wav"], "seed": "3"}
    answer = await respond(gateway, responses_body(metadata))
    assert answer["stub"]["metadata"] == {"trace_id": "t-17", "seed": "3"}
    assert clip_shas(answer) == [sha256_of(audio_dir / "a.wav"), sha256_of(audio_dir / "b.wav")]


@pytest.mark.parametrize("key", ["audio_path", "audio_paths", "audio_data", "audio_url"])
async def test_metadata_emptied_by_the_audio_key_is_dropped(
    gateway: Client, stub: StubState, audio_dir: Path, key: str
) -> None:
    clip = audio_dir / "a.wav"
    value: Any = {
        "audio_path": "a.wav",
        "audio_paths": ["a.wav"],
        "audio_data": f"data:audio/wav;base64,{b64_of(clip)}",
        "audio_url": f"data:audio/wav;base64,{b64_of(clip)}",
    }[key]
    answer = await respond(gateway, responses_body({key: value}))
    assert answer["stub"]["has_metadata"] is False
    assert "metadata" not in forwarded_json(stub)
    assert clip_shas(answer) == [sha256_of(clip)]


async def test_a_request_without_the_sidechannel_is_forwarded_byte_for_byte(
    gateway: Client, stub: StubState
) -> None:
    raw = b'{"model":"m",  "input":"hello", "metadata":{"trace":"x"}}'
    response = await gateway.post(
        "/v1/responses", data=raw, headers={"Content-Type": "application/json"}
    )
    assert response.status == 200
    assert stub.requests[-1].body == raw


# --- errors are the chat route's errors ------------------------------------------------------


@pytest.fixture
def error_cases(audio_dir: Path, tmp_path: Path) -> dict[str, tuple[dict[str, Any], int, str]]:
    """metadata -> (status, param) the gateway must answer on both routes."""
    (audio_dir / "notes.txt").write_text("not audio")
    (audio_dir / "fake.wav").write_text("not audio either, despite the name")
    (tmp_path / "outside.wav").write_bytes((audio_dir / "a.wav").read_bytes())
    (audio_dir / "folder.wav").mkdir()
    uri = f"data:audio/wav;base64,{b64_of(audio_dir / 'a.wav')}"
    return {
        "missing-file": ({"audio_path": "missing.wav"}, 404, "metadata.audio_path"),
        "bad-extension": ({"audio_path": "notes.txt"}, 400, "metadata.audio_path"),
        "not-audio": ({"audio_path": "fake.wav"}, 400, "metadata.audio_path"),
        "not-a-file": ({"audio_paths": ["a.wav", "folder.wav"]}, 400, "metadata.audio_paths"),
        "outside-roots": ({"audio_path": "../outside.wav"}, 403, "metadata.audio_path"),
        "conflicting-keys": (
            {"audio_path": "a.wav", "audio_data": uri},
            400,
            "metadata.audio_data",
        ),
        "empty-list": ({"audio_paths": []}, 400, "metadata.audio_paths"),
        "bad-data-uri": ({"audio_data": "data:text/plain;base64,aGk="}, 400, "metadata.audio_data"),
        "too-many-clips": ({"audio_paths": ["a.wav"] * 17}, 400, "metadata.audio_paths"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing-file",
        "bad-extension",
        "not-audio",
        "not-a-file",
        "outside-roots",
        "conflicting-keys",
        "empty-list",
        "bad-data-uri",
        "too-many-clips",
    ],
)
async def test_errors_are_identical_to_chat(
    gateway: Client,
    stub: StubState,
    error_cases: dict[str, tuple[dict[str, Any], int, str]],
    case: str,
) -> None:
    metadata, status, param = error_cases[case]
    chat = await gateway.post("/v1/chat/completions", json=chat_body(dict(metadata)))
    responses = await gateway.post("/v1/responses", json=responses_body(dict(metadata)))
    chat_error = await gateway_error(chat, status, param)
    assert await gateway_error(responses, status, param) == chat_error
    assert stub.request_count == 0


async def test_inline_audio_without_an_input_audio_format_is_refused(
    gateway: Client, stub: StubState, audio_dir: Path
) -> None:
    uri = f"data:audio/aiff;base64,{b64_of(audio_dir / 'a.wav')}"
    response = await gateway.post("/v1/responses", json=responses_body({"audio_data": uri}))
    error = await gateway_error(response, 400, "metadata.audio_data")
    assert error["code"] == "unsupported_audio_format"
    assert stub.request_count == 0


async def test_a_malformed_input_is_an_error_not_a_crash(gateway: Client, stub: StubState) -> None:
    response = await gateway.post(
        "/v1/responses", json=responses_body({"audio_path": "a.wav"}, input={"role": "user"})
    )
    await gateway_error(response, 400, "input")
    assert stub.request_count == 0


# --- streaming -------------------------------------------------------------------------------


async def test_a_streamed_response_is_relayed_event_by_event(
    gateway: Client, stub: StubState, audio_dir: Path
) -> None:
    body = responses_body({"audio_path": "b.wav"}, stream=True)
    response = await gateway.post("/v1/responses", json=body, headers={"X-Stub-Hold": "1"})
    try:
        assert response.status == 200, await response.text()
        assert response.content_type == "text/event-stream"
        async with asyncio.timeout(5):
            created = await read_event(response.content)
        # the stub has not finished (it holds until released): this event was not buffered
        assert stub.streams_finished == 0
        assert created["event"] == "response.created"
        clips = created["data"]["response"]["stub"]["clips"]
        assert [clip["sha256"] for clip in clips] == [sha256_of(audio_dir / "b.wav")]
    finally:
        stub.hold.set()
    async with asyncio.timeout(5):
        rest = [await read_event(response.content) for _ in range(2)]
        assert await response.content.read() == b""
    assert [event["event"] for event in rest] == [
        "response.output_text.delta",
        "response.completed",
    ]
    assert rest[1]["data"]["response"]["status"] == "completed"
    assert stub.streams_finished == 1


# --- what vLLM 0.33's own Responses API does with audio parts ---------------------------------

vllm_like_stub = pytest.mark.stub(responses_accept_audio=False)  # the default stub


@vllm_like_stub
@pytest.mark.parametrize(
    ("splice", "part_type"), [({}, "input_audio"), ({"mode": "file_url"}, "audio_url")]
)
async def test_the_default_stub_refuses_responses_audio_parts_as_vllm_does(
    make_gateway: GatewayFactory, stub: StubState, splice: dict[str, str], part_type: str
) -> None:
    """Why the bridge is the default: this splice fails on a vLLM 0.33 upstream."""
    gateway = await make_gateway(responses=INPUT_AUDIO_MODE, splice=splice)
    response = await gateway.post("/v1/responses", json=responses_body({"audio_path": "a.wav"}))
    assert response.status == 400
    message = (await response.json())["error"]["message"]
    assert "Input should be 'input_text'" in message
    assert f"(input {part_type!r})" in message
    assert forwarded_json(stub)["input"][0]["content"][0]["type"] == part_type
    assert stub.rejected == 1


@vllm_like_stub
async def test_the_default_stub_refuses_audio_in_an_input_file_as_vllm_does(
    gateway: Client, stub: StubState, audio_dir: Path
) -> None:
    """No sidechannel: passed through untouched, and refused upstream by vLLM's part parser."""
    part = {"type": "input_file", "file_data": b64_of(audio_dir / "a.wav"), "filename": "a.wav"}
    body = responses_body(None, input=[{"role": "user", "content": [part]}])
    response = await gateway.post("/v1/responses", json=body)
    assert response.status == 400
    assert "Unsupported chat content part type" in (await response.json())["error"]["message"]
    assert stub.rejected == 1
