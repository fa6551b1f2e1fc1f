"""The speech routes' forms, read by vLLM's own request models (0.33 and 0.34).

The gateway turns a JSON body with the sidechannel, a curl-style form naming `audio_path` and
an urlencoded form with inline audio into the multipart upload vLLM's speech routes take. Each
form the stub received is posted, byte for byte with its Content-Type, to a FastAPI app whose
routes are declared as vLLM's `speech_to_text/{transcription,translation}/api_router.py`
declare theirs (`request: Annotated[TranscriptionRequest, Form()]`, then
`read_upload_with_limit(request.file)`); only the serving object behind them, which needs an
engine, is left out. The upload must be the clip's bytes and every field must reach vLLM's
model with its value.
"""

from __future__ import annotations

import base64
import warnings
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
from aiohttp import FormData

from tests.vllm_compat.versions import require_vllm

require_vllm()

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi import FastAPI, Form
    from vllm.entrypoints.speech_to_text.base.utils import read_upload_with_limit
    from vllm.entrypoints.speech_to_text.transcription.protocol import TranscriptionRequest
    from vllm.entrypoints.speech_to_text.translation.protocol import TranslationRequest

from gateway.stub_upstream import StubState  # noqa: E402
from tests.conftest import GatewayFactory, write_encoded_tone  # noqa: E402

MODEL = "stub-audio-model"
TRANSCRIPTIONS = "/v1/audio/transcriptions"
TRANSLATIONS = "/v1/audio/translations"
Heard = list[tuple[bytes, Any]]


def vllm_speech_app(heard: Heard) -> FastAPI:
    """vLLM's two speech routes up to their serving object; what they read goes to `heard`."""
    app = FastAPI()

    @app.post(TRANSCRIPTIONS)
    async def create_transcriptions(request: Annotated[TranscriptionRequest, Form()]) -> Any:
        heard.append((await read_upload_with_limit(request.file), request))
        return {"text": ""}

    @app.post(TRANSLATIONS)
    async def create_translations(request: Annotated[TranslationRequest, Form()]) -> Any:
        heard.append((await read_upload_with_limit(request.file), request))
        return {"text": ""}

    return app


async def vllm_reads(stub: StubState) -> tuple[bytes, Any]:
    """What vLLM's route reads from the last form the stub received."""
    received = stub.requests[-1]
    heard: Heard = []
    transport = httpx.ASGITransport(app=vllm_speech_app(heard))
    async with httpx.AsyncClient(transport=transport, base_url="http://vllm") as client:
        answer = await client.post(
            received.path,
            content=received.body,
            headers={"Content-Type": received.headers["Content-Type"]},
        )
    assert answer.status_code == 200, answer.text
    [(upload, request)] = heard
    return upload, request


def data_uri(path: Path, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def json_body(metadata: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, **fields, "metadata": metadata}


EVERY_FIELD: dict[str, Any] = {
    "language": "en",
    "prompt": "A tone.",
    "temperature": 0.5,
    "seed": 7,
    "response_format": "verbose_json",
    "timestamp_granularities": ["word", "segment"],
    "vllm_xargs": {"k": 1},
}


@pytest.mark.parametrize("stream", [False, True])
async def test_a_json_body_with_every_field_reaches_vllms_model(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, stream: bool
) -> None:
    gateway = await make_gateway()
    fields = {**EVERY_FIELD, "response_format": "json"} if stream else EVERY_FIELD  # vLLM's rule
    body = json_body({"audio_path": "b.wav", "row": "7"}, **fields, stream=stream)
    response = await gateway.post(TRANSCRIPTIONS, json=body)
    assert response.status == 200, await response.text()
    await response.read()
    upload, request = await vllm_reads(stub)
    assert upload == (audio_dir / "b.wav").read_bytes()
    assert (request.file.filename, request.model, request.stream) == ("b.wav", MODEL, stream)
    for name, value in fields.items():
        assert getattr(request, name) == value, name


@pytest.mark.parametrize("key", ["audio_data", "audio_url"])
async def test_inline_audio_reaches_vllms_translation_route_decoded(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, key: str
) -> None:
    flac = write_encoded_tone(audio_dir / "t.flac", 0.2, 300.0, "FLAC")
    gateway = await make_gateway()
    body = json_body({key: data_uri(flac, "audio/flac")}, temperature=0.2)
    response = await gateway.post(TRANSLATIONS, json=body)
    assert response.status == 200, await response.text()
    upload, request = await vllm_reads(stub)
    assert upload == flac.read_bytes()
    assert (request.model, request.temperature) == (MODEL, 0.2)


async def test_a_form_naming_an_audio_path_reaches_vllm_as_an_upload(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    form = FormData(default_to_multipart=True)
    for name, value in [
        ("model", MODEL),
        ("audio_path", "a.wav"),
        ("language", "en"),
        ("timestamp_granularities[]", "word"),
    ]:
        form.add_field(name, value)
    gateway = await make_gateway()
    response = await gateway.post(TRANSCRIPTIONS, data=form)
    assert response.status == 200, await response.text()
    upload, request = await vllm_reads(stub)
    assert upload == (audio_dir / "a.wav").read_bytes()
    assert (request.language, request.timestamp_granularities) == ("en", ["word"])


async def test_an_urlencoded_form_with_inline_audio_reaches_vllm_as_an_upload(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
) -> None:
    gateway = await make_gateway()
    form = FormData({"model": MODEL, "audio_data": data_uri(audio_dir / "c.wav", "audio/wav")})
    response = await gateway.post(TRANSLATIONS, data=form)
    assert response.status == 200, await response.text()
    upload, request = await vllm_reads(stub)
    assert upload == (audio_dir / "c.wav").read_bytes()
    assert request.model == MODEL
