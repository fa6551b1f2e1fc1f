"""The stub's multimodal processor cache behaves as vLLM 0.33's (research notes
`vllm_uuid_cache.md`): uuid-only parts use the held clip, a miss is vLLM's exact 400 before
any stream, every item is checked before any is recorded, the cache is bounded (LRU) and
emptied by /pause, /sleep and /reset_mm_cache, a data-carrying request holds its clips only
after the preprocessing delay, and engine drift fails as vLLM's GenerationError does."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given
from hypothesis import strategies as st

from gateway.audio.samples import write_tone
from gateway.stub_upstream import StubState, stub_state_key
from gateway.stub_upstream.media import ClipReport
from gateway.stub_upstream.mm_cache import (
    GIB,
    CacheMiss,
    HeldPart,
    MmProcessorCache,
    hash_factors,
    item_key,
)
from tests.conftest import sha256_of

Client = TestClient[web.Request, web.Application]
CLIP_SECONDS = 0.25  # 16 kHz mono: 16 000 bytes of the stub's item size each
TWO_CLIPS_GB = 40_000 / GIB


def miss_body(index: int) -> str:
    message = f"Cache miss for audio at index {index} but data is not provided."
    return (
        '{"error":{"message":"' + message + '","type":"BadRequestError","param":null,"code":400}}'
    )


INTERNAL_ERROR = (
    '{"error":{"message":"Internal server error","type":"InternalServerError",'
    '"param":null,"code":500}}'
)


@pytest.fixture
async def client(stub_server: TestServer) -> AsyncIterator[Client]:
    async with TestClient(stub_server) as test_client:
        yield test_client


@pytest.fixture
def tones(audio_dir: Path) -> list[Path]:
    return [write_tone(audio_dir / f"t{i}.wav", CLIP_SECONDS, 300.0 + 100 * i) for i in range(3)]


def data_part(path: Path, uuid: str | None = None, kind: str = "audio_url") -> dict[str, Any]:
    payload = base64.b64encode(path.read_bytes()).decode()
    if kind == "audio_url":
        part: dict[str, Any] = {
            "type": kind,
            "audio_url": {"url": f"data:audio/wav;base64,{payload}"},
        }
    else:
        part = {"type": kind, "input_audio": {"data": payload, "format": "wav"}}
    return part if uuid is None else {**part, "uuid": uuid}


UUID_ONLY_SHAPES = {
    "audio_url-null": lambda k: {"type": "audio_url", "audio_url": None, "uuid": k},
    "audio_url-empty-url": lambda k: {"type": "audio_url", "audio_url": {"url": ""}, "uuid": k},
    "audio_url-untyped": lambda k: {"audio_url": None, "uuid": k},
    "input_audio-null": lambda k: {"type": "input_audio", "input_audio": None, "uuid": k},
    "input_audio-empty-data": lambda k: {
        "type": "input_audio",
        "input_audio": {"data": "", "format": "wav"},
        "uuid": k,
    },
}


def uuid_only(key: str, shape: str = "audio_url-null") -> dict[str, Any]:
    return UUID_ONLY_SHAPES[shape](key)


def body(*parts: dict[str, Any], **extra: Any) -> dict[str, Any]:
    content = [*parts, {"type": "text", "text": "Transcribe."}]
    return {"model": "m", "messages": [{"role": "user", "content": content}], **extra}


async def chat(client: Client, *parts: dict[str, Any], **extra: Any) -> Any:
    return await client.post("/v1/chat/completions", json=body(*parts, **extra))


async def ok_clips(client: Client, *parts: dict[str, Any], **extra: Any) -> list[dict[str, Any]]:
    response = await chat(client, *parts, **extra)
    assert response.status == 200, await response.text()
    clips: list[dict[str, Any]] = (await response.json())["stub"]["clips"]
    return clips


async def assert_miss(client: Client, index: int, *parts: dict[str, Any], **extra: Any) -> None:
    response = await chat(client, *parts, **extra)
    assert response.status == 400
    assert response.content_type == "application/json"
    assert await response.text() == miss_body(index)


async def state(client: Client) -> dict[str, Any]:
    response = await client.get("/stub/state")
    assert response.status == 200
    result: dict[str, Any] = await response.json()
    return result


# --- hits, misses and the part shapes ---------------------------------------------------------


@pytest.mark.parametrize("shape", list(UUID_ONLY_SHAPES))
@pytest.mark.parametrize("kind", ["audio_url", "input_audio"])
async def test_a_uuid_only_part_uses_the_clip_held_under_its_uuid(
    client: Client, tones: list[Path], kind: str, shape: str
) -> None:
    key = sha256_of(tones[0])
    await assert_miss(client, 0, uuid_only(key, shape))
    first = await ok_clips(client, data_part(tones[0], key, kind))
    assert (await state(client))["decodes"] == 1
    again = await ok_clips(client, uuid_only(key, shape))
    assert again[0]["sha256"] == first[0]["sha256"] == key
    assert again[0]["source"] == "uuid" and again[0]["duration_seconds"] == CLIP_SECONDS
    stats = await state(client)
    assert stats["decodes"] == 1  # the uuid-only request decoded nothing
    assert stats["mm_cache"]["hits"] == 1 and stats["mm_cache"]["uuid_misses"] == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_a_miss_is_vllms_exact_400_naming_the_audio_index_before_any_stream(
    client: Client, tones: list[Path], stream: bool
) -> None:
    held = sha256_of(tones[0])
    await ok_clips(client, data_part(tones[0], held))
    unknown = sha256_of(tones[1])
    extra = {"stream": True} if stream else {}
    await assert_miss(client, 1, uuid_only(held), uuid_only(unknown), **extra)
    # the index counts audio items across the request's messages
    request = body(uuid_only(held))
    request["messages"] += [
        {"role": "assistant", "content": "ok"},
        body(uuid_only(unknown))["messages"][0],
    ]
    response = await client.post("/v1/chat/completions", json={**request, **extra})
    assert response.status == 400 and await response.text() == miss_body(1)


async def test_every_item_is_checked_before_any_is_recorded(
    client: Client, tones: list[Path]
) -> None:
    key = sha256_of(tones[0])
    await assert_miss(client, 1, data_part(tones[0], key), uuid_only(key))
    await assert_miss(client, 0, uuid_only(key))  # the failed request held nothing
    clips = await ok_clips(client, data_part(tones[0], key), data_part(tones[0], key))
    assert [c["sha256"] for c in clips] == [key, key]
    assert (await ok_clips(client, uuid_only(key)))[0]["sha256"] == key


async def test_a_part_without_its_media_key_is_vllms_missing_type_400(client: Client) -> None:
    response = await chat(client, {"type": "audio_url", "uuid": "k"})
    assert response.status == 400
    assert await response.json() == {
        "error": {
            "message": "Missing 'type' field in multimodal part. (parameter=type)",
            "type": "BadRequestError",
            "param": "type",
            "code": 400,
        }
    }
    # nor a part with neither a type nor a media key
    untyped = await chat(client, {"uuid": "k"})
    assert untyped.status == 400 and (await untyped.json())["error"]["param"] == "type"
    # without a uuid the strict parser refuses the null instead
    assert (await chat(client, {"type": "audio_url", "audio_url": None})).status == 400


async def test_a_uuid_that_is_not_a_string_is_its_str(client: Client, tones: list[Path]) -> None:
    part = data_part(tones[0])
    await ok_clips(client, {**part, "uuid": 12345})
    assert (await ok_clips(client, uuid_only("12345")))[0]["sha256"] == sha256_of(tones[0])


async def test_data_with_a_held_uuid_uses_the_held_clip_as_vllm_does(
    client: Client, tones: list[Path]
) -> None:
    """vLLM does not compare data with the cache: the uuid wins (why uuids must be hashes)."""
    await ok_clips(client, data_part(tones[0], "same"))
    clips = await ok_clips(client, data_part(tones[1], "same"))
    assert clips[0]["sha256"] == sha256_of(tones[0]) and clips[0]["source"] == "data"
    assert (await state(client))["decodes"] == 2  # still decoded


# --- the key: uuid, or a hash with the request's kwargs ---------------------------------------


@pytest.mark.stub(trust_request_mm_kwargs=True)
async def test_kwargs_key_the_clip_apart(client: Client, tones: list[Path]) -> None:
    key = sha256_of(tones[0])
    with_kwargs = {"mm_processor_kwargs": {"audio_kwargs": {"padding": True}}}
    await ok_clips(client, data_part(tones[0], key))
    await assert_miss(client, 0, uuid_only(key), **with_kwargs)
    await ok_clips(client, data_part(tones[0], key), **with_kwargs)
    await ok_clips(client, uuid_only(key), **with_kwargs)
    await assert_miss(client, 0, uuid_only(key), media_io_kwargs={"audio": {"sr": 8000}})
    # kwargs of other modalities leave the audio key alone
    other = {
        "mm_processor_kwargs": {"images_kwargs": {"x": 1}},
        "media_io_kwargs": {"image": {"y": 2}},
    }
    await ok_clips(client, uuid_only(key), **other)


kwargs_values = st.dictionaries(
    st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3
)


@given(
    uuid=st.text(max_size=20),
    model=st.text(max_size=10),
    processor=kwargs_values,
    media=kwargs_values,
)
def test_the_key_is_the_uuid_exactly_when_no_audio_kwargs(
    uuid: str, model: str, processor: dict[str, Any], media: dict[str, Any]
) -> None:
    request = {"mm_processor_kwargs": processor, "media_io_kwargs": {"audio": media}}
    factors = hash_factors(request)
    key = item_key(HeldPart(uuid), model, factors)
    if not processor and not media:
        assert key == uuid
    else:
        assert key.startswith("mmhash:") and key == item_key(HeldPart(uuid), model, factors)
        assert key != item_key(HeldPart(uuid + "x"), model, factors)
        assert key != item_key(HeldPart(uuid), model + "x", factors)


# --- bounds and clearing ----------------------------------------------------------------------


@pytest.mark.stub(mm_processor_cache_gb=TWO_CLIPS_GB)
async def test_the_cache_is_a_bounded_lru(client: Client, tones: list[Path]) -> None:
    keys = [sha256_of(t) for t in tones]
    await ok_clips(client, data_part(tones[0], keys[0]))
    await ok_clips(client, data_part(tones[1], keys[1]))
    await ok_clips(client, uuid_only(keys[0]))  # a hit touches: 1 is now the oldest
    await ok_clips(client, data_part(tones[2], keys[2]))
    await assert_miss(client, 0, uuid_only(keys[1]))
    await ok_clips(client, uuid_only(keys[0]), uuid_only(keys[2]))
    assert (await state(client))["mm_cache"]["items"] == 2


@pytest.mark.stub(mm_processor_cache_gb=10_000 / GIB)
async def test_a_clip_larger_than_the_cache_is_never_held(
    client: Client, tones: list[Path]
) -> None:
    key = sha256_of(tones[0])
    await ok_clips(client, data_part(tones[0], key))
    await assert_miss(client, 0, uuid_only(key))


@pytest.mark.stub(mm_processor_cache_gb=0)
async def test_with_the_cache_off_uuid_only_parts_fail_and_data_works(
    client: Client, tones: list[Path]
) -> None:
    key = sha256_of(tones[0])
    await ok_clips(client, data_part(tones[0], key))
    response = await chat(client, uuid_only(key))
    assert response.status == 400
    assert (await response.json())["error"]["message"].startswith("Failed to apply")


CLEARING = [
    ("/pause", {"status": "paused"}),
    ("/pause?mode=keep", {"status": "paused"}),
    ("/sleep", {"status": "sleeping", "level": 1}),
    ("/sleep?level=2&mode=wait", {"status": "sleeping", "level": 2}),
    ("/release_kv_cache_memory", {"status": "kv_cache_released"}),
    ("/reset_mm_cache", None),
]
KEEPING = [
    ("/pause?clear_cache=false", {"status": "paused"}),
    ("/sleep?level=0", {"status": "sleeping", "level": 0}),
    ("/resume", {"status": "resumed"}),
    ("/wake_up", {"status": "awake", "tags": None}),
]


@pytest.mark.parametrize(("route", "answer"), CLEARING + KEEPING)
async def test_pause_sleep_and_reset_empty_the_cache_as_vllm(
    client: Client, tones: list[Path], route: str, answer: dict[str, Any] | None
) -> None:
    key = sha256_of(tones[0])
    await ok_clips(client, data_part(tones[0], key))
    response = await client.post(route)
    assert response.status == 200
    assert (await response.json() if answer is not None else await response.read()) == (
        answer if answer is not None else b""
    )
    if (route, answer) in CLEARING:
        await assert_miss(client, 0, uuid_only(key))
    else:
        await ok_clips(client, uuid_only(key))


@pytest.mark.parametrize(
    "route", ["/pause?mode=later", "/pause?clear_cache=maybe", "/sleep?level=3"]
)
async def test_bad_query_parameters_are_refused_and_keep_the_cache(
    client: Client, tones: list[Path], route: str
) -> None:
    key = sha256_of(tones[0])
    await ok_clips(client, data_part(tones[0], key))
    response = await client.post(route)
    assert response.status == 400
    error = (await response.json())["error"]
    assert error["param"] == "query." + route.split("?")[1].split("=")[0]
    assert error["type"] == "Bad Request"
    await ok_clips(client, uuid_only(key))


# --- the preprocessing delay ------------------------------------------------------------------


@pytest.mark.stub(mm_preprocess_delay_seconds=0.3)
async def test_a_clip_is_held_only_once_its_request_was_preprocessed(
    client: Client, stub: StubState, tones: list[Path]
) -> None:
    key = sha256_of(tones[0])
    first = asyncio.create_task(ok_clips(client, data_part(tones[0], key)))
    while stub.decodes == 0:  # the data request has been decoded and is in its delay
        await asyncio.sleep(0.005)
    await assert_miss(client, 0, uuid_only(key))  # no data: no delay, and nothing held yet
    await first
    await ok_clips(client, uuid_only(key))


# --- engine drift (P1 lost what P0 holds) -----------------------------------------------------


async def test_drift_fails_a_plain_request_with_vllms_500_and_forgets_the_clip(
    client: Client, tones: list[Path]
) -> None:
    key = sha256_of(tones[0])
    await ok_clips(client, data_part(tones[0], key))
    response = await client.post(
        "/v1/chat/completions", json=body(uuid_only(key)), headers={"X-Stub-Mm-Drift": "1"}
    )
    assert response.status == 500 and await response.text() == INTERNAL_ERROR
    await assert_miss(client, 0, uuid_only(key))  # P0 invalidated it
    await ok_clips(client, data_part(tones[0], key))
    await ok_clips(client, uuid_only(key))
    assert (await state(client))["mm_cache"]["engine_misses"] == 1


async def read_events(response: Any) -> list[str]:
    text = await response.text()
    return [block.removeprefix("data: ") for block in text.split("\n\n") if block]


async def test_drift_in_a_stream_is_the_role_chunk_then_an_error_event(
    client: Client, tones: list[Path]
) -> None:
    key = sha256_of(tones[0])
    await ok_clips(client, data_part(tones[0], key))
    for refused in ({"keys": "all"}, "not json"):
        kwargs = {"json": refused} if isinstance(refused, dict) else {"data": refused}
        assert (await client.post("/stub/mm_cache/lose", **kwargs)).status == 400
    lost = await client.post("/stub/mm_cache/lose", json={"keys": [key]})
    assert await lost.json() == {"lost": 1}
    response = await chat(client, data_part(tones[0], key), stream=True)  # data + uuid: P0 hit
    assert response.status == 200
    role, error, done = await read_events(response)
    assert json.loads(role)["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert error == INTERNAL_ERROR and done == "[DONE]"


@pytest.mark.stub(mm_engine_cache_gb=20_000 / GIB)
async def test_a_smaller_engine_cache_drifts_on_its_own(client: Client, tones: list[Path]) -> None:
    keys = [sha256_of(t) for t in tones[:2]]
    await ok_clips(client, data_part(tones[0], keys[0]))
    await ok_clips(client, data_part(tones[1], keys[1]))  # the engine evicts clip 0; P0 keeps it
    response = await chat(client, uuid_only(keys[0]))
    assert response.status == 500 and await response.text() == INTERNAL_ERROR
    await ok_clips(client, uuid_only(keys[1]))


async def test_a_normal_stream_starts_with_vllms_role_chunk(
    client: Client, tones: list[Path]
) -> None:
    response = await chat(client, data_part(tones[0]), stream=True)
    events = await read_events(response)
    assert json.loads(events[0])["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert events[-1] == "[DONE]" and len(events) > 3


# --- what the bench reads ---------------------------------------------------------------------


async def test_the_state_route_counts_decodes(client: Client, tones: list[Path]) -> None:
    await ok_clips(client, data_part(tones[0]), data_part(tones[1], kind="input_audio"))
    await ok_clips(client, data_part(tones[0], "k"))
    await ok_clips(client, uuid_only("k"), uuid_only("k"))
    stats = await state(client)
    assert stats["decodes"] == 3 and stats["request_count"] == 4  # this request counts too
    assert stats["mm_cache"]["items"] == 3  # two by content, one by uuid


async def test_recorded_bodies_are_the_chat_bodies_one_a_line(
    tmp_path: Path, audio_dir: Path, tones: list[Path]
) -> None:
    from gateway.stub_upstream import create_stub_app

    path = tmp_path / "bodies.jsonl"
    sent = [body(data_part(tones[0], "k")), body(uuid_only("k")), body(uuid_only("x"))]
    app = create_stub_app(str(audio_dir.parent), record_bodies=str(path))
    async with TestClient(TestServer(app)) as stub_client:
        for request in sent:
            raw = json.dumps(request, indent=2).encode()  # newlines inside become spaces
            await stub_client.post("/v1/chat/completions", data=raw)
        await stub_client.post("/tokenize", json={"prompt": "not a chat body"})
        assert stub_client.app is not None and stub_client.app[stub_state_key].rejected == 1
    lines = path.read_bytes().splitlines()
    assert [json.loads(line) for line in lines] == sent  # the missed one too: vLLM parsed it


async def test_the_command_line_sets_the_cache_the_delay_and_the_body_record(
    tmp_path: Path, tones: list[Path]
) -> None:
    """`python -m gateway.stub_upstream` with the new flags, as bench/ starts it."""
    import sys

    import aiohttp

    from bench.shared.servers import free_port

    port, record = free_port(), tmp_path / "bodies.jsonl"
    argv = ["--port", str(port), "--mm-processor-cache-gb", str(TWO_CLIPS_GB)]
    argv += ["--mm-preprocess-delay-ms", "1", "--record-bodies", str(record)]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.stub_upstream", *argv
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(200):  # up within 10 s
                try:
                    async with session.get(url + "/health") as health:
                        if health.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
            key = sha256_of(tones[0])
            for part in (data_part(tones[0], key), uuid_only(key)):
                async with session.post(url + "/v1/chat/completions", json=body(part)) as reply:
                    assert reply.status == 200, await reply.text()
            async with session.get(url + "/stub/state") as reply:
                stats = await reply.json()
    finally:
        process.terminate()
        await process.wait()
    assert stats["decodes"] == 1 and stats["mm_cache"]["capacity_bytes"] == 40_000
    assert [
        json.loads(line)["messages"][0]["content"][0].get("uuid")
        for line in record.read_bytes().splitlines()
    ] == [key, key]


@pytest.mark.stub(mm_processor_cache_gb=TWO_CLIPS_GB)
async def test_held_items_of_a_request_are_touched_before_its_new_ones_are_recorded(
    client: Client, tones: list[Path]
) -> None:
    keys = [sha256_of(t) for t in tones]
    await ok_clips(client, data_part(tones[0], keys[0]))
    await ok_clips(client, data_part(tones[1], keys[1]))
    # 0 is the oldest, but this request holds it: recording 2 evicts 1 instead
    clips = await ok_clips(client, data_part(tones[2], keys[2]), uuid_only(keys[0]))
    assert [c["sha256"] for c in clips] == [keys[2], keys[0]]
    await ok_clips(client, uuid_only(keys[0]), uuid_only(keys[2]))
    await assert_miss(client, 0, uuid_only(keys[1]))


def clip_report(key: str) -> ClipReport:
    return ClipReport("data", "audio/wav", "wav", 100, key, 1.0, 16000, 1, key)


requests_strategy = st.lists(
    st.lists(st.tuples(st.sampled_from("abcd"), st.booleans()), max_size=4), max_size=12
)


@given(requests=requests_strategy)
def test_a_request_misses_at_its_first_unheld_data_less_item_and_then_records_nothing(
    requests: list[list[tuple[str, bool]]],
) -> None:
    """Against a model with room for everything: vLLM checks every item before it records
    any; a request that passes holds all its data items, and a uuid-only item then hits."""
    cache, model = MmProcessorCache(GIB), set[str]()
    for request in requests:
        items: list[Any] = [clip_report(k) if data else HeldPart(k) for k, data in request]
        keys = [k for k, _ in request]
        first_miss = next(
            (i for i, (k, data) in enumerate(request) if not data and k not in model), None
        )
        if first_miss is None:
            admitted = cache.admit(items, keys)
            assert [c.sha256 for c in admitted.clips] == keys and admitted.engine_misses == []
            model |= {k for k, data in request if data}
        else:
            with pytest.raises(CacheMiss, match=f"at index {first_miss} "):
                cache.admit(items, keys)
        assert cache.stats()["items"] == len(model)


async def test_losing_everything_in_the_engine_fails_every_held_clip_once(
    client: Client, tones: list[Path]
) -> None:
    keys = [sha256_of(t) for t in tones[:2]]
    for tone, key in zip(tones, keys, strict=False):
        await ok_clips(client, data_part(tone, key))
    assert await (await client.post("/stub/mm_cache/lose")).json() == {"lost": 2}
    response = await chat(client, uuid_only(keys[0]), uuid_only(keys[1]))
    assert response.status == 500 and await response.text() == INTERNAL_ERROR
    await assert_miss(client, 0, uuid_only(keys[0]), uuid_only(keys[1]))  # both forgotten
