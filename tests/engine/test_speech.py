"""Speech-to-text by path to the real vLLM serving the tiny Whisper, which listens on a Unix
socket (`--uds`): these are also the tests of a Unix-socket upstream. A JSON body or a form
naming a clip becomes the multipart upload vLLM expects; vLLM's `usage` gives the seconds of
audio it decoded."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import FormData

from engine.server import EngineServer

from .helpers import BOUND_SECONDS, Client, delta, engine_metrics, make_gateway_client, write_clip

pytestmark = pytest.mark.timeout(180, func_only=True)
MODEL = "tiny-whisper"
ROUTES = ["/v1/audio/transcriptions", "/v1/audio/translations"]
SECONDS = 2.0


@pytest.fixture
async def gateway(whisper_engine: EngineServer, clip_dir: Path) -> AsyncIterator[Client]:
    assert whisper_engine.url.startswith("unix://")
    write_clip(clip_dir, "speech.wav", SECONDS)
    client = await make_gateway_client(whisper_engine, clip_dir)
    yield client
    await client.close()


async def transcribed(
    engine: EngineServer, gateway: Client, route: str, **kwargs: Any
) -> dict[str, Any]:
    """The engine's answer (a 200 asserted, one request served by the engine)."""
    before = await engine_metrics(engine)
    response = await gateway.post(route, timeout=BOUND_SECONDS, **kwargs)
    text = await response.text()
    assert response.status == 200, text
    served = "vllm:request_success_total"
    assert delta(before, await engine_metrics(engine), served) == {served: 1}
    answer: dict[str, Any] = await response.json()
    assert isinstance(answer["text"], str)
    if route.endswith("/transcriptions"):  # a translation's answer has no usage
        assert answer["usage"] == {"type": "duration", "seconds": SECONDS}
    return answer


@pytest.mark.parametrize("route", ROUTES)
async def test_a_json_body_naming_a_clip(
    whisper_engine: EngineServer, gateway: Client, route: str
) -> None:
    body = {
        "model": MODEL,
        "language": "en",
        "max_completion_tokens": 5,
        "metadata": {"audio_path": "speech.wav"},
    }
    await transcribed(whisper_engine, gateway, route, json=body)


@pytest.mark.parametrize("route", ROUTES)
async def test_a_form_with_an_audio_path_field(
    whisper_engine: EngineServer, gateway: Client, route: str
) -> None:
    form = FormData(default_to_multipart=True)
    form.add_field("model", MODEL)
    form.add_field("audio_path", "speech.wav")
    form.add_field("language", "en")
    form.add_field("max_completion_tokens", "5")
    await transcribed(whisper_engine, gateway, route, data=form)


async def test_a_missing_clip_is_404_before_the_engine(gateway: Client) -> None:
    body = {"model": MODEL, "metadata": {"audio_path": "missing.wav"}}
    response = await gateway.post(ROUTES[0], json=body)
    assert response.status == 404, await response.text()
