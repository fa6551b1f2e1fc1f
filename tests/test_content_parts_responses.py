"""Audio in a Responses row's input (`input_audio`, an `input_file` naming an audio path or
holding an audio data URI) goes through the chat bridge as the sidechannel does: the official
openai SDK and raw HTTP, against the stub (which, like vLLM 0.33, takes no audio on Responses)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from openai import AsyncOpenAI

from gateway.bridge import UNSUPPORTED
from gateway.stub_upstream import StubState
from tests.conftest import (
    GatewayFactory,
    audio_part,
    b64_of,
    forwarded_json,
    gateway_error,
    gateway_metrics,
    sha256_of,
)

Client = TestClient[web.Request, web.Application]
MODEL = "stub-audio-model"
CHAT_PATH = "/v1/chat/completions"
PROMPT = {"type": "input_text", "text": "Transcribe."}
CHAT_PROMPT = {"type": "text", "text": "Transcribe."}


@pytest.fixture
async def client(gateway: Client) -> AsyncIterator[AsyncOpenAI]:
    base_url = str(gateway.make_url("/v1"))
    async with AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=10) as sdk:
        yield sdk


def file_part(url: str) -> dict[str, Any]:
    return {"type": "input_file", "file_url": url}


def input_audio(path: Path) -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": b64_of(path), "format": "wav"}}


def user(*content: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(content)}


async def post(client: Client, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/v1/responses", json={"model": MODEL, **body})
    assert response.status == 200, await response.text()
    answer: dict[str, Any] = await response.json()
    assert answer["object"] == "response"
    return answer


def sent_chat(stub: StubState) -> list[dict[str, Any]]:
    assert stub.requests[-1].path == CHAT_PATH
    messages: list[dict[str, Any]] = forwarded_json(stub)["messages"]
    return messages


def decoded(stub: StubState) -> list[str]:
    assert stub.last_report is not None
    return [clip["sha256"] for clip in stub.last_report["clips"]]


async def test_the_sdk_sends_an_input_file_path(
    client: AsyncOpenAI, audio_dir: Path, stub: StubState
) -> None:
    clip = audio_dir / "a.wav"
    answer = await client.responses.create(
        model=MODEL,
        input=[user(PROMPT, file_part("file://" + quote(str(clip))))],  # type: ignore[list-item]
    )
    assert answer.output_text
    assert sent_chat(stub) == [{"role": "user", "content": [CHAT_PROMPT, audio_part(clip)]}]
    assert decoded(stub) == [sha256_of(clip)]


async def test_a_streamed_row_with_a_relative_input_file(
    client: AsyncOpenAI, audio_dir: Path, stub: StubState
) -> None:
    stream = await client.responses.create(
        model=MODEL,
        input=[user(file_part("b.wav"), PROMPT)],  # type: ignore[list-item]
        stream=True,
    )
    events = [event.type async for event in stream]
    assert events[0] == "response.created" and events[-1] == "response.completed"
    assert decoded(stub) == [sha256_of(audio_dir / "b.wav")]


async def test_every_carrier_in_its_place(
    gateway: Client, audio_dir: Path, stub: StubState
) -> None:
    """The sidechannel's clip first in the last user message, each part where it stood."""
    a, b, c = (audio_dir / name for name in ("a.wav", "b.wav", "c.wav"))
    data_uri = audio_part(c)["audio_url"]["url"]
    body = {
        "instructions": "Be brief.",
        "input": [
            user(input_audio(a), PROMPT),
            {"role": "assistant", "content": "A tone."},
            user(PROMPT, {"type": "input_file", "file_data": data_uri}, file_part(str(b))),
        ],
        "metadata": {"audio_path": "a.wav"},
    }
    await post(gateway, body)
    chat_audio = {"type": "input_audio", "input_audio": {"data": b64_of(a), "format": "wav"}}
    assert sent_chat(stub) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [chat_audio, CHAT_PROMPT]},
        {"role": "assistant", "content": "A tone."},
        {"role": "user", "content": [audio_part(a), CHAT_PROMPT, audio_part(c), audio_part(b)]},
    ]
    assert decoded(stub) == [sha256_of(p) for p in (a, a, c, b)]


async def test_inline_audio_alone_is_bridged(
    gateway: Client, audio_dir: Path, stub: StubState
) -> None:
    await post(gateway, {"input": [user(PROMPT, input_audio(audio_dir / "c.wav"))]})
    assert decoded(stub) == [sha256_of(audio_dir / "c.wav")]
    samples = await gateway_metrics(gateway)
    assert samples['audio_gateway_clips_total{carrier="content_part"}'] == 0  # nothing to resolve


@pytest.mark.parametrize(
    "splice",
    [
        {"mode": "file_url"},
        {"chat_part": "input_audio"},
        {"part_uuid": True},
        {"repeats": "reference"},
    ],
    ids=["file_url", "input_audio", "part_uuid", "reference"],
)
async def test_every_splice_mode(
    make_gateway: GatewayFactory, audio_dir: Path, stub: StubState, splice: dict[str, Any]
) -> None:
    gateway = await make_gateway(splice=splice)
    body = {"input": [user(file_part("a.wav"), PROMPT)]}
    for _ in range(2):
        await post(gateway, body)
    assert decoded(stub) == [sha256_of(audio_dir / "a.wav")]
    assert stub.decodes == (1 if "repeats" in splice else 2)


async def test_errors_name_the_input_part(gateway: Client, stub: StubState) -> None:
    body = {
        "model": MODEL,
        "instructions": "Be brief.",
        "input": [user(PROMPT), user(PROMPT, file_part("file:///etc/passwd.wav"))],
    }
    response = await gateway.post("/v1/responses", json=body)
    error = await gateway_error(response, 403, "input[1].content[1].file_url")
    assert "'file:///etc/passwd.wav'" in error["message"]
    body["input"] = [user(file_part("file://server/a.wav"))]
    response = await gateway.post("/v1/responses", json=body)
    error = await gateway_error(response, 400, "input[0].content[0].file_url")
    assert "host 'server'" in error["message"]
    assert stub.requests == []


@pytest.mark.parametrize(
    "other",
    [
        file_part("file:///data/report.pdf"),
        {"type": "input_file", "file_id": "file-123"},
        {"type": "input_file", "file_data": "data:application/pdf;base64,JVBERg=="},
        file_part("https://example.invalid/a.wav"),
    ],
    ids=["pdf-path", "file_id", "pdf-data", "http-url"],
)
async def test_a_non_audio_file_in_an_audio_row_is_refused(
    gateway: Client, stub: StubState, other: dict[str, Any]
) -> None:
    body = {"model": MODEL, "input": [user(file_part("a.wav")), user(PROMPT, other)]}
    response = await gateway.post("/v1/responses", json=body)
    error = await gateway_error(response, 400, "input[1].content[1]")
    assert error["code"] == UNSUPPORTED
    assert stub.requests == []


async def test_a_row_without_audio_goes_to_responses_untouched(
    gateway: Client, stub: StubState
) -> None:
    raw = (
        b'{"model":"m", "input":[{"role":"user","content":[{"type":"input_file",'
        b'"file_url":"file:///data/report.pdf"},{"type":"input_text","text":"Sum up."}]}]}'
    )
    response = await gateway.post(
        "/v1/responses", data=raw, headers={"Content-Type": "application/json"}
    )
    assert (stub.requests[-1].path, stub.requests[-1].body) == ("/v1/responses", raw)
    assert response.status in (200, 400)  # the stub judges it as vLLM would


async def test_pass_still_bridges_but_leaves_the_path(
    make_gateway: GatewayFactory, audio_dir: Path, stub: StubState
) -> None:
    """vLLM's Responses API takes no audio, so the row is bridged; the path part reaches vLLM's
    chat route as a file:// URL for it to read (the stub reads under the audio root's parent)."""
    gateway = await make_gateway(sidechannel={"content_parts": "pass"})
    url = "file://" + quote(str(audio_dir / "a.wav"))
    await post(gateway, {"input": [user(file_part(url))]})
    assert sent_chat(stub)[0]["content"] == [{"type": "audio_url", "audio_url": {"url": url}}]
    assert decoded(stub) == [sha256_of(audio_dir / "a.wav")]
