"""The audio sidechannel of chat completions, end to end: each form, the splice, the metadata.

Every success asserts the exact bytes the stub decoded (sha256 of the file) and, where the
shape matters, the exact body the stub received.
"""

from __future__ import annotations

import base64
import io
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile

from gateway.audio.samples import write_tone
from gateway.naming.strict_base64 import DECODE_CHUNK_CHARS
from gateway.stub_upstream import StubState
from tests.conftest import (
    audio_part,
    chat_body,
    forwarded_json,
    gateway_error,
    no_blocking_calls,
    sha256_of,
)

CHAT = "/v1/chat/completions"
SUPPORTED = ".wav, .flac, .mp3, .m4a, .ogg, .opus"


def data_uri(path: Path, mime: str = "audio/wav") -> str:
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def write_flac(path: Path, seconds: float = 0.3, rate_hz: int = 16_000) -> Path:
    samples = np.sin(np.linspace(0, 2 * np.pi * 440 * seconds, int(rate_hz * seconds)))
    buffer = io.BytesIO()
    soundfile.write(buffer, (samples * 0.4).astype(np.float32), rate_hz, format="FLAC")
    path.write_bytes(buffer.getvalue())
    return path


async def post_chat(gateway, body: dict[str, Any]) -> dict[str, Any]:
    response = await gateway.post(CHAT, json=body)
    assert response.status == 200, await response.text()
    return await response.json()


def clip_shas(answer: dict[str, Any]) -> list[str]:
    return [clip["sha256"] for clip in answer["stub"]["clips"]]


class TestAudioDataSplice:
    """NeMo Gym's TestAudioDataSplice: the inline form."""

    async def test_inline_data_uri_is_forwarded_as_is(self, gateway, stub, audio_dir) -> None:
        uri = data_uri(audio_dir / "b.wav", "audio/x-wav")
        answer = await post_chat(gateway, chat_body({"audio_data": uri}))
        assert clip_shas(answer) == [sha256_of(audio_dir / "b.wav")]
        assert answer["stub"]["clips"][0]["mime"] == "audio/x-wav"
        assert forwarded_json(stub)["messages"][-1]["content"] == [
            {"type": "audio_url", "audio_url": {"url": uri}},
            {"type": "text", "text": "Transcribe the audio."},
        ]

    async def test_inline_audio_above_aiohttp_default_body_limit(
        self, gateway, stub, tmp_path
    ) -> None:
        # aiohttp's 1 MiB default client_max_size would refuse this row.
        big = write_tone(tmp_path / "big.wav", 60.0, 330.0)  # about 1.9 MB of WAV
        raw = json.dumps(chat_body({"audio_data": data_uri(big)})).encode()
        assert len(raw) > 2 * 1024**2
        response = await gateway.post(
            CHAT, data=io.BytesIO(raw), headers={"Content-Type": "application/json"}
        )
        assert response.status == 200, await response.text()
        assert clip_shas(await response.json()) == [sha256_of(big)]


class TestLegacyAudioUrl:
    async def test_legacy_key_is_treated_as_audio_data(self, gateway, stub, audio_dir) -> None:
        uri = data_uri(audio_dir / "a.wav")
        answer = await post_chat(gateway, chat_body({"audio_url": uri, "keep": "me"}))
        assert clip_shas(answer) == [sha256_of(audio_dir / "a.wav")]
        forwarded = forwarded_json(stub)
        assert forwarded["metadata"] == {"keep": "me"}
        assert forwarded["messages"][-1]["content"][0] == {
            "type": "audio_url",
            "audio_url": {"url": uri},
        }

    async def test_legacy_key_is_logged_once_as_deprecated(
        self, gateway, audio_dir, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.WARNING)
        uri = data_uri(audio_dir / "a.wav")
        for _ in range(3):
            await post_chat(gateway, chat_body({"audio_url": uri}))
        await post_chat(gateway, chat_body({"audio_data": uri}))
        deprecations = [
            record
            for record in caplog.records
            if "audio_url" in record.getMessage() and "deprecated" in record.getMessage()
        ]
        assert len(deprecations) == 1, [r.getMessage() for r in caplog.records]
        assert deprecations[0].levelno == logging.WARNING

    async def test_modern_key_is_not_logged(
        self, gateway, audio_dir, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.WARNING)
        await post_chat(gateway, chat_body({"audio_data": data_uri(audio_dir / "a.wav")}))
        assert not [r for r in caplog.records if "deprecated" in r.getMessage()]


class TestAudioPathSplice:
    """NeMo Gym's TestAudioPathSplice, plus the gateway's own path rules."""

    async def test_absolute_path(self, gateway, stub, audio_dir) -> None:
        path = audio_dir / "b.wav"
        answer = await post_chat(gateway, chat_body({"audio_path": str(path)}))
        assert clip_shas(answer) == [sha256_of(path)]
        assert forwarded_json(stub)["messages"][-1]["content"][0] == audio_part(path)

    async def test_relative_path_joins_root(self, gateway, stub, audio_dir) -> None:
        (audio_dir / "nested" / "deeper").mkdir(parents=True)
        path = write_tone(audio_dir / "nested" / "deeper" / "d.wav", 0.1, 220.0)
        answer = await post_chat(gateway, chat_body({"audio_path": "nested/deeper/d.wav"}))
        assert clip_shas(answer) == [sha256_of(path)]
        clip = answer["stub"]["clips"][0]
        assert (clip["mime"], clip["sample_rate"], clip["channels"]) == ("audio/wav", 16000, 1)
        assert clip["duration_seconds"] == pytest.approx(0.1)
        assert clip["bytes"] == path.stat().st_size

    async def test_relative_path_without_root_is_400(self, make_gateway, stub) -> None:
        gateway = await make_gateway(audio={"root": ""})
        response = await gateway.post(CHAT, json=chat_body({"audio_path": "a.wav"}))
        error = await gateway_error(response, 400, "metadata.audio_path")
        assert "metadata.audio_path" in error["message"]
        assert "'a.wav'" in error["message"]
        assert "audio.root" in error["message"]
        assert stub.request_count == 0

    async def test_missing_file_is_404(self, gateway, stub) -> None:
        response = await gateway.post(CHAT, json=chat_body({"audio_path": "nope/missing.wav"}))
        error = await gateway_error(response, 404, "metadata.audio_path")
        assert "metadata.audio_path" in error["message"]
        assert "'nope/missing.wav'" in error["message"]
        assert stub.request_count == 0

    @pytest.mark.parametrize("name", ["notes.txt", "clip.wav.bak", "noextension", "clip.aiff"])
    async def test_unknown_extension_is_400_listing_supported(
        self, gateway, stub, audio_dir, name
    ) -> None:
        (audio_dir / name).write_bytes((audio_dir / "a.wav").read_bytes())
        response = await gateway.post(CHAT, json=chat_body({"audio_path": name}))
        error = await gateway_error(response, 400, "metadata.audio_path")
        assert repr(name) in error["message"]
        assert SUPPORTED in error["message"]
        assert stub.request_count == 0

    @pytest.mark.parametrize("name", ["LOUD.WAV", "Mixed.Wav"])
    async def test_extension_is_case_insensitive(self, gateway, audio_dir, name) -> None:
        path = write_tone(audio_dir / name, 0.1, 500.0)
        answer = await post_chat(gateway, chat_body({"audio_path": name}))
        assert clip_shas(answer) == [sha256_of(path)]
        assert answer["stub"]["clips"][0]["mime"] == "audio/wav"

    @pytest.mark.parametrize("name", ["клип 1.wav", "it's here.wav", "a#b?c.wav", "日本.wav"])
    async def test_unusual_file_names(self, gateway, audio_dir, name) -> None:
        path = write_tone(audio_dir / name, 0.1, 700.0)
        answer = await post_chat(gateway, chat_body({"audio_paths": [name, str(path)]}))
        assert clip_shas(answer) == [sha256_of(path)] * 2

    async def test_multi_clip_order_is_preserved(self, gateway, stub, audio_dir) -> None:
        names = ["c.wav", "a.wav", "b.wav", "a.wav"]
        answer = await post_chat(gateway, chat_body({"audio_paths": names}))
        assert clip_shas(answer) == [sha256_of(audio_dir / name) for name in names]
        assert forwarded_json(stub)["messages"][-1]["content"] == [
            *(audio_part(audio_dir / name) for name in names),
            {"type": "text", "text": "Transcribe the audio."},
        ]

    async def test_audio_paths_as_json_array_string(self, gateway, stub, audio_dir) -> None:
        # OpenAI-style metadata is string-to-string, so the list may arrive as its JSON text.
        names = ["b.wav", str(audio_dir / "c.wav")]
        answer = await post_chat(gateway, chat_body({"audio_paths": json.dumps(names)}))
        assert clip_shas(answer) == [sha256_of(audio_dir / "b.wav"), sha256_of(audio_dir / "c.wav")]
        assert "metadata" not in forwarded_json(stub)

    @pytest.mark.parametrize(
        "value",
        [5, {"path": "a.wav"}, True, "a.wav", '{"a": "a.wav"}', '"a.wav"', "[a.wav]"],
        ids=["int", "object", "bool", "plain-string", "json-object", "json-string", "not-json"],
    )
    async def test_audio_paths_not_a_list_is_400(self, gateway, stub, value) -> None:
        response = await gateway.post(CHAT, json=chat_body({"audio_paths": value}))
        error = await gateway_error(response, 400, "metadata.audio_paths")
        assert "metadata.audio_paths" in error["message"]
        assert stub.request_count == 0

    @pytest.mark.parametrize(
        "metadata",
        [
            {"audio_path": "a.wav", "audio_paths": ["b.wav"]},
            {"audio_data": "data:audio/wav;base64,AAAA", "audio_path": "a.wav"},
            {"audio_url": "data:audio/wav;base64,AAAA", "audio_data": "data:audio/wav;base64,AAAA"},
            {"audio_path": "a.wav", "audio_paths": []},  # present counts, empty or not
            {"audio_path": "", "audio_data": ""},
            {"audio_data": "x", "audio_url": "x", "audio_path": "a.wav", "audio_paths": ["a"]},
        ],
    )
    async def test_more_than_one_key_is_400_naming_them(self, gateway, stub, metadata) -> None:
        response = await gateway.post(CHAT, json=chat_body(metadata))
        error = await gateway_error(response, 400, f"metadata.{sorted_keys(metadata)[0]}")
        for key in metadata:
            assert f"metadata.{key}" in error["message"]
        assert stub.request_count == 0


def sorted_keys(metadata: dict[str, Any]) -> list[str]:
    """The sidechannel keys in the gateway's canonical order (param names the first)."""
    order = ["audio_data", "audio_url", "audio_path", "audio_paths"]
    return sorted(metadata, key=order.index)


class TestContentSniffing:
    async def test_flac_named_wav_is_sent_as_flac(self, gateway, stub, audio_dir) -> None:
        path = write_flac(audio_dir / "really_flac.wav")
        answer = await post_chat(gateway, chat_body({"audio_path": "really_flac.wav"}))
        clip = answer["stub"]["clips"][0]
        assert (clip["sha256"], clip["mime"], clip["container"]) == (
            sha256_of(path),
            "audio/flac",
            "flac",
        )
        assert clip["duration_seconds"] == pytest.approx(0.3, abs=0.01)
        assert forwarded_json(stub)["messages"][-1]["content"][0] == audio_part(path, "audio/flac")

    async def test_flac_file_is_audio_flac(self, gateway, audio_dir) -> None:
        path = write_flac(audio_dir / "clip.flac", seconds=0.2)
        answer = await post_chat(gateway, chat_body({"audio_paths": ["clip.flac", "a.wav"]}))
        assert clip_shas(answer) == [sha256_of(path), sha256_of(audio_dir / "a.wav")]
        assert [clip["mime"] for clip in answer["stub"]["clips"]] == ["audio/flac", "audio/wav"]

    async def test_wav_named_flac_is_sent_as_wav(self, gateway, audio_dir) -> None:
        (audio_dir / "wav_inside.flac").write_bytes((audio_dir / "b.wav").read_bytes())
        answer = await post_chat(gateway, chat_body({"audio_path": "wav_inside.flac"}))
        assert clip_shas(answer) == [sha256_of(audio_dir / "b.wav")]
        assert answer["stub"]["clips"][0]["mime"] == "audio/wav"


class TestSplicePlacement:
    """Same semantics as NeMo Gym's vllm_model splice."""

    async def test_string_content_becomes_audio_then_text(self, gateway, stub, audio_dir) -> None:
        await post_chat(gateway, chat_body({"audio_path": "a.wav"}))
        assert forwarded_json(stub)["messages"] == [
            {
                "role": "user",
                "content": [
                    audio_part(audio_dir / "a.wav"),
                    {"type": "text", "text": "Transcribe the audio."},
                ],
            }
        ]

    async def test_list_content_keeps_existing_parts_after_audio(
        self, gateway, stub, audio_dir
    ) -> None:
        existing = [
            {"type": "text", "text": "First part."},
            {"type": "text", "text": "Second part, with unicode: héllo ✓"},
        ]
        messages = [{"role": "user", "content": existing}]
        answer = await post_chat(
            gateway, chat_body({"audio_paths": ["b.wav", "c.wav"]}, messages=messages)
        )
        assert forwarded_json(stub)["messages"][-1]["content"] == [
            audio_part(audio_dir / "b.wav"),
            audio_part(audio_dir / "c.wav"),
            *existing,
        ]
        assert answer["stub"]["last_message_part_types"] == [
            "audio_url",
            "audio_url",
            "text",
            "text",
        ]

    async def test_null_content_becomes_audio_only(self, gateway, stub, audio_dir) -> None:
        messages = [{"role": "user", "content": None}]
        await post_chat(gateway, chat_body({"audio_path": "c.wav"}, messages=messages))
        assert forwarded_json(stub)["messages"] == [
            {"role": "user", "content": [audio_part(audio_dir / "c.wav")]}
        ]

    async def test_no_user_message_appends_one(self, gateway, stub, audio_dir) -> None:
        messages = [
            {"role": "system", "content": "You transcribe."},
            {"role": "assistant", "content": "Ready."},
        ]
        await post_chat(gateway, chat_body({"audio_path": "a.wav"}, messages=messages))
        assert forwarded_json(stub)["messages"] == [
            *messages,
            {"role": "user", "content": [audio_part(audio_dir / "a.wav")]},
        ]

    async def test_only_the_last_user_message_gets_audio(self, gateway, stub, audio_dir) -> None:
        messages = [
            {"role": "system", "content": "You transcribe."},
            {"role": "user", "content": "Earlier turn."},
            {"role": "assistant", "content": "Earlier answer."},
            {"role": "user", "content": [{"type": "text", "text": "This turn."}]},
            {"role": "assistant", "content": "Thinking..."},
        ]
        answer = await post_chat(gateway, chat_body({"audio_path": "b.wav"}, messages=messages))
        forwarded = forwarded_json(stub)["messages"]
        assert forwarded[:3] == messages[:3]
        assert forwarded[3] == {
            "role": "user",
            "content": [audio_part(audio_dir / "b.wav"), {"type": "text", "text": "This turn."}],
        }
        assert forwarded[4] == messages[4]
        assert clip_shas(answer) == [sha256_of(audio_dir / "b.wav")]

    async def test_rest_of_the_body_is_kept(self, gateway, stub) -> None:
        extra = {"temperature": 0.25, "max_tokens": 7, "seed": 3, "stop": ["\n"], "n": 1}
        await post_chat(gateway, chat_body({"audio_path": "a.wav"}, **extra))
        forwarded = forwarded_json(stub)
        assert {key: forwarded[key] for key in extra} == extra
        assert forwarded["model"] == "stub-audio-model"
        assert set(forwarded) == {"model", "messages", *extra}


class TestMetadata:
    @pytest.mark.parametrize(
        "sidechannel",
        [{"audio_path": "a.wav"}, {"audio_paths": ["a.wav"]}, {"audio_paths": '["a.wav"]'}],
    )
    async def test_consumed_key_removed_other_keys_kept(
        self, gateway, stub, audio_dir, sidechannel
    ) -> None:
        metadata = {"run_id": "r-17", **sidechannel, "split": "test"}
        answer = await post_chat(gateway, chat_body(metadata))
        assert forwarded_json(stub)["metadata"] == {"run_id": "r-17", "split": "test"}
        assert answer["stub"]["metadata"] == {"run_id": "r-17", "split": "test"}
        assert clip_shas(answer) == [sha256_of(audio_dir / "a.wav")]

    async def test_emptied_metadata_is_removed(self, gateway, stub, audio_dir) -> None:
        answer = await post_chat(gateway, chat_body({"audio_data": data_uri(audio_dir / "c.wav")}))
        assert "metadata" not in forwarded_json(stub)
        assert answer["stub"]["has_metadata"] is False

    async def test_spliced_body_is_sent_as_json(self, gateway, stub) -> None:
        await post_chat(gateway, chat_body({"audio_path": "a.wav"}))
        headers = stub.requests[-1].headers
        assert headers["Content-Type"] == "application/json"
        assert int(headers["Content-Length"]) == len(stub.requests[-1].body)


class TestNoSidechannel:
    """A request without sidechannel keys is forwarded byte-for-byte."""

    @pytest.mark.parametrize(
        "raw",
        [
            b'{ "model" :"stub-audio-model",\n\t"messages":[ {"role":"user",'
            b'"content":"caf\\u00e9 \xc3\xa9  spaced"} ] ,  "metadata":{"run":"1","audio":"x"}'
            b'  ,"temperature":1.0e0}\r\n',
            b'{"messages":[{"content":"Hi","role":"user"}],"model":"m"}',
            b'  {"model":"m","messages":[{"role":"user","content":"x"}],"metadata":null}  ',
            b'{"model":"m","messages":[{"role":"user","content":"x"}],"metadata":"audio_path"}',
        ],
        ids=["odd-whitespace", "compact", "null-metadata", "string-metadata"],
    )
    async def test_forwarded_byte_for_byte(self, gateway, stub: StubState, raw: bytes) -> None:
        response = await gateway.post(
            CHAT, data=raw, headers={"Content-Type": "application/json; charset=utf-8"}
        )
        assert response.status == 200, await response.text()
        assert stub.requests[-1].body == raw
        assert stub.requests[-1].headers["Content-Type"] == "application/json; charset=utf-8"
        assert (await response.json())["stub"]["clips"] == []


async def test_no_form_blocks_the_event_loop(gateway, stub, audio_dir) -> None:
    """Every file-system touch runs off the loop (but `no_blocking_calls`' one stat)."""
    write_flac(audio_dir / "d.flac")
    uri = data_uri(audio_dir / "a.wav")
    expected = {name: sha256_of(audio_dir / name) for name in ("a.wav", "b.wav", "d.flac")}
    with no_blocking_calls():
        answers = [
            await post_chat(gateway, chat_body(metadata))
            for metadata in (
                {"audio_path": "a.wav"},
                {"audio_paths": ["b.wav", "d.flac"]},
                {"audio_data": uri},
                {"audio_url": uri},
            )
        ]
        missing = await gateway.post(CHAT, json=chat_body({"audio_path": "missing.wav"}))
        assert missing.status == 404
        stub.hold.set()
        streamed = await gateway.post(CHAT, json=chat_body({"audio_path": "b.wav"}, stream=True))
        assert streamed.status == 200
        assert (await streamed.text()).endswith("data: [DONE]\n\n")
    assert [clip_shas(answer) for answer in answers] == [
        [expected["a.wav"]],
        [expected["b.wav"], expected["d.flac"]],
        [expected["a.wav"]],
        [expected["a.wav"]],
    ]


@pytest.mark.parametrize(
    "cache",
    [{}, {"max_bytes": 0}, {"max_item_bytes": "1KiB"}],
    ids=["cached", "cache-off", "streamed-from-disk"],
)
async def test_multi_chunk_files_arrive_byte_identical(
    make_gateway, stub, audio_dir, cache
) -> None:
    """Files spanning several read chunks: the base64 pieces must join into the exact bytes."""
    gateway = await make_gateway(cache=cache)
    root = audio_dir
    long_wav = write_tone(root / "long.wav", 70.0, 123.0)  # about 2.2 MB: three read chunks
    odd_wav = write_tone(root / "odd.wav", 0.01, 99.0)  # size not a multiple of 3
    long_flac = write_flac(root / "long.flac", seconds=20.0)
    names = ["long.wav", "odd.wav", "long.flac", "long.wav"]
    with no_blocking_calls():
        answer = await post_chat(gateway, chat_body({"audio_paths": names}))
    by_name = {"long.wav": long_wav, "odd.wav": odd_wav, "long.flac": long_flac}
    assert clip_shas(answer) == [sha256_of(by_name[name]) for name in names]
    assert forwarded_json(stub)["messages"][-1]["content"][:3] == [
        audio_part(long_wav),
        audio_part(odd_wav),
        audio_part(long_flac, "audio/flac"),
    ]


async def test_large_inline_audio_is_validated_across_chunks(
    make_gateway, stub: StubState, tmp_path: Path
) -> None:
    """Inline base64 is checked chunk by chunk (`DECODE_CHUNK_CHARS`): a clip spanning several
    chunks arrives intact, and a fault in a later chunk (a stray character, padding mid-stream)
    is still a 400."""
    big = write_tone(tmp_path / "long.wav", 200.0, 330.0)  # ~6.4 MB: 8.5 Mi base64 characters
    gateway = await make_gateway(audio={"max_file_bytes": "32MiB"})

    def post(uri: str) -> Any:  # a BytesIO body: aiohttp warns about large raw bytes
        body = io.BytesIO(json.dumps(chat_body({"audio_data": uri})).encode())
        headers = {"Content-Type": "application/json"}
        return gateway.post("/v1/chat/completions", data=body, headers=headers)

    uri = data_uri(big)
    response = await post(uri)
    assert response.status == 200, await response.text()
    assert clip_shas(await response.json()) == [sha256_of(big)]

    late = len(uri) - 1000  # inside the last chunk
    middle = uri.index(",") + DECODE_CHUNK_CHARS + 8  # inside the second chunk
    for broken in (uri[:late] + "!" + uri[late + 1 :], uri[:middle] + "====" + uri[middle + 4 :]):
        before = stub.request_count
        error = await gateway_error(await post(broken), 400, "metadata.audio_data")
        assert "base64" in error["message"]
        assert stub.request_count == before


async def test_a_rewritten_body_is_framed_as_json_of_its_exact_length(
    gateway, stub: StubState, audio_dir: Path
) -> None:
    """Whatever Content-Type the client sent, the body the gateway wrote is JSON, and its
    Content-Length is the rewritten body's own, not the client's."""
    raw = json.dumps(chat_body({"audio_path": "a.wav"})).encode()
    response = await gateway.post(
        "/v1/chat/completions", data=raw, headers={"Content-Type": "text/plain; charset=utf-8"}
    )
    assert response.status == 200, await response.text()
    forwarded = stub.requests[-1]
    headers = {k.lower(): v for k, v in forwarded.headers.items()}
    assert headers["content-type"] == "application/json"
    assert int(headers["content-length"]) == len(forwarded.body) > len(raw)
    assert clip_shas(await response.json()) == [sha256_of(audio_dir / "a.wav")]
