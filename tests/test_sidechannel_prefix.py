"""`[sidechannel] key_prefix`: with a prefix P only the P-keys are the sidechannel.

The pure rules (`SidechannelKeys`) are held to the unprefixed rules by property tests: reading a
body under P is reading the same body renamed to the plain keys, with every name as sent. The
routes (chat, the Responses bridge, Responses `input_audio` mode, speech-to-text) are then
checked end to end against the stub.
"""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp import FormData, web
from aiohttp.test_utils import TestClient
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import ConfigError, validate_config
from gateway.errors import GatewayError, InvalidRequest
from gateway.naming.sidechannel import (
    DEFAULT_KEYS,
    KEY_PREFIX_PATTERN,
    SIDECHANNEL_KEYS,
    InlineAudio,
    PathAudio,
    Sidechannel,
    SidechannelKeys,
)
from gateway.stub_upstream import StubState
from tests.conftest import GatewayFactory, chat_body, forwarded_json, gateway_error, sha256_of

Client = TestClient[web.Request, web.Application]
PREFIX = "gateway_"
MAX_CLIPS, MAX_CLIP_BYTES = 4, 1024
WAV_URI = "data:audio/wav;base64," + base64.b64encode(b"RIFF\x00\x00\x00\x00WAVE").decode()

# --- the pure rules ---------------------------------------------------------------------------

prefixes = st.from_regex(r"[A-Za-z0-9_.-]{0,12}", fullmatch=True)
# Valid and invalid values of every kind: the rules must agree on errors as well as on clips.
values = st.one_of(
    st.sampled_from(["a.wav", "dir/b.flac", "", "x.txt", WAV_URI, "data:text/plain;base64,QQ=="]),
    st.lists(st.sampled_from(["a.wav", "b.mp3", "", "c.doc"]), max_size=6),
    st.sampled_from(['["a.wav", "b.wav"]', "[]", "[1]", "not json"]),
    st.integers(),
    st.none(),
)
other_keys = st.dictionaries(
    st.sampled_from(["trace_id", "seed", "audio", "audio_pathz", "gateway", "x_audio_path"]),
    st.text(max_size=5),
    max_size=3,
)


@st.composite
def mixtures(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A prefix and a metadata mixing prefixed, unprefixed and unrelated keys."""
    prefix = draw(prefixes)
    metadata = draw(other_keys)
    for kind in draw(st.sets(st.sampled_from(SIDECHANNEL_KEYS))):
        metadata[prefix + kind] = draw(values)
    for kind in draw(st.sets(st.sampled_from(SIDECHANNEL_KEYS))):
        metadata.setdefault(kind, draw(values))  # with prefix "" these are the same keys
    return prefix, metadata


def read_or_error(keys: SidechannelKeys, body: dict[str, Any]) -> Sidechannel | GatewayError:
    try:
        return keys.read(body, MAX_CLIPS, MAX_CLIP_BYTES)
    except GatewayError as error:
        return error


def renamed(metadata: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The metadata as the plain keys would carry it: the P-keys renamed, the rest dropped."""
    return {kind: metadata[prefix + kind] for kind in SIDECHANNEL_KEYS if prefix + kind in metadata}


def clip_view(clip: InlineAudio | PathAudio, prefix: str) -> tuple[Any, ...]:
    """A clip with its names as the plain keys would give them (`prefix` taken out)."""

    def plain(name: str) -> str:
        return "metadata." + name.removeprefix("metadata.").removeprefix(prefix)

    if isinstance(clip, InlineAudio):
        return ("inline", clip.uri, clip.mime, plain(clip.param))
    return ("path", clip.given, plain(clip.param), plain(clip.label))


@given(mixtures())
def test_reading_under_a_prefix_is_reading_the_renamed_keys(
    mixture: tuple[str, dict[str, Any]],
) -> None:
    prefix, metadata = mixture
    under_prefix = read_or_error(SidechannelKeys(prefix), {"metadata": metadata})
    plain = read_or_error(DEFAULT_KEYS, {"metadata": renamed(metadata, prefix)})
    if isinstance(plain, GatewayError):
        assert isinstance(under_prefix, GatewayError)
        assert (under_prefix.status, under_prefix.code) == (plain.status, plain.code)
        assert under_prefix.param == f"metadata.{prefix}{plain.param.removeprefix('metadata.')}"
        return
    if plain is None:
        assert under_prefix is None
        return
    assert isinstance(under_prefix, Sidechannel)
    assert (under_prefix.key, under_prefix.kind) == (prefix + plain.key, plain.kind)
    assert under_prefix.param == f"metadata.{prefix}{plain.key}"
    assert [clip_view(c, prefix) for c in under_prefix.clips] == [
        clip_view(c, "") for c in plain.clips
    ]
    for clip in under_prefix.clips:  # named as sent
        assert clip.param == f"metadata.{prefix}{plain.key}"


@given(mixtures())
def test_only_the_prefixed_keys_are_the_sidechannel(mixture: tuple[str, dict[str, Any]]) -> None:
    prefix, metadata = mixture
    keys = SidechannelKeys(prefix)
    prefixed = [prefix + kind for kind in SIDECHANNEL_KEYS if prefix + kind in metadata]
    assert keys.carries({"metadata": metadata}) == bool(prefixed)
    result = read_or_error(keys, {"metadata": metadata})
    if len(prefixed) > 1:
        assert isinstance(result, InvalidRequest)
        assert result.code == "conflicting_audio_keys"
        assert result.param == f"metadata.{prefixed[0]}"
        for name in prefixed:  # every one named as sent
            assert f"metadata.{name}" in result.message
    elif not prefixed:
        assert result is None
    elif isinstance(result, Sidechannel):
        assert result.key == prefixed[0]
    else:
        assert isinstance(result, GatewayError) and result.param == f"metadata.{prefixed[0]}"


@given(st.text(max_size=12))
def test_a_prefix_is_a_plain_key_fragment(prefix: str) -> None:
    plain = KEY_PREFIX_PATTERN.fullmatch(prefix) is not None
    assert plain == all(c.isascii() and (c.isalnum() or c in "_.-") for c in prefix)
    if plain:
        assert SidechannelKeys(prefix).names == tuple(prefix + k for k in SIDECHANNEL_KEYS)
        config = validate_config({"sidechannel": {"key_prefix": prefix}})
        assert config.sidechannel.key_prefix == prefix
        return
    with pytest.raises(ValueError):
        SidechannelKeys(prefix)
    with pytest.raises(ConfigError, match=r"sidechannel\.key_prefix"):
        validate_config({"sidechannel": {"key_prefix": prefix}})


def test_the_default_is_the_plain_keys() -> None:
    config = validate_config({})
    assert config.sidechannel.key_prefix == ""
    assert SidechannelKeys(config.sidechannel.key_prefix).names == SIDECHANNEL_KEYS


# --- the routes -------------------------------------------------------------------------------


@pytest.fixture
async def prefixed(make_gateway: GatewayFactory) -> Client:
    return await make_gateway(sidechannel={"key_prefix": PREFIX})


async def test_chat_reads_the_prefixed_key_and_forwards_the_plain_ones(
    prefixed: Client, stub: StubState, audio_dir: Path
) -> None:
    metadata = {"gateway_audio_path": "a.wav", "audio_path": "b.wav", "audio_data": "x", "k": "v"}
    response = await prefixed.post("/v1/chat/completions", json=chat_body(metadata))
    assert response.status == 200, await response.text()
    answer = await response.json()
    assert [clip["sha256"] for clip in answer["stub"]["clips"]] == [sha256_of(audio_dir / "a.wav")]
    sent = forwarded_json(stub)
    assert sent["metadata"] == {"audio_path": "b.wav", "audio_data": "x", "k": "v"}
    assert sent["messages"][-1]["content"][0]["type"] == "audio_url"


async def test_chat_with_only_plain_keys_is_forwarded_byte_for_byte(
    prefixed: Client, stub: StubState
) -> None:
    raw = json.dumps(chat_body({"audio_path": "a.wav", "audio_paths": '["b.wav"]'})).encode()
    response = await prefixed.post(
        "/v1/chat/completions", data=raw, headers={"Content-Type": "application/json"}
    )
    assert response.status == 200, await response.text()
    assert stub.requests[-1].body == raw


async def test_errors_name_the_key_as_sent(prefixed: Client, stub: StubState) -> None:
    body = chat_body({"gateway_audio_path": "missing.wav"})
    response = await prefixed.post("/v1/chat/completions", json=body)
    error = await gateway_error(response, 404, "metadata.gateway_audio_path")
    assert "metadata.gateway_audio_path" in error["message"]
    body = chat_body({"gateway_audio_paths": ["a.wav", "b.txt"]})
    response = await prefixed.post("/v1/chat/completions", json=body)
    error = await gateway_error(response, 404, "metadata.gateway_audio_paths")
    assert "metadata.gateway_audio_paths[1]" in error["message"]
    assert not stub.requests


async def test_two_prefixed_keys_conflict_naming_both(prefixed: Client, stub: StubState) -> None:
    body = chat_body(
        {"audio_path": "a.wav", "gateway_audio_data": WAV_URI, "gateway_audio_path": "a"}
    )
    response = await prefixed.post("/v1/chat/completions", json=body)
    error = await gateway_error(response, 400, "metadata.gateway_audio_data")
    assert error["code"] == "conflicting_audio_keys"
    assert "metadata.gateway_audio_data" in error["message"]
    assert "metadata.gateway_audio_path" in error["message"]
    assert "metadata.audio_path" not in error["message"].replace("gateway_audio_path", "")
    assert not stub.requests


async def test_the_legacy_key_is_read_under_the_prefix_and_logged_as_sent(
    prefixed: Client, audio_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    uri = "data:audio/wav;base64," + base64.b64encode((audio_dir / "a.wav").read_bytes()).decode()
    with caplog.at_level(logging.WARNING):
        response = await prefixed.post(
            "/v1/chat/completions", json=chat_body({"gateway_audio_url": uri})
        )
    assert response.status == 200, await response.text()
    messages = [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()]
    assert messages and "metadata.gateway_audio_url" in messages[0]
    assert "metadata.gateway_audio_data" in messages[0]


async def test_the_bridge_follows_the_prefix(
    prefixed: Client, stub: StubState, audio_dir: Path
) -> None:
    metadata = {"gateway_audio_paths": '["a.wav", "b.wav"]', "audio_path": "c.wav"}
    body = {"model": "stub-audio-model", "input": "Transcribe.", "metadata": metadata}
    response = await prefixed.post("/v1/responses", json=body)
    assert response.status == 200, await response.text()
    answer = await response.json()
    assert answer["object"] == "response"
    assert answer["metadata"] == {"audio_path": "c.wav"}  # what the sidechannel left, echoed
    assert stub.requests[-1].path == "/v1/chat/completions"
    sent = forwarded_json(stub)
    assert sent["metadata"] == {"audio_path": "c.wav"}
    assert [p["type"] for p in sent["messages"][-1]["content"]] == [
        "audio_url",
        "audio_url",
        "text",
    ]


async def test_the_bridge_passes_rows_with_only_plain_keys(
    prefixed: Client, stub: StubState
) -> None:
    body = {"model": "stub-audio-model", "input": "hi", "metadata": {"audio_path": "a.wav"}}
    response = await prefixed.post("/v1/responses", json=body)
    assert stub.requests[-1].path == "/v1/responses"
    assert json.loads(stub.requests[-1].body) == body
    assert response.status == 200, await response.text()


@pytest.mark.stub(responses_accept_audio=True)
async def test_responses_input_audio_mode_follows_the_prefix(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(
        sidechannel={"key_prefix": PREFIX}, responses={"audio": "input_audio"}
    )
    metadata = {"gateway_audio_path": "b.wav", "audio_paths": '["a.wav"]'}
    body = {"model": "stub-audio-model", "input": "Transcribe.", "metadata": metadata}
    response = await gateway.post("/v1/responses", json=body)
    assert response.status == 200, await response.text()
    answer = await response.json()
    assert [clip["sha256"] for clip in answer["stub"]["clips"]] == [sha256_of(audio_dir / "b.wav")]
    assert forwarded_json(stub)["metadata"] == {"audio_paths": '["a.wav"]'}


async def test_speech_json_follows_the_prefix(
    prefixed: Client, stub: StubState, audio_dir: Path
) -> None:
    body = {"model": "stub-audio-model", "metadata": {"gateway_audio_path": "c.wav"}}
    response = await prefixed.post("/v1/audio/transcriptions", json=body)
    assert response.status == 200, await response.text()
    assert (await response.json())["stub"]["clip"]["sha256"] == sha256_of(audio_dir / "c.wav")
    body = {"model": "stub-audio-model", "metadata": {"gateway_audio_paths": '["c.wav"]'}}
    response = await prefixed.post("/v1/audio/transcriptions", json=body)
    error = await gateway_error(response, 400, "metadata.gateway_audio_paths")
    assert "metadata.gateway_audio_path" in error["message"]


async def test_speech_form_fields_follow_the_prefix(
    prefixed: Client, stub: StubState, audio_dir: Path
) -> None:
    form = FormData()
    form.add_field("model", "stub-audio-model")
    form.add_field("audio_path", "plain-field.wav")  # an ordinary form field under the prefix
    form.add_field("gateway_audio_path", "a.wav")
    response = await prefixed.post("/v1/audio/transcriptions", data=form)
    assert response.status == 200, await response.text()
    report = (await response.json())["stub"]
    assert report["clip"]["sha256"] == sha256_of(audio_dir / "a.wav")
    assert ["audio_path", "plain-field.wav"] in report["fields"]
    assert not any(name == "gateway_audio_path" for name, _ in report["fields"])


def test_serve_refuses_a_bad_prefix_naming_the_key(tmp_path: Path) -> None:
    from tests.test_config import run_cli

    bad = tmp_path / "bad.toml"
    bad.write_text('[sidechannel]\nkey_prefix = "gateway audio/"\n')
    result = run_cli("serve", "--config", str(bad))
    assert result.returncode == 2
    assert "sidechannel.key_prefix" in result.stderr
