"""The speech-to-text routes: `/v1/audio/transcriptions` and `/v1/audio/translations`.

A multipart upload with a `file` part passes untouched; a JSON body whose metadata names a clip,
or a form with an `audio_path` field instead of a file, becomes the upload vLLM expects. The
stub parses every form as vLLM's FastAPI handler does and reports what arrived.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import shutil
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import FormData, web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai import AsyncOpenAI
from python_multipart.multipart import MultipartParser, parse_options_header

from gateway.app import create_app
from gateway.audio.samples import write_tone
from gateway.stub_upstream import StubState
from gateway.upstream.multipart import (
    AudioUpload,
    FormScanner,
    build_form,
    field_text,
    form_fields,
    text_part,
)
from tests.conftest import (
    GatewayFactory,
    cache_stats,
    gateway_config,
    gateway_error,
    gateway_metrics,
    no_blocking_calls,
    sha256_of,
    write_encoded_tone,
)
from tests.test_cache import SerialExecutor, eventually, serial_executor  # noqa: F401

Client = TestClient[web.Request, web.Application]
TRANSCRIPTIONS = "/v1/audio/transcriptions"
TRANSLATIONS = "/v1/audio/translations"
ROUTES = [TRANSCRIPTIONS, TRANSLATIONS]
MODEL = "stub-audio-model"


def data_uri(path: Path, mime: str = "audio/wav") -> str:
    return f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode()


async def speech_json(client: Client, body: dict[str, Any], route: str = TRANSCRIPTIONS) -> Any:
    response = await client.post(route, json=body)
    assert response.status == 200, await response.text()
    return await response.json()


def received_form(stub: StubState) -> tuple[str, bytes]:
    """The Content-Type and body of the last request the stub received."""
    last = stub.requests[-1]
    return last.headers["Content-Type"], last.body


# --- passthrough: a multipart upload with a `file` part ---------------------------------------


async def test_openai_sdk_upload_passes_through(
    gateway: Client, stub: StubState, audio_dir: Path
) -> None:
    async with AsyncOpenAI(
        base_url=str(gateway.make_url("/v1")), api_key="x", max_retries=0, timeout=10
    ) as client:
        with open(audio_dir / "b.wav", "rb") as clip:
            transcription = await client.audio.transcriptions.create(
                file=clip, model=MODEL, language="en", timestamp_granularities=["segment"]
            )
    report = transcription.model_extra["stub"]
    assert report["clip"]["sha256"] == sha256_of(audio_dir / "b.wav")
    assert report["filename"] == "b.wav"
    assert ["language", "en"] in report["fields"]
    assert ["timestamp_granularities[]", "segment"] in report["fields"]
    assert transcription.model_extra["params"]["timestamp_granularities[]"] == ["segment"]
    assert stub.requests[-1].headers["Authorization"] == "Bearer x"
    assert (await cache_stats(gateway))["misses"] == 0  # nothing of the gateway's own was read


async def test_openai_sdk_json_post_with_metadata(gateway: Client, audio_dir: Path) -> None:
    async with AsyncOpenAI(
        base_url=str(gateway.make_url("/v1")), api_key="x", max_retries=0, timeout=10
    ) as client:
        answer = await client.post(
            "/audio/translations",
            cast_to=object,
            body={"model": MODEL, "temperature": 0.2, "metadata": {"audio_path": "c.wav"}},
        )
    assert isinstance(answer, dict)
    assert answer["stub"]["clip"]["sha256"] == sha256_of(audio_dir / "c.wav")
    assert answer["stub"]["fields"] == [["model", MODEL], ["temperature", "0.2"]]


@pytest.mark.parametrize("route", ROUTES)
async def test_a_multipart_upload_arrives_byte_for_byte(
    gateway: Client, stub: StubState, audio_dir: Path, route: str
) -> None:
    form = FormData()
    form.add_field("model", MODEL)
    form.add_field("audio_path", "c.wav")  # a file part wins: the form is not touched
    form.add_field("file", (audio_dir / "a.wav").read_bytes(), filename="x.wav")
    payload = form()
    body = b"".join([await _bytes_of(payload)])
    response = await gateway.post(route, data=body, headers={"Content-Type": payload.content_type})
    assert response.status == 200, await response.text()
    assert received_form(stub) == (payload.content_type, body)
    assert (await response.json())["stub"]["clip"]["sha256"] == sha256_of(audio_dir / "a.wav")


async def test_a_chunked_upload_is_streamed_through(
    gateway: Client, stub: StubState, audio_dir: Path
) -> None:
    payload = FormData({"model": MODEL})
    payload.add_field("file", (audio_dir / "c.wav").read_bytes(), filename="c.wav")
    writer = payload()
    body = await _bytes_of(writer)

    async def pieces() -> AsyncIterator[bytes]:
        for at in range(0, len(body), 997):  # the part headers arrive cut at odd places
            yield body[at : at + 997]

    headers = {"Content-Type": writer.content_type}
    response = await gateway.post(TRANSCRIPTIONS, data=pieces(), headers=headers)
    assert response.status == 200, await response.text()
    assert stub.requests[-1].body == body
    assert stub.requests[-1].headers.get("Transfer-Encoding") == "chunked"


async def test_an_upload_reaches_the_upstream_before_the_client_has_sent_it_all(
    audio_dir: Path,
) -> None:
    """The client holds back the rest of its upload until the upstream has seen the start:
    a gateway that buffered the body would never let that happen."""
    started = asyncio.Event()
    received: list[bytes] = []

    async def upload(request: web.Request) -> web.Response:
        while chunk := await request.content.readany():
            received.append(chunk)
            started.set()
        return web.json_response({"text": "ok"})

    upstream = web.Application()
    upstream.router.add_post(TRANSCRIPTIONS, upload)
    writer = FormData({"model": MODEL})
    writer.add_field("file", (audio_dir / "c.wav").read_bytes(), filename="c.wav")
    payload = writer()
    body = await _bytes_of(payload)

    async def held_back() -> AsyncIterator[bytes]:
        yield body[:1000]  # the `file` part's headers and its first bytes
        await asyncio.wait_for(started.wait(), 10)
        yield body[1000:]

    async with TestServer(upstream) as server:
        config = gateway_config(str(server.make_url("")).rstrip("/"), audio_dir)
        async with TestClient(TestServer(create_app(config))) as gateway:
            headers = {"Content-Type": payload.content_type}
            response = await gateway.post(TRANSCRIPTIONS, data=held_back(), headers=headers)
            assert response.status == 200, await response.text()
    assert b"".join(received) == body


async def _bytes_of(payload: Any) -> bytes:
    chunks: list[bytes] = []

    class Sink:
        async def write(self, data: bytes) -> None:
            chunks.append(bytes(data))

    await payload.write(Sink())
    return b"".join(chunks)


# --- JSON + metadata ---------------------------------------------------------------------------


async def test_json_audio_path_becomes_the_file_part_with_every_field_in_order(
    gateway: Client, stub: StubState, audio_dir: Path
) -> None:
    body = {
        "model": MODEL,
        "language": "en",
        "temperature": 0.5,
        "seed": 7,
        "use_beam_search": False,
        "timestamp_granularities": ["word", "segment"],
        "response_format": "verbose_json",
        "vllm_xargs": {"k": 1},
        "prompt": None,
        "metadata": {"audio_path": "b.wav", "row": "17"},
    }
    answer = await speech_json(gateway, body)
    report = answer["stub"]
    assert report["clip"]["sha256"] == sha256_of(audio_dir / "b.wav")
    assert report["clip"]["duration_seconds"] == pytest.approx(0.5)
    assert (report["filename"], report["content_type"]) == ("b.wav", "audio/wav")
    assert report["files"] == ["file"]
    assert report["fields"] == [
        ["model", MODEL],
        ["language", "en"],
        ["temperature", "0.5"],
        ["seed", "7"],
        ["use_beam_search", "false"],
        ["timestamp_granularities[]", "word"],
        ["timestamp_granularities[]", "segment"],
        ["response_format", "verbose_json"],
        ["vllm_xargs", '{"k":1}'],
    ]
    params = answer["params"]  # how vLLM's pydantic model read them
    assert params["temperature"] == 0.5 and params["seed"] == 7
    assert params["timestamp_granularities[]"] == ["word", "segment"]
    assert params["vllm_xargs"] == {"k": 1}
    content_type, raw = received_form(stub)
    assert content_type.startswith("multipart/form-data; boundary=")
    assert b"row" not in raw and b"metadata" not in raw and b"audio_path" not in raw
    assert (audio_dir / "b.wav").read_bytes() in raw  # raw bytes, not base64


async def test_a_content_sniffed_type_and_a_nested_path(
    gateway: Client, stub: StubState, audio_dir: Path
) -> None:
    (audio_dir / "set").mkdir()
    clip = write_encoded_tone(audio_dir / "set" / "lying.wav", 0.3, 500.0, "FLAC")
    report = (
        await speech_json(gateway, {"model": MODEL, "metadata": {"audio_path": "set/lying.wav"}})
    )["stub"]
    assert (report["filename"], report["content_type"]) == ("lying.wav", "audio/flac")
    assert report["clip"]["sha256"] == sha256_of(clip)
    assert report["clip"]["container"] == "flac"


@pytest.mark.parametrize("key", ["audio_data", "audio_url"])
async def test_inline_audio_is_uploaded_decoded(gateway: Client, audio_dir: Path, key: str) -> None:
    flac = write_encoded_tone(audio_dir / "t.flac", 0.2, 300.0, "FLAC")
    body = {"model": MODEL, "metadata": {key: data_uri(flac, "audio/x-flac")}}
    report = (await speech_json(gateway, body, TRANSLATIONS))["stub"]
    assert (report["filename"], report["content_type"]) == ("audio.flac", "audio/flac")
    assert report["clip"]["sha256"] == sha256_of(flac)
    assert report["task"] == "translate"


async def test_translations_take_the_same_sidechannel(gateway: Client, audio_dir: Path) -> None:
    answer = await speech_json(
        gateway, {"model": MODEL, "metadata": {"audio_path": "c.wav"}}, TRANSLATIONS
    )
    assert answer["stub"]["task"] == "translate"
    assert answer["stub"]["clip"]["sha256"] == sha256_of(audio_dir / "c.wav")
    assert "usage" not in answer  # vLLM's translation answer has none


async def test_json_without_a_clip_is_relayed_untouched(gateway: Client, stub: StubState) -> None:
    raw = json.dumps({"model": MODEL, "metadata": {"row": "1"}}).encode()
    response = await gateway.post(
        TRANSCRIPTIONS, data=raw, headers={"Content-Type": "application/json"}
    )
    assert response.status == 400  # vLLM's answer: no `file`
    assert (await response.json())["error"]["param"] == "body.file"
    assert stub.requests[-1].body == raw


# --- curl-style forms: an `audio_path` field instead of a file ---------------------------------


async def test_a_form_with_an_audio_path_field(
    gateway: Client, stub: StubState, audio_dir: Path
) -> None:
    form = FormData(default_to_multipart=True)
    form.add_field("model", MODEL)
    form.add_field("audio_path", "a.wav")
    form.add_field("response_format", "json")
    form.add_field("timestamp_granularities[]", "word")
    response = await gateway.post(TRANSCRIPTIONS, data=form)
    assert response.status == 200, await response.text()
    report = (await response.json())["stub"]
    assert report["clip"]["sha256"] == sha256_of(audio_dir / "a.wav")
    assert report["filename"] == "a.wav"
    assert report["fields"] == [
        ["model", MODEL],
        ["response_format", "json"],
        ["timestamp_granularities[]", "word"],
    ]
    assert b"audio_path" not in received_form(stub)[1]


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
@pytest.mark.parametrize("audio", ["audio_path=c.wav", "file=@{dir}/c.wav"], ids=["path", "file"])
async def test_real_curl(gateway: Client, stub: StubState, audio_dir: Path, audio: str) -> None:
    process = await asyncio.create_subprocess_exec(
        "curl", "-sS", "--max-time", "20",
        "-F", f"model={MODEL}", "-F", audio.format(dir=audio_dir), "-F", "language=en",
        str(gateway.make_url(TRANSCRIPTIONS)),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, _ = await process.communicate()
    assert process.returncode == 0
    answer = json.loads(stdout)
    assert answer["stub"]["clip"]["sha256"] == sha256_of(audio_dir / "c.wav")
    assert answer["stub"]["filename"] == "c.wav"
    assert answer["stub"]["fields"] == [["model", MODEL], ["language", "en"]]
    assert answer["usage"] == {"type": "duration", "seconds": 1}
    rewritten = b"audio-gateway-" in stub.requests[-1].headers["Content-Type"].encode()
    assert rewritten == audio.startswith("audio_path")


async def test_an_urlencoded_form_with_inline_audio_data(gateway: Client, audio_dir: Path) -> None:
    # `curl -d audio_data=...`: aiohttp sends a form without files urlencoded.
    form = FormData({"model": MODEL, "audio_data": data_uri(audio_dir / "b.wav")})
    response = await gateway.post(TRANSLATIONS, data=form)
    assert response.status == 200, await response.text()
    report = (await response.json())["stub"]
    assert (report["filename"], report["clip"]["sha256"]) == (
        "audio.wav",
        sha256_of(audio_dir / "b.wav"),
    )


# --- streaming -----------------------------------------------------------------------------------


async def test_a_streamed_transcription_is_relayed_event_by_event(
    gateway: Client, stub: StubState, audio_dir: Path
) -> None:
    body = {
        "model": MODEL,
        "stream": True,
        "stream_include_usage": True,
        "metadata": {"audio_path": "a.wav"},
    }
    response = await gateway.post(TRANSCRIPTIONS, json=body, headers={"X-Stub-Hold": "1"})
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/event-stream")
    assert response.headers["X-Accel-Buffering"] == "no"
    # The stub holds its stream after the first event: it must reach us before the rest exists.
    first = await asyncio.wait_for(response.content.readuntil(b"\n\n"), 10)
    assert stub.streams_finished == 0
    event = json.loads(first.removeprefix(b"data: "))
    assert event["object"] == "transcription.chunk"
    assert event["stub"]["clip"]["sha256"] == sha256_of(audio_dir / "a.wav")
    stub.hold.set()
    rest = (await asyncio.wait_for(response.read(), 10)).decode()
    events = [e.removeprefix("data: ") for e in rest.split("\n\n") if e]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    text = "".join(c["choices"][0]["delta"]["content"] for c in [event, *chunks[:-1]])
    assert text.startswith("wav ")


# --- errors -------------------------------------------------------------------------------------

# (metadata or form fields, status, param suffix, code)
ERRORS: list[tuple[dict[str, str], int, str, str]] = [
    ({"audio_paths": '["a.wav"]'}, 400, "audio_paths", "invalid_audio_reference"),
    ({"audio_path": "a.wav", "audio_data": "x"}, 400, "audio_data", "conflicting_audio_keys"),
    ({"audio_path": ""}, 400, "audio_path", "empty_audio_reference"),
    ({"audio_data": "data:text/plain;base64,AAAA"}, 400, "audio_data", "invalid_audio_reference"),
    ({"audio_data": "data:audio/wav;base64,AAAA"}, 400, "audio_data", "not_audio"),
    ({"audio_path": "a.txt"}, 400, "audio_path", "unsupported_audio_format"),
    ({"audio_path": "dir.wav"}, 400, "audio_path", "not_a_regular_file"),
    ({"audio_path": "noise.wav"}, 400, "audio_path", "not_audio"),
    ({"audio_path": "/etc/passwd.wav"}, 403, "audio_path", "audio_path_forbidden"),
    ({"audio_path": "../outside.wav"}, 403, "audio_path", "audio_path_forbidden"),
    ({"audio_path": "missing.wav"}, 404, "audio_path", "audio_not_found"),
    ({"audio_path": "big.wav"}, 413, "audio_path", "audio_too_large"),
]


@pytest.fixture
def error_files(audio_dir: Path) -> None:
    (audio_dir / "dir.wav").mkdir()
    (audio_dir / "a.txt").write_text("a regular file: its extension is what is wrong\n")
    (audio_dir / "noise.wav").write_bytes(os.urandom(4096))
    write_tone(audio_dir / "big.wav", 1.0)  # 32 KB, over the 16 KB limit these tests set
    write_tone(audio_dir.parent / "outside.wav", 0.1)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("form", ["json", "multipart", "urlencoded"])
@pytest.mark.parametrize(("fields", "status", "key", "code"), ERRORS)
async def test_every_error(
    make_gateway: GatewayFactory,
    stub: StubState,
    error_files: None,
    route: str,
    form: str,
    fields: dict[str, str],
    status: int,
    key: str,
    code: str,
) -> None:
    gateway = await make_gateway(audio={"max_file_bytes": 16_000})
    if form == "json":
        response = await gateway.post(route, json={"model": MODEL, "metadata": fields})
    else:
        data = FormData({"model": MODEL, **fields}, default_to_multipart=form == "multipart")
        response = await gateway.post(route, data=data)
    param = f"metadata.{key}" if form == "json" else key
    error = await gateway_error(response, status, param)
    assert error["code"] == code
    assert param in error["message"]
    given = fields.get("audio_path")
    if given and status != 400:
        assert repr(given) in error["message"]
    assert stub.request_count == 0


async def test_inline_audio_over_the_size_limit_is_413(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(audio={"max_file_bytes": 1000})
    body = {"model": MODEL, "metadata": {"audio_data": data_uri(audio_dir / "a.wav")}}
    response = await gateway.post(TRANSCRIPTIONS, json=body)
    error = await gateway_error(response, 413, "metadata.audio_data")
    assert error["code"] == "audio_too_large"
    assert stub.request_count == 0


@pytest.mark.parametrize("form", [False, True], ids=["json", "form"])
async def test_a_body_over_max_body_bytes_is_413(
    make_gateway: GatewayFactory, stub: StubState, form: bool
) -> None:
    gateway = await make_gateway(server={"max_body_bytes": 50_000})
    filler = "x" * 60_000
    if form:
        data = FormData({"prompt": filler, "audio_path": "a.wav"}, default_to_multipart=True)
        response = await gateway.post(TRANSCRIPTIONS, data=data)
    else:
        body = {"prompt": filler, "metadata": {"audio_path": "a.wav"}}
        response = await gateway.post(TRANSCRIPTIONS, json=body)
    error = await gateway_error(response, 413, None)
    assert error["code"] == "request_too_large"
    assert stub.request_count == 0


@pytest.mark.parametrize(
    ("raw", "code", "param"),
    [
        (b'{"model": ', "invalid_json", None),
        (b"[1]", "invalid_json", None),
        (b'{"file": "x", "metadata": {"audio_path": "a.wav"}}', "conflicting_audio_keys", "file"),
    ],
)
async def test_bad_json_bodies(
    gateway: Client, stub: StubState, raw: bytes, code: str, param: str | None
) -> None:
    response = await gateway.post(
        TRANSLATIONS, data=raw, headers={"Content-Type": "application/json"}
    )
    assert (await gateway_error(response, 400, param))["code"] == code
    assert stub.request_count == 0


async def test_an_audio_path_field_given_twice_is_400(gateway: Client, stub: StubState) -> None:
    form = FormData(default_to_multipart=True)
    form.add_field("audio_path", "a.wav")
    form.add_field("audio_path", "b.wav")
    response = await gateway.post(TRANSCRIPTIONS, data=form)
    assert (await gateway_error(response, 400, "audio_path"))["code"] == "invalid_audio_reference"
    assert stub.request_count == 0


async def test_an_unreachable_upstream_is_502(
    make_gateway: GatewayFactory, audio_dir: Path
) -> None:
    gateway = await make_gateway(upstream={"url": "http://127.0.0.1:9"})
    body = {"model": MODEL, "metadata": {"audio_path": "a.wav"}}
    response = await gateway.post(TRANSCRIPTIONS, json=body)
    assert (await gateway_error(response, 502, None))["code"] == "upstream_unreachable"


async def test_a_silent_upstream_is_504(audio_dir: Path) -> None:
    release = asyncio.Event()
    received = bytearray()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.extend(await reader.read(65536))
        await release.wait()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    config = gateway_config(
        f"http://127.0.0.1:{port}", audio_dir, upstream={"read_timeout_seconds": 0.2}
    )
    async with server, TestClient(TestServer(create_app(config))) as gateway:
        body = {"model": MODEL, "metadata": {"audio_path": "a.wav"}}
        response = await gateway.post(TRANSCRIPTIONS, json=body)
        assert (await gateway_error(response, 504, None))["code"] == "upstream_timeout"
        release.set()
    assert received.startswith(b"POST /v1/audio/transcriptions HTTP/1.1\r\n")


async def test_a_relative_path_without_a_root_is_400(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(audio={"root": "", "allowed_roots": [str(audio_dir)]})
    form = FormData({"audio_path": "a.wav"}, default_to_multipart=True)
    response = await gateway.post(TRANSCRIPTIONS, data=form)
    assert (await gateway_error(response, 400, "audio_path"))["code"] == "audio_root_unset"
    assert stub.request_count == 0


async def test_vllm_refusals_are_relayed(gateway: Client, stub: StubState) -> None:
    cases = [
        ({"response_format": "srt"}, None),
        ({"stream_include_usage": True}, "stream_include_usage"),
        ({"temperature": "warm"}, "body.temperature"),
        ({"timestamp_granularities": ["char"]}, "body.timestamp_granularities[].0"),
    ]
    for extra, param in cases:
        body = {"model": MODEL, **extra, "metadata": {"audio_path": "a.wav"}}
        response = await gateway.post(TRANSCRIPTIONS, json=body)
        assert response.status == 400, extra
        assert (await response.json())["error"]["param"] == param
    assert stub.rejected == 0 and stub.request_count == len(cases)


# --- cache, single-flight, big clips ----------------------------------------------------------


async def test_the_cache_keeps_raw_bytes_and_reads_a_clip_once(
    gateway: Client, audio_dir: Path
) -> None:
    body = {"model": MODEL, "metadata": {"audio_path": "c.wav"}}
    answers = await asyncio.gather(*(speech_json(gateway, body) for _ in range(16)))
    assert {a["stub"]["clip"]["sha256"] for a in answers} == {sha256_of(audio_dir / "c.wav")}
    stats = await cache_stats(gateway)
    size = (audio_dir / "c.wav").stat().st_size
    assert (stats["misses"], stats["hits"], stats["entries"]) == (1, 15, 1)
    assert size <= stats["bytes"] < size + 1024  # the bytes themselves, not their base64
    assert stats["encoded"] == 0
    # Chat keeps its base64 entry beside it; both answer right.
    chat = await gateway.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": [], "metadata": {"audio_path": "c.wav"}},
    )
    assert (await chat.json())["stub"]["clips"][0]["sha256"] == sha256_of(audio_dir / "c.wav")
    assert (await cache_stats(gateway))["entries"] == 2


async def test_concurrent_requests_share_one_load_and_a_file_changed_meanwhile_is_409(
    serial_executor: SerialExecutor,  # noqa: F811  (the fixture imported from test_cache)
    gateway: Client,
    stub: StubState,
    audio_dir: Path,
) -> None:
    jobs = serial_executor.jobs
    gate = serial_executor.park()  # the load's first file operation (its open) waits here
    body = {"model": MODEL, "metadata": {"audio_path": "b.wav"}}
    first = asyncio.create_task(gateway.post(TRANSCRIPTIONS, json=body))
    await serial_executor.until_jobs(jobs + 1)
    form = FormData({"audio_path": "b.wav"}, default_to_multipart=True)
    others = [asyncio.create_task(gateway.post(TRANSLATIONS, data=form)) for _ in range(7)]

    async def all_waiting() -> bool:
        return (await cache_stats(gateway))["hits"] == 7

    await eventually(all_waiting)
    with open(audio_dir / "b.wav", "ab") as clip:
        clip.write(b"\0" * 100)  # after the checks, before the read
    gate.set()
    responses = await asyncio.gather(first, *others)
    for response, param in zip(responses, PARAMS, strict=True):
        error = await gateway_error(response, 409, param)  # each worded for its own request
        assert error["code"] == "audio_file_changed"
        assert error["message"].startswith(f"{param}: 'b.wav' changed")
    assert (await cache_stats(gateway))["misses"] == 1
    assert stub.request_count == 0
    answer = await speech_json(gateway, body)  # a retry reads the new file
    assert answer["stub"]["clip"]["sha256"] == sha256_of(audio_dir / "b.wav")


PARAMS = ["metadata.audio_path"] + ["audio_path"] * 7


@pytest.mark.parametrize(
    "sections",
    [{"splice": {"mode": "file_url", "part_uuid": True}}, {"cache": {"max_bytes": 0}}],
    ids=["file_url-mode", "cache-off"],
)
async def test_uploads_are_bytes_whatever_the_chat_wire_form(
    make_gateway: GatewayFactory, audio_dir: Path, sections: dict[str, Any]
) -> None:
    gateway = await make_gateway(**sections)
    body = {"model": MODEL, "metadata": {"audio_path": "b.wav"}}
    for _ in range(2):
        answer = await speech_json(gateway, body)
        assert answer["stub"]["clip"]["sha256"] == sha256_of(audio_dir / "b.wav")


async def test_a_rewritten_file_is_read_again(gateway: Client, audio_dir: Path) -> None:
    body = {"model": MODEL, "metadata": {"audio_path": "a.wav"}}
    await speech_json(gateway, body)
    write_tone(audio_dir / "a.wav", 0.4, 300.0)
    os.utime(audio_dir / "a.wav", ns=(1, 10**18))
    answer = await speech_json(gateway, body)
    assert answer["stub"]["clip"]["sha256"] == sha256_of(audio_dir / "a.wav")
    assert (await cache_stats(gateway))["entries"] == 1  # the old entry was dropped


async def test_a_clip_over_max_item_bytes_is_streamed_uncached(
    make_gateway: GatewayFactory, audio_dir: Path
) -> None:
    gateway = await make_gateway(cache={"max_item_bytes": 10_000})
    body = {"model": MODEL, "metadata": {"audio_path": "c.wav"}}  # 24 KB
    for _ in range(2):
        answer = await speech_json(gateway, body, TRANSLATIONS)
        assert answer["stub"]["clip"]["sha256"] == sha256_of(audio_dir / "c.wav")
    stats = await cache_stats(gateway)
    assert (stats["misses"], stats["entries"]) == (2, 0)


async def test_the_speech_path_never_blocks_the_event_loop(
    make_gateway: GatewayFactory, audio_dir: Path
) -> None:
    gateway = await make_gateway(cache={"max_item_bytes": 10_000})
    form = FormData({"model": MODEL, "audio_path": "a.wav"}, default_to_multipart=True)
    with no_blocking_calls():
        cached = await speech_json(gateway, {"model": MODEL, "metadata": {"audio_path": "a.wav"}})
        streamed = await speech_json(gateway, {"model": MODEL, "metadata": {"audio_path": "c.wav"}})
        from_form = await gateway.post(TRANSCRIPTIONS, data=form)
        status = from_form.status
    assert cached["stub"]["clip"]["sha256"] == sha256_of(audio_dir / "a.wav")
    assert streamed["stub"]["clip"]["sha256"] == sha256_of(audio_dir / "c.wav")
    assert status == 200


@pytest.fixture
async def hashing_upstream() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """An upstream that reads the upload part by part, hashing as it goes and keeping nothing,
    so that the memory a big upload takes in this process is the gateway's."""
    seen: dict[str, Any] = {}

    async def upload(request: web.Request) -> web.Response:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            assert isinstance(part, aiohttp.BodyPartReader)
            digest, size = hashlib.sha256(), 0
            while chunk := await part.read_chunk(256 * 1024):
                digest.update(chunk)
                size += len(chunk)
            seen[part.name or ""] = (digest.hexdigest(), size, part.filename)
        return web.json_response({"text": "ok"})

    app = web.Application()
    app.router.add_post(TRANSCRIPTIONS, upload)
    server = TestServer(app)
    await server.start_server()
    yield str(server.make_url("")).rstrip("/"), seen
    await server.close()


async def test_a_big_clip_is_streamed_with_bounded_memory(
    hashing_upstream: tuple[str, dict[str, Any]], audio_dir: Path
) -> None:
    url, seen = hashing_upstream
    clip = audio_dir / "long.wav"
    write_tone(clip, 48 * 1024 * 1024 / 32_000, 440.0)  # 48 MiB
    config = gateway_config(
        url,
        audio_dir,
        audio={"max_file_bytes": "64MiB", "max_duration_seconds": 3600},
        cache={"max_item_bytes": "1MiB"},
    )
    async with TestClient(TestServer(create_app(config))) as gateway:
        tracemalloc.start()
        try:
            body = {"model": MODEL, "metadata": {"audio_path": "long.wav"}}
            response = await gateway.post(TRANSCRIPTIONS, json=body)
            assert response.status == 200, await response.text()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert seen["file"] == (sha256_of(clip), clip.stat().st_size, "long.wav")
    assert peak < 16 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB for a 48 MiB clip"


# --- metrics -----------------------------------------------------------------------------------


async def test_requests_are_counted_by_route(gateway: Client) -> None:
    body = {"model": MODEL, "metadata": {"audio_path": "a.wav"}}
    await speech_json(gateway, body)
    await speech_json(gateway, body, TRANSLATIONS)
    await gateway.post(TRANSLATIONS, json={"model": MODEL, "metadata": {"audio_path": ""}})
    samples = await gateway_metrics(gateway)
    assert samples['audio_gateway_requests_total{route="transcriptions",status="200"}'] == 1
    assert samples['audio_gateway_requests_total{route="translations",status="200"}'] == 1
    assert samples['audio_gateway_requests_total{route="translations",status="400"}'] == 1
    assert samples['audio_gateway_added_latency_seconds_count{route="transcriptions"}'] == 1


# --- the pure builder and scanner, against Starlette's own parser (python-multipart) ----------

names = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n\x00"),
    min_size=1,
    max_size=12,
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(blacklist_categories=["Cs"]), max_size=20),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)  # fmt: skip


def parse_with_python_multipart(
    body: bytes, boundary: str
) -> list[tuple[str, dict[bytes, bytes], bytes]]:
    """(Content-Disposition name, its parameters, data) per part, as Starlette's parser sees it."""
    parts: list[tuple[str, dict[bytes, bytes], bytes]] = []
    current: dict[str, Any] = {}

    def on_part_begin() -> None:
        current.update(headers={}, data=bytearray(), field=b"", value=b"")

    def on_header_field(data: bytes, start: int, end: int) -> None:
        current["field"] += data[start:end]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        current["value"] += data[start:end]

    def on_header_end() -> None:
        current["headers"][current["field"].lower()] = current["value"]
        current.update(field=b"", value=b"")

    def on_part_data(data: bytes, start: int, end: int) -> None:
        current["data"] += data[start:end]

    def on_part_end() -> None:
        _, params = parse_options_header(current["headers"][b"content-disposition"])
        parts.append((params[b"name"].decode(), params, bytes(current["data"])))

    parser = MultipartParser(
        boundary,
        {
            "on_part_begin": on_part_begin,
            "on_header_field": on_header_field,
            "on_header_value": on_header_value,
            "on_header_end": on_header_end,
            "on_part_data": on_part_data,
            "on_part_end": on_part_end,
        },
    )
    parser.write(body)
    parser.finalize()
    return parts


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    fields=st.dictionaries(names.filter(lambda n: n != "metadata"), json_values, max_size=6),
    audio=st.binary(max_size=300),
    filename=names.filter(lambda n: "\\" not in n),  # python-multipart: IE6 path workaround
)
def test_built_forms_parse_back_with_starlettes_parser(
    fields: dict[str, Any], audio: bytes, filename: str
) -> None:
    boundary = "audio-gateway-" + os.urandom(16).hex()
    parts = [text_part(name, value) for name, value in form_fields(fields)]
    upload = AudioUpload(filename, "audio/wav", (audio[:10], audio[10:]))
    body = b"".join(s for s in build_form(boundary, upload, parts) if isinstance(s, bytes))
    parsed = parse_with_python_multipart(body, boundary)
    first_name, params, data = parsed[0]
    assert (first_name, params[b"filename"].decode(), data) == ("file", filename, audio)
    expected: list[tuple[str, str]] = []
    for name, value in fields.items():
        if isinstance(value, list):
            suffix = "" if name.endswith("[]") else "[]"
            expected += [(name + suffix, field_text(v)) for v in value if v is not None]
        elif value is not None:
            expected.append((name, field_text(value)))
    assert [(n, d.decode()) for n, _, d in parsed[1:]] == expected


@settings(max_examples=150, deadline=None)
@given(
    fields=st.lists(st.tuples(names, st.text(max_size=30)), max_size=6),
    has_file=st.booleans(),
    cut=st.integers(min_value=1, max_value=64),
)
def test_the_scanner_finds_parts_however_the_body_is_cut(
    fields: list[tuple[str, str]], has_file: bool, cut: int
) -> None:
    boundary = os.urandom(8).hex()
    parts = [text_part(name, value) for name, value in fields if name != "file"]
    upload = AudioUpload("x.wav", "audio/wav", (b"RIFF--" + boundary.encode(),))
    body = b"".join(s for s in build_form(boundary, upload, parts) if isinstance(s, bytes))
    if not has_file:  # drop the file part: what curl -F audio_path=... sends
        body = body[body.index(b"\r\n--" + boundary.encode() + b"\r\n", 10) + 2 :] if parts else b""
    scanner = FormScanner(boundary)
    seen = any([scanner.feed(body[at : at + cut]) for at in range(0, len(body), cut)])
    assert seen == has_file
    if has_file or not parts:
        return
    found = scanner.parts()
    assert found is not None
    assert [(p.name, p.text()) for p in found] == [(p.name, p.text()) for p in parts]


async def test_vllm_decode_limits_hold_on_the_speech_routes(
    make_gateway: Any, stub: Any, audio_dir: Path
) -> None:
    """vLLM's speech-to-text routes refuse long audio as chat does: 413 before any upload,
    for a path clip (cached or not) and for inline audio."""
    gateway = await make_gateway(audio={"max_duration_seconds": 0.3})
    inline = (
        "data:audio/wav;base64," + base64.b64encode((audio_dir / "b.wav").read_bytes()).decode()
    )
    for metadata, param in (
        ({"audio_path": "b.wav"}, "metadata.audio_path"),
        ({"audio_path": "b.wav"}, "metadata.audio_path"),
        ({"audio_data": inline}, "metadata.audio_data"),
    ):
        response = await gateway.post(
            "/v1/audio/transcriptions", json={"model": "m", "metadata": metadata}
        )
        error = await gateway_error(response, 413, param)
        assert error["code"] == "audio_too_long"
    ok = await gateway.post(
        "/v1/audio/transcriptions", json={"model": "m", "metadata": {"audio_path": "a.wav"}}
    )
    assert ok.status == 200, await ok.text()
    assert len(stub.requests) == 1
