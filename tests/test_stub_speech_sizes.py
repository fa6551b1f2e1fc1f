"""The stub's speech routes take an upload of any size up to their limit (25 MiB, vLLM's
VLLM_MAX_AUDIO_CLIP_FILESIZE_MB), through the gateway both ways: a clip the gateway uploads
for `audio_path`, and the client's own multipart upload relayed untouched. One byte over the
limit is the stub's 400, as vLLM's, never a 500."""

from __future__ import annotations

import io
import wave
from pathlib import Path

import pytest
from aiohttp import FormData, web
from aiohttp.test_utils import TestClient

from gateway.audio.samples import write_tone
from gateway.stub_upstream import StubState
from gateway.stub_upstream.speech import MAX_FILE_BYTES
from tests.conftest import GatewayFactory, sha256_of

Client = TestClient[web.Request, web.Application]
TRANSCRIPTIONS = "/v1/audio/transcriptions"
MODEL = "stub-audio-model"
WAV_HEADER_BYTES = 44
WIDE_FRAME_BYTES = 4  # 16-bit stereo: 25 MiB of it is 136 s at 48 kHz, inside 600 s


def write_wav_of_size(path: Path, size: int) -> Path:
    """A 48 kHz stereo WAV of exactly `size` bytes (a multiple of 4 past its header)."""
    frames = (size - WAV_HEADER_BYTES) // WIDE_FRAME_BYTES
    with wave.open(str(path), "wb") as clip:
        clip.setnchannels(2)
        clip.setsampwidth(2)
        clip.setframerate(48_000)
        clip.writeframes(bytes(frames * WIDE_FRAME_BYTES))
    assert path.stat().st_size == size
    return path


@pytest.fixture(params=["10s", "45s", "25MiB"])
def clip(request: pytest.FixtureRequest, audio_dir: Path) -> Path:
    path = audio_dir / f"upload-{request.param}.wav"
    if request.param == "25MiB":
        return write_wav_of_size(path, MAX_FILE_BYTES)
    return write_tone(path, float(request.param.removesuffix("s")), 440.0)


async def test_a_clip_named_by_audio_path_is_uploaded_whole(
    gateway: Client, stub: StubState, clip: Path
) -> None:
    body = {"model": MODEL, "metadata": {"audio_path": clip.name}}
    response = await gateway.post(TRANSCRIPTIONS, json=body)
    assert response.status == 200, await response.text()
    report = (await response.json())["stub"]["clip"]
    assert (report["bytes"], report["sha256"]) == (clip.stat().st_size, sha256_of(clip))


async def test_a_clients_own_upload_is_relayed_and_read_whole(
    gateway: Client, stub: StubState, clip: Path
) -> None:
    form = FormData({"model": MODEL})
    form.add_field(
        "file", io.BytesIO(clip.read_bytes()), filename=clip.name, content_type="audio/wav"
    )
    response = await gateway.post(TRANSCRIPTIONS, data=form)
    assert response.status == 200, await response.text()
    answer = await response.json()
    assert answer["stub"]["clip"]["sha256"] == sha256_of(clip)
    assert answer["stub"]["filename"] == clip.name


async def test_one_byte_over_the_limit_is_the_stubs_400(
    make_gateway: GatewayFactory, audio_dir: Path
) -> None:
    gateway = await make_gateway()
    clip = write_wav_of_size(audio_dir / "over.wav", MAX_FILE_BYTES + WIDE_FRAME_BYTES)
    form = FormData({"model": MODEL})
    form.add_field(
        "file", io.BytesIO(clip.read_bytes()), filename=clip.name, content_type="audio/wav"
    )
    response = await gateway.post(TRANSCRIPTIONS, data=form)
    assert response.status == 400, await response.text()
    error = (await response.json())["error"]
    assert (error["message"], error["param"]) == ("Maximum file size exceeded", "audio_filesize_mb")
