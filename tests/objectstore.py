"""A real S3 API server for the object-storage tests: moto in server mode on 127.0.0.1.

`s3_server` (one per test session) counts every request it answers by method, at the server,
so "exactly one GET" is checked where the GETs arrive. Buckets are per test (moto's state is
process-wide), and the gateway finds its credentials in the environment, as in production.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from bench.shared.s3server import LocalS3, RequestLog

ACCESS_KEY_ID = "AKIAGATEWAYTESTKEY01"
SECRET_ACCESS_KEY = "gateway-test-secret-Zq8vX1p0Lr6"  # must never show up in an error
REGION = "us-east-1"


@dataclass
class S3Server:
    endpoint: str
    log: RequestLog
    client: Any  # a boto3 S3 client for the test's own setup

    def bucket(self) -> str:
        """A fresh bucket of this test's own."""
        name = f"audio-{uuid.uuid4().hex[:16]}"
        self.client.create_bucket(Bucket=name)
        return name

    def put(self, bucket: str, key: str, data: bytes | Path) -> bytes:
        body = data.read_bytes() if isinstance(data, Path) else data
        self.client.put_object(Bucket=bucket, Key=key, Body=body)
        return body

    def gets(self, bucket: str, key: str, *, ranged: bool | None = None) -> int:
        return self.log.count("GET", f"/{bucket}/{key}", ranged=ranged)

    def heads(self, bucket: str, key: str) -> int:
        return self.log.count("HEAD", f"/{bucket}/{key}")

    def iam_user_keys(self, deny: str | None = None) -> tuple[str, str]:
        """(key id, secret) of a new IAM user allowed s3:* (but s3:GetObject on the `deny`
        resource ARN), for tests where moto checks signatures (only its IAM users' keys pass
        then)."""
        iam = boto3.client(
            "iam",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
        )
        user = f"gateway-{uuid.uuid4().hex[:12]}"
        iam.create_user(UserName=user)
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
        }
        if deny is not None:
            policy["Statement"].append(
                {"Effect": "Deny", "Action": "s3:GetObject", "Resource": deny}
            )
        iam.put_user_policy(UserName=user, PolicyName="audio", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=user)["AccessKey"]
        return key["AccessKeyId"], key["SecretAccessKey"]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    server = LocalS3()
    client = boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY_ID,
        aws_secret_access_key=SECRET_ACCESS_KEY,
    )
    yield S3Server(server.endpoint, server.log, client)
    server.stop()


@pytest.fixture
def aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Credentials in the environment only: no shared files, no instance metadata."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def s3_config(server: S3Server, **values: Any) -> dict[str, Any]:
    """The `[storage.s3]` section for the test server."""
    return {
        "endpoint_url": server.endpoint,
        "region": REGION,
        "allow_http": True,
        "timeout_seconds": 10,
        **values,
    }


@pytest.fixture
def silent_store() -> Iterator[str]:
    """An endpoint that accepts connections and never answers (the kernel's backlog accepts
    them; nobody reads): a store that hangs."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    host, port = listener.getsockname()
    yield f"http://{host}:{port}"
    listener.close()
