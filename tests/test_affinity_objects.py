"""The clip key of clips from object storage: objects read whole key by their bytes (as the
same bytes from a file or inline do), presigned ones by their identity (bucket, key, ETag,
size: a rewritten object is a new clip)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from gateway.stub_upstream import StubState
from tests.conftest import GatewayFactory, chat_body
from tests.objectstore import S3Server, aws_environment, s3_config, s3_server
from tests.test_affinity_routes import ROUTING, keyed

__all__ = ["aws_environment", "s3_server"]  # fixtures, used by name


def objects_gateway(
    server: S3Server, bucket: str, audio_dir: Path, **splice: Any
) -> dict[str, Any]:
    return {
        "audio": {"allowed_roots": [str(audio_dir), f"s3://{bucket}/data/"]},
        "storage": {"s3": s3_config(server)},
        "splice": splice,
        "routing": ROUTING,
    }


@pytest.mark.usefixtures("aws_environment")
async def test_objects_read_whole_key_by_their_bytes(
    make_gateway: GatewayFactory, s3_server: S3Server, audio_dir: Path, stub: StubState
) -> None:
    bucket = s3_server.bucket()
    s3_server.put(bucket, "data/b.wav", audio_dir / "b.wav")
    gateway = await make_gateway(**objects_gateway(s3_server, bucket, audio_dir))
    from_object = await keyed(gateway, stub, chat_body({"audio_path": f"s3://{bucket}/data/b.wav"}))
    uri = "data:audio/wav;base64," + base64.b64encode((audio_dir / "b.wav").read_bytes()).decode()
    assert await keyed(gateway, stub, chat_body({"audio_data": uri})) == from_object
    as_file = chat_body({"audio_path": str(audio_dir / "b.wav")})
    assert await keyed(gateway, stub, as_file) == from_object


@pytest.mark.usefixtures("aws_environment")
async def test_presigned_objects_key_by_their_identity(
    make_gateway: GatewayFactory, s3_server: S3Server, audio_dir: Path, stub: StubState
) -> None:
    bucket = s3_server.bucket()
    name = f"s3://{bucket}/data/b.wav"
    s3_server.put(bucket, "data/b.wav", audio_dir / "b.wav")
    gateway = await make_gateway(
        **objects_gateway(s3_server, bucket, audio_dir, remote="presigned_url")
    )
    first = await keyed(gateway, stub, chat_body({"audio_path": name}, seed=1))
    assert await keyed(gateway, stub, chat_body({"audio_path": name}, seed=2)) == first
    assert s3_server.gets(bucket, "data/b.wav", ranged=False) == 2  # the stub's, not ours
    s3_server.put(bucket, "data/b.wav", audio_dir / "c.wav")  # a new ETag: a new clip
    assert await keyed(gateway, stub, chat_body({"audio_path": name})) != first
