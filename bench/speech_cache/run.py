"""Why the cache keeps raw bytes for the speech-to-text routes: what a hit would cost if it
decoded the cached base64 instead (`python -m bench.speech_cache`).

Per clip size: pybase64's decode of the cached pieces (what each request would pay, on the
event loop or a thread hop away), and the size of a base64 entry against a raw one.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import pybase64

from gateway.audio.encoder import READ_CHUNK_BYTES

SIZES_MIB = (1, 10, 25)  # 25 MiB: audio.max_file_bytes, vLLM's own limit
RUNS = 20


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(
        prog="python -m bench.speech_cache",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
    ).parse_args(argv)
    print("| clip | decode per hit, best / median | decode rate | base64 entry | raw entry |")
    print("| --- | --- | --- | --- | --- |")
    for size_mib in SIZES_MIB:
        raw = os.urandom(size_mib * 1024 * 1024)
        step = READ_CHUNK_BYTES
        pieces = [pybase64.b64encode(raw[at : at + step]) for at in range(0, len(raw), step)]
        times = []
        for _ in range(RUNS + 3):
            started = time.perf_counter()
            decoded = [pybase64.b64decode(piece) for piece in pieces]
            times.append(time.perf_counter() - started)
        assert b"".join(decoded) == raw
        best, median = min(times[3:]), statistics.median(times[3:])
        encoded = sum(map(len, pieces))
        print(
            f"| {size_mib} MiB | {best * 1e3:.2f} / {median * 1e3:.2f} ms "
            f"| {len(raw) / best / 1e9:.2f} GB/s | {encoded / 2**20:.2f} MiB "
            f"| {len(raw) / 2**20:.2f} MiB |"
        )
