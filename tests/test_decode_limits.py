"""vLLM's decode limits, checked from the container header before anything is sent:
`audio.max_duration_seconds` (VLLM_MAX_AUDIO_DECODE_DURATION_S, 600 s) -> 413 `audio_too_long`,
`audio.max_decode_bytes` (VLLM_MAX_AUDIO_DECODE_BYTES, 256 MiB of float32 samples) -> 413
`audio_decode_too_large`; and the stub refuses the same clips as vLLM 0.33 does, so a gateway
that stopped checking would fail here without vLLM."""

from __future__ import annotations

import base64
import io
import struct
import wave
from pathlib import Path
from typing import Any

import aiohttp
import numpy
import pytest
import soundfile
from aiohttp.test_utils import TestServer
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.audio.durations import read_base64_header, read_header
from gateway.stub_upstream import StubState
from tests.conftest import GatewayFactory, cache_stats, chat_body, gateway_error, sha256_of
from tests.test_durations import wav_bytes
from tests.test_modes import UUID_GATEWAYS as GATEWAYS  # every wire form, streamed and uncached

LIMIT_SECONDS = 600
# 10^7 frames x 8 channels x 4 bytes = 320 MB of float32, in 104 s: under the duration limit.
BIG_DECODE = (10_000_000, 8, 96_000)


def write_silence_wav(path: Path, seconds: float, rate_hz: int = 1000) -> Path:
    """8-bit mono silence: 601 s at 1 kHz is 601 kB, a cheap clip past vLLM's 600 s."""
    with wave.open(str(path), "wb") as clip:
        clip.setnchannels(1)
        clip.setsampwidth(1)
        clip.setframerate(rate_hz)
        clip.writeframes(b"\x80" * round(seconds * rate_hz))
    return path


def flac_streaminfo_only(frames: int, channels: int, rate_hz: int) -> bytes:
    """A FLAC whose STREAMINFO claims `frames`: what a decompression bomb looks like up front
    (libsndfile, and so vLLM, reads the same numbers from it)."""
    packed = rate_hz << 44 | (channels - 1) << 41 | 15 << 36 | frames
    info = struct.pack(">HH", 4096, 4096) + bytes(6) + struct.pack(">Q", packed) + bytes(16)
    return b"fLaC" + b"\x80" + len(info).to_bytes(3, "big") + info


def data_uri(raw: bytes, mime: str = "audio/wav") -> str:
    return f"data:{mime};base64,{base64.b64encode(raw).decode()}"


async def post(gateway: Any, route: str, metadata: dict[str, Any]) -> aiohttp.ClientResponse:
    if route == "responses":
        body = {"model": "m", "input": "Transcribe.", "metadata": metadata}
        response: aiohttp.ClientResponse = await gateway.post("/v1/responses", json=body)
        return response
    return await gateway.post("/v1/chat/completions", json=chat_body(metadata))


# --- duration --------------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["chat", "responses"])
@pytest.mark.parametrize("setup", list(GATEWAYS))
async def test_a_clip_over_600_s_is_refused_before_anything_is_sent(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, setup: str, route: str
) -> None:
    gateway = await make_gateway(**GATEWAYS[setup])
    write_silence_wav(audio_dir / "long.wav", LIMIT_SECONDS + 1)
    for _ in range(2):  # the second time from the cache (or the stream) again: still refused
        response = await post(gateway, route, {"audio_paths": ["a.wav", "long.wav"]})
        error = await gateway_error(response, 413, "metadata.audio_paths")
        assert error["code"] == "audio_too_long"
        assert error["message"].startswith("metadata.audio_paths[1]: 'long.wav' is 601.0 s")
        assert "600 s (audio.max_duration_seconds" in error["message"]
    assert stub.request_count == 0


async def test_cached_clips_are_checked_without_a_re_read(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway()
    write_silence_wav(audio_dir / "long.wav", LIMIT_SECONDS + 1)
    for _ in range(3):
        response = await post(gateway, "chat", {"audio_path": "long.wav"})
        assert response.status == 413
    stats = await cache_stats(gateway)
    assert (stats["misses"], stats["hits"], stats["entries"]) == (1, 2, 1)


@pytest.mark.parametrize("route", ["chat", "responses"])
async def test_inline_audio_data_over_600_s_is_refused(
    make_gateway: GatewayFactory, stub: StubState, tmp_path: Path, route: str
) -> None:
    gateway = await make_gateway()
    uri = data_uri(write_silence_wav(tmp_path / "long.wav", LIMIT_SECONDS + 0.5).read_bytes())
    response = await post(gateway, route, {"audio_data": uri})
    error = await gateway_error(response, 413, "metadata.audio_data")
    assert error["code"] == "audio_too_long"
    assert error["message"].startswith("metadata.audio_data: 'data:audio/wav;base64,...' is 600.5")
    assert stub.request_count == 0


async def test_600_s_exactly_passes_both_the_gateway_and_the_stub(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    path = write_silence_wav(audio_dir / "ten-minutes.wav", LIMIT_SECONDS)
    gateway = await make_gateway()
    response = await post(gateway, "chat", {"audio_path": "ten-minutes.wav"})
    assert response.status == 200, await response.text()
    [clip] = (await response.json())["stub"]["clips"]
    assert (clip["sha256"], clip["duration_seconds"]) == (sha256_of(path), 600.0)


async def test_a_raised_limit_lets_it_through_and_the_stub_refuses_as_vllm_does(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    write_silence_wav(audio_dir / "long.wav", LIMIT_SECONDS + 1)
    gateway = await make_gateway(audio={"max_duration_seconds": 700})
    response = await post(gateway, "chat", {"audio_path": "long.wav"})
    assert response.status == 400
    error = (await response.json())["error"]
    assert error["type"] == "BadRequestError"  # vLLM's answer, relayed
    assert "maximum allowed duration of 600s" in error["message"]
    assert "VLLM_MAX_AUDIO_DECODE_DURATION_S" in error["message"]
    assert stub.rejected == 1


async def test_the_limit_is_configurable_downwards(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway(audio={"max_duration_seconds": 0.5})
    ok = await post(gateway, "chat", {"audio_paths": ["a.wav", "b.wav"]})  # 0.25 s, 0.5 s
    assert ok.status == 200, await ok.text()
    response = await post(gateway, "chat", {"audio_paths": ["a.wav", "c.wav"]})  # c: 0.75 s
    error = await gateway_error(response, 413, "metadata.audio_paths")
    assert error["message"].startswith("metadata.audio_paths[1]: 'c.wav' is 0.8 s")
    assert stub.request_count == 1


async def test_formats_whose_header_has_no_length_are_left_to_vllm(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    from tests.conftest import write_encoded_tone

    write_encoded_tone(audio_dir / "t.ogg", 1.0, 440.0, "OGG")
    gateway = await make_gateway(audio={"max_duration_seconds": 0.5})
    response = await post(gateway, "chat", {"audio_path": "t.ogg"})
    assert response.status == 200, await response.text()  # 1 s, unknown to the gateway


# --- decoded size ----------------------------------------------------------------------------


@pytest.mark.parametrize("setup", ["data-uri", "file-url", "inline"])
async def test_a_clip_decoding_past_256_mib_is_refused(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, setup: str
) -> None:
    bomb = flac_streaminfo_only(*BIG_DECODE)
    (audio_dir / "bomb.flac").write_bytes(bomb)
    gateway = await make_gateway(**GATEWAYS.get(setup, {}))
    if setup == "inline":
        metadata, param = {"audio_data": data_uri(bomb, "audio/flac")}, "metadata.audio_data"
    else:
        metadata, param = {"audio_path": "bomb.flac"}, "metadata.audio_path"
    response = await post(gateway, "chat", metadata)
    error = await gateway_error(response, 413, param)
    assert error["code"] == "audio_decode_too_large"
    assert (
        "320000000 bytes of float32 samples (10000000 frames x 8 channels x 4)"
        in (error["message"])
    )
    assert "268435456 bytes (audio.max_decode_bytes" in error["message"]
    assert stub.request_count == 0


async def test_a_raised_decode_limit_meets_the_stubs_vllm_limit(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    (audio_dir / "bomb.flac").write_bytes(flac_streaminfo_only(*BIG_DECODE))
    gateway = await make_gateway(audio={"max_decode_bytes": "1GiB"})
    response = await post(gateway, "chat", {"audio_path": "bomb.flac"})
    assert response.status == 400
    message = (await response.json())["error"]["message"]
    assert "exceeding the 256 MiB limit" in message and "VLLM_MAX_AUDIO_DECODE_BYTES" in message


async def test_wav_decoded_size_counts_every_channel_as_float32(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    """c.wav: 12000 frames of 16-bit mono = 48000 bytes once decoded (twice the file's)."""
    gateway = await make_gateway(audio={"max_decode_bytes": 47_999})
    response = await post(gateway, "chat", {"audio_paths": ["a.wav", "c.wav"]})
    error = await gateway_error(response, 413, "metadata.audio_paths")
    assert error["code"] == "audio_decode_too_large"
    assert "'c.wav' decodes to 48000 bytes" in error["message"]
    gateway = await make_gateway(audio={"max_decode_bytes": 48_000})
    response = await post(gateway, "chat", {"audio_paths": ["a.wav", "c.wav"]})
    assert response.status == 200, await response.text()


# --- the stub refuses as vLLM does -----------------------------------------------------------


@pytest.mark.parametrize(
    ("clip", "says"),
    [
        ("long.wav", "VLLM_MAX_AUDIO_DECODE_DURATION_S"),
        ("bomb.flac", "VLLM_MAX_AUDIO_DECODE_BYTES"),
        ("ok.wav", None),
    ],
)
@pytest.mark.parametrize("url", ["data", "file"])
async def test_the_stub_refuses_clips_vllm_refuses(
    stub_server: TestServer, audio_dir: Path, clip: str, says: str | None, url: str
) -> None:
    write_silence_wav(audio_dir / "long.wav", LIMIT_SECONDS + 1)
    write_silence_wav(audio_dir / "ok.wav", LIMIT_SECONDS)
    (audio_dir / "bomb.flac").write_bytes(flac_streaminfo_only(*BIG_DECODE))
    path = audio_dir / clip
    src = path.as_uri() if url == "file" else data_uri(path.read_bytes())
    part = {"type": "audio_url", "audio_url": {"url": src}}
    body = {"model": "m", "messages": [{"role": "user", "content": [part]}]}
    async with aiohttp.ClientSession() as session:
        url_ = stub_server.make_url("/v1/chat/completions")
        async with session.post(url_, json=body) as response:
            text = await response.text()
    if says is None:
        assert response.status == 200, text
    else:
        assert response.status == 400 and says in text, text


# --- the pure parts --------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    frames=st.integers(1, 30_000),
    rate=st.sampled_from([8000, 16000, 44100, 48000]),
    channels=st.integers(1, 4),
    width=st.sampled_from([1, 2, 3, 4]),
)
def test_decoded_bytes_are_what_a_float32_decode_allocates(
    frames: int, rate: int, channels: int, width: int
) -> None:
    """The header's estimate equals the float32 array libsndfile (vLLM's loader) decodes, and
    the base64 form gives the same header as the bytes."""
    raw = wav_bytes(frames, rate, channels, width)
    header = read_header(raw[:65536], len(raw))
    assert header is not None
    decoded, _ = soundfile.read(io.BytesIO(raw), dtype="float32", always_2d=True)
    assert header.decoded_bytes == decoded.nbytes
    assert read_base64_header(base64.b64encode(raw).decode(), len(raw)) == header


def test_a_streaminfo_only_flac_reads_alike_in_the_gateway_and_libsndfile() -> None:
    bomb = flac_streaminfo_only(*BIG_DECODE)
    info = soundfile.info(io.BytesIO(bomb))
    assert (info.frames, info.channels, info.samplerate) == BIG_DECODE
    header = read_header(bomb)
    assert header is not None and (header.frames, header.channels, header.sample_rate) == (
        BIG_DECODE
    )
    assert numpy.float32().itemsize * info.frames * info.channels == header.decoded_bytes
