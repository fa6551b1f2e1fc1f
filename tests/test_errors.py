"""Every error the gateway makes: one JSON envelope, the right status, the key and path named,
and nothing sent upstream."""

from __future__ import annotations

import base64
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from gateway.stub_upstream import StubState
from tests.conftest import chat_body, gateway_error

CHAT = "/v1/chat/completions"
JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    "raw",
    [b'{"model": "m", "messages": [', b"", b"not json at all", b'{"a": 1} trailing', b"\xff\xfe{"],
    ids=["truncated", "empty", "text", "trailing", "not-utf8"],
)
async def test_malformed_json_is_400(gateway, stub: StubState, raw: bytes) -> None:
    response = await gateway.post(CHAT, data=raw, headers=JSON)
    error = await gateway_error(response, 400, None)
    assert "JSON" in error["message"]
    assert stub.request_count == 0


@pytest.mark.parametrize("raw", [b"[1, 2]", b'"text"', b"42", b"null", b"true"])
async def test_non_object_json_is_400(gateway, stub: StubState, raw: bytes) -> None:
    response = await gateway.post(CHAT, data=raw, headers=JSON)
    error = await gateway_error(response, 400, None)
    assert "object" in error["message"]
    assert stub.request_count == 0


# (metadata, param, fragments the message must contain)
INVALID_SIDECHANNELS: list[tuple[dict[str, Any], str, list[str]]] = [
    ({"audio_path": ""}, "metadata.audio_path", ["metadata.audio_path", "empty"]),
    ({"audio_paths": []}, "metadata.audio_paths", ["metadata.audio_paths", "empty"]),
    ({"audio_paths": ""}, "metadata.audio_paths", ["metadata.audio_paths", "empty"]),
    ({"audio_paths": "[]"}, "metadata.audio_paths", ["metadata.audio_paths", "empty"]),
    ({"audio_paths": ["a.wav", ""]}, "metadata.audio_paths", ["metadata.audio_paths[1]", "empty"]),
    ({"audio_data": ""}, "metadata.audio_data", ["metadata.audio_data", "empty"]),
    ({"audio_url": ""}, "metadata.audio_url", ["metadata.audio_url", "empty"]),
    ({"audio_data": "https://example.com/a.wav"}, "metadata.audio_data", ["metadata.audio_data"]),
    ({"audio_data": "UklGRiQAAABXQVZF"}, "metadata.audio_data", ["metadata.audio_data"]),
    ({"audio_data": "data:audio/wav,UklGRg=="}, "metadata.audio_data", ["metadata.audio_data"]),
    ({"audio_data": "data:audio/wav;base64,"}, "metadata.audio_data", ["empty"]),
    (
        {"audio_data": "data:audio/wav;base64,!!not*base64!!"},
        "metadata.audio_data",
        ["metadata.audio_data", "base64"],
    ),
    ({"audio_data": "data:audio/wav;base64,UklGR"}, "metadata.audio_data", ["base64"]),
    (
        {"audio_data": "data:image/png;base64,iVBORw0KGgo="},
        "metadata.audio_data",
        ["metadata.audio_data", "image/png"],
    ),
    ({"audio_url": "data:text/plain;base64,aGk="}, "metadata.audio_url", ["metadata.audio_url"]),
    ({"audio_data": 12}, "metadata.audio_data", ["metadata.audio_data"]),
    ({"audio_path": 7}, "metadata.audio_path", ["metadata.audio_path"]),
    ({"audio_path": None}, "metadata.audio_path", ["metadata.audio_path"]),
    ({"audio_path": ["a.wav"]}, "metadata.audio_path", ["metadata.audio_path"]),
    ({"audio_path": "a\x00.wav"}, "metadata.audio_path", ["metadata.audio_path", "NUL"]),
    (
        {"audio_paths": ["a.wav", 3, "b.wav"]},
        "metadata.audio_paths",
        ["metadata.audio_paths[1]", "int"],
    ),
    ({"audio_paths": '["a.wav", null]'}, "metadata.audio_paths", ["metadata.audio_paths[1]"]),
    ({"audio_paths": [["a.wav"]]}, "metadata.audio_paths", ["metadata.audio_paths[0]"]),
]


@pytest.mark.parametrize(
    ("metadata", "param", "fragments"),
    INVALID_SIDECHANNELS,
    ids=[json.dumps(case[0])[:60] for case in INVALID_SIDECHANNELS],
)
async def test_invalid_sidechannel_is_400(
    gateway, stub: StubState, metadata: dict[str, Any], param: str, fragments: list[str]
) -> None:
    response = await gateway.post(CHAT, json=chat_body(metadata))
    error = await gateway_error(response, 400, param)
    for fragment in fragments:
        assert fragment in error["message"], error["message"]
    assert stub.request_count == 0


async def test_more_than_max_clips_is_400(make_gateway, stub: StubState) -> None:
    gateway = await make_gateway(audio={"max_clips": 2})
    ok = await gateway.post(CHAT, json=chat_body({"audio_paths": ["a.wav", "b.wav"]}))
    assert ok.status == 200, await ok.text()
    response = await gateway.post(
        CHAT, json=chat_body({"audio_paths": ["a.wav", "b.wav", "c.wav"]})
    )
    error = await gateway_error(response, 400, "metadata.audio_paths")
    assert "metadata.audio_paths" in error["message"]
    assert "3" in error["message"] and "2" in error["message"]
    assert stub.request_count == 1


async def test_default_max_clips_is_16(gateway, stub: StubState) -> None:
    response = await gateway.post(CHAT, json=chat_body({"audio_paths": ["a.wav"] * 17}))
    await gateway_error(response, 400, "metadata.audio_paths")
    response = await gateway.post(CHAT, json=chat_body({"audio_paths": ["a.wav"] * 16}))
    assert response.status == 200, await response.text()
    assert len((await response.json())["stub"]["clips"]) == 16


async def test_file_over_max_file_bytes_is_413(
    make_gateway, stub: StubState, audio_dir: Path
) -> None:
    limit = (audio_dir / "a.wav").stat().st_size  # a.wav fits exactly; b.wav is larger
    gateway = await make_gateway(audio={"max_file_bytes": limit})
    ok = await gateway.post(CHAT, json=chat_body({"audio_path": "a.wav"}))
    assert ok.status == 200, await ok.text()
    response = await gateway.post(CHAT, json=chat_body({"audio_paths": ["a.wav", "b.wav"]}))
    error = await gateway_error(response, 413, "metadata.audio_paths")
    assert "metadata.audio_paths[1]" in error["message"]
    assert "'b.wav'" in error["message"]
    assert str(limit) in error["message"]
    assert stub.request_count == 1


async def test_inline_audio_over_max_file_bytes_is_413(
    make_gateway, stub: StubState, audio_dir: Path
) -> None:
    limit = (audio_dir / "a.wav").stat().st_size
    gateway = await make_gateway(audio={"max_file_bytes": limit})

    def inline(name: str) -> dict[str, str]:
        payload = base64.b64encode((audio_dir / name).read_bytes()).decode()
        return {"audio_data": f"data:audio/wav;base64,{payload}"}

    assert (await gateway.post(CHAT, json=chat_body(inline("a.wav")))).status == 200
    response = await gateway.post(CHAT, json=chat_body(inline("b.wav")))
    error = await gateway_error(response, 413, "metadata.audio_data")
    assert str(limit) in error["message"]
    assert stub.request_count == 1


async def test_max_file_bytes_accepts_size_strings(
    make_gateway, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(audio={"max_file_bytes": "8KiB"})  # a.wav: 8044 B, b.wav: 16044 B
    assert (await gateway.post(CHAT, json=chat_body({"audio_path": "a.wav"}))).status == 200
    response = await gateway.post(CHAT, json=chat_body({"audio_path": "b.wav"}))
    error = await gateway_error(response, 413, "metadata.audio_path")
    assert "8192" in error["message"]


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("noise.wav", os.urandom(4096)),
        ("text.mp3", b"hello, this is text and not audio at all\n" * 10),
        ("empty.wav", b""),
        ("riff_but_avi.wav", b"RIFF\x00\x00\x00\x00AVI LIST" + os.urandom(64)),
    ],
)
async def test_file_that_is_not_audio_is_400(
    gateway, stub: StubState, audio_dir: Path, name: str, content: bytes
) -> None:
    if name == "noise.wav":  # random bytes could open with an MPEG frame sync by chance
        content = b"\x00" + content[1:]
    (audio_dir / name).write_bytes(content)
    response = await gateway.post(CHAT, json=chat_body({"audio_path": name}))
    error = await gateway_error(response, 400, "metadata.audio_path")
    assert "metadata.audio_path" in error["message"]
    assert repr(name) in error["message"]
    assert stub.request_count == 0


async def test_one_bad_clip_fails_the_whole_request(
    gateway, stub: StubState, audio_dir: Path
) -> None:
    (audio_dir / "junk.wav").write_bytes(b"\x00" * 1024)
    response = await gateway.post(
        CHAT, json=chat_body({"audio_paths": ["a.wav", "b.wav", "junk.wav", "c.wav"]})
    )
    error = await gateway_error(response, 400, "metadata.audio_paths")
    assert "'junk.wav'" in error["message"]
    assert stub.request_count == 0


async def test_request_body_over_max_body_bytes_is_413(make_gateway, stub: StubState) -> None:
    gateway = await make_gateway(server={"max_body_bytes": "16KiB"})
    small = json.dumps(chat_body({"audio_path": "a.wav"})).encode()
    assert (await gateway.post(CHAT, data=small, headers=JSON)).status == 200
    big = json.dumps(chat_body({"note": "x" * 20_000})).encode()
    response = await gateway.post(CHAT, data=io.BytesIO(big), headers=JSON)
    error = await gateway_error(response, 413, None)
    assert "max_body_bytes" in error["message"]
    assert stub.request_count == 1


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (chat_body({"audio_path": "a.wav"}, messages="Transcribe"), "messages"),
        (chat_body({"audio_path": "a.wav"}, messages=None), "messages"),
        (chat_body({"audio_path": "a.wav"}, messages=[{"role": "user", "content": 5}]), "messages"),
    ],
    ids=["messages-string", "messages-null", "content-int"],
)
async def test_unspliceable_messages_are_400(
    gateway, stub: StubState, body: dict[str, Any], param: str
) -> None:
    response = await gateway.post(CHAT, json=body)
    await gateway_error(response, 400, param)
    assert stub.request_count == 0


async def test_upstream_rejection_is_relayed_not_wrapped(gateway, stub: StubState) -> None:
    """A 400 from vLLM itself is its own answer, passed on untouched (not a gateway error)."""
    body = chat_body(messages=[{"role": "user", "content": [{"type": "bogus_part", "x": 1}]}])
    response = await gateway.post(CHAT, json=body)
    assert response.status == 400
    error = (await response.json())["error"]
    assert error["type"] == "BadRequestError"
    assert "bogus_part" in error["message"]
    assert stub.rejected == 1
