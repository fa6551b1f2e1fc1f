"""What the clip key costs per MB of audio (`python -m bench.affinity_key`).

Audio a client inlined itself (an `audio_url` data URI or an `input_audio` part) is keyed by the
sha256 of its decoded bytes: per request, `part_digests` decodes and hashes every such part.
Measured per clip size, in CPU time (`time.process_time`, this process only), interleaved
round by round with what the gateway spends on the same body anyway (msgspec's parse), and
with the sha256 alone (what a file's first read, a cache miss, adds when the key is on).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import time
from collections.abc import Callable

import msgspec
import pybase64

from gateway.affinity import clip_key, part_digests

SIZES_MIB = (1, 5, 25)  # 25 MiB: audio.max_file_bytes, vLLM's own limit
ROUNDS = 15


def chat_body(audio: bytes) -> bytes:
    uri = "data:audio/wav;base64," + pybase64.b64encode(audio).decode()
    part = {"type": "audio_url", "audio_url": {"url": uri}}
    text = {"type": "text", "text": "Transcribe the audio."}
    return msgspec.json.encode(
        {"model": "m", "messages": [{"role": "user", "content": [part, text]}]}
    )


def cpu_ms(work: Callable[[], object]) -> float:
    started = time.process_time()
    work()
    return (time.process_time() - started) * 1e3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.affinity_key",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
    )
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    args = parser.parse_args(argv)
    print(
        "| audio | key of an inline part (decode + sha256) | per MiB | sha256 alone per MiB "
        "| JSON parse of the body (paid anyway) |"
    )
    print("| --- | --- | --- | --- | --- |")
    for size_mib in SIZES_MIB:
        key_ms, sha_ms, parse_ms = measure(os.urandom(size_mib * 1024 * 1024), args.rounds)
        print(
            f"| {size_mib} MiB | {key_ms:.2f} ms | {key_ms / size_mib:.2f} ms "
            f"| {sha_ms / size_mib:.2f} ms | {parse_ms:.2f} ms |"
        )


def measure(audio: bytes, rounds: int) -> tuple[float, float, float]:
    """Median CPU ms of: keying the body's inline part, the sha256 alone, parsing the body."""
    raw = chat_body(audio)
    messages = msgspec.json.decode(raw)["messages"]
    expected = clip_key(["sha256:" + hashlib.sha256(audio).hexdigest()])
    assert clip_key(part_digests(messages, {})) == expected
    keyed, hashed, parsed = [], [], []
    for _ in range(rounds):  # interleaved: a busy machine slows all three alike
        keyed.append(cpu_ms(lambda: clip_key(part_digests(messages, {}))))
        hashed.append(cpu_ms(lambda: hashlib.sha256(audio).hexdigest()))
        parsed.append(cpu_ms(lambda: msgspec.json.decode(raw)))
    return statistics.median(keyed), statistics.median(hashed), statistics.median(parsed)
