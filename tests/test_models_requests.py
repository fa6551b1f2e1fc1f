"""Each request's model's profile on its path, over real HTTP against the stub: the clip limit
before any file is read, windows per model ([chunking] on and off), channels and rate, uuid-only
parts, placement from the stub's /v1/models, /gateway/health, and bad config at start-up."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from gateway.audio.samples import write_tone
from gateway.stub_upstream import StubState, create_stub_app
from gateway.stub_upstream.served import ServedModel
from gateway.stub_upstream.window import ModelWindow, window_key
from tests.conftest import (
    GatewayFactory,
    audio_part,
    cache_stats,
    chat_body,
    forwarded_json,
    gateway_config,
    gateway_error,
    sha256_of,
)

CHAT = "/v1/chat/completions"
VOXTRAL = "VoxtralForConditionalGeneration"
AF3 = "AudioFlamingo3ForConditionalGeneration"
GLM_ASR = "GlmAsrForConditionalGeneration"
QWEN2_AUDIO = "Qwen2AudioForConditionalGeneration"
REPO_ROOT = Path(__file__).resolve().parent.parent


def models(**architectures: str) -> dict[str, Any]:
    return {name: {"architecture": arch} for name, arch in architectures.items()}


def body_for(model: str, metadata: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return chat_body(metadata, model=model, **extra)


def write_stereo(path: Path, seconds: float, rate: int, subtype: str = "PCM_16") -> Path:
    frames = int(seconds * rate)
    t = np.arange(frames) / rate
    samples = np.stack([np.sin(2 * np.pi * 440 * t), np.sin(2 * np.pi * 660 * t)], axis=1)
    soundfile.write(path, 0.5 * samples, rate, subtype=subtype)
    return path


def sent_clips(stub: StubState) -> list[dict[str, Any]]:
    clips: list[dict[str, Any]] = forwarded_json_report(stub)["clips"]
    return clips


def forwarded_json_report(stub: StubState) -> dict[str, Any]:
    assert stub.last_report is not None
    return stub.last_report


class TestClipLimit:
    async def test_more_clips_than_the_model_takes_is_refused_before_any_read(
        self, make_gateway: GatewayFactory, stub: StubState
    ) -> None:
        gateway = await make_gateway(models=models(af3=AF3))
        # The second clip does not exist: a gateway that resolved or read paths first would
        # answer 404; the limit is checked before.
        metadata = {"audio_paths": json.dumps(["a.wav", "missing.wav"])}
        response = await gateway.post(CHAT, json=body_for("af3", metadata))
        error = await gateway_error(response, 400, "metadata.audio_paths")
        assert error["code"] == "too_many_clips"
        assert "limit of 1 per prompt" in error["message"] and "'af3'" in error["message"]
        assert AF3 in error["message"] and 'models."af3"] clips_per_prompt' in error["message"]
        assert stub.request_count == 0
        assert (await cache_stats(gateway))["misses"] == 0  # nothing read or encoded

    async def test_the_clients_own_inline_parts_count_too(
        self, make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
    ) -> None:
        gateway = await make_gateway(models=models(voxtral=VOXTRAL))
        own = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
        message = {"role": "user", "content": [own] * 5 + [{"type": "text", "text": "Hi"}]}
        body = {"model": "voxtral", "messages": [message], "metadata": {"audio_path": "a.wav"}}
        response = await gateway.post(CHAT, json=body)
        error = await gateway_error(response, 400, "metadata.audio_path")
        assert "6 audio clips, 5 of them inlined by the client" in error["message"]
        assert stub.request_count == 0

    async def test_within_the_limit_and_the_operators_override(
        self, make_gateway: GatewayFactory, stub: StubState
    ) -> None:
        tables = {"af3": {"architecture": AF3, "clips_per_prompt": 2}}
        gateway = await make_gateway(models=tables)
        metadata = {"audio_paths": json.dumps(["a.wav", "b.wav"])}
        response = await gateway.post(CHAT, json=body_for("af3", metadata))
        assert response.status == 200, await response.text()
        assert len(sent_clips(stub)) == 2

    async def test_content_parts_are_held_to_the_limit(
        self, make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
    ) -> None:
        gateway = await make_gateway(models=models(glm=GLM_ASR))
        parts = [
            {"type": "audio_url", "audio_url": {"url": f"file://{audio_dir / name}"}}
            for name in ("a.wav", "b.wav")
        ]
        body = {"model": "glm", "messages": [{"role": "user", "content": parts}]}
        response = await gateway.post(CHAT, json=body)
        await gateway_error(response, 400, "messages[0].content[1].audio_url.url")
        assert stub.request_count == 0

    async def test_an_unplaced_model_keeps_the_global_limit(
        self, make_gateway: GatewayFactory, stub: StubState
    ) -> None:
        gateway = await make_gateway()
        metadata = {"audio_paths": json.dumps(["a.wav", "b.wav", "c.wav"])}
        response = await gateway.post(CHAT, json=chat_body(metadata))
        assert response.status == 200, await response.text()


@pytest.fixture
def long_clip(audio_dir: Path) -> str:
    write_tone(audio_dir / "long.wav", 45.0, 300.0)
    return "long.wav"


class TestWindows:
    @pytest.mark.stub(window=ModelWindow())
    @pytest.mark.parametrize(
        ("architecture", "pieces"),
        [(QWEN2_AUDIO, [30.0, 15.0]), (AF3, [45.0]), (GLM_ASR, [45.0]), (VOXTRAL, [45.0])],
    )
    async def test_a_45_s_clip_is_cut_only_for_a_model_that_would_drop_audio(
        self,
        make_gateway: GatewayFactory,
        stub_server: TestServer,
        long_clip: str,
        architecture: str,
        pieces: list[float],
    ) -> None:
        _window(stub_server).heard.clear()  # the marker's window is shared by the cases
        gateway = await make_gateway(
            models=models(m=architecture), chunking={"enabled": True, "split": "fixed"}
        )
        response = await gateway.post(CHAT, json=body_for("m", {"audio_path": long_clip}))
        assert response.status == 200, await response.text()
        heard = [round(clip.seconds, 3) for clips in _window(stub_server).heard for clip in clips]
        assert sorted(heard) == sorted(pieces)

    @pytest.mark.stub(window=ModelWindow())
    async def test_the_operator_overrides_the_cut(
        self, make_gateway: GatewayFactory, stub_server: TestServer, long_clip: str
    ) -> None:
        tables = {"m": {"architecture": AF3, "max_clip_seconds": 20}}
        chunking = {"enabled": True, "split": "fixed"}
        gateway = await make_gateway(models=tables, chunking=chunking)
        response = await gateway.post(CHAT, json=body_for("m", {"audio_path": long_clip}))
        assert response.status == 200, await response.text()
        heard = [round(c.seconds, 3) for clips in _window(stub_server).heard for c in clips]
        assert sorted(heard) == [5.0, 20.0, 20.0]

    async def test_with_chunking_off_the_over_window_log_uses_the_models_window(
        self,
        make_gateway: GatewayFactory,
        long_clip: str,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        caplog.set_level(logging.WARNING, "gateway.over_window")
        gateway = await make_gateway(models=models(q=QWEN2_AUDIO, v=VOXTRAL, a=AF3))
        for model in ("v", "a"):  # keep 45 s whole: nothing to tell
            response = await gateway.post(CHAT, json=body_for(model, {"audio_path": long_clip}))
            assert response.status == 200
        assert not caplog.records
        response = await gateway.post(CHAT, json=body_for("q", {"audio_path": long_clip}))
        assert response.status == 200
        (record,) = caplog.records
        assert f"longer than the longest clip {QWEN2_AUDIO} hears whole (30 s" in (
            record.getMessage()
        )


def _window(stub_server: TestServer) -> ModelWindow:
    return stub_server.app[window_key]


class TestChannelsAndRate:
    @pytest.mark.stub(served=ServedModel(mistral=True))
    async def test_stereo_to_voxtral_with_normalize_off_goes_mono(
        self, make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
    ) -> None:
        write_stereo(audio_dir / "stereo.wav", 1.0, 16_000)
        plain = await make_gateway()
        response = await plain.post(CHAT, json=chat_body({"audio_path": "stereo.wav"}))
        error = (await response.json())["error"]
        assert response.status == 400 and error["message"] == "audio_array.ndim=2"  # vLLM's
        gateway = await make_gateway(models=models(v=VOXTRAL))
        response = await gateway.post(CHAT, json=body_for("v", {"audio_path": "stereo.wav"}))
        assert response.status == 200, await response.text()
        (clip,) = sent_clips(stub)
        assert (clip["channels"], clip["sample_rate"]) == (1, 16_000)

    @pytest.mark.stub(served=ServedModel(mistral=True))
    async def test_stereo_44k_to_voxtral_with_normalize_on_keeping_channels(
        self, make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
    ) -> None:
        write_stereo(audio_dir / "stereo44.wav", 1.0, 44_100)
        normalize = {"enabled": True, "channels": 0}  # "keep each clip's own": not for Voxtral
        gateway = await make_gateway(models=models(v=VOXTRAL), normalize=normalize)
        response = await gateway.post(CHAT, json=body_for("v", {"audio_path": "stereo44.wav"}))
        assert response.status == 200, await response.text()
        (clip,) = sent_clips(stub)
        assert (clip["channels"], clip["sample_rate"]) == (1, 16_000)

    async def test_a_mono_clip_goes_as_it_is_with_normalize_off(
        self, make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
    ) -> None:
        flac = audio_dir / "mono.flac"
        soundfile.write(flac, np.zeros(8000), 22_050, format="FLAC")
        gateway = await make_gateway(models=models(v=VOXTRAL))
        response = await gateway.post(CHAT, json=body_for("v", {"audio_path": "mono.flac"}))
        assert response.status == 200, await response.text()
        (clip,) = sent_clips(stub)
        assert clip["sha256"] == sha256_of(flac)  # byte for byte: no conversion

    async def test_normalize_sends_at_the_models_rate(
        self, make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
    ) -> None:
        write_stereo(audio_dir / "s.wav", 1.0, 44_100)
        tables = models(mimo="MiMoV2OmniForCausalLM", q=QWEN2_AUDIO)
        gateway = await make_gateway(models=tables, normalize={"enabled": True})
        rates = []
        for model in ("mimo", "q", "unplaced"):
            response = await gateway.post(CHAT, json=body_for(model, {"audio_path": "s.wav"}))
            assert response.status == 200, await response.text()
            rates.append(sent_clips(stub)[0]["sample_rate"])
        assert rates == [24_000, 16_000, 16_000]


class TestReferences:
    @pytest.mark.stub(served=ServedModel(mistral=True))
    async def test_a_model_that_refuses_uuid_only_parts_gets_data_and_uuid_every_time(
        self, make_gateway: GatewayFactory, stub: StubState
    ) -> None:
        splice = {"repeats": "reference", "reference_wait_ms": 0}
        gateway = await make_gateway(models=models(v=VOXTRAL), splice=splice)
        for _ in range(4):
            response = await gateway.post(CHAT, json=body_for("v", {"audio_path": "a.wav"}))
            assert response.status == 200, await response.text()
            (part,) = forwarded_json(stub)["messages"][0]["content"][:1]
            assert part["audio_url"]["url"].startswith("data:audio/wav;base64,")
            assert part["uuid"]

    @pytest.mark.stub(
        served=ServedModel("voxtral", "mistralai/Voxtral-Mini-3B-2507", 5, mistral=True)
    )
    async def test_placed_by_the_upstream_and_inline_parts_too(
        self, make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
    ) -> None:
        splice = {"repeats": "reference", "reference_wait_ms": 0}
        placement = {"ask_upstream": True}
        gateway = await make_gateway(splice=splice, placement=placement)
        inline = audio_part(audio_dir / "b.wav")
        rows = [
            body_for("voxtral", {"audio_path": "a.wav"}),
            {"model": "voxtral", "messages": [{"role": "user", "content": [inline]}]},
        ]
        for body in rows * 3:
            response = await gateway.post(CHAT, json=body)
            assert response.status == 200, await response.text()
            part = forwarded_json(stub)["messages"][0]["content"][0]
            assert part["audio_url"]["url"].startswith("data:audio/wav;base64,")
        assert stub.rejected == 0  # never a refused uuid-only part, never a retry

    async def test_a_model_that_takes_them_gets_them(
        self, make_gateway: GatewayFactory, stub: StubState
    ) -> None:
        splice = {"repeats": "reference", "reference_wait_ms": 0}
        gateway = await make_gateway(models=models(q=QWEN2_AUDIO), splice=splice)
        for _ in range(2):
            response = await gateway.post(CHAT, json=body_for("q", {"audio_path": "a.wav"}))
            assert response.status == 200, await response.text()
        part = forwarded_json(stub)["messages"][0]["content"][0]
        assert part["audio_url"] is None and part["uuid"]


class TestPlacement:
    @pytest.mark.stub(
        served=ServedModel("voxtral", "mistralai/Voxtral-Mini-3B-2507", 5, mistral=True)
    )
    async def test_placed_by_the_upstream_root_and_shown_in_health(
        self, make_gateway: GatewayFactory, stub: StubState, audio_dir: Path
    ) -> None:
        write_stereo(audio_dir / "stereo.wav", 0.5, 16_000)
        gateway = await make_gateway(placement={"ask_upstream": True})
        response = await gateway.post(CHAT, json=body_for("voxtral", {"audio_path": "stereo.wav"}))
        assert response.status == 200, await response.text()
        health = await (await gateway.get("/gateway/health")).json()
        shown = health["models"]["voxtral"]
        assert shown["architecture"] == VOXTRAL
        assert shown["placed_by"] == "upstream root mistralai/Voxtral-Mini-3B-2507"
        assert shown["accepts_uuid_only_parts"] is False and shown["clips_per_prompt"] == 5
        assert shown["translations"] == "transcribes"
        paths = [r.path for r in stub.requests]
        assert paths == ["/v1/models", CHAT]

    async def test_placed_by_a_model_directory(self, audio_dir: Path, tmp_path: Path) -> None:
        model_dir = tmp_path / "tiny-model"
        model_dir.mkdir()
        (model_dir / "config.json").write_text(json.dumps({"architectures": [AF3]}))
        stub = TestServer(create_stub_app(served=ServedModel("tiny", str(model_dir))))
        await stub.start_server()
        upstream = str(stub.make_url("")).rstrip("/")
        config = gateway_config(upstream, audio_dir, placement={"ask_upstream": True})
        try:
            async with TestClient(TestServer(create_app(config))) as gateway:
                metadata = {"audio_paths": json.dumps(["a.wav", "b.wav"])}
                response = await gateway.post(CHAT, json=body_for("tiny", metadata))
                error = await gateway_error(response, 400, "metadata.audio_paths")
                assert error["code"] == "too_many_clips" and AF3 in error["message"]
        finally:
            await stub.close()

    async def test_a_model_it_cannot_place_gets_todays_behaviour(
        self, make_gateway: GatewayFactory, stub: StubState, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.DEBUG, "gateway.models")
        gateway = await make_gateway(placement={"ask_upstream": True})
        metadata = {"audio_paths": json.dumps(["a.wav", "b.wav", "c.wav"])}
        for _ in range(2):
            response = await gateway.post(CHAT, json=chat_body(metadata))
            assert response.status == 200, await response.text()
        assert "'stub-audio-model': not placed" in caplog.text
        assert [r.path for r in stub.requests].count("/v1/models") == 1  # kept
        health = await (await gateway.get("/gateway/health")).json()
        assert health["models"]["stub-audio-model"]["architecture"] is None

    async def test_configured_models_and_unknown_architecture_warning(
        self, make_gateway: GatewayFactory, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.WARNING, "gateway.models")
        tables = {"v": {"architecture": VOXTRAL}, "x": {"architecture": "MadeUpForAudio"}}
        gateway = await make_gateway(models=tables)
        assert "MadeUpForAudio" in caplog.text and 'models."x"' in caplog.text
        health = await (await gateway.get("/gateway/health")).json()
        assert health["models"]["v"]["placed_by"] == "config"
        assert health["models"]["x"]["architecture"] is None


@pytest.mark.parametrize(
    ("table", "key"),
    [
        (
            'architecture = "VoxtralForConditionalGeneration"\nwindow_seconds = -30',
            "window_seconds",
        ),
        ("clips_per_prompt = 0", "clips_per_prompt"),
        ("max_clips = 3", "max_clips"),
    ],
)
def test_serve_refuses_a_bad_models_table_naming_the_key(
    tmp_path: Path, table: str, key: str
) -> None:
    bad = tmp_path / "models.toml"
    bad.write_text(f'[models."voxtral"]\n{table}\n')
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--config", str(bad)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert f'models."voxtral".{key}' in result.stderr


async def test_a_translation_to_a_model_that_does_not_translate_is_told_once(
    make_gateway: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gateway.speech")
    gateway = await make_gateway(models=models(v=VOXTRAL, w="WhisperForConditionalGeneration"))
    for model in ("v", "v", "w"):
        body = {"model": model, "metadata": {"audio_path": "a.wav"}}
        response = await gateway.post("/v1/audio/translations", json=body)
        assert response.status == 200, await response.text()  # relayed as asked
    (record,) = caplog.records
    assert "model 'v'" in record.getMessage() and "a transcription" in record.getMessage()
