"""`python -m bench.dataset_tools`: the dataset commands on synthetic datasets.

1. `audio-gateway check` over ROWS chat rows naming CLIPS distinct WAV files by path (seeds
   repeat clips, as materialised rollouts do): wall time and rows/s of the whole command.
2. `audio-gateway convert --extract-to` over INLINE NeMo Gym rows whose clips are inline
   `audio_data` data URIs: the JSONL size before and after, and the time.

Both run the installed command in a subprocess, as a user would (start-up included). Figures
are printed as Markdown; nothing is asserted (timings on a shared machine are noisy).
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gateway.audio.samples import tone_pcm, write_wav

CLIP_SECONDS = (1.5, 2.0)  # LibriSpeech-PC-shaped: ~48-64 KB of 16 kHz mono 16-bit WAV


def write_clips(directory: Path, count: int, rng: random.Random) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    return [
        write_wav(directory / f"{i:05d}.wav", tone_pcm(rng.uniform(*CLIP_SECONDS), 200 + i % 800))
        for i in range(count)
    ]


def path_rows(path: Path, clips: list[Path], rows: int, rng: random.Random) -> None:
    with path.open("w") as out:
        for i in range(rows):
            clip = rng.choice(clips).name
            row = {
                "model": "qwen2-audio",
                "messages": [{"role": "user", "content": f"Transcribe utterance {i}."}],
                "metadata": {"audio_path": clip},
            }
            out.write(json.dumps(row) + "\n")


def inline_rows(path: Path, clips: list[Path], rows: int, rng: random.Random) -> None:
    with path.open("w") as out:
        for i in range(rows):
            data = base64.b64encode(rng.choice(clips).read_bytes()).decode()
            params = {
                "input": [{"role": "user", "content": "Transcribe the audio."}],
                "metadata": {"audio_data": f"data:audio/wav;base64,{data}"},
            }
            row = {"responses_create_params": params, "expected_answer": "...", "task_id": i}
            out.write(json.dumps(row) + "\n")


def run_tool(*argv: str) -> tuple[dict[str, Any], float]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "gateway", *argv, "--json"], capture_output=True, text=True
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"audio-gateway {argv[0]} failed ({done.returncode}): {done.stderr}")
    return json.loads(done.stdout), elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.dataset_tools")
    parser.add_argument("--rows", type=int, default=100_000, help="path rows to check")
    parser.add_argument("--clips", type=int, default=2_000, help="distinct clips")
    parser.add_argument("--inline-rows", type=int, default=2_000, help="inline rows to convert")
    parser.add_argument("--jobs", type=int, help="check --jobs (default: the command's)")
    args = parser.parse_args(argv)
    rng = random.Random(10)
    with tempfile.TemporaryDirectory(prefix="bench-dataset-tools-") as temporary:
        work = Path(temporary)
        clips = write_clips(work / "audio", args.clips, rng)
        path_rows(work / "paths.jsonl", clips, args.rows, rng)
        jobs = ["--jobs", str(args.jobs)] if args.jobs else []
        audio_root = ["--audio-root", str(work / "audio")]
        check, check_s = run_tool("check", str(work / "paths.jsonl"), *audio_root, *jobs)
        inline_rows(work / "inline.jsonl", clips, args.inline_rows, rng)
        convert, convert_s = run_tool(
            "convert", str(work / "inline.jsonl"), str(work / "out.jsonl"),
            "--extract-to", str(work / "extracted"),
        )  # fmt: skip
    print("| measurement | figure |\n| --- | --- |")
    print(
        f"| `check`, {check['rows']:,} path rows, {check['distinct_files']:,} distinct files "
        f"| {check_s:.1f} s wall ({check['rows'] / check_s:,.0f} rows/s; "
        f"{check['seconds']:.1f} s checking) |"
    )
    print(
        f"| `convert --extract-to`, {convert['rows']:,} inline NeMo Gym rows "
        f"| {convert['bytes_in'] / 1e6:,.1f} MB -> {convert['bytes_out'] / 1e6:,.2f} MB "
        f"({convert['bytes_in'] / convert['bytes_out']:,.0f}x smaller), "
        f"{convert['files_written']:,} clip files ({convert['clip_bytes_written'] / 1e6:,.1f} MB) "
        f"written once each, {convert_s:.1f} s |"
    )
