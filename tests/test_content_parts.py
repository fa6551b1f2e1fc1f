"""Chat content parts that name a path (`file://`, a bare path, `s3://`), resolved by the gateway
as the sidechannel is, and replaced where they stand: over real HTTP against the stub."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.audio.samples import write_tone
from gateway.config import ConfigError, validate_config
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
PROMPT = {"type": "text", "text": "Transcribe the audio."}


def url_part(url: str, **extra: Any) -> dict[str, Any]:
    return {"type": "audio_url", "audio_url": {"url": url}, **extra}


def file_url(path: Path) -> str:
    return "file://" + quote(str(path))


def chat(*contents: list[dict[str, Any]] | str, **extra: Any) -> dict[str, Any]:
    """A conversation: user, assistant, user, ... with these contents."""
    roles = ("user", "assistant")
    messages = [{"role": roles[i % 2], "content": c} for i, c in enumerate(contents)]
    return {"model": "stub-audio-model", "messages": messages, **extra}


async def post(client: Client, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status == 200, await response.text()
    answer: dict[str, Any] = await response.json()
    return answer


def sent_messages(stub: StubState) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = forwarded_json(stub)["messages"]
    return messages


# --- the forms of a path ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spell",
    [
        pytest.param(lambda p: file_url(p), id="file:///abs"),
        pytest.param(lambda p: "file://localhost" + quote(str(p)), id="file://localhost/abs"),
        pytest.param(lambda p: "file:" + quote(str(p)), id="file:/abs"),
        pytest.param(lambda p: "FILE://" + quote(str(p)), id="FILE:///abs"),
        pytest.param(lambda p: str(p), id="bare absolute"),
        pytest.param(lambda p: p.name, id="relative to audio.root"),
        pytest.param(lambda p: file_url(p.parent / ".." / "audio" / p.name), id="dots"),
        pytest.param(lambda p: file_url(p).replace("/a.wav", "/%2E%2e/audio/a.wav"), id="%2e%2e"),
    ],
)
async def test_a_path_part_becomes_the_clip_in_place(
    gateway: Client, audio_dir: Path, stub: StubState, spell: Any
) -> None:
    clip = audio_dir / "a.wav"
    body = chat([PROMPT, url_part(spell(clip))])
    answer = await post(gateway, body)
    assert sent_messages(stub)[0]["content"] == [PROMPT, audio_part(clip)]
    assert [c["sha256"] for c in answer["stub"]["clips"]] == [sha256_of(clip)]


async def test_percent_encoded_names_are_decoded(
    gateway: Client, audio_dir: Path, stub: StubState
) -> None:
    clip = audio_dir / "a b#1é.wav"
    write_tone(clip, 0.1, 300.0)
    await post(gateway, chat([url_part(file_url(clip))]))
    assert sent_messages(stub)[0]["content"] == [audio_part(clip)]


async def test_bare_string_form_comes_back_as_an_object(
    gateway: Client, audio_dir: Path, stub: StubState
) -> None:
    """vLLM's bare-string `audio_url` form; the part's other keys stay."""
    part = {"type": "audio_url", "audio_url": "b.wav", "uuid": "client-chosen"}
    await post(gateway, chat([part, PROMPT]))
    sent = sent_messages(stub)[0]["content"]
    assert sent == [
        {**audio_part(audio_dir / "b.wav"), "uuid": "client-chosen"},
        PROMPT,
    ]


async def test_every_message_and_the_sidechannel_each_in_their_place(
    gateway: Client, audio_dir: Path, stub: StubState
) -> None:
    a, b, c = (audio_dir / name for name in ("a.wav", "b.wav", "c.wav"))
    body = chat(
        [PROMPT, url_part(file_url(a))],
        "It is a tone.",
        [url_part("c.wav"), PROMPT, url_part(str(b))],
        metadata={"audio_path": "b.wav"},
    )
    answer = await post(gateway, body)
    messages = sent_messages(stub)
    assert messages[0]["content"] == [PROMPT, audio_part(a)]
    assert messages[1]["content"] == "It is a tone."
    # the sidechannel's clip first, then the message's own parts in their order
    assert messages[2]["content"] == [audio_part(b), audio_part(c), PROMPT, audio_part(b)]
    assert "metadata" not in forwarded_json(stub)
    assert [x["sha256"] for x in answer["stub"]["clips"]] == [sha256_of(p) for p in (a, b, c, b)]


async def test_urls_for_vllm_are_left_alone(
    gateway: Client, audio_dir: Path, stub: StubState
) -> None:
    """data: URIs, http(s) URLs and other schemes, and parts that are not ours, pass as sent
    (the body byte for byte: nothing to resolve)."""
    data = audio_part(audio_dir / "a.wav")
    content = [
        data,
        url_part("https://example.invalid/a.wav"),
        url_part("ftp://example.invalid/a.wav"),
        {
            "type": "input_audio",
            "input_audio": {"data": b64_of(audio_dir / "a.wav"), "format": "wav"},
        },
        {"type": "audio_url", "audio_url": {"url": 7}},
        {"type": "audio_url"},
        {"type": "text", "text": "file:///etc/passwd"},
    ]
    body = chat(content)
    response = await gateway.post("/v1/chat/completions", json=body)
    assert response.status in (200, 400)  # the stub judges the foreign URLs as vLLM does
    assert forwarded_json(stub)["messages"][0]["content"] == content


# --- [splice] modes -------------------------------------------------------------------------------


async def test_file_url_mode_sends_the_real_path(
    make_gateway: GatewayFactory, audio_dir: Path, stub: StubState
) -> None:
    client = await make_gateway(splice={"mode": "file_url"})
    await post(client, chat([url_part("a.wav", uuid="client-uuid")]))
    real = Path(os.path.realpath(audio_dir / "a.wav")).as_uri()
    assert sent_messages(stub)[0]["content"] == [url_part(real, uuid="client-uuid")]


async def test_input_audio_mode_replaces_the_part_type(
    make_gateway: GatewayFactory, audio_dir: Path, stub: StubState
) -> None:
    client = await make_gateway(splice={"chat_part": "input_audio"})
    await post(client, chat([PROMPT, url_part(file_url(audio_dir / "c.wav"))]))
    data = {"data": b64_of(audio_dir / "c.wav"), "format": "wav"}
    assert sent_messages(stub)[0]["content"] == [
        PROMPT,
        {"type": "input_audio", "input_audio": data},
    ]


async def test_part_uuid_names_the_bytes(
    make_gateway: GatewayFactory, audio_dir: Path, stub: StubState
) -> None:
    client = await make_gateway(splice={"part_uuid": True})
    await post(client, chat([url_part("a.wav")]))
    sent = sent_messages(stub)[0]["content"][0]
    assert sent == {**audio_part(audio_dir / "a.wav"), "uuid": sha256_of(audio_dir / "a.wav")}


async def test_a_four_turn_conversation_costs_one_decode_by_reference(
    make_gateway: GatewayFactory, audio_dir: Path, stub: StubState
) -> None:
    """Each turn re-sends the conversation, the clip's part included: vLLM decodes it once."""
    client = await make_gateway(splice={"repeats": "reference"})
    turns: list[list[dict[str, Any]] | str] = [[url_part(file_url(audio_dir / "a.wav")), PROMPT]]
    for turn in range(4):
        await post(client, chat(*turns))
        turns += [f"answer {turn}", [{"type": "text", "text": f"question {turn}"}]]
    assert stub.decodes == 1
    first = sent_messages(stub)[0]["content"][0]
    assert first["type"] == "audio_url" and first["audio_url"] is None
    assert first["uuid"] == sha256_of(audio_dir / "a.wav")


# --- limits and refusals --------------------------------------------------------------------------


async def test_max_clips_counts_every_carrier(
    make_gateway: GatewayFactory, stub: StubState
) -> None:
    client = await make_gateway(audio={"max_clips": 2})
    body = chat([url_part("a.wav"), url_part("b.wav")], metadata={"audio_path": "c.wav"})
    response = await client.post("/v1/chat/completions", json=body)
    error = await gateway_error(response, 400, "messages[0].content[1].audio_url.url")
    assert error["code"] == "too_many_clips"
    assert "3 audio clips" in error["message"] and "limit of 2" in error["message"]
    assert stub.requests == []


@pytest.mark.parametrize(
    ("url", "status", "code"),
    [
        ("file://server/a.wav", 400, "invalid_audio_reference"),
        ("file:///x/a.wav?download=1", 400, "invalid_audio_reference"),
        ("file:a.wav", 400, "invalid_audio_reference"),
        ("file:///x/a%00.wav", 400, "invalid_audio_reference"),
        ("a\x00.wav", 400, "invalid_audio_reference"),
        ("file:///etc/passwd.wav", 403, "audio_path_forbidden"),
        ("../outside.wav", 403, "audio_path_forbidden"),
        ("file://{root}/%2e%2e/outside.wav", 403, "audio_path_forbidden"),
        ("missing.wav", 404, "audio_not_found"),
        ("notes.txt", 400, "unsupported_audio_format"),
        ("fake.wav", 400, "not_audio"),
        ("dir.wav", 400, "not_a_regular_file"),
    ],
)
async def test_bad_path_parts_are_refused_by_name(
    gateway: Client, audio_dir: Path, stub: StubState, url: str, status: int, code: str
) -> None:
    (audio_dir.parent / "outside.wav").write_bytes((audio_dir / "a.wav").read_bytes())
    (audio_dir / "fake.wav").write_bytes(b"not audio at all, just text")
    (audio_dir / "dir.wav").mkdir()
    url = url.format(root=quote(str(audio_dir)))
    body = chat("Hello.", "Hi.", [PROMPT, url_part(url)])
    response = await gateway.post("/v1/chat/completions", json=body)
    error = await gateway_error(response, status, "messages[2].content[1].audio_url.url")
    assert error["code"] == code
    assert repr(url) in error["message"]
    assert stub.requests == []


async def test_a_fifo_is_not_a_regular_file(
    gateway: Client, audio_dir: Path, stub: StubState
) -> None:
    os.mkfifo(audio_dir / "pipe.wav")
    response = await gateway.post("/v1/chat/completions", json=chat([url_part("pipe.wav")]))
    error = await gateway_error(response, 400, "messages[0].content[0].audio_url.url")
    assert error["code"] == "not_a_regular_file"
    assert stub.requests == []


# --- the switch and the roots ---------------------------------------------------------------------


async def test_pass_relays_path_parts_untouched(
    make_gateway: GatewayFactory, stub: StubState
) -> None:
    client = await make_gateway(sidechannel={"content_parts": "pass"})
    body = chat([url_part("file://server/a.wav"), url_part("a.wav")])
    await client.post("/v1/chat/completions", json=body)
    assert forwarded_json(stub) == body


async def test_no_root_names_audio_root_and_the_switch(
    make_gateway: GatewayFactory, audio_dir: Path, stub: StubState
) -> None:
    client = await make_gateway(audio={"root": ""})
    response = await client.post(
        "/v1/chat/completions", json=chat([url_part(file_url(audio_dir / "a.wav"))])
    )
    error = await gateway_error(response, 400, "messages[0].content[0].audio_url.url")
    assert error["code"] == "audio_root_unset"
    assert "audio.root" in error["message"] and 'content_parts = "pass"' in error["message"]
    assert stub.requests == []


async def test_allowed_roots_alone_admit_absolute_paths_only(
    make_gateway: GatewayFactory, audio_dir: Path, stub: StubState
) -> None:
    client = await make_gateway(audio={"root": "", "allowed_roots": [str(audio_dir)]})
    await post(client, chat([url_part(file_url(audio_dir / "a.wav"))]))
    assert sent_messages(stub)[0]["content"] == [audio_part(audio_dir / "a.wav")]
    response = await client.post("/v1/chat/completions", json=chat([url_part("a.wav")]))
    error = await gateway_error(response, 400, "messages[0].content[0].audio_url.url")
    assert error["code"] == "audio_root_unset" and "relative path 'a.wav'" in error["message"]


# --- metrics and the openai SDK -------------------------------------------------------------------


async def test_clips_are_counted_by_carrier(gateway: Client) -> None:
    before = await gateway_metrics(gateway)
    assert before['audio_gateway_clips_total{carrier="content_part"}'] == 0
    assert before['audio_gateway_clips_total{carrier="sidechannel"}'] == 0
    body = chat([url_part("a.wav"), url_part("b.wav")], metadata={"audio_path": "c.wav"})
    await post(gateway, body)
    after = await gateway_metrics(gateway)
    assert after['audio_gateway_clips_total{carrier="content_part"}'] == 2
    assert after['audio_gateway_clips_total{carrier="sidechannel"}'] == 1


async def test_the_openai_sdk_sends_file_urls_as_nemo_skills_does(
    gateway: Client, audio_dir: Path, stub: StubState
) -> None:
    sdk = openai.AsyncOpenAI(base_url=str(gateway.make_url("/v1")), api_key="unused")
    async with sdk:
        answer = await sdk.chat.completions.create(
            model="stub-audio-model",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "audio_url", "audio_url": {"url": file_url(audio_dir / "b.wav")}},  # type: ignore[list-item,misc]
                        {"type": "text", "text": "Transcribe."},
                    ],
                }
            ],
        )
    assert answer.choices[0].message.content
    assert sent_messages(stub)[0]["content"][0] == audio_part(audio_dir / "b.wav")


def test_a_bad_switch_value_names_the_key() -> None:
    with pytest.raises(
        ConfigError, match=r"sidechannel\.content_parts: Input should be 'resolve' or 'pass'"
    ):
        validate_config({"sidechannel": {"content_parts": "maybe"}})


async def test_a_client_uuid_never_sends_a_clip_by_reference(
    make_gateway: GatewayFactory, audio_dir: Path, stub: StubState
) -> None:
    """In reference mode the gateway's uuid (the sha256 of the bytes) replaces the client's."""
    client = await make_gateway(splice={"repeats": "reference"})
    body = chat([url_part("a.wav", uuid="client-chosen")])
    for _ in range(2):
        await post(client, body)
    sent = sent_messages(stub)[0]["content"][0]
    assert sent["uuid"] == sha256_of(audio_dir / "a.wav") and stub.decodes == 1


async def test_inline_sidechannel_audio_and_path_parts_mix(
    gateway: Client, audio_dir: Path, stub: StubState
) -> None:
    inline = audio_part(audio_dir / "c.wav")["audio_url"]["url"]
    body = chat([url_part("a.wav"), PROMPT], metadata={"audio_data": inline})
    answer = await post(gateway, body)
    sent = sent_messages(stub)[0]["content"]
    assert sent == [audio_part(audio_dir / "c.wav"), audio_part(audio_dir / "a.wav"), PROMPT]
    assert [c["sha256"] for c in answer["stub"]["clips"]] == [
        sha256_of(audio_dir / "c.wav"),
        sha256_of(audio_dir / "a.wav"),
    ]


async def test_a_streamed_answer_through_the_sdk(
    gateway: Client, audio_dir: Path, stub: StubState
) -> None:
    sdk = openai.AsyncOpenAI(base_url=str(gateway.make_url("/v1")), api_key="unused")
    async with sdk:
        stream = await sdk.chat.completions.create(
            model="stub-audio-model",
            messages=chat([url_part("c.wav"), PROMPT])["messages"],
            stream=True,
        )
        text = "".join(
            [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
        )
    assert text
    assert sent_messages(stub)[0]["content"][0] == audio_part(audio_dir / "c.wav")
