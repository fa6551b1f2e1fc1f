"""Audio on object storage: `s3://` clips through the gateway, against a real S3 API server.

moto runs in server mode on 127.0.0.1 and counts the requests it answers; the stub upstream
proves the bytes (the sha256 of what it decoded). Nothing here mocks the gateway's code.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import moto.settings
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.app import create_app
from gateway.audio.samples import write_tone
from gateway.config import ConfigError, validate_config
from gateway.stub_upstream import StubState, create_stub_app
from tests.conftest import (
    GatewayFactory,
    cache_stats,
    chat_body,
    gateway_config,
    gateway_error,
    gateway_metrics,
    no_blocking_calls,
)
from tests.objectstore import (
    ACCESS_KEY_ID,
    SECRET_ACCESS_KEY,
    S3Server,
    aws_environment,
    s3_config,
    s3_server,
    silent_store,
)

__all__ = ["aws_environment", "s3_server", "silent_store"]  # fixtures, used by name

Client = TestClient[web.Request, web.Application]
pytestmark = pytest.mark.usefixtures("aws_environment")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def decoded(client: Client, metadata: dict[str, Any]) -> list[dict[str, Any]]:
    """POST a chat request; the clips the stub decoded (sha256, source, ...)."""
    response = await client.post("/v1/chat/completions", json=chat_body(metadata))
    assert response.status == 200, await response.text()
    clips: list[dict[str, Any]] = (await response.json())["stub"]["clips"]
    return clips


async def storage_requests(client: Client) -> dict[str, float]:
    samples = await gateway_metrics(client)
    prefix = "audio_gateway_storage_requests_total"
    return {k.removeprefix(prefix): v for k, v in samples.items() if k.startswith(prefix)}


@pytest.fixture
def bucket(s3_server: S3Server) -> str:
    return s3_server.bucket()


@pytest.fixture
async def s3_gateway(
    make_gateway: GatewayFactory, s3_server: S3Server, bucket: str, audio_dir: Path
) -> Client:
    """A gateway allowing `audio_dir` and `s3://<bucket>/data/`."""
    return await make_gateway(
        audio={"allowed_roots": [str(audio_dir), f"s3://{bucket}/data/"]},
        storage={"s3": s3_config(s3_server)},
    )


# --- reading objects ---------------------------------------------------------------------------


async def test_one_object_clip_reaches_the_upstream_byte_for_byte(
    s3_gateway: Client, s3_server: S3Server, bucket: str, audio_dir: Path
) -> None:
    body = s3_server.put(bucket, "data/a.wav", audio_dir / "a.wav")
    clips = await decoded(s3_gateway, {"audio_path": f"s3://{bucket}/data/a.wav"})
    assert [(c["sha256"], c["source"], c["mime"]) for c in clips] == [
        (sha(body), "data", "audio/wav")
    ]


async def test_local_and_object_clips_mix_in_one_request_in_order(
    s3_gateway: Client, s3_server: S3Server, bucket: str, audio_dir: Path
) -> None:
    b = s3_server.put(bucket, "data/sub/b.wav", audio_dir / "b.wav")
    c = s3_server.put(bucket, "data/c.wav", audio_dir / "c.wav")
    paths = [
        "a.wav",
        f"s3://{bucket}/data/sub/b.wav",
        str(audio_dir / "c.wav"),
        f"s3://{bucket}/data/c.wav",
    ]
    clips = await decoded(s3_gateway, {"audio_paths": paths})
    a = (audio_dir / "a.wav").read_bytes()
    assert [clip["sha256"] for clip in clips] == [sha(a), sha(b), sha(c), sha(c)]


async def test_relative_paths_join_an_object_root(
    make_gateway: GatewayFactory, s3_server: S3Server, bucket: str, audio_dir: Path
) -> None:
    body = s3_server.put(bucket, "corpus/en/b.wav", audio_dir / "b.wav")
    client = await make_gateway(
        audio={"root": f"s3://{bucket}/corpus/"}, storage={"s3": s3_config(s3_server)}
    )
    clips = await decoded(client, {"audio_paths": ["en/b.wav", f"s3://{bucket}/corpus/en/b.wav"]})
    assert [clip["sha256"] for clip in clips] == [sha(body)] * 2
    outside = await client.post(
        "/v1/chat/completions", json=chat_body({"audio_path": "/etc/x.wav"})
    )
    await gateway_error(outside, 403, "metadata.audio_path")


async def test_a_transcription_uploads_the_objects_exact_bytes(
    s3_gateway: Client, s3_server: S3Server, bucket: str, audio_dir: Path, stub: StubState
) -> None:
    body = s3_server.put(bucket, "data/sub/b.wav", audio_dir / "b.wav")
    metadata = {"audio_path": f"s3://{bucket}/data/sub/b.wav"}
    response = await s3_gateway.post(
        "/v1/audio/transcriptions", json={"model": "stub-audio-model", "metadata": metadata}
    )
    assert response.status == 200, await response.text()
    report = (await response.json())["stub"]
    assert report["clip"]["sha256"] == sha(body)
    assert (report["filename"], report["content_type"]) == ("b.wav", "audio/wav")
    assert body in stub.requests[-1].body  # the object's own bytes, not base64


async def test_a_big_object_is_streamed_uncached_and_arrives_whole(
    make_gateway: GatewayFactory, s3_server: S3Server, bucket: str, tmp_path: Path
) -> None:
    path = write_tone(tmp_path / "long.wav", 40.0, 220.0)  # 1.28 MB: several 3 MiB-less chunks
    body = s3_server.put(bucket, "data/long.wav", path)
    client = await make_gateway(
        audio={"allowed_roots": [f"s3://{bucket}/data/"]},
        cache={"max_item_bytes": 100_000},
        storage={"s3": s3_config(s3_server)},
    )
    for _ in range(2):
        clips = await decoded(client, {"audio_path": f"s3://{bucket}/data/long.wav"})
        assert [clip["sha256"] for clip in clips] == [sha(body)]
    assert s3_server.gets(bucket, "data/long.wav") == 2  # streamed clips are never cached
    assert (await cache_stats(client))["entries"] == 0


# --- one fetch per clip ------------------------------------------------------------------------


async def test_64_concurrent_seeds_of_one_object_make_exactly_one_get(
    s3_gateway: Client, s3_server: S3Server, bucket: str, audio_dir: Path
) -> None:
    body = s3_server.put(bucket, "data/seeded.wav", audio_dir / "c.wav")
    metadata = {"audio_path": f"s3://{bucket}/data/seeded.wav"}
    results = await asyncio.gather(*(decoded(s3_gateway, metadata) for _ in range(64)))
    assert {clips[0]["sha256"] for clips in results} == {sha(body)}
    assert s3_server.gets(bucket, "data/seeded.wav") == 1
    assert s3_server.heads(bucket, "data/seeded.wav") == 64  # revalidate = true: one per request
    stats = await cache_stats(s3_gateway)
    assert (stats["misses"], stats["hits"], stats["entries"]) == (1, 63, 1)
    requests = await storage_requests(s3_gateway)
    assert requests['{op="get",outcome="ok"}'] == 1
    assert requests['{op="head",outcome="ok"}'] == 64
    samples = await gateway_metrics(s3_gateway)
    assert samples['audio_gateway_storage_seconds_count{op="get"}'] == 1


@pytest.mark.parametrize("revalidate", [True, False])
async def test_an_overwritten_object_is_fetched_again_only_when_revalidating(
    make_gateway: GatewayFactory,
    s3_server: S3Server,
    bucket: str,
    audio_dir: Path,
    revalidate: bool,
) -> None:
    client = await make_gateway(
        audio={"allowed_roots": [f"s3://{bucket}/data/"]},
        storage={"s3": s3_config(s3_server, revalidate=revalidate)},
    )
    metadata = {"audio_path": f"s3://{bucket}/data/take.wav"}
    first = s3_server.put(bucket, "data/take.wav", audio_dir / "a.wav")
    assert (await decoded(client, metadata))[0]["sha256"] == sha(first)
    second = s3_server.put(bucket, "data/take.wav", audio_dir / "b.wav")  # a new ETag
    served = (await decoded(client, metadata))[0]["sha256"]
    if revalidate:
        assert served == sha(second)
        assert (
            s3_server.heads(bucket, "data/take.wav"),
            s3_server.gets(bucket, "data/take.wav"),
        ) == (2, 2)
    else:
        assert served == sha(first)  # trusted as cached: the store was not asked at all
        assert (
            s3_server.heads(bucket, "data/take.wav"),
            s3_server.gets(bucket, "data/take.wav"),
        ) == (1, 1)


# --- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "data/../secret/x.wav",
        "data/./a.wav",
        "data//a.wav",
        "data/sub/../a.wav",
        "data\\..\\secret\\x.wav",
        "data/sub\\a.wav",
        "/data/a.wav",
    ],
)
async def test_keys_s3_would_take_literally_are_refused(
    s3_gateway: Client, bucket: str, key: str
) -> None:
    given = f"s3://{bucket}/{key}"
    response = await s3_gateway.post(
        "/v1/chat/completions", json=chat_body({"audio_paths": ["a.wav", given]})
    )
    error = await gateway_error(response, 400, "metadata.audio_paths")
    assert error["code"] == "invalid_audio_reference"
    assert "metadata.audio_paths[1]" in error["message"] and repr(given) in error["message"]


@pytest.mark.parametrize(
    "url",
    [
        "s3://{bucket}/secret/a.wav",  # another prefix of the allowed bucket
        "s3://{bucket}/database/a.wav",  # shares the allowed prefix's letters, not its folder
        "s3://{bucket}/data.wav",  # beside the prefix, not under it
        "s3://other-{bucket}/data/a.wav",  # another bucket
        "S3://{bucket}/elsewhere/a.wav",  # scheme case does not matter
    ],
)
async def test_objects_outside_the_allowed_prefixes_are_forbidden_whether_or_not_they_exist(
    s3_gateway: Client, s3_server: S3Server, bucket: str, audio_dir: Path, url: str
) -> None:
    given = url.format(bucket=bucket)
    s3_server.put(bucket, "secret/a.wav", audio_dir / "a.wav")
    before = s3_server.log.seen.copy()
    answers = []
    for path in (given, given.replace("a.wav", "missing.wav")):
        response = await s3_gateway.post(
            "/v1/chat/completions", json=chat_body({"audio_path": path})
        )
        error = await gateway_error(response, 403, "metadata.audio_path")
        answers.append((error["code"], error["message"].replace("missing.wav", "a.wav")))
    assert answers[0] == answers[1] and answers[0][0] == "audio_path_forbidden"
    assert s3_server.log.seen == before  # decided on the name: the store was never asked


async def test_other_url_schemes_are_refused_by_name(s3_gateway: Client) -> None:
    for given in ("gs://bucket/a.wav", "file:///etc/a.wav", "https://example.com/a.wav"):
        response = await s3_gateway.post(
            "/v1/chat/completions", json=chat_body({"audio_path": given})
        )
        error = await gateway_error(response, 400, "metadata.audio_path")
        assert error["code"] == "invalid_audio_reference" and repr(given) in error["message"]


async def test_a_missing_object_is_404(s3_gateway: Client, bucket: str, stub: StubState) -> None:
    given = f"s3://{bucket}/data/nope.wav"
    response = await s3_gateway.post("/v1/chat/completions", json=chat_body({"audio_path": given}))
    error = await gateway_error(response, 404, "metadata.audio_path")
    assert error["code"] == "audio_not_found" and repr(given) in error["message"]
    assert stub.request_count == 0
    assert (await storage_requests(s3_gateway))['{op="head",outcome="not_found"}'] == 1


async def test_max_file_bytes_is_enforced_from_the_head_before_any_get(
    make_gateway: GatewayFactory, s3_server: S3Server, bucket: str, audio_dir: Path
) -> None:
    s3_server.put(bucket, "data/c.wav", audio_dir / "c.wav")
    client = await make_gateway(
        audio={"allowed_roots": [f"s3://{bucket}/data/"], "max_file_bytes": 1000},
        storage={"s3": s3_config(s3_server)},
    )
    response = await client.post(
        "/v1/chat/completions", json=chat_body({"audio_path": f"s3://{bucket}/data/c.wav"})
    )
    error = await gateway_error(response, 413, "metadata.audio_path")
    assert error["code"] == "audio_too_large"
    assert (s3_server.heads(bucket, "data/c.wav"), s3_server.gets(bucket, "data/c.wav")) == (1, 0)


@pytest.mark.parametrize("content", [b"<html>not audio</html>" * 100, b""])
async def test_an_object_that_is_no_audio_is_refused_from_its_first_bytes(
    s3_gateway: Client, s3_server: S3Server, bucket: str, content: bytes
) -> None:
    s3_server.put(bucket, "data/fake.wav", content)
    response = await s3_gateway.post(
        "/v1/chat/completions", json=chat_body({"audio_path": f"s3://{bucket}/data/fake.wav"})
    )
    assert (await gateway_error(response, 400, "metadata.audio_path"))["code"] == "not_audio"


async def test_the_duration_limit_holds_for_objects(
    make_gateway: GatewayFactory, s3_server: S3Server, bucket: str, audio_dir: Path
) -> None:
    s3_server.put(bucket, "data/c.wav", audio_dir / "c.wav")  # 0.75 s
    client = await make_gateway(
        audio={"allowed_roots": [f"s3://{bucket}/data/"], "max_duration_seconds": 0.5},
        storage={"s3": s3_config(s3_server)},
    )
    response = await client.post(
        "/v1/chat/completions", json=chat_body({"audio_path": f"s3://{bucket}/data/c.wav"})
    )
    assert (await gateway_error(response, 413, "metadata.audio_path"))["code"] == "audio_too_long"


async def test_refused_credentials_are_a_502_naming_the_url_and_the_store_code_not_the_secret(
    s3_gateway: Client,
    s3_server: S3Server,
    bucket: str,
    audio_dir: Path,
    stub: StubState,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    s3_server.put(bucket, "data/a.wav", audio_dir / "a.wav")
    # moto checks signatures against its IAM users from now on: our key is unknown to it.
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    given = f"s3://{bucket}/data/a.wav"
    with caplog.at_level(logging.DEBUG):
        response = await s3_gateway.post(
            "/v1/chat/completions", json=chat_body({"audio_path": given})
        )
        error = await gateway_error(response, 502, "metadata.audio_path")
    assert error["code"] == "audio_storage_error"
    assert given in error["message"] and "InvalidAccessKeyId" in error["message"]
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("gateway")]
    assert ours  # the failure is logged (moto's own request logs are not ours to judge)
    for text in (error["message"], *ours):
        assert SECRET_ACCESS_KEY not in text and ACCESS_KEY_ID not in text
    assert stub.request_count == 0
    assert (await storage_requests(s3_gateway))['{op="head",outcome="error"}'] == 1


async def test_a_store_that_hangs_is_a_504_within_the_timeout(
    make_gateway: GatewayFactory, silent_store: str, stub: StubState
) -> None:
    client = await make_gateway(
        audio={"allowed_roots": ["s3://hanging-bucket/data/"]},
        storage={
            "s3": {
                "endpoint_url": silent_store,
                "allow_http": True,
                "region": "us-east-1",
                "timeout_seconds": 0.5,
            }
        },
    )
    given = "s3://hanging-bucket/data/a.wav"
    response = await client.post("/v1/chat/completions", json=chat_body({"audio_path": given}))
    error = await gateway_error(response, 504, "metadata.audio_path")
    assert error["code"] == "audio_storage_timeout" and given in error["message"]
    assert stub.request_count == 0
    assert (await storage_requests(client))['{op="head",outcome="timeout"}'] == 1


# --- presigned mode ----------------------------------------------------------------------------


async def test_presigned_mode_hands_vllm_a_url_it_fetches_from_the_store(
    make_gateway: GatewayFactory,
    s3_server: S3Server,
    bucket: str,
    audio_dir: Path,
    stub: StubState,
) -> None:
    body = s3_server.put(bucket, "data/b.wav", audio_dir / "b.wav")
    client = await make_gateway(
        audio={"allowed_roots": [str(audio_dir), f"s3://{bucket}/data/"]},
        splice={"remote": "presigned_url"},
        storage={"s3": s3_config(s3_server, presign_seconds=600)},
    )
    paths = [f"s3://{bucket}/data/b.wav", "a.wav"]
    for _ in range(2):
        clips = await decoded(client, {"audio_paths": paths})
        a = (audio_dir / "a.wav").read_bytes()
        assert [(c["source"], c["sha256"]) for c in clips] == [("url", sha(body)), ("data", sha(a))]
    sent = json.loads(stub.requests[-1].body)["messages"][-1]["content"][0]
    url = sent["audio_url"]["url"]
    assert sent["type"] == "audio_url" and url.startswith(
        f"{s3_server.endpoint}/{bucket}/data/b.wav?"
    )
    assert "X-Amz-Signature=" in url and "X-Amz-Expires=600" in url
    assert SECRET_ACCESS_KEY not in url
    # The gateway read only the first bytes, once (cached); the stub's two GETs were whole.
    assert s3_server.gets(bucket, "data/b.wav", ranged=True) == 1
    assert s3_server.gets(bucket, "data/b.wav", ranged=False) == 2


@pytest.mark.stub(responses_accept_audio=True)
async def test_presigned_mode_keeps_data_uris_where_parts_have_no_url_form(
    make_gateway: GatewayFactory, s3_server: S3Server, bucket: str, audio_dir: Path
) -> None:
    body = s3_server.put(bucket, "data/c.wav", audio_dir / "c.wav")
    client = await make_gateway(
        audio={"allowed_roots": [f"s3://{bucket}/data/"]},
        splice={"remote": "presigned_url"},
        storage={"s3": s3_config(s3_server)},
        responses={"audio": "input_audio"},  # the Responses splice: input_audio parts
    )
    response = await client.post(
        "/v1/responses",
        json={
            "model": "m",
            "input": "Transcribe.",
            "metadata": {"audio_path": f"s3://{bucket}/data/c.wav"},
        },
    )
    assert response.status == 200, await response.text()
    clips = (await response.json())["stub"]["clips"]
    assert [(c["source"], c["sha256"]) for c in clips] == [("data", sha(body))]


async def test_presigned_mode_still_checks_before_naming_an_object(
    make_gateway: GatewayFactory, s3_server: S3Server, bucket: str, stub: StubState
) -> None:
    s3_server.put(bucket, "data/fake.wav", b"not audio at all" * 10)
    client = await make_gateway(
        audio={"allowed_roots": [f"s3://{bucket}/data/"]},
        splice={"remote": "presigned_url"},
        storage={"s3": s3_config(s3_server)},
    )
    for name, status, code in (
        ("fake.wav", 400, "not_audio"),
        ("gone.wav", 404, "audio_not_found"),
    ):
        response = await client.post(
            "/v1/chat/completions", json=chat_body({"audio_path": f"s3://{bucket}/data/{name}"})
        )
        assert (await gateway_error(response, status, "metadata.audio_path"))["code"] == code
    assert stub.request_count == 0


# --- credentials -------------------------------------------------------------------------------


async def test_credentials_come_from_a_shared_credentials_file(
    make_gateway: GatewayFactory,
    s3_server: S3Server,
    bucket: str,
    audio_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = s3_server.put(bucket, "data/a.wav", audio_dir / "a.wav")
    key_id, secret = s3_server.iam_user_keys()
    credentials = tmp_path / "credentials"
    credentials.write_text(
        f"[default]\naws_access_key_id = {key_id}\naws_secret_access_key = {secret}\n"
    )
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # keys are checked
    client = await make_gateway(
        audio={"allowed_roots": [f"s3://{bucket}/data/"]}, storage={"s3": s3_config(s3_server)}
    )
    clips = await decoded(client, {"audio_path": f"s3://{bucket}/data/a.wav"})
    assert [clip["sha256"] for clip in clips] == [sha(body)]


@pytest.fixture
def small_and_big(s3_server: S3Server, bucket: str, tmp_path: Path) -> tuple[bytes, bytes]:
    """`data/a.wav` (0.25 s) and `data/big.wav` (10 s, 320 KB: streamed past 100 KB)."""
    small = s3_server.put(bucket, "data/a.wav", write_tone(tmp_path / "a.wav", 0.25, 440.0))
    big = s3_server.put(bucket, "data/big.wav", write_tone(tmp_path / "big.wav", 10.0, 330.0))
    return small, big


async def test_object_clips_never_block_the_event_loop(
    make_gateway: GatewayFactory,
    s3_server: S3Server,
    bucket: str,
    small_and_big: tuple[bytes, bytes],
) -> None:
    small, big = small_and_big
    storage = {"s3": s3_config(s3_server)}
    roots = {"allowed_roots": [f"s3://{bucket}/data/"]}
    data_uri = await make_gateway(audio=roots, cache={"max_item_bytes": 100_000}, storage=storage)
    presigned = await make_gateway(audio=roots, splice={"remote": "presigned_url"}, storage=storage)
    a, b = ({"audio_path": f"s3://{bucket}/data/{name}"} for name in ("a.wav", "big.wav"))
    with no_blocking_calls():
        miss = await decoded(data_uri, a)
        hit = await decoded(data_uri, a)
        streamed = await decoded(data_uri, b)
        by_url = await decoded(presigned, a)
    assert [c[0]["sha256"] for c in (miss, hit, by_url)] == [sha(small)] * 3
    assert streamed[0]["sha256"] == sha(big)


@pytest.mark.parametrize(
    "key", ["data/a b.wav", "data/100%.wav", "data/ü/ß+x.wav", "data/a%2Fb.wav"]
)
async def test_keys_are_taken_literally(
    s3_gateway: Client, s3_server: S3Server, bucket: str, audio_dir: Path, key: str
) -> None:
    body = s3_server.put(bucket, key, audio_dir / "a.wav")
    clips = await decoded(s3_gateway, {"audio_path": f"s3://{bucket}/{key}"})
    assert [clip["sha256"] for clip in clips] == [sha(body)]


async def test_part_uuid_of_an_object_is_its_content_sha256_cached_or_streamed(
    make_gateway: GatewayFactory,
    s3_server: S3Server,
    bucket: str,
    small_and_big: tuple[bytes, bytes],
) -> None:
    small, big = small_and_big
    client = await make_gateway(
        audio={"allowed_roots": [f"s3://{bucket}/data/"]},
        cache={"max_item_bytes": 100_000},
        splice={"part_uuid": True},
        storage={"s3": s3_config(s3_server)},
    )
    clips = await decoded(
        client, {"audio_paths": [f"s3://{bucket}/data/{n}" for n in ("a.wav", "big.wav")]}
    )
    assert [(c["uuid"], c["sha256"]) for c in clips] == [
        (sha(small), sha(small)),
        (sha(big), sha(big)),
    ]


async def test_without_revalidation_a_vanished_version_is_a_409_then_fetched_anew(
    make_gateway: GatewayFactory, s3_server: S3Server, bucket: str, audio_dir: Path
) -> None:
    client = await make_gateway(
        audio={"allowed_roots": [f"s3://{bucket}/data/"]},
        cache={"max_bytes": 0},  # nothing cached: the remembered HEAD alone stands for the clip
        storage={"s3": s3_config(s3_server, revalidate=False)},
    )
    metadata = {"audio_path": f"s3://{bucket}/data/take.wav"}
    first = s3_server.put(bucket, "data/take.wav", audio_dir / "a.wav")
    assert (await decoded(client, metadata))[0]["sha256"] == sha(first)
    second = s3_server.put(bucket, "data/take.wav", audio_dir / "b.wav")
    stale = await client.post("/v1/chat/completions", json=chat_body(metadata))
    error = (await stale.json())["error"]
    assert (stale.status, error["type"], error["code"]) == (
        409,
        "conflict_error",
        "audio_file_changed",
    )
    assert (await decoded(client, metadata))[0]["sha256"] == sha(second)
    assert s3_server.heads(bucket, "data/take.wav") == 2


async def test_presigned_urls_outside_vllms_allowed_media_domains_are_refused_there(
    s3_server: S3Server, bucket: str, audio_dir: Path
) -> None:
    s3_server.put(bucket, "data/a.wav", audio_dir / "a.wav")
    stub = TestServer(create_stub_app(allowed_media_domains=["s3.example.com"]))
    await stub.start_server()
    config = gateway_config(
        str(stub.make_url("")).rstrip("/"),
        audio_dir,
        audio={"allowed_roots": [f"s3://{bucket}/data/"]},
        splice={"remote": "presigned_url"},
        storage={"s3": s3_config(s3_server)},
    )
    async with TestClient(TestServer(create_app(config))) as client:
        metadata = {"audio_path": f"s3://{bucket}/data/a.wav"}
        response = await client.post("/v1/chat/completions", json=chat_body(metadata))
        answer = await response.json()
    await stub.close()
    assert response.status == 400  # vLLM's answer, relayed: the gateway cannot check this
    assert "allowed domains" in answer["error"]["message"]


def test_a_plain_http_endpoint_needs_allow_http() -> None:
    """`allow_http = false` (the default) with an http:// endpoint stops `serve` at start-up
    naming the key, rather than failing every object request."""
    endpoint = {"endpoint_url": "http://127.0.0.1:9000"}
    with pytest.raises(ConfigError) as refused:
        validate_config({"storage": {"s3": endpoint}})
    assert "storage.s3" in str(refused.value) and "allow_http" in str(refused.value)
    assert validate_config({"storage": {"s3": {**endpoint, "allow_http": True}}})
    assert validate_config({"storage": {"s3": {"endpoint_url": "https://s3.local"}}})


async def test_an_object_the_credentials_may_not_read_is_403_not_502(
    make_gateway: GatewayFactory,
    s3_server: S3Server,
    bucket: str,
    audio_dir: Path,
    stub: StubState,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As a file the gateway's user may not read: 403 `audio_path_forbidden` on every try,
    naming the store's AccessDenied; a readable object beside it still arrives."""
    s3_server.put(bucket, "data/a.wav", audio_dir / "a.wav")
    s3_server.put(bucket, "data/locked.wav", audio_dir / "b.wav")
    key_id, secret = s3_server.iam_user_keys(deny=f"arn:aws:s3:::{bucket}/data/locked.wav")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # keys are checked
    client = await make_gateway(
        audio={"allowed_roots": [f"s3://{bucket}/data/"]}, storage={"s3": s3_config(s3_server)}
    )
    assert len(await decoded(client, {"audio_path": f"s3://{bucket}/data/a.wav"})) == 1
    given = f"s3://{bucket}/data/locked.wav"
    for _ in range(2):
        response = await client.post("/v1/chat/completions", json=chat_body({"audio_path": given}))
        error = await gateway_error(response, 403, "metadata.audio_path")
        assert error["code"] == "audio_path_forbidden"
        assert given in error["message"] and "AccessDenied" in error["message"]
        assert "retry" not in error["message"]
    assert stub.audio_requests == 1
