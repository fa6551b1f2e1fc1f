"""Workload (s3): the clips on a local S3 server (moto), through the gateway and a baseline.

Each mode gets a fresh proxy and walks the workload's shuffled order twice at one concurrency:
a cold pass (nothing cached: every clip fetched once by the gateway, the other seeds hit or
join the fetch in flight) and a warm pass. GETs per clip are counted at the S3 server.

- `seed-reference-s3`: BASELINE, GET + stdlib base64 + json per request
  (bench/shared/seed_reference.py with --s3-endpoint; an async obstore GET, so the comparison
  is about the per-request work).
- `gateway-s3`: the gateway, `audio.root = "s3://<bucket>/"`, `revalidate = true` (a HEAD per
  request, a GET per new ETag).
- `gateway-s3-immutable`: the same with `revalidate = false` (a cached clip costs no request).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3

from bench.shared import servers
from bench.shared.points import BenchRun, summarise
from bench.shared.s3server import LocalS3
from bench.shared.workloads import ClipSet

OBJECT_WORKLOAD_KEY = "s3"
OBJECT_MODES = ("seed-reference-s3", "gateway-s3", "gateway-s3-immutable")
OBJECT_CONCURRENCY = 32
BUCKET = "bench-audio"
REGION = "us-east-1"
# moto accepts any credentials; the proxies read these from their environment as in production.
BENCH_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret"}


def run_objects(bench: BenchRun, clipset: ClipSet) -> list[dict[str, Any]]:
    """Every object mode, cold then warm; one row per (mode, phase)."""
    key = clipset.workload.key
    order = list(clipset.order)
    store = LocalS3()
    try:
        upload(store.endpoint, clipset)
        bench.load(key, list(clipset.clips), order)
        bench.prepare(key, "path")
        rows = []
        for mode in OBJECT_MODES:
            with object_proxy(bench, mode, store.endpoint) as server:
                bench.servers[mode] = server
                for phase in ("cold", "warm"):
                    gets, heads = store.log.count("GET"), store.log.count("HEAD")
                    run = bench.sample(mode, key, OBJECT_CONCURRENCY, len(order))
                    row = summarise(mode, clipset, OBJECT_CONCURRENCY, phase, [run])
                    row["gets_per_clip"] = (store.log.count("GET") - gets) / len(clipset.clips)
                    row["heads_per_request"] = (store.log.count("HEAD") - heads) / len(order)
                    rows.append(row)
                    bench.step(f"{key}: {mode} {phase}")
            del bench.servers[mode]
        for loadgen in bench.loadgens:
            loadgen.call({"op": "drop", "key": key})
        return rows
    finally:
        store.stop()


def upload(endpoint: str, clipset: ClipSet) -> None:
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=BENCH_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=BENCH_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )
    client.create_bucket(Bucket=BUCKET)
    for clip in clipset.clips:
        client.put_object(Bucket=BUCKET, Key=clip.rel, Body=clip.path.read_bytes())


@contextmanager
def object_proxy(bench: BenchRun, mode: str, endpoint: str) -> Iterator[servers.ServerProcess]:
    """The proxy of an object mode, started with the bench credentials in its environment."""
    assert bench.stub is not None
    saved = {name: os.environ.get(name) for name in BENCH_CREDENTIALS}
    os.environ.update(BENCH_CREDENTIALS)
    try:
        if mode == "seed-reference-s3":
            server = start_seed_reference_s3(bench.workdir, bench.stub.url, endpoint)
        else:
            revalidate = mode == "gateway-s3"
            server = start_object_gateway(mode, bench.workdir, bench.stub.url, endpoint, revalidate)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    try:
        yield server
    finally:
        server.stop()


def start_object_gateway(
    name: str, workdir: Path, upstream: str, endpoint: str, revalidate: bool
) -> servers.ServerProcess:
    config = workdir / f"{name}.toml"
    config.write_text(
        f'[audio]\nroot = "s3://{BUCKET}/"\n'
        f'[storage.s3]\nendpoint_url = "{endpoint}"\nregion = "{REGION}"\nallow_http = true\n'
        f"revalidate = {'true' if revalidate else 'false'}\n"
    )
    port = servers.free_port()
    argv = [sys.executable, "-m", "gateway", "serve", "--config", str(config)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--upstream", upstream]
    argv += ["--log-level", "WARNING"]
    return servers.start(servers.ServerProcess(name, argv, port, workdir))


def start_seed_reference_s3(workdir: Path, upstream: str, endpoint: str) -> servers.ServerProcess:
    port = servers.free_port()
    argv = [sys.executable, "-m", "bench.shared.seed_reference", "--port", str(port)]
    argv += ["--upstream", upstream, "--audio-root", "/nonexistent"]
    argv += ["--s3-endpoint", endpoint, "--s3-bucket", BUCKET, "--s3-region", REGION]
    return servers.start(servers.ServerProcess("seed-reference-s3", argv, port, workdir))
