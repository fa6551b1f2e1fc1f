"""`repeats = "reference"` with presigned objects: the gateway reads no object bytes there, so
a clip's uuid comes from the object's identity (bucket, key, ETag, size), and a rewritten
object (a new ETag) is a new clip."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from gateway.audio.sources.s3 import ObjectInfo
from gateway.naming.object_names import ObjectName
from gateway.references.body import object_uuid
from gateway.stub_upstream import StubState
from tests.conftest import GatewayFactory, chat_body
from tests.objectstore import S3Server, aws_environment, s3_config, s3_server

__all__ = ["aws_environment", "s3_server"]  # fixtures, used by name

pytestmark = pytest.mark.usefixtures("aws_environment")


def sent_part(stub: StubState) -> dict[str, Any]:
    part: dict[str, Any] = json.loads(stub.requests[-1].body)["messages"][-1]["content"][0]
    return part


def test_object_uuids_follow_the_identity() -> None:
    name = ObjectName("bucket", "data/a.wav")
    uuid = object_uuid(ObjectInfo(name, '"etag-1"', 100))
    assert uuid is not None and uuid.startswith("s3-etag:")
    assert uuid == object_uuid(ObjectInfo(name, '"etag-1"', 100))
    others = [
        ObjectInfo(name, '"etag-2"', 100),
        ObjectInfo(ObjectName("bucket", "data/b.wav"), '"etag-1"', 100),
        ObjectInfo(ObjectName("other", "data/a.wav"), '"etag-1"', 100),
    ]
    assert uuid not in {object_uuid(info) for info in others}
    # Without an ETag nothing but the size tells versions apart: such an object is never named.
    assert object_uuid(ObjectInfo(name, "", 100)) is None


async def test_presigned_objects_go_by_reference_without_the_gateway_reading_them(
    make_gateway: GatewayFactory, s3_server: S3Server, audio_dir: Path, stub: StubState
) -> None:
    bucket = s3_server.bucket()
    key = "data/b.wav"
    body = s3_server.put(bucket, key, audio_dir / "b.wav")
    client = await make_gateway(
        audio={"allowed_roots": [f"s3://{bucket}/data/"]},
        splice={"remote": "presigned_url", "repeats": "reference"},
        storage={"s3": s3_config(s3_server)},
    )
    metadata = {"audio_path": f"s3://{bucket}/{key}"}
    response = await client.post("/v1/chat/completions", json=chat_body(metadata))
    assert response.status == 200, await response.text()
    first = sent_part(stub)
    assert first["audio_url"]["url"].startswith(f"{s3_server.endpoint}/{bucket}/{key}?")
    assert first["uuid"].startswith("s3-etag:")
    assert first["uuid"] != hashlib.sha256(body).hexdigest()
    response = await client.post("/v1/chat/completions", json=chat_body(metadata))
    assert response.status == 200, await response.text()
    assert sent_part(stub) == {"type": "audio_url", "audio_url": None, "uuid": first["uuid"]}
    # One whole GET: the stub's, once. The gateway only sniffed the first bytes.
    assert s3_server.gets(bucket, key, ranged=False) == 1
    assert stub.decodes == 1

    s3_server.put(bucket, key, audio_dir / "c.wav")  # rewritten: a new ETag, a new clip
    response = await client.post("/v1/chat/completions", json=chat_body(metadata))
    assert response.status == 200, await response.text()
    changed = sent_part(stub)
    assert changed["audio_url"] is not None and changed["uuid"] != first["uuid"]
    expected = hashlib.sha256((audio_dir / "c.wav").read_bytes()).hexdigest()
    assert (await response.json())["stub"]["clips"][0]["sha256"] == expected
