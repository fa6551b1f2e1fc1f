"""The upstream wire forms: `[splice] chat_part`, `[splice] mode = "file_url"` and the opt-in
per-part `uuid`, each proved end to end against the stub, which reads `file://` URLs the way
vLLM does (only under its allowed local media path, here the audio root's parent)."""

from __future__ import annotations

import base64
import functools
import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.audio.samples import write_tone
from gateway.stub_upstream import StubState
from tests.conftest import (
    GatewayFactory,
    b64_of,
    cache_stats,
    chat_body,
    forwarded_json,
    gateway_error,
    sha256_of,
    write_encoded_tone,
)

Client = TestClient[web.Request, web.Application]
PROMPT = {"type": "text", "text": "Transcribe the audio."}
FILE_URL = {"mode": "file_url"}


def file_url_part(path: Path) -> dict[str, Any]:
    """What vLLM must receive for `path` in file:// mode: the URL of its resolved real path."""
    url = Path(os.path.realpath(path)).as_uri()
    return {"type": "audio_url", "audio_url": {"url": url}}


def input_audio(path: Path, format: str = "wav") -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": b64_of(path), "format": format}}


async def post_chat(client: Client, metadata: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/v1/chat/completions", json=chat_body(metadata))
    assert response.status == 200, await response.text()
    answer: dict[str, Any] = await response.json()
    return answer


async def post_responses(
    client: Client, metadata: dict[str, Any], stub: StubState
) -> dict[str, Any]:
    """A Responses answer's `stub` report is the stub's (a bridged answer cannot carry it)."""
    body = {"model": "m", "input": "Transcribe.", "metadata": metadata}
    response = await client.post("/v1/responses", json=body)
    assert response.status == 200, await response.text()
    assert (await response.json())["object"] == "response"
    return {"stub": stub.last_report}


def clips(answer: dict[str, Any]) -> list[dict[str, Any]]:
    reported: list[dict[str, Any]] = answer["stub"]["clips"]
    return reported


def sent_parts(stub: StubState) -> list[dict[str, Any]]:
    """The content parts of the last message the stub received (chat or Responses)."""
    body = forwarded_json(stub)
    messages = body["messages"] if "messages" in body else body["input"]
    parts: list[dict[str, Any]] = messages[-1]["content"]
    return parts


# --- chat_part = "input_audio" ---------------------------------------------------------------


async def test_input_audio_chat_parts(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(splice={"chat_part": "input_audio"})
    mp3 = write_encoded_tone(audio_dir / "d.mp3", 0.3, 500.0, "MP3")
    answer = await post_chat(gateway, {"audio_paths": ["b.wav", "d.mp3", "a.wav"]})
    paths = [audio_dir / "b.wav", mp3, audio_dir / "a.wav"]
    assert sent_parts(stub) == [
        input_audio(paths[0]),
        input_audio(mp3, "mp3"),
        input_audio(paths[2]),
        PROMPT,
    ]
    assert [clip["sha256"] for clip in clips(answer)] == [sha256_of(path) for path in paths]
    assert answer["stub"]["last_message_part_types"] == ["input_audio"] * 3 + ["text"]


async def test_input_audio_chat_parts_for_inline_and_streamed_audio(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(
        splice={"chat_part": "input_audio"}, cache={"max_item_bytes": 100_000}
    )
    big = write_tone(audio_dir / "big.wav", 10.0, 440.0)  # 320 KB: streamed, not cached
    answer = await post_chat(gateway, {"audio_path": "big.wav"})
    assert sent_parts(stub) == [input_audio(big), PROMPT]
    assert [clip["sha256"] for clip in clips(answer)] == [sha256_of(big)]

    payload = b64_of(audio_dir / "c.wav")
    answer = await post_chat(gateway, {"audio_data": f"data:audio/wav;base64,{payload}"})
    assert sent_parts(stub)[0] == {
        "type": "input_audio",
        "input_audio": {"data": payload, "format": "wav"},
    }
    assert [clip["sha256"] for clip in clips(answer)] == [sha256_of(audio_dir / "c.wav")]


# --- mode = "file_url" -----------------------------------------------------------------------


async def test_file_url_mode_sends_the_real_path_and_no_base64(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(splice=FILE_URL)
    (audio_dir / "sub").mkdir()
    shutil.copy(audio_dir / "c.wav", audio_dir / "sub" / "take #2 100%.wav")
    (audio_dir / "link.wav").symlink_to(audio_dir / "b.wav")
    names = ["a.wav", "link.wav", "sub/take #2 100%.wav", "sub/../a.wav"]
    answer = await post_chat(gateway, {"audio_paths": names})

    targets = [audio_dir / "a.wav", audio_dir / "b.wav", audio_dir / "sub/take #2 100%.wav"]
    targets.append(audio_dir / "a.wav")
    assert sent_parts(stub) == [*map(file_url_part, targets), PROMPT]
    assert [(clip["source"], clip["sha256"]) for clip in clips(answer)] == [
        ("file", sha256_of(path)) for path in targets
    ]
    assert b"base64" not in stub.requests[-1].body
    assert (await cache_stats(gateway))["encoded"] == 0


RESPONSES_MODES = [
    pytest.param("chat_bridge", "text", id="chat-bridge"),
    pytest.param(
        "input_audio",
        "input_text",
        id="input-audio",
        marks=pytest.mark.stub(responses_accept_audio=True),
    ),
]


@pytest.mark.parametrize(("audio", "text_type"), RESPONSES_MODES)
async def test_file_url_mode_on_the_responses_route(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, audio: str, text_type: str
) -> None:
    gateway = await make_gateway(splice=FILE_URL, responses={"audio": audio})
    answer = await post_responses(gateway, {"audio_paths": ["c.wav", "a.wav"]}, stub)
    paths = [audio_dir / "c.wav", audio_dir / "a.wav"]
    assert sent_parts(stub) == [
        *map(file_url_part, paths),
        {"type": text_type, "text": "Transcribe."},
    ]
    assert [(clip["source"], clip["sha256"]) for clip in clips(answer)] == [
        ("file", sha256_of(path)) for path in paths
    ]


@pytest.mark.parametrize(("audio", "text_type"), RESPONSES_MODES)
async def test_audio_data_stays_a_data_uri_in_file_url_mode(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, audio: str, text_type: str
) -> None:
    gateway = await make_gateway(splice=FILE_URL, responses={"audio": audio})
    clip = audio_dir / "b.wav"
    uri = f"data:audio/wav;base64,{b64_of(clip)}"
    answer = await post_chat(gateway, {"audio_data": uri})
    assert sent_parts(stub) == [{"type": "audio_url", "audio_url": {"url": uri}}, PROMPT]
    assert [(c["source"], c["sha256"]) for c in clips(answer)] == [("data", sha256_of(clip))]

    answer = await post_responses(gateway, {"audio_data": uri}, stub)
    # the bridge splices chat parts (chat_part = "audio_url"); input_audio mode Responses parts
    expected = {"type": "audio_url", "audio_url": {"url": uri}}
    assert sent_parts(stub)[0] == (expected if audio == "chat_bridge" else input_audio(clip))
    assert sent_parts(stub)[-1] == {"type": text_type, "text": "Transcribe."}
    assert [(c["source"], c["sha256"]) for c in clips(answer)] == [("data", sha256_of(clip))]


@pytest.fixture
def refused(audio_dir: Path, tmp_path: Path) -> dict[str, tuple[int, str]]:
    """Paths the gateway must refuse in file:// mode -> (status, code). The stub could read
    every one of them (they are all under its allowed media path): the gateway's checks are
    what stops them."""
    outside = tmp_path / "outside.wav"
    outside.write_bytes((audio_dir / "a.wav").read_bytes())
    (audio_dir / "escape.wav").symlink_to(outside)
    (audio_dir / "fake.wav").write_text("plain text wearing a .wav name")
    (audio_dir / "notes.txt").write_bytes((audio_dir / "a.wav").read_bytes())
    (audio_dir / "folder.wav").mkdir()
    return {
        str(outside): (403, "audio_path_forbidden"),
        "../outside.wav": (403, "audio_path_forbidden"),
        "escape.wav": (403, "audio_path_forbidden"),
        "fake.wav": (400, "not_audio"),
        "notes.txt": (400, "unsupported_audio_format"),
        "folder.wav": (400, "not_a_regular_file"),
        "missing.wav": (404, "audio_not_found"),
        "c.wav": (413, "audio_too_large"),  # 24044 bytes, over the 20000 set below
    }


@pytest.mark.parametrize(
    "path",
    [
        "outside-absolute",
        "../outside.wav",
        "escape.wav",
        "fake.wav",
        "notes.txt",
        "folder.wav",
        "missing.wav",
        "c.wav",
    ],
)
async def test_file_url_mode_keeps_every_path_check(
    make_gateway: GatewayFactory,
    stub: StubState,
    tmp_path: Path,
    refused: dict[str, tuple[int, str]],
    path: str,
) -> None:
    if path == "outside-absolute":
        path = str(tmp_path / "outside.wav")
    status, code = refused[path]
    gateway = await make_gateway(splice=FILE_URL, audio={"max_file_bytes": 20_000})
    response = await gateway.post("/v1/chat/completions", json=chat_body({"audio_path": path}))
    error = await gateway_error(response, status, "metadata.audio_path")
    assert error["code"] == code
    assert stub.request_count == 0


async def test_the_stub_refuses_file_urls_outside_its_allowed_path(
    make_gateway: GatewayFactory,
    stub: StubState,
    audio_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The stub is as strict as vLLM's --allowed-local-media-path, so file:// tests mean
    something: a root the gateway allows but vLLM does not gets vLLM's 400, relayed."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")  # not under the stub's allowed path
    clip = write_tone(elsewhere / "x.wav", 0.2, 300.0)
    (audio_dir / "to-elsewhere.wav").symlink_to(clip)
    roots = [str(audio_dir), str(elsewhere)]
    gateway = await make_gateway(splice=FILE_URL, audio={"allowed_roots": roots})

    for given in (str(clip), "to-elsewhere.wav"):
        response = await gateway.post("/v1/chat/completions", json=chat_body({"audio_path": given}))
        assert response.status == 400
        error = (await response.json())["error"]
        assert error["type"] == "BadRequestError"  # vLLM's answer, not the gateway's
        assert "allowed-local-media-path" in error["message"]
        assert sent_parts(stub)[0] == file_url_part(clip)
    assert stub.rejected == 2

    inlined = await make_gateway(audio={"allowed_roots": roots})  # data URIs: vLLM reads nothing
    answer = await post_chat(inlined, {"audio_path": str(clip)})
    assert [(c["source"], c["sha256"]) for c in clips(answer)] == [("data", sha256_of(clip))]


async def test_the_stub_reads_file_urls_only_under_its_allowed_path(
    stub_server: TestServer, audio_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = write_tone(tmp_path_factory.mktemp("elsewhere") / "x.wav", 0.2, 300.0)
    (audio_dir / "to-elsewhere.wav").symlink_to(elsewhere)

    async def send(path: Path) -> aiohttp.ClientResponse:
        part = {"type": "audio_url", "audio_url": {"url": path.as_uri()}}
        body = {"model": "m", "messages": [{"role": "user", "content": [part]}]}
        async with aiohttp.ClientSession() as session:
            response = await session.post(stub_server.make_url("/v1/chat/completions"), json=body)
            await response.read()
            return response

    inside = await send(audio_dir / "a.wav")
    assert inside.status == 200
    assert (await inside.json())["stub"]["clips"][0]["sha256"] == sha256_of(audio_dir / "a.wav")
    assert (await send(elsewhere)).status == 400
    assert (await send(audio_dir / "to-elsewhere.wav")).status == 400  # resolved, then refused


# --- part_uuid -------------------------------------------------------------------------------


UUID_GATEWAYS: dict[str, dict[str, dict[str, Any]]] = {
    "data-uri": {},
    "input-audio-chat": {"splice": {"chat_part": "input_audio"}},
    "file-url": {"splice": FILE_URL},
    "streamed": {"cache": {"max_item_bytes": 10_000}},  # every clip here is over 10 KB encoded
    "uncached": {"cache": {"max_bytes": 0}},
}


@pytest.mark.parametrize("route", ["chat", "responses"])
@pytest.mark.parametrize("setup", list(UUID_GATEWAYS))
async def test_part_uuid_is_the_sha256_of_the_content(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, setup: str, route: str
) -> None:
    sections = UUID_GATEWAYS[setup]
    splice = {**sections.get("splice", {}), "part_uuid": True}
    gateway = await make_gateway(**{**sections, "splice": splice})
    post = post_chat if route == "chat" else functools.partial(post_responses, stub=stub)
    shutil.copy(audio_dir / "a.wav", audio_dir / "same-as-a.wav")
    names = ["a.wav", "b.wav", "same-as-a.wav", "a.wav"]
    expected = [sha256_of(audio_dir / name) for name in names]

    seeds = []
    for _ in range(3):  # one clip, several rollouts
        answer = await post(gateway, {"audio_paths": names})
        uuids = [part["uuid"] for part in sent_parts(stub) if "uuid" in part]
        assert uuids == expected
        assert [(c["uuid"], c["sha256"]) for c in clips(answer)] == [(sha, sha) for sha in expected]
        seeds.append(uuids)
    assert seeds[0] == seeds[1] == seeds[2]
    assert expected[0] == expected[2] != expected[1]  # by content, never by path


async def test_part_uuid_follows_a_rewritten_file(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(splice={"part_uuid": True})
    clip = audio_dir / "a.wav"
    await post_chat(gateway, {"audio_path": "a.wav"})
    before = sent_parts(stub)[0]["uuid"]
    old_mtime_ns = clip.stat().st_mtime_ns
    write_tone(clip, 0.25, 1500.0)
    os.utime(clip, ns=(old_mtime_ns, old_mtime_ns + 1_000_000_000))
    answer = await post_chat(gateway, {"audio_path": "a.wav"})
    after = sent_parts(stub)[0]["uuid"]
    assert before != after == sha256_of(clip) == clips(answer)[0]["sha256"]


@pytest.mark.parametrize("route", ["chat", "responses"])
async def test_part_uuid_of_inline_audio_data_is_the_decoded_bytes_sha256(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, route: str
) -> None:
    gateway = await make_gateway(splice={"part_uuid": True})
    post = post_chat if route == "chat" else functools.partial(post_responses, stub=stub)
    seen = []
    for name in ("b.wav", "c.wav", "b.wav"):
        raw = (audio_dir / name).read_bytes()
        uri = f"data:audio/wav;base64,{base64.b64encode(raw).decode()}"
        answer = await post(gateway, {"audio_data": uri})
        part = sent_parts(stub)[0]
        assert part["uuid"] == hashlib.sha256(raw).hexdigest() == clips(answer)[0]["uuid"]
        seen.append(part["uuid"])
    assert seen[0] == seen[2] != seen[1]


@pytest.mark.parametrize("sections", [{}, {"splice": FILE_URL}, {"cache": {"max_item_bytes": 1}}])
async def test_without_part_uuid_no_part_has_one(
    make_gateway: GatewayFactory, stub: StubState, sections: dict[str, Any]
) -> None:
    gateway = await make_gateway(**sections)
    answer = await post_chat(gateway, {"audio_paths": ["a.wav", "b.wav"]})
    assert all("uuid" not in part for part in sent_parts(stub))
    assert [clip["uuid"] for clip in clips(answer)] == [None, None]
