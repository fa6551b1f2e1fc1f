"""The gateway's bodies, judged by vLLM's own code (0.33 and 0.34; skipped unless `vllm` imports).

Each request goes through a real gateway to the stub, which records the body it received;
that body is then run through what a vLLM server runs on it, in process and without an
engine: the request model (`ChatCompletionRequest` / `ResponsesRequest`), the chat
content-part parser (`parse_chat_messages_async`, with a tracker that needs no ModelConfig
or HF processor) and the `MediaConnector` audio loading behind it. The decoded samples
must equal vLLM's decoding of the original files, bit for bit.

Run it with `.ci/vllm-compat` (a venv per vLLM version, then these modules in each), or in any
environment with `pip install 'vllm[audio]==0.34.0'`: `python -m pytest tests/vllm_compat`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy
import pytest
import soundfile

from tests.vllm_compat.versions import require_vllm

require_vllm()

with warnings.catch_warnings():  # vLLM's imports warn about the torch build; not our concern
    warnings.simplefilter("ignore")
    from pydantic import ValidationError
    from vllm.config.multimodal import MultiModalConfig
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest
    from vllm.entrypoints.serve.exception_handling.error_response import create_error_response
    from vllm.exceptions import GenerationError, VLLMValidationError
    from vllm.multimodal.media.audio import AudioMediaIO
    from vllm.renderers.chat_utils import chat_message

from bench.vllm_frontend_cpu.run import ModelFreeTracker  # noqa: E402
from gateway.audio.samples import write_tone  # noqa: E402
from gateway.stub_upstream import StubState  # noqa: E402
from tests.conftest import GatewayFactory, chat_body, gateway_error, write_encoded_tone  # noqa: E402
from tests.test_decode_limits import (  # noqa: E402
    BIG_DECODE,
    LIMIT_SECONDS,
    flac_streaminfo_only,
    write_silence_wav,
)
from tests.vllm_compat.conftest import Decoded, VllmChat, starlette_json  # noqa: E402


def vllm_decodes(path: Path) -> Decoded:
    """vLLM's decoding of the original file (its AudioMediaIO, native rate, as it serves)."""
    decoded: Decoded = AudioMediaIO().load_bytes(path.read_bytes())
    return decoded


def assert_same_samples(got: list[Decoded], paths: list[Path]) -> None:
    assert len(got) == len(paths)
    for (samples, rate), path in zip(got, paths, strict=True):
        expected, expected_rate = vllm_decodes(path)
        assert rate == expected_rate, path.name
        assert samples.dtype == expected.dtype and numpy.array_equal(samples, expected), path.name


# --- the clips, the sidechannel forms and the gateway variants -----------------------------


@pytest.fixture
def clips(audio_dir: Path) -> dict[str, Path]:
    """WAV (16 kHz mono, 44.1 kHz stereo), FLAC, MP3 and Ogg Vorbis clips."""
    rate = 44_100
    t = numpy.arange(int(0.4 * rate)) / rate
    stereo = numpy.stack([numpy.sin(2 * numpy.pi * 330 * t), numpy.sin(2 * numpy.pi * 550 * t)])
    soundfile.write(audio_dir / "stereo44.wav", 0.3 * stereo.T, rate, subtype="PCM_16")
    made = {"speech.wav": write_tone(audio_dir / "speech.wav", 0.6, 440.0)}
    made["stereo44.wav"] = audio_dir / "stereo44.wav"
    for name, kind in (("tone.flac", "FLAC"), ("tone.mp3", "MP3"), ("tone.ogg", "OGG")):
        made[name] = write_encoded_tone(audio_dir / name, 0.5, 620.0, kind)
    return made


ALL_CLIPS = ["stereo44.wav", "tone.flac", "tone.mp3", "tone.ogg", "speech.wav"]
WAV_MP3 = ["stereo44.wav", "tone.mp3", "speech.wav"]  # what input_audio may carry


def data_uri(path: Path) -> str:
    mime = {".wav": "audio/wav", ".flac": "audio/flac", ".mp3": "audio/mpeg"}[path.suffix]
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def forms(names: list[str]) -> dict[str, tuple[dict[str, Any], list[str]]]:
    """Every sidechannel form -> (metadata, the clips it carries, in order)."""
    inline = "tone.flac" if "tone.flac" in names else "tone.mp3"
    return {
        "audio_path": ({"audio_path": names[-1]}, [names[-1]]),
        "audio_paths": ({"audio_paths": names}, names),
        "audio_paths-json": ({"audio_paths": json.dumps(names[:2])}, names[:2]),
        "audio_data": ({"audio_data": inline}, [inline]),
        "audio_url-legacy": ({"audio_url": "speech.wav"}, ["speech.wav"]),
    }


FORMS = list(forms(ALL_CLIPS))


@dataclass(frozen=True)
class Variant:
    route: str  # the gateway route the client calls: "chat" or "responses"
    sections: dict[str, Any] = field(default_factory=dict)
    wav_mp3_only: bool = False  # the gateway refuses other containers as input_audio

    @property
    def part_uuid(self) -> bool:
        return bool(self.sections.get("splice", {}).get("part_uuid"))


INPUT_AUDIO = {"chat_part": "input_audio"}
FILE_URL = {"mode": "file_url"}
UUID = {"part_uuid": True}

BRIDGE = {"audio": "chat_bridge"}
RESPONSES_SPLICE = {"audio": "input_audio"}

# Every [splice] and [responses] variant. A body that reaches /v1/chat/completions is judged
# as chat, whatever route the client called (the bridge sends Responses rows there).
VARIANTS: dict[str, Variant] = {
    "chat/audio-url": Variant("chat"),
    "chat/input-audio": Variant("chat", {"splice": INPUT_AUDIO}, wav_mp3_only=True),
    "chat/file-url": Variant("chat", {"splice": FILE_URL}),
    "chat/audio-url+uuid": Variant("chat", {"splice": UUID}),
    "chat/input-audio+uuid": Variant("chat", {"splice": {**INPUT_AUDIO, **UUID}}, True),
    "chat/file-url+uuid": Variant("chat", {"splice": {**FILE_URL, **UUID}}),
    "chat/streamed": Variant("chat", {"cache": {"max_item_bytes": 1}}),
    "responses/chat-bridge": Variant("responses", {"responses": BRIDGE}),
    "responses/chat-bridge+input-audio": Variant(
        "responses", {"responses": BRIDGE, "splice": INPUT_AUDIO}, wav_mp3_only=True
    ),
    "responses/chat-bridge+file-url+uuid": Variant(
        "responses", {"responses": BRIDGE, "splice": {**FILE_URL, **UUID}}
    ),
    "responses/input-audio": Variant(
        "responses", {"responses": RESPONSES_SPLICE}, wav_mp3_only=True
    ),
    "responses/file-url": Variant(
        "responses", {"responses": RESPONSES_SPLICE, "splice": FILE_URL}, wav_mp3_only=True
    ),
}


def resolve_metadata(metadata: dict[str, Any], clips: dict[str, Path]) -> dict[str, Any]:
    """Inline forms carry the clip's bytes as a data URI, not its name."""
    return {
        key: data_uri(clips[value]) if key in ("audio_data", "audio_url") else value
        for key, value in metadata.items()
    }


async def send(gateway: Any, variant: Variant, metadata: dict[str, Any]) -> Any:
    if variant.route == "chat":
        return await gateway.post("/v1/chat/completions", json=chat_body(metadata))
    body = {"model": "stub-audio-model", "input": "Transcribe the audio.", "metadata": metadata}
    return await gateway.post("/v1/responses", json=body)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", list(VARIANTS))
async def test_vllm_accepts_and_decodes_what_the_gateway_sends(
    make_gateway: GatewayFactory,
    stub: StubState,
    clips: dict[str, Path],
    vllm_chat: VllmChat,
    name: str,
    form: str,
) -> None:
    variant = VARIANTS[name]
    metadata, carried = forms(WAV_MP3 if variant.wav_mp3_only else ALL_CLIPS)[form]
    gateway = await make_gateway(**variant.sections)
    response = await send(gateway, variant, resolve_metadata(metadata, clips))
    received = stub.requests[-1]
    body = json.loads(received.body)
    paths = [clips[clip] for clip in carried]

    if received.path == "/v1/responses":
        # vLLM 0.33 and 0.34 validate Responses input with the openai SDK's types: a message part is
        # input_text / input_image / input_file only. No audio part passes (issue #8).
        with pytest.raises(ValidationError):
            ResponsesRequest.model_validate(body)
        return

    assert received.path == "/v1/chat/completions"
    assert response.status == 200, await response.text()
    result = await vllm_chat(body)
    assert_same_samples(result.audio, paths)
    expected_uuids = [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]
    assert result.uuids == (expected_uuids if variant.part_uuid else [None] * len(paths))
    last = result.conversation[-1]
    assert last["role"] == "user"
    assert last["content"].endswith("Transcribe the audio.")  # the text stays after the audio
    assert last["content"].count("<audio ") == len(paths)


# --- what the gateway refuses, vLLM refuses -------------------------------------------------


@pytest.mark.parametrize("fmt", ["wav", "mp3", "flac", "ogg"])
async def test_input_audio_formats_vllm_takes_are_the_ones_the_gateway_sends(
    make_gateway: GatewayFactory,
    stub: StubState,
    clips: dict[str, Path],
    vllm_chat: VllmChat,
    fmt: str,
) -> None:
    """A user message holding only an `input_audio` part with `format` outside the literal
    fails vLLM's validation; the gateway refuses such a clip itself (400) instead."""
    path = {"wav": clips["speech.wav"], "mp3": clips["tone.mp3"]}.get(fmt, clips["tone.flac"])
    data = base64.b64encode(path.read_bytes()).decode()
    part = {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}
    body = {"model": "m", "messages": [{"role": "user", "content": [part]}]}
    gateway = await make_gateway(splice=INPUT_AUDIO)
    response = await gateway.post("/v1/chat/completions", json=chat_body({"audio_path": path.name}))
    if fmt in ("wav", "mp3"):
        assert_same_samples((await vllm_chat(body)).audio, [path])
        assert response.status == 200, await response.text()
        return
    with pytest.raises(ValidationError, match="'wav' or 'mp3'"):
        await vllm_chat(body)
    error = await gateway_error(response, 400, "metadata.audio_path")
    assert error["code"] == "unsupported_audio_format"


@pytest.mark.parametrize(
    ("clip", "code", "vllm_says"),
    [
        ("long.wav", "audio_too_long", "VLLM_MAX_AUDIO_DECODE_DURATION_S"),
        ("bomb.flac", "audio_decode_too_large", "VLLM_MAX_AUDIO_DECODE_BYTES"),
        ("ten-minutes.wav", None, None),
    ],
)
async def test_the_gateways_decode_limits_are_vllms(
    make_gateway: GatewayFactory,
    stub: StubState,
    audio_dir: Path,
    clip: str,
    code: str | None,
    vllm_says: str | None,
) -> None:
    write_silence_wav(audio_dir / "long.wav", LIMIT_SECONDS + 1)
    write_silence_wav(audio_dir / "ten-minutes.wav", LIMIT_SECONDS)
    (audio_dir / "bomb.flac").write_bytes(flac_streaminfo_only(*BIG_DECODE))
    gateway = await make_gateway()
    response = await gateway.post("/v1/chat/completions", json=chat_body({"audio_path": clip}))
    if code is None:
        samples, rate = vllm_decodes(audio_dir / clip)
        assert len(samples) / rate == LIMIT_SECONDS
        assert response.status == 200, await response.text()
        return
    with pytest.raises(ValueError, match=vllm_says):
        vllm_decodes(audio_dir / clip)
    error = await gateway_error(response, 413, "metadata.audio_path")
    assert error["code"] == code
    assert stub.request_count == 0


def test_vllms_default_audio_items_per_prompt_is_999() -> None:
    """What the README says about `--limit-mm-per-prompt` (a model may cap it lower)."""
    assert MultiModalConfig().get_limit_per_prompt("audio") == 999


# --- clips by reference: uuid-only parts (issue 17) ------------------------------------------

UUID_ONLY_PARTS: dict[str, dict[str, Any]] = {
    "audio_url-null": {"type": "audio_url", "audio_url": None},
    "audio_url-empty-url": {"type": "audio_url", "audio_url": {"url": ""}},
    "audio_url-untyped": {"audio_url": None},
    "input_audio-null": {"type": "input_audio", "input_audio": None},
    "input_audio-empty-data": {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}},
}
KEY = "sha256:0123abcd"


def user_body(*parts: dict[str, Any], **extra: Any) -> dict[str, Any]:
    content = [*parts, {"type": "text", "text": "Transcribe the audio."}]
    return {
        "model": "stub-audio-model",
        "messages": [{"role": "user", "content": content}],
        **extra,
    }


def data_parts(path: Path, uuid: str) -> dict[str, dict[str, Any]]:
    """Both part types carrying `path`'s bytes and a uuid (and the bare-string URL form)."""
    payload = base64.b64encode(path.read_bytes()).decode()
    url = f"data:audio/wav;base64,{payload}"
    return {
        "audio_url": {"type": "audio_url", "audio_url": {"url": url}, "uuid": uuid},
        "audio_url-string": {"type": "audio_url", "audio_url": url, "uuid": uuid},
        "audio_url-untyped": {"audio_url": {"url": url}, "uuid": uuid},
        "input_audio": {
            "type": "input_audio",
            "input_audio": {"data": payload, "format": "wav"},
            "uuid": uuid,
        },
    }


@pytest.fixture
async def stub_client(stub_server: Any) -> Any:
    from aiohttp.test_utils import TestClient

    async with TestClient(stub_server) as client:
        yield client


@pytest.mark.parametrize("shape", list(UUID_ONLY_PARTS))
async def test_vllm_takes_uuid_only_parts_and_the_stub_reads_them_alike(
    vllm_chat: VllmChat, stub_client: Any, clips: dict[str, Path], shape: str
) -> None:
    path = clips["speech.wav"]
    key = hashlib.sha256(path.read_bytes()).hexdigest()
    body = user_body({**UUID_ONLY_PARTS[shape], "uuid": key})
    result = await vllm_chat(body)
    assert result.audio == [None] and result.uuids == [key]  # the uuid, no data
    assert result.conversation[-1]["content"].count("<audio ") == 1  # same prompt as with data
    # the stub: nothing held is vLLM's cache-miss 400; once held, the held clip
    missed = await stub_client.post("/v1/chat/completions", json=body)
    miss = ValueError("Cache miss for audio at index 0 but data is not provided.")
    assert missed.status == 400 and await missed.text() == starlette_json(
        create_error_response(miss)
    )
    held = await stub_client.post(
        "/v1/chat/completions", json=user_body(data_parts(path, key)["input_audio"])
    )
    assert held.status == 200
    again = await stub_client.post("/v1/chat/completions", json=body)
    assert again.status == 200
    assert [c["sha256"] for c in (await again.json())["stub"]["clips"]] == [key]


@pytest.mark.parametrize(
    "kind", ["audio_url", "audio_url-string", "audio_url-untyped", "input_audio"]
)
async def test_data_with_a_uuid_decodes_as_before(
    vllm_chat: VllmChat, stub_client: Any, clips: dict[str, Path], kind: str
) -> None:
    path = clips["speech.wav"]
    body = user_body(data_parts(path, KEY)[kind])
    result = await vllm_chat(body)
    assert_same_samples(result.audio, [path])
    assert result.uuids == [KEY]
    answer = await stub_client.post("/v1/chat/completions", json=body)
    assert answer.status == 200
    clip = (await answer.json())["stub"]["clips"][0]
    assert (clip["uuid"], clip["sha256"]) == (KEY, hashlib.sha256(path.read_bytes()).hexdigest())


@pytest.mark.parametrize("part", [{"type": "audio_url"}, {"type": "input_audio"}, {}])
async def test_a_uuid_part_without_its_media_key_is_the_same_400_in_vllm_and_the_stub(
    vllm_chat: VllmChat, stub_client: Any, part: dict[str, Any]
) -> None:
    body = user_body({**part, "uuid": KEY})
    with pytest.raises(VLLMValidationError) as caught:
        await vllm_chat(body)
    answer = await stub_client.post("/v1/chat/completions", json=body)
    assert answer.status == 400
    assert await answer.text() == starlette_json(create_error_response(caught.value))


@pytest.mark.parametrize("stream", [False, True])
async def test_the_stubs_engine_drift_is_vllms_generation_error(
    stub_client: Any, clips: dict[str, Path], stream: bool
) -> None:
    part = data_parts(clips["speech.wav"], KEY)["input_audio"]
    assert (await stub_client.post("/v1/chat/completions", json=user_body(part))).status == 200
    uuid_only = {"type": "input_audio", "input_audio": None, "uuid": KEY}
    body = user_body(uuid_only, stream=stream)
    answer = await stub_client.post(
        "/v1/chat/completions", json=body, headers={"X-Stub-Mm-Drift": "1"}
    )
    error = GenerationError("Internal server error")
    if not stream:
        assert answer.status == 500
        assert await answer.text() == starlette_json(create_error_response(error))
        return
    # chat_completion_stream_generator: create_error_response(str(e), InternalServerError, 500)
    event = create_error_response(
        str(error), err_type="InternalServerError", status_code=error.status_code
    ).model_dump_json()
    assert answer.status == 200
    events = [b.removeprefix("data: ") for b in (await answer.text()).split("\n\n") if b]
    assert events[1:] == [event, "[DONE]"]
    assert json.loads(events[0])["choices"][0]["delta"] == {"role": "assistant", "content": ""}


KWARGS_CASES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({}, {}),
    ({"audio_kwargs": {"padding": True}}, {}),
    ({"sampling_rate": 16000}, {}),
    ({"images_kwargs": {"size": 4}}, {}),
    ({"videos_kwargs": {"fps": 2}}, {"image": {"mode": "RGB"}}),
    ({}, {"audio": {"sr": 8000}}),
    ({}, {"audio": {}}),
    ({"audio_kwargs": {"padding": True}}, {"audio": {"sr": 8000}}),
]


def test_the_stubs_cache_key_follows_vllms_mm_hash() -> None:
    """vLLM's own `get_mm_hashes`: the key is the uuid exactly when the stub's is, and two
    requests share a key in vLLM exactly when they do in the stub."""
    from vllm.multimodal.parse import MultiModalDataParser
    from vllm.multimodal.processing.inputs import ProcessorInputs

    from gateway.stub_upstream.mm_cache import HeldPart, hash_factors, item_key

    items = MultiModalDataParser(target_sr=16000).parse_mm_data({"audio": [None]})
    vllm_keys, stub_keys = [], []
    for processor, media in KWARGS_CASES:
        inputs = ProcessorInputs(
            prompt=[1],
            mm_data_items=items,
            mm_uuid_items={"audio": [KEY]},
            hf_processor_mm_kwargs=processor,
            media_io_kwargs=media,
        )
        vllm_keys.append(inputs.get_mm_hashes("stub-audio-model", "sha256")["audio"][0])
        body = {"mm_processor_kwargs": processor, "media_io_kwargs": media}
        stub_keys.append(item_key(HeldPart(KEY), "stub-audio-model", hash_factors(body)))
    assert [k == KEY for k in vllm_keys] == [k == KEY for k in stub_keys]
    assert [vllm_keys.index(k) for k in vllm_keys] == [stub_keys.index(k) for k in stub_keys]


async def test_the_frontend_cpu_tool_decodes_data_parts_and_skips_uuid_only_ones(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, audio_dir: Path, clips: dict[str, Path]
) -> None:
    """bench/vllm_frontend_cpu/ on bodies the stub recorded: vLLM decodes (and resamples)
    the clip that came as data, and loads nothing for the uuid-only parts."""
    import asyncio

    from aiohttp.test_utils import TestClient, TestServer

    from bench.vllm_frontend_cpu.run import measure, read_bodies
    from gateway.stub_upstream import create_stub_app

    monkeypatch.setattr(
        chat_message, "AsyncMultiModalItemTracker", ModelFreeTracker
    )  # restored after
    path = clips["stereo44.wav"]
    key = hashlib.sha256(path.read_bytes()).hexdigest()
    uuid_only = {"type": "audio_url", "audio_url": None, "uuid": key}
    recorded = tmp_path / "bodies.jsonl"
    app = create_stub_app(str(audio_dir.parent), record_bodies=str(recorded))
    async with TestClient(TestServer(app)) as client:
        for body in (
            user_body(data_parts(path, key)["audio_url"]),
            user_body(uuid_only, uuid_only),
        ):
            assert (await client.post("/v1/chat/completions", json=body)).status == 200
    report = await measure(await asyncio.to_thread(read_bodies, recorded), repeat=2)
    assert [(c.decoded, c.by_reference) for c in report.per_body] == [(1, 0), (0, 2)]
    assert (report.audio_items_decoded, report.audio_items_by_reference) == (1, 2)
    assert report.audio_cpu_seconds == sum(c.audio_ms for c in report.per_body) / 1000
    assert all(c.audio_ms == max(0.0, c.cpu_ms - c.text_only_ms) for c in report.per_body)
