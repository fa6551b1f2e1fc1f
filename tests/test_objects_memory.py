"""A 256 MiB object streamed through a gateway process within 48 MiB of peak RSS growth.

The slow one of the object-storage tests (about half a minute): a real `audio-gateway serve`
process, so its VmHWM is its own; moto holds the object and the stub proves the bytes.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import socket
import struct
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.stub_upstream import create_stub_app
from tests.conftest import chat_body
from tests.objectstore import ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY, S3Server, s3_server

__all__ = ["s3_server"]

OBJECT_BYTES = 256 * 1024 * 1024
GROWTH_LIMIT_BYTES = 48 * 1024 * 1024
TILE_BYTES = 4 * 1024 * 1024


def wav_of(total_bytes: int) -> bytes:
    """A 16 kHz mono 16-bit WAV of `total_bytes` (one random tile repeated: cheap, valid)."""
    data_bytes = total_bytes - 44
    header = b"RIFF" + struct.pack("<I", 36 + data_bytes) + b"WAVEfmt "
    header += struct.pack("<IHHIIHH", 16, 1, 1, 16_000, 32_000, 2, 16)
    header += b"data" + struct.pack("<I", data_bytes)
    tile = random.Random(7).randbytes(TILE_BYTES)
    body = bytearray(header)
    while len(body) < total_bytes:
        body += tile[: total_bytes - len(body)]
    return bytes(body)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} missing")


@pytest.fixture
async def stub_url() -> AsyncIterator[str]:
    server = TestServer(create_stub_app(record=False))  # record=False: keeps no bodies
    await server.start_server()
    yield str(server.make_url("")).rstrip("/")
    await server.close()


async def serve(config: Path, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET_ACCESS_KEY,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    argv = [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--port", str(port)]
    process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)
    for _ in range(300):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return process
        except OSError:
            await asyncio.sleep(0.1)
    process.kill()
    raise AssertionError("the gateway did not start")


@pytest.mark.timeout(300)
async def test_a_256_mib_object_streams_within_48_mib_of_peak_rss_growth(
    s3_server: S3Server, stub_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stub holds the clip to vLLM's decode limits, read from vLLM's variables: raise them.
    monkeypatch.setenv("VLLM_MAX_AUDIO_DECODE_DURATION_S", "10000")
    monkeypatch.setenv("VLLM_MAX_AUDIO_DECODE_BYTES", str(1024**3))
    bucket = s3_server.bucket()
    huge = wav_of(OBJECT_BYTES)
    expected = hashlib.sha256(huge).hexdigest()
    s3_server.put(bucket, "data/huge.wav", huge)
    s3_server.put(bucket, "data/small.wav", wav_of(64 * 1024))
    del huge
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'[upstream]\nurl = "{stub_url}"\n'
        f'[audio]\nallowed_roots = ["s3://{bucket}/data/"]\nmax_file_bytes = "512MiB"\n'
        "max_duration_seconds = 10000.0\n"  # the clip is 8389 s of 16 kHz audio
        'max_decode_bytes = "1GiB"\n'
        f'[storage.s3]\nendpoint_url = "{s3_server.endpoint}"\nregion = "{REGION}"\n'
        "allow_http = true\ntimeout_seconds = 60\n"
    )
    port = free_port()
    process = await serve(config, port)
    timeout = aiohttp.ClientTimeout(total=240)
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}", timeout=timeout) as client:

            async def send(key: str) -> list[str]:
                metadata = {"audio_path": f"s3://{bucket}/data/{key}"}
                async with client.post("/v1/chat/completions", json=chat_body(metadata)) as r:
                    assert r.status == 200, await r.text()
                    return [clip["sha256"] for clip in (await r.json())["stub"]["clips"]]

            await send("small.wav")  # warm: imports, connections, the first allocations
            before = status_kib(process.pid, "VmRSS")
            assert await send("huge.wav") == [expected]
            peak = status_kib(process.pid, "VmHWM")
    finally:
        process.terminate()
        process.wait(timeout=10)
        s3_server.client.delete_object(Bucket=bucket, Key="data/huge.wav")  # moto's memory
    growth = (peak - before) * 1024
    assert growth <= GROWTH_LIMIT_BYTES, f"peak RSS grew {growth / 2**20:.1f} MiB"
