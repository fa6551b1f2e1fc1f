"""[normalize]: clips the gateway reads go upstream as WAV in the model's form, over real HTTP
against the stub (which decodes each clip and reports its rate and channels)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
import soxr
from aiohttp import FormData, web
from aiohttp.test_utils import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config import ConfigError, NormalizeConfig, validate_config
from gateway.normalize.convert import convert
from gateway.normalize.form import TargetForm, in_form, wav_format
from gateway.stub_upstream import StubState
from tests.conftest import GatewayFactory, audio_part, chat_body, gateway_error, gateway_metrics
from tests.objectstore import S3Server, aws_environment, s3_config, s3_server
from tests.tools_helpers import run_json, write_jsonl

__all__ = ["aws_environment", "s3_server"]  # fixtures, used by name

Client = TestClient[web.Request, web.Application]
NORMALIZE = {"enabled": True}
NORMALIZED = "audio_gateway_normalized_clips_total"
REPO_ROOT = Path(__file__).resolve().parent.parent


def stereo_tone(seconds: float, rate: int) -> np.ndarray:
    """440 Hz on the left, 660 Hz on the right, float32 at half scale."""
    t = np.arange(int(seconds * rate)) / rate
    left, right = np.sin(2 * np.pi * 440 * t), np.sin(2 * np.pi * 660 * t)
    return (0.5 * np.stack([left, right], axis=1)).astype(np.float32)


def write_clip(path: Path, rate: int, container: str, subtype: str | None = None) -> Path:
    soundfile.write(path, stereo_tone(1.0, rate), rate, format=container, subtype=subtype)
    return path


def sent_clips(stub: StubState, index: int = -1) -> list[bytes]:
    """The audio bytes of every audio part of one request the stub received."""
    body = json.loads(stub.requests[index].body)
    clips = []
    for message in body["messages"]:
        for part in message["content"] if isinstance(message["content"], list) else []:
            if part["type"] == "audio_url":
                url = part["audio_url"]["url"]
                assert url.startswith("data:audio/wav;base64,"), url[:40]
                clips.append(base64.b64decode(url.partition(",")[2]))
            elif part["type"] == "input_audio":
                assert part["input_audio"]["format"] == "wav"
                clips.append(base64.b64decode(part["input_audio"]["data"]))
    return clips


def expected(path: Path, form: TargetForm) -> bytes:
    """The gateway's conversion of `path`, made here directly."""
    out = io.BytesIO()
    with open(path, "rb") as handle:
        convert(handle, form, out, max_seconds=3600)
    return out.getvalue()


async def chat(client: Client, metadata: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/v1/chat/completions", json=chat_body(metadata))
    assert response.status == 200, await response.text()
    answer: dict[str, Any] = await response.json()
    return answer


# --- config -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"sample_rate": 7999}, "normalize.sample_rate"),
        ({"sample_rate": 192_001}, "normalize.sample_rate"),
        ({"sample_rate": "16000"}, "normalize.sample_rate"),
        ({"channels": -1}, "normalize.channels"),
        ({"channels": 9}, "normalize.channels"),
        ({"sample_format": "PCM_24"}, "normalize.sample_format"),
        ({"resampler": "soxr"}, "normalize.resampler"),
    ],
)
def test_a_bad_setting_is_a_start_up_error_naming_its_key(values: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=rf"{key}: "):
        validate_config({"normalize": values})


def test_the_bounds_are_inclusive_and_normalize_is_off_by_default() -> None:
    assert validate_config({}).normalize == NormalizeConfig()
    assert not NormalizeConfig().enabled
    low = validate_config({"normalize": {"sample_rate": 8000, "channels": 0}}).normalize
    high = validate_config({"normalize": {"sample_rate": 192_000, "channels": 8}}).normalize
    assert (low.sample_rate, low.channels, high.sample_rate, high.channels) == (8000, 0, 192000, 8)


# --- the form check (pure) ---------------------------------------------------------------------


def wav_head(tag: int, channels: int, rate: int, bits: int, extra_chunk: bytes = b"") -> bytes:
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * channels * bits // 8, 4, bits)
    body = extra_chunk + b"fmt " + struct.pack("<I", 16) + fmt + b"data" + struct.pack("<I", 0)
    return b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WAVE" + body


@settings(deadline=None)  # pure and fast; the shared cores make timings unreliable
@given(
    tag=st.sampled_from([1, 3, 0xFFFE, 2]),
    channels=st.integers(1, 8),
    rate=st.sampled_from([8000, 16000, 22050, 44100, 48000]),
    bits=st.sampled_from([8, 16, 24, 32]),
    junk=st.binary(max_size=9),
    target=st.builds(
        TargetForm,
        st.sampled_from([8000, 16000, 48000]),
        st.integers(0, 8),
        st.sampled_from(["PCM_16", "FLOAT"]),
    ),
)
def test_a_wav_is_in_form_exactly_when_its_fmt_chunk_says_the_target(
    tag: int, channels: int, rate: int, bits: int, junk: bytes, target: TargetForm
) -> None:
    extra = b"LIST" + struct.pack("<I", len(junk)) + junk + b"\0" * (len(junk) & 1)
    head = wav_head(tag, channels, rate, bits, extra)
    found = wav_format(head)
    assert found is not None and (found.tag, found.channels, found.sample_rate) == (
        tag,
        channels,
        rate,
    )
    kind = {"PCM_16": (1, 16), "FLOAT": (3, 32)}[target.subtype]
    want = (tag, bits) == kind and rate == target.sample_rate and target.channels in (0, channels)
    assert in_form(head, target) == want
    assert not in_form(head[:20], target)  # cut before its fmt chunk: not known to be in form


@settings(deadline=None)
@given(st.binary(max_size=64))
def test_anything_but_a_riff_wave_is_not_in_form(data: bytes) -> None:
    assert not in_form(b"fLaC" + data, TargetForm(16000, 1, "PCM_16"))
    assert wav_format(b"RIFX" + data) is None


# --- formats, rates, channels, sample formats ---------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rate", "container", "subtype"),
    [
        ("s.wav", 44100, "WAV", "PCM_16"),
        ("s.flac", 48000, "FLAC", None),
        ("s.mp3", 44100, "MP3", None),
        ("s.ogg", 48000, "OGG", None),
        ("f.wav", 16000, "WAV", "FLOAT"),  # the rate already, but float and stereo
        ("x.wav", 16000, "WAV", "PCM_24"),
    ],
)
async def test_a_clip_not_in_form_goes_as_a_16khz_mono_16_bit_wav(
    make_gateway: GatewayFactory,
    stub: StubState,
    audio_dir: Path,
    name: str,
    rate: int,
    container: str,
    subtype: str | None,
) -> None:
    path = write_clip(audio_dir / name, rate, container, subtype)
    gateway = await make_gateway(normalize=NORMALIZE)
    report = (await chat(gateway, {"audio_path": name}))["stub"]["clips"][0]
    assert (report["mime"], report["sample_rate"], report["channels"]) == ("audio/wav", 16000, 1)
    (sent,) = sent_clips(stub)
    assert sent == expected(path, TargetForm(16000, 1, "PCM_16"))
    assert soundfile.info(io.BytesIO(sent)).subtype == "PCM_16"
    assert (await gateway_metrics(gateway))[NORMALIZED] == 1


async def test_the_mono_mix_is_the_mean_of_the_channels_resampled(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    write_clip(audio_dir / "s.wav", 48000, "WAV", "FLOAT")
    gateway = await make_gateway(normalize=NORMALIZE | {"sample_format": "FLOAT"})
    await chat(gateway, {"audio_path": "s.wav"})
    got, rate = soundfile.read(io.BytesIO(sent_clips(stub)[0]), dtype="float32")
    reference = soxr.resample(stereo_tone(1.0, 48000).mean(axis=1), 48000, 16000)
    assert rate == 16000 and got.shape == reference.shape
    assert np.max(np.abs(got - reference)) < 1e-5  # one resampler, streamed or whole


@pytest.mark.parametrize(
    ("settings", "want_rate", "want_channels", "want_subtype"),
    [
        ({"channels": 0}, 16000, 2, "PCM_16"),
        ({"channels": 2, "sample_rate": 8000}, 8000, 2, "PCM_16"),
        ({"channels": 3}, 16000, 3, "PCM_16"),  # stereo mixed to mono, then copied
        ({"sample_rate": 48000, "sample_format": "FLOAT"}, 48000, 1, "FLOAT"),
        ({"sample_rate": 192_000}, 192_000, 1, "PCM_16"),
    ],
)
async def test_the_target_form_is_what_is_sent(
    make_gateway: GatewayFactory,
    stub: StubState,
    audio_dir: Path,
    settings: dict[str, Any],
    want_rate: int,
    want_channels: int,
    want_subtype: str,
) -> None:
    write_clip(audio_dir / "s.flac", 44100, "FLAC")
    gateway = await make_gateway(normalize=NORMALIZE | settings)
    report = (await chat(gateway, {"audio_path": "s.flac"}))["stub"]["clips"][0]
    assert (report["sample_rate"], report["channels"]) == (want_rate, want_channels)
    info = soundfile.info(io.BytesIO(sent_clips(stub)[0]))
    assert (info.samplerate, info.channels, info.subtype) == (
        want_rate,
        want_channels,
        want_subtype,
    )
    assert abs(info.duration - 1.0) < 0.01


async def test_mono_copied_to_two_channels_is_the_same_signal_twice(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    soundfile.write(audio_dir / "m.wav", stereo_tone(1.0, 16000)[:, 0], 16000, subtype="PCM_16")
    gateway = await make_gateway(normalize=NORMALIZE | {"channels": 2})
    await chat(gateway, {"audio_path": "m.wav"})
    got, _ = soundfile.read(io.BytesIO(sent_clips(stub)[0]), dtype="int16")
    original, _ = soundfile.read(audio_dir / "m.wav", dtype="int16")
    assert np.array_equal(got[:, 0], original) and np.array_equal(got[:, 1], original)


@pytest.mark.parametrize("subtype", ["PCM_16", "FLOAT"])
async def test_a_wav_already_in_form_is_sent_byte_for_byte_and_counts_nothing(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, subtype: str
) -> None:
    path = audio_dir / "in_form.wav"
    soundfile.write(path, stereo_tone(0.5, 16000)[:, 0], 16000, subtype=subtype)
    gateway = await make_gateway(normalize=NORMALIZE | {"sample_format": subtype})
    await chat(gateway, {"audio_path": "in_form.wav"})
    assert json.loads(stub.requests[-1].body)["messages"][0]["content"][0] == audio_part(path)
    assert (await gateway_metrics(gateway))[NORMALIZED] == 0


async def test_normalize_off_sends_the_clip_as_it_is(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    path = write_clip(audio_dir / "s.flac", 44100, "FLAC")
    gateway = await make_gateway()
    report = (await chat(gateway, {"audio_path": "s.flac"}))["stub"]["clips"][0]
    assert (report["sample_rate"], report["channels"]) == (44100, 2)
    part = json.loads(stub.requests[-1].body)["messages"][0]["content"][0]
    assert part == audio_part(path, "audio/flac")
    assert (await gateway_metrics(gateway))[NORMALIZED] == 0


# --- the cache, single flight, references, URL modes --------------------------------------------


async def test_the_cache_holds_the_conversion_and_concurrent_requests_share_it(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    write_clip(audio_dir / "s.mp3", 44100, "MP3")
    gateway = await make_gateway(normalize=NORMALIZE)
    await asyncio.gather(*(chat(gateway, {"audio_path": "s.mp3"}) for _ in range(4)))
    await chat(gateway, {"audio_path": "s.mp3"})
    metrics = await gateway_metrics(gateway)
    assert metrics[NORMALIZED] == 1
    assert metrics["audio_gateway_normalize_seconds_count"] == 1
    assert metrics["audio_gateway_cache_misses_total"] == 1
    assert len({sent_clips(stub, i)[0] for i in range(5)}) == 1


async def test_a_rewritten_clip_is_converted_again(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    path = write_clip(audio_dir / "s.wav", 44100, "WAV", "PCM_16")
    gateway = await make_gateway(normalize=NORMALIZE)
    await chat(gateway, {"audio_path": "s.wav"})
    soundfile.write(path, stereo_tone(2.0, 44100), 44100, subtype="PCM_16")
    report = (await chat(gateway, {"audio_path": "s.wav"}))["stub"]["clips"][0]
    assert abs(report["duration_seconds"] - 2.0) < 0.01
    assert (await gateway_metrics(gateway))[NORMALIZED] == 2


async def test_settings_of_the_form_are_part_of_the_cache_key(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    write_clip(audio_dir / "s.wav", 44100, "WAV", "PCM_16")
    mono = await make_gateway(normalize=NORMALIZE)
    stereo = await make_gateway(normalize=NORMALIZE | {"channels": 0})
    assert (await chat(mono, {"audio_path": "s.wav"}))["stub"]["clips"][0]["channels"] == 1
    assert (await chat(stereo, {"audio_path": "s.wav"}))["stub"]["clips"][0]["channels"] == 2


async def test_by_reference_the_uuid_is_the_sha256_of_the_wav_sent(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    write_clip(audio_dir / "s.wav", 44100, "WAV", "PCM_16")
    gateway = await make_gateway(normalize=NORMALIZE, splice={"repeats": "reference"})
    first = (await chat(gateway, {"audio_path": "s.wav"}))["stub"]["clips"][0]
    (sent,) = sent_clips(stub)
    assert first["uuid"] == hashlib.sha256(sent).hexdigest() == first["sha256"]
    await chat(gateway, {"audio_path": "s.wav"})
    part = json.loads(stub.requests[-1].body)["messages"][0]["content"][0]
    assert part.get("uuid") == first["uuid"]
    assert (await gateway_metrics(gateway))[NORMALIZED] == 1


async def test_in_file_url_mode_a_converted_clip_goes_as_data_and_one_in_form_as_its_url(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    write_clip(audio_dir / "s.wav", 44100, "WAV", "PCM_16")
    gateway = await make_gateway(normalize=NORMALIZE, splice={"mode": "file_url"})
    report = (await chat(gateway, {"audio_path": "s.wav"}))["stub"]["clips"][0]
    assert (report["source"], report["sample_rate"], report["channels"]) == ("data", 16000, 1)
    await chat(gateway, {"audio_path": "a.wav"})  # the fixture's clips: 16 kHz mono 16-bit
    part = json.loads(stub.requests[-1].body)["messages"][0]["content"][0]
    assert part["audio_url"]["url"] == (audio_dir / "a.wav").resolve().as_uri()


# --- every route --------------------------------------------------------------------------------


async def test_input_audio_parts_carry_the_wav_even_of_a_flac(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    path = write_clip(audio_dir / "s.flac", 48000, "FLAC")
    gateway = await make_gateway(normalize=NORMALIZE, splice={"chat_part": "input_audio"})
    report = (await chat(gateway, {"audio_path": "s.flac"}))["stub"]["clips"][0]
    assert (report["sample_rate"], report["channels"]) == (16000, 1)
    assert sent_clips(stub) == [expected(path, TargetForm(16000, 1, "PCM_16"))]


async def test_the_responses_bridge_sends_the_normalized_clip(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    write_clip(audio_dir / "s.mp3", 48000, "MP3")
    gateway = await make_gateway(normalize=NORMALIZE)
    body = {"model": "m", "input": "Transcribe.", "metadata": {"audio_path": "s.mp3"}}
    response = await gateway.post("/v1/responses", json=body)
    assert response.status == 200, await response.text()
    (sent,) = sent_clips(stub)
    info = soundfile.info(io.BytesIO(sent))
    assert (info.samplerate, info.channels) == (16000, 1)


@pytest.mark.stub(responses_accept_audio=True)  # an upstream whose Responses API takes audio
async def test_responses_input_audio_parts_carry_the_wav(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    path = write_clip(audio_dir / "s.ogg", 44100, "OGG")
    gateway = await make_gateway(normalize=NORMALIZE, responses={"audio": "input_audio"})
    body = {"model": "m", "input": "Transcribe.", "metadata": {"audio_path": "s.ogg"}}
    response = await gateway.post("/v1/responses", json=body)
    assert response.status == 200, await response.text()
    part = json.loads(stub.requests[-1].body)["input"][0]["content"][0]
    assert part["input_audio"]["format"] == "wav"
    sent = base64.b64decode(part["input_audio"]["data"])
    assert sent == expected(path, TargetForm(16000, 1, "PCM_16"))


@pytest.mark.parametrize("form", ["json", "multipart"])
async def test_a_speech_upload_is_a_wav_file_part_typed_audio_wav(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, form: str
) -> None:
    path = write_clip(audio_dir / "talk.flac", 44100, "FLAC")
    gateway = await make_gateway(normalize=NORMALIZE)
    if form == "json":
        body = {"model": "m", "metadata": {"audio_path": "talk.flac"}}
        response = await gateway.post("/v1/audio/transcriptions", json=body)
    else:
        data = FormData()
        data.add_field("model", "m")
        data.add_field("audio_path", "talk.flac")
        response = await gateway.post("/v1/audio/translations", data=data)
    assert response.status == 200, await response.text()
    report = (await response.json())["stub"]
    assert report["filename"] == "talk.wav"
    wav = expected(path, TargetForm(16000, 1, "PCM_16"))
    assert report["clip"]["sha256"] == hashlib.sha256(wav).hexdigest()
    assert b'filename="talk.wav"\r\nContent-Type: audio/wav' in stub.requests[-1].body


async def test_inline_audio_is_not_normalized(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    path = write_clip(audio_dir / "s.flac", 44100, "FLAC")
    gateway = await make_gateway(normalize=NORMALIZE)
    uri = "data:audio/flac;base64," + base64.b64encode(path.read_bytes()).decode()
    report = (await chat(gateway, {"audio_data": uri}))["stub"]["clips"][0]
    assert (report["sample_rate"], report["channels"]) == (44100, 2)
    assert (await gateway_metrics(gateway))[NORMALIZED] == 0


# --- refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize("chunking", [False, True])
async def test_an_undecodable_clip_is_400_cannot_decode_audio(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, chunking: bool
) -> None:
    (audio_dir / "broken.wav").write_bytes(b"RIFF\x24\0\0\0WAVEjunk" + bytes(64))
    gateway = await make_gateway(normalize=NORMALIZE, chunking={"enabled": chunking})
    response = await gateway.post(
        "/v1/chat/completions", json=chat_body({"audio_paths": ["a.wav", "broken.wav"]})
    )
    error = await gateway_error(response, 400, "metadata.audio_paths")
    assert error["code"] == "cannot_decode_audio"
    assert error["message"].startswith("metadata.audio_paths[1]: 'broken.wav' (audio/wav)")
    assert "[normalize]" in error["message"]
    assert stub.requests == []


async def test_a_file_that_is_not_audio_is_refused_as_without_normalize(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    (audio_dir / "notes.wav").write_bytes(b"just some text, not audio at all")
    plain = await make_gateway()
    normalized = await make_gateway(normalize=NORMALIZE)
    body = chat_body({"audio_path": "notes.wav"})
    want = await (await plain.post("/v1/chat/completions", json=body)).json()
    got = await (await normalized.post("/v1/chat/completions", json=body)).json()
    assert got == want and stub.requests == []


async def test_a_clip_decoding_past_the_duration_limit_is_413(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    write_clip(audio_dir / "s.mp3", 44100, "MP3")  # no length header: found by decoding
    gateway = await make_gateway(normalize=NORMALIZE, audio={"max_duration_seconds": 0.5})
    response = await gateway.post("/v1/chat/completions", json=chat_body({"audio_path": "s.mp3"}))
    error = await gateway_error(response, 413, "metadata.audio_path")
    assert error["code"] == "audio_too_long" and stub.requests == []


# --- long-audio pieces, objects -----------------------------------------------------------------


@pytest.mark.parametrize("max_item_bytes", ["64MiB", "1MiB"])  # pieces kept, or cut on demand
async def test_pieces_are_cut_from_the_normalized_signal(
    make_gateway: GatewayFactory,
    stub: StubState,
    audio_dir: Path,
    max_item_bytes: str,
) -> None:
    path = audio_dir / "long.wav"
    rng = np.random.default_rng(5)
    noise = (0.3 * rng.standard_normal((70 * 44100, 2))).astype(np.float32)
    soundfile.write(path, noise, 44100, subtype="PCM_16")
    gateway = await make_gateway(
        normalize=NORMALIZE,
        chunking={"enabled": True, "max_concurrent_chunks": 1},  # the pieces arrive in order
        cache={"max_item_bytes": max_item_bytes},
    )
    await chat(gateway, {"audio_path": "long.wav"})
    pieces = [
        soundfile.read(io.BytesIO(c), dtype="int16")
        for i in range(len(stub.requests))
        for c in sent_clips(stub, i)
    ]
    assert len(pieces) == 3 and {rate for _, rate in pieces} == {16000}
    whole, _ = soundfile.read(
        io.BytesIO(expected(path, TargetForm(16000, 1, "PCM_16"))), dtype="int16"
    )
    assert np.array_equal(np.concatenate([samples for samples, _ in pieces]), whole)


@pytest.mark.usefixtures("aws_environment")
@pytest.mark.parametrize("remote", ["data_uri", "presigned_url"])
async def test_an_object_is_normalized_and_goes_as_data_in_either_mode(
    make_gateway: GatewayFactory, stub: StubState, tmp_path: Path, s3_server: S3Server, remote: str
) -> None:
    bucket = s3_server.bucket()
    clip = write_clip(tmp_path / "s.flac", 48000, "FLAC")
    s3_server.put(bucket, "data/s.flac", clip)
    gateway = await make_gateway(
        normalize=NORMALIZE,
        audio={"root": f"s3://{bucket}/data/"},
        splice={"remote": remote},
        storage={"s3": s3_config(s3_server)},
    )
    report = (await chat(gateway, {"audio_path": "s.flac"}))["stub"]["clips"][0]
    assert (report["source"], report["sample_rate"], report["channels"]) == ("data", 16000, 1)
    assert sent_clips(stub) == [expected(clip, TargetForm(16000, 1, "PCM_16"))]


# --- check --------------------------------------------------------------------------------------


@pytest.mark.parametrize("enabled", [True, False])
def test_check_counts_the_clips_normalize_would_convert(
    tmp_path: Path, audio_dir: Path, enabled: bool
) -> None:
    write_clip(audio_dir / "s.flac", 44100, "FLAC")
    write_clip(audio_dir / "s.wav", 16000, "WAV", "PCM_16")  # the rate, but stereo
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'[audio]\nroot = "{audio_dir}"\n[normalize]\nenabled = {str(enabled).lower()}\n'
    )
    rows = [chat_body({"audio_path": name}) for name in ("a.wav", "s.flac", "s.wav", "s.flac")]
    rows.append(
        chat_body(
            {
                "audio_data": "data:audio/flac;base64,"
                + base64.b64encode((audio_dir / "s.flac").read_bytes()).decode()
            }
        )
    )
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    code, summary = run_json("check", str(data), "--config", str(config))
    assert code == 0, summary["errors"]
    assert summary["clips_normalized"] == (3 if enabled else 0)  # never inline audio


# --- memory -------------------------------------------------------------------------------------


@pytest.mark.timeout(900)
def test_a_60_minute_44khz_stereo_clip_is_normalized_and_cut_in_bounded_memory(
    tmp_path: Path,
) -> None:
    """A real `serve` process (`bench.normalize.memory`): after a warm-up request, the hour
    normalized with [chunking] on grows the gateway's peak RSS by at most 64 MiB. No timing."""
    argv = ["--minutes", "60", "--chunking", "on", "--workdir", str(tmp_path)]
    result = subprocess.run(
        [sys.executable, "-m", "bench.normalize.memory", *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=840,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["status"] == 200, figures
    # The warm-up, and the hour (not cached: once for the request, once for its pieces' spool).
    assert figures["normalized_clips"] >= 2, figures
    assert 120 <= figures["pieces_sent"] - 2 <= 3600 // 25, figures  # the warm-up's: 2
    assert figures["peak_rss_growth_mib"] <= 64, figures
