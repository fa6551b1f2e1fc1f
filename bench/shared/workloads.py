"""The scenario (what to run) and the synthetic clips each workload sends.

(a) LibriSpeech-PC-shaped: many ~56 KB 16 kHz mono WAV clips, several seeds each, shuffled.
(b) long-form: ~10 MB clips, a few seeds each.
(c) one huge clip (256 MiB) streamed through a fresh proxy, for its peak RSS.
(s3) ~56 KB clips on a local S3 server (bench/objects/).
(repeats) ~56 KB clips sent again and again, by data and by reference (bench/repeats/).
Clip content is seeded pseudo-random PCM, so every clip is distinct and every run identical.
"""

from __future__ import annotations

import hashlib
import random
import wave
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.shared.stub_timing import VLLM_LIKE, StubTiming
from gateway.audio.samples import SAMPLE_RATE_HZ

WAV_HEADER_BYTES = 44
TILE_BYTES = 4 * 1024 * 1024  # big clips repeat one random tile: cheap to write, still valid PCM


@dataclass(frozen=True)
class Workload:
    """`clips` distinct files of about `clip_bytes`, each requested `seeds` times, shuffled."""

    key: str
    title: str
    clips: int
    clip_bytes: int
    seeds: int
    concurrency: tuple[int, ...]
    passes: int = 1  # how many times one measured point walks the shuffled order
    warmup_requests: int = 64  # per non-gateway mode, untimed (the gateway's is its cold pass)

    @property
    def requests_per_point(self) -> int:
        return self.clips * self.seeds * self.passes


@dataclass(frozen=True)
class Scenario:
    name: str
    quick: bool
    modes: tuple[str, ...]
    workloads: tuple[Workload, ...]
    huge_clip_bytes: int  # workload (c); 0 skips it
    huge_clip_modes: tuple[str, ...] = ("seed-reference", "gateway")
    encode_file_bytes: int = 100 * 1000 * 1000  # 0 skips the cold-encode comparison
    encode_repeats: int = 3
    sha_check_every: int = 8  # the stub's decoded sha256 is compared on every Nth response
    loadgen_processes: int = 1
    rounds: int = 2  # each point is split into rounds that interleave the modes
    connections: str = "keep-alive"  # or "per-request": bench/shared/clients.py
    stub_timing: StubTiming = VLLM_LIKE  # bench/shared/stub_timing.py; --unpaced-stub: PLAIN
    notes: tuple[str, ...] = field(default_factory=tuple)

    def with_modes(self, modes: tuple[str, ...]) -> Scenario:
        return replace(self, modes=modes)


ALL_MODES = (
    "direct",
    "nginx",
    "seed-reference",
    "gateway-nocache",
    "gateway",
    "gateway-passthrough",
    "gateway-keyed",
)
OPT_IN_MODES = ("gateway-keyed",)  # run when named in --modes, not by default
DEFAULT_MODES = tuple(mode for mode in ALL_MODES if mode not in OPT_IN_MODES)

WORKLOAD_A = Workload(
    "a", "LibriSpeech-PC-shaped: 200 x ~56 KB, 8 seeds", 200, 56_000, 8, (1, 8, 32, 128)
)
WORKLOAD_B = Workload(
    "b", "long-form: 10 x ~10 MB, 4 seeds", 10, 10_000_000, 4, (8,), passes=2, warmup_requests=4
)
WORKLOAD_S3 = Workload(
    "s3", "objects: 100 x ~56 KB on a local S3 server (moto), 8 seeds", 100, 56_000, 8, (32,)
)
WORKLOAD_REPEATS = Workload(
    "repeats", "repeats: 200 x ~56 KB, 16 seeds a wave / 4-turn conversations", 200, 56_000, 16,
    (16,),
)  # fmt: skip
HUGE_CLIP_BYTES = 256 * 1024 * 1024


def standard_scenario(name: str = "standard") -> Scenario:
    workloads = (WORKLOAD_A, WORKLOAD_B, WORKLOAD_S3, WORKLOAD_REPEATS)
    return Scenario(name, False, DEFAULT_MODES, workloads, HUGE_CLIP_BYTES, rounds=4)


def quick_scenario(name: str = "quick") -> Scenario:
    """The standard run scaled down, every workload and mode kept. (a) keeps 512 requests a
    point (256 a round): at 192 a round's req/s on 2 shared cores swung more than the modes
    differ. (The cold and warm gateway rows differ by less than that at any size: report.py's
    COLD_NOTE.) (repeats) counts bytes and decodes, not speed: 16 clips show them as well as
    200. Each run's Markdown says how long it took and where the time went."""
    return Scenario(
        name,
        True,
        DEFAULT_MODES,
        (
            replace(WORKLOAD_A, title="(quick) 64 x ~56 KB, 8 seeds", clips=64, seeds=8,
                    concurrency=(1, 32), warmup_requests=32),
            replace(WORKLOAD_B, title="(quick) 3 x ~10 MB, 2 seeds", clips=3, seeds=2,
                    concurrency=(4,), passes=1),
            replace(WORKLOAD_S3, title="(quick) objects: 32 x ~56 KB on moto, 4 seeds",
                    clips=32, seeds=4),
            replace(WORKLOAD_REPEATS, title="(quick) repeats: 16 x ~56 KB, 16 seeds / 4 turns",
                    clips=16),
        ),
        HUGE_CLIP_BYTES // 2,  # 128 MiB: still streamed (over max_item_bytes), half the time
        encode_file_bytes=50 * 1000 * 1000,
        encode_repeats=2,
    )  # fmt: skip


@dataclass(frozen=True)
class Clip:
    rel: str  # relative to the audio root: the path form's `metadata.audio_path`
    path: Path
    size: int
    sha256: str

    def to_json(self) -> dict[str, object]:
        return {"rel": self.rel, "path": str(self.path), "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class ClipSet:
    workload: Workload
    clips: tuple[Clip, ...]
    order: tuple[int, ...]  # clip index per request of one pass, seeds shuffled together

    def to_json(self) -> dict[str, object]:
        return {"clips": [clip.to_json() for clip in self.clips], "order": list(self.order)}


def write_random_wav(path: Path, total_bytes: int, seed: str) -> str:
    """A valid 16 kHz mono 16-bit WAV of `total_bytes`; returns the file's sha256."""
    frames = max(1, (total_bytes - WAV_HEADER_BYTES) // 2)
    rng = random.Random(seed)
    tile = rng.randbytes(min(frames * 2, TILE_BYTES))
    with wave.open(str(path), "wb") as clip:
        clip.setnchannels(1)
        clip.setsampwidth(2)
        clip.setframerate(SAMPLE_RATE_HZ)
        remaining = frames * 2
        while remaining:
            piece = tile[:remaining]
            clip.writeframes(piece)
            remaining -= len(piece)
    return file_sha256(path)


def file_sha256(path: Path) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(TILE_BYTES):
            hasher.update(chunk)
    return hasher.hexdigest()


def make_clips(workload: Workload, audio_root: Path) -> ClipSet:
    """Write the workload's clips under `audio_root/<key>/` (sizes within +-15 %)."""
    folder = audio_root / workload.key
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"bench-{workload.key}")
    clips = []
    for index in range(workload.clips):
        size = int(workload.clip_bytes * rng.uniform(0.85, 1.15))
        path = folder / f"clip_{index:04d}.wav"
        sha = write_random_wav(path, size, seed=f"{workload.key}-{index}")
        rel = f"{workload.key}/{path.name}"
        clips.append(Clip(rel, path, path.stat().st_size, sha))
    order = [index for index in range(workload.clips) for _ in range(workload.seeds)]
    rng.shuffle(order)
    return ClipSet(workload, tuple(clips), tuple(order))


def make_huge_clip(audio_root: Path, total_bytes: int) -> Clip:
    folder = audio_root / "c"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "huge.wav"
    sha = write_random_wav(path, total_bytes, seed="huge")
    return Clip(f"c/{path.name}", path, path.stat().st_size, sha)


STEREO_RATE_HZ = 44_100
STEREO_SECONDS = 3.0  # ~529 KB: vLLM decodes, down-mixes and resamples it to 16 kHz mono


def make_stereo_clips(count: int, audio_root: Path, seeds: int) -> ClipSet:
    """`count` distinct 44.1 kHz stereo 16-bit WAV clips of STEREO_SECONDS (seeded noise)."""
    folder = audio_root / "repeats-stereo"
    folder.mkdir(parents=True, exist_ok=True)
    clips = []
    for index in range(count):
        path = folder / f"clip_{index:04d}.wav"
        frames = int(STEREO_RATE_HZ * STEREO_SECONDS)
        with wave.open(str(path), "wb") as clip:
            clip.setnchannels(2)
            clip.setsampwidth(2)
            clip.setframerate(STEREO_RATE_HZ)
            clip.writeframes(random.Random(f"stereo-{index}").randbytes(frames * 4))
        clips.append(Clip(f"repeats-stereo/{path.name}", path, path.stat().st_size,
                          file_sha256(path)))  # fmt: skip
    workload = Workload(
        "repeats-stereo", "repeats: 44.1 kHz stereo", count, clips[0].size, seeds, (16,)
    )
    return ClipSet(workload, tuple(clips), tuple(range(count)))
