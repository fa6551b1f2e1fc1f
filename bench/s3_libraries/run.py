"""obstore vs aiobotocore against a local moto server: GET throughput, per-request overhead.

`python -m bench.s3_libraries --moto-python PYTHON_WITH_MOTO`, from a venv with obstore
and aiobotocore (a separate one: aiobotocore pins botocore below what boto3/moto want); moto
runs as its own process from the interpreter given,
so the client CPU figures, from getrusage over all the client's threads, are the client's
alone). Throughput is bounded by moto (Python) on this machine; the client CPU per request
and per MB is the figure that tells the libraries apart. Not part of `python -m bench`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable

from bench.shared.servers import free_port

SMALL_BYTES, SMALL_OBJECTS, SMALL_REQUESTS = 56_000, 50, 1000
BIG_BYTES = 64 * 1024 * 1024
CHUNK_BYTES = 3 * 1024 * 1024
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret"}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measure(
    name: str, get: Callable[[str], Awaitable[int]], head: Callable[[str], Awaitable[None]]
) -> None:
    print(name)
    for concurrency in (1, 32):
        slots = asyncio.Semaphore(concurrency)

        async def one(index: int, slots: asyncio.Semaphore = slots) -> None:
            async with slots:
                await get(f"small/{index % SMALL_OBJECTS}.bin")

        await asyncio.gather(*(one(i) for i in range(SMALL_OBJECTS)))  # warm the pool
        wall, cpu = time.perf_counter(), cpu_seconds()
        await asyncio.gather(*(one(i) for i in range(SMALL_REQUESTS)))
        wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
        print(f"  GET 56 KB c={concurrency}: {SMALL_REQUESTS / wall:.0f} req/s, "
              f"client CPU {1000 * cpu / SMALL_REQUESTS:.2f} ms/request")  # fmt: skip
    count = SMALL_REQUESTS // 2
    wall, cpu = time.perf_counter(), cpu_seconds()
    for index in range(count):
        await head(f"small/{index % SMALL_OBJECTS}.bin")
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    print(f"  HEAD c=1: {count / wall:.0f} req/s, client CPU {1000 * cpu / count:.2f} ms/request")
    best: tuple[float, float] | None = None
    for _ in range(3):
        wall, cpu = time.perf_counter(), cpu_seconds()
        size = await get("big.bin")
        wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
        if best is None or wall < best[0]:
            best = (wall, cpu)
    assert best is not None
    print(f"  GET 64 MiB (best of 3): {size / best[0] / 1e6:.0f} MB/s, "
          f"client CPU {1000 * best[1] / (size / 1e6):.2f} ms/MB")  # fmt: skip


async def compare(endpoint: str) -> None:
    import obstore
    from aiobotocore.session import get_session
    from obstore.store import S3Store

    store = S3Store("bench", endpoint=endpoint, region="us-east-1", allow_http=True)

    async def obstore_get(key: str) -> int:
        result = await obstore.get_async(store, key)
        return sum([len(chunk) async for chunk in result.stream(min_chunk_size=CHUNK_BYTES)])

    async def obstore_head(key: str) -> None:
        await obstore.head_async(store, key)

    await measure(f"obstore {obstore.__version__}", obstore_get, obstore_head)
    async with get_session().create_client(
        "s3", endpoint_url=endpoint, region_name="us-east-1"
    ) as client:

        async def botocore_get(key: str) -> int:
            reply = await client.get_object(Bucket="bench", Key=key)
            async with reply["Body"] as body:
                return sum([len(chunk) async for chunk in body.iter_chunks(CHUNK_BYTES)])

        async def botocore_head(key: str) -> None:
            await client.head_object(Bucket="bench", Key=key)

        import aiobotocore

        await measure(f"aiobotocore {aiobotocore.__version__}", botocore_get, botocore_head)


def seed(endpoint: str) -> None:
    import obstore
    from obstore.store import S3Store

    bucket = urllib.request.Request(f"{endpoint}/bench", method="PUT")  # moto: no auth needed
    urllib.request.urlopen(bucket, timeout=10).close()
    store = S3Store("bench", endpoint=endpoint, region="us-east-1", allow_http=True)
    for index in range(SMALL_OBJECTS):
        obstore.put(store, f"small/{index}.bin", os.urandom(SMALL_BYTES))
    obstore.put(store, "big.bin", os.urandom(BIG_BYTES))


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.s3_libraries", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--moto-python", default=sys.executable, help="runs moto.server")
    args = parser.parse_args()
    os.environ.update(CREDENTIALS)
    port = free_port()
    argv = [args.moto_python, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    moto = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(endpoint, timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        seed(endpoint)
        asyncio.run(compare(endpoint))
    finally:
        moto.terminate()
        moto.wait()
