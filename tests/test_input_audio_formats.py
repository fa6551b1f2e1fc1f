"""`input_audio` parts carry only the formats their type allows ("wav" | "mp3", the literal
vLLM 0.33 validates): any other clip is refused with 400 `unsupported_audio_format`, naming
the clip and the setting that sends it, and nothing reaches the upstream."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import InvalidRequest
from gateway.naming.formats import INPUT_AUDIO_FORMAT_BY_MIME, MIME_BY_EXTENSION, input_audio_format
from gateway.stub_upstream import StubState
from tests.conftest import GatewayFactory, chat_body, gateway_error, write_encoded_tone

INPUT_AUDIO_CHAT = {"splice": {"chat_part": "input_audio"}}
CHAT_FIX = 'chat_part = "audio_url"'
RESPONSES_FIX = '[responses] audio = "chat_bridge"'


def write_clip(audio_dir: Path, name: str) -> Path:
    """A clip of the container its extension names (M4A: just its `ftyp` signature, as the
    gateway refuses it before anything would decode it)."""
    path = audio_dir / name
    if name.endswith(".m4a"):
        path.write_bytes(b"\x00\x00\x00\x18ftypM4A \x00\x00\x02\x00" + bytes(1000))
        return path
    kind = {".flac": "FLAC", ".ogg": "OGG", ".opus": "OGG", ".mp3": "MP3", ".wav": "WAV"}
    return write_encoded_tone(path, 0.3, 500.0, kind[path.suffix])


async def post(gateway: Any, route: str, metadata: dict[str, Any]) -> aiohttp.ClientResponse:
    if route == "chat":
        return await gateway.post("/v1/chat/completions", json=chat_body(metadata))
    body = {"model": "m", "input": "Transcribe.", "metadata": metadata}
    response: aiohttp.ClientResponse = await gateway.post("/v1/responses", json=body)
    return response


RESPONSES_SPLICE = {"responses": {"audio": "input_audio"}}  # the bridge sends chat parts
ROUTES = {"chat": (INPUT_AUDIO_CHAT, CHAT_FIX), "responses": (RESPONSES_SPLICE, RESPONSES_FIX)}
# An upstream whose Responses API takes input_audio (vLLM 0.33's refuses every audio part).
ROUTE_PARAMS = [
    "chat",
    pytest.param("responses", marks=pytest.mark.stub(responses_accept_audio=True)),
]


@pytest.mark.parametrize("route", ROUTE_PARAMS)
@pytest.mark.parametrize("name", ["d.flac", "d.ogg", "d.opus", "d.m4a"])
@pytest.mark.parametrize("cache", [{}, {"max_item_bytes": 1}], ids=["cached", "streamed"])
async def test_other_containers_are_refused_before_anything_is_sent(
    make_gateway: GatewayFactory,
    stub: StubState,
    audio_dir: Path,
    route: str,
    name: str,
    cache: dict[str, Any],
) -> None:
    sections, fix = ROUTES[route]
    gateway = await make_gateway(**sections, cache=cache)
    write_clip(audio_dir, name)
    response = await post(gateway, route, {"audio_paths": ["a.wav", name]})
    error = await gateway_error(response, 400, "metadata.audio_paths")
    assert error["code"] == "unsupported_audio_format"
    message = error["message"]
    assert message.startswith(f"metadata.audio_paths[1]: {name!r} is audio/")
    assert "input_audio" in message and "wav or mp3" in message and fix in message
    assert stub.request_count == 0


@pytest.mark.parametrize("route", ROUTE_PARAMS)
@pytest.mark.parametrize("mime", ["audio/flac", "audio/ogg", "audio/webm", "audio/x-m4a"])
async def test_inline_audio_data_of_other_types_is_refused(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, route: str, mime: str
) -> None:
    sections, fix = ROUTES[route]
    gateway = await make_gateway(**sections)
    payload = base64.b64encode(write_clip(audio_dir, "d.flac").read_bytes()).decode()
    response = await post(gateway, route, {"audio_data": f"data:{mime};base64,{payload}"})
    error = await gateway_error(response, 400, "metadata.audio_data")
    assert error["code"] == "unsupported_audio_format"
    assert f"'data:{mime};base64,...' is {mime}" in error["message"]
    assert fix in error["message"]
    assert stub.request_count == 0


@pytest.mark.parametrize("route", ROUTE_PARAMS)
async def test_wav_and_mp3_travel_as_input_audio(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, route: str
) -> None:
    sections, _ = ROUTES[route]
    gateway = await make_gateway(**sections)
    write_clip(audio_dir, "d.mp3")
    response = await post(gateway, route, {"audio_paths": ["a.wav", "d.mp3"]})
    assert response.status == 200, await response.text()
    answer = await response.json()
    assert [clip["container"] for clip in answer["stub"]["clips"]] == ["wav", "mp3"]


async def test_the_fix_the_message_names_works(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    """The same FLAC row goes through as an `audio_url` data URI (the default chat part)."""
    flac = write_clip(audio_dir, "d.flac")
    gateway = await make_gateway(splice={"chat_part": "audio_url"})
    response = await post(gateway, "chat", {"audio_path": "d.flac"})
    assert response.status == 200, await response.text()
    [clip] = (await response.json())["stub"]["clips"]
    assert (clip["container"], clip["bytes"]) == ("flac", flac.stat().st_size)


@given(mime=st.one_of(st.sampled_from([*MIME_BY_EXTENSION.values(), "audio/x-flac"]), st.text()))
def test_input_audio_format_is_wav_or_mp3_or_a_refusal(mime: str) -> None:
    try:
        fmt = input_audio_format(mime, label="l", given="g", param="p", fix="f")
    except InvalidRequest as exc:
        assert (exc.status, exc.code, exc.param) == (400, "unsupported_audio_format", "p")
        assert mime.lower() not in INPUT_AUDIO_FORMAT_BY_MIME
    else:
        assert fmt in ("wav", "mp3")
        assert fmt == INPUT_AUDIO_FORMAT_BY_MIME[mime.lower()]


# --- the stub holds the line as vLLM does ------------------------------------------------------


@pytest.mark.parametrize(("fmt", "status"), [("wav", 200), ("mp3", 200), ("flac", 400)])
async def test_the_stub_takes_only_the_literal_formats(
    stub_server: TestServer, audio_dir: Path, fmt: str, status: int
) -> None:
    """So a gateway that sent `format: "flac"` again would fail the default suite."""
    data = base64.b64encode((audio_dir / "a.wav").read_bytes()).decode()
    part = {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}
    body = {"model": "m", "messages": [{"role": "user", "content": [part]}]}
    async with aiohttp.ClientSession() as session:
        url = stub_server.make_url("/v1/chat/completions")
        async with session.post(url, json=body) as response:
            text = await response.text()
    assert response.status == status, text
    if status == 400:
        assert "input_audio.format 'flac'" in text
