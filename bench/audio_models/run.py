"""`python -m bench.audio_models`: vLLM alone against the gateway + vLLM pair, per audio chat
architecture, on the real CPU engine (see __init__.py)."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from bench.shared import procstat
from bench.shared.results import RESULTS_DIR
from bench.shared.servers import ServerProcess, free_port, start

RESULTS_NAME = "audio-models"
SEEDS = 16
MAX_TOKENS = 4
MODES = ("vllm-direct", "gateway")
COMMON_FLAGS = (
    "--max-model-len", "2048", "--max-num-seqs", "16", "--max-num-batched-tokens", "4096",
    "--media-io-kwargs", '{"audio": {"audio_backend": "soundfile"}}',
)  # fmt: skip
# By reference for every model: the gateway places each (vLLM's /v1/models names the model's
# directory) and sends a model that takes no uuid-only parts (Voxtral) data with a `uuid`.
REFERENCE = '[splice]\nrepeats = "reference"\nreference_wait_ms = 30000\n'
PARTS = re.compile(r'^audio_gateway_audio_parts_total\{form="(data|reference)"\} (\S+)$', re.M)


@dataclass(frozen=True)
class Model:
    name: str  # served name
    built: str  # engine.server.build_models key
    architecture: str
    flags: tuple[str, ...] = ()


MODELS = {
    "qwen2-audio": Model(
        "tiny-qwen2-audio", "qwen2-audio", "Qwen2AudioForConditionalGeneration",
        ("--limit-mm-per-prompt", '{"audio": 2}'),
    ),
    "voxtral": Model(
        "tiny-voxtral", "voxtral", "VoxtralForConditionalGeneration",
        ("--tokenizer-mode", "mistral", "--config-format", "mistral"),
    ),
    "audio-flamingo3": Model(
        "tiny-audio-flamingo3", "audio-flamingo3", "AudioFlamingo3ForConditionalGeneration"
    ),
    "glm-asr": Model("tiny-glm-asr", "glm-asr", "GlmAsrForConditionalGeneration"),
}  # fmt: skip
MM_CACHE = re.compile(r"^vllm:mm_cache_(queries|hits)_total\{[^}]*\} (\S+)$", re.M)


@dataclass
class Cell:
    """One model and mode: requests, errors, and the CPU and processings they cost."""

    requests: int = 0
    errors: int = 0
    waves: int = 0
    api_s: float = 0.0
    vllm_s: float = 0.0
    gateway_s: float = 0.0
    processings: float = 0.0  # vLLM processor cache queries less hits
    parts: dict[str, float] = field(default_factory=lambda: {"data": 0.0, "reference": 0.0})
    error_samples: list[str] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        n = max(self.requests, 1)
        return {
            "requests": self.requests,
            "errors": self.errors,
            "api_server_cpu_ms": 1000 * self.api_s / n,
            "vllm_cpu_ms": 1000 * self.vllm_s / n,
            "gateway_cpu_ms": 1000 * self.gateway_s / n,
            "processings_per_wave": self.processings / max(self.waves, 1),
            "gateway_parts_per_wave": {k: v / max(self.waves, 1) for k, v in self.parts.items()},
            "error_samples": self.error_samples,
        }


def write_clip(folder: Path, seed: int, seconds: float) -> Path:
    """A new 16 kHz mono PCM16 WAV of noise (no two clips share bytes)."""
    import numpy
    import soundfile

    path = folder / f"clip{seed}.wav"
    rng = numpy.random.default_rng(seed)
    soundfile.write(path, rng.integers(-12000, 12000, int(seconds * 16_000), dtype="int16"), 16_000)
    return path


def chat_body(model: Model, clip: Path, mode: str) -> dict[str, Any]:
    text = {"type": "text", "text": "What is said in this clip?"}
    body: dict[str, Any] = {"model": model.name, "max_tokens": MAX_TOKENS, "temperature": 0.0}
    if mode == "vllm-direct":
        uri = "data:audio/wav;base64," + base64.b64encode(clip.read_bytes()).decode()
        body["messages"] = [
            {"role": "user", "content": [{"type": "audio_url", "audio_url": {"url": uri}}, text]}
        ]
    else:
        body["messages"] = [{"role": "user", "content": [text]}]
        body["metadata"] = {"audio_path": clip.name}
    return body


class Pair:
    """One model's vLLM server and the gateway in front of it."""

    def __init__(self, engine: Any, gateway: Any) -> None:
        self.engine = engine
        self.gateway = gateway
        self.api_pid: int = engine.process.pid

    def reading(self) -> tuple[float, float, float]:
        return (
            procstat.cpu_seconds(self.api_pid),
            procstat.total_cpu_seconds(procstat.process_tree(self.api_pid)),
            procstat.total_cpu_seconds(self.gateway.pids()),
        )

    async def processed(self, session: Any) -> float:
        """vLLM's processor cache queries less hits, so far (uuid-only hits count in both)."""
        async with session.get(f"{self.engine.url}/metrics") as response:
            text = await response.text()
        totals = {"queries": 0.0, "hits": 0.0}
        for kind, value in MM_CACHE.findall(text):
            totals[kind] += float(value)
        return totals["queries"] - totals["hits"]

    async def parts(self, session: Any) -> dict[str, float]:
        """The audio parts the gateway sent so far, with data and by reference."""
        async with session.get(f"{self.gateway.url}/gateway/metrics") as response:
            text = await response.text()
        return {form: float(value) for form, value in PARTS.findall(text)}


async def wave(pair: Pair, model: Model, mode: str, clip: Path, cell: Cell, session: Any) -> None:
    url = pair.engine.url if mode == "vllm-direct" else pair.gateway.url
    body = chat_body(model, clip, mode)

    async def post() -> None:
        async with session.post(f"{url}/v1/chat/completions", json=body) as response:
            answer = await response.read()
        cell.requests += 1
        if response.status != 200:
            cell.errors += 1
            if len(cell.error_samples) < 3:
                cell.error_samples.append(f"{response.status} {answer[:200]!r}")

    processed, parts = await pair.processed(session), await pair.parts(session)
    before = pair.reading()
    await asyncio.gather(*(post() for _ in range(SEEDS)))
    after = pair.reading()
    cell.processings += await pair.processed(session) - processed
    if mode == "gateway":
        for form, value in (await pair.parts(session)).items():
            cell.parts[form] += value - parts.get(form, 0.0)
    cell.waves += 1
    cell.api_s += after[0] - before[0]
    cell.vllm_s += after[1] - before[1]
    cell.gateway_s += after[2] - before[2]


def start_gateway(workdir: Path, model: Model, upstream: str, clips: Path) -> ServerProcess:
    port = free_port()
    config = workdir / f"gateway-{model.built}.toml"
    config.write_text(
        f'[server]\nport = {port}\n[upstream]\nurl = "{upstream}"\n[audio]\nroot = "{clips}"\n'
        + REFERENCE
    )
    argv = [sys.executable, "-m", "gateway", "serve", "--config", str(config)]
    return start(ServerProcess(f"gateway-{model.built}", argv, port, workdir))


async def measure_model(model: Model, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    import aiohttp

    from engine.server import EngineServer, EngineSpec, build_models

    built = build_models(args.venv, workdir / "models")
    clips = workdir / f"clips-{model.built}"
    clips.mkdir()
    spec = EngineSpec(model.name, built[model.built], (*COMMON_FLAGS, *model.flags))
    engine = EngineServer(spec, args.venv, workdir / model.built)
    engine.start()
    gateway = None
    try:
        startup_s = engine.wait_healthy()
        gateway = start_gateway(workdir, model, engine.url, clips)
        pair, cells = Pair(engine, gateway), {mode: Cell() for mode in MODES}
        timeout = aiohttp.ClientTimeout(total=300)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for number in range(args.waves):
                for mode in MODES:  # interleaved: each mode meets the same machine
                    clip = write_clip(clips, 2 * number + MODES.index(mode) + 1, args.seconds)
                    await wave(pair, model, mode, clip, cells[mode], session)
        return {
            "model": model.name,
            "architecture": model.architecture,
            "startup_s": startup_s,
            "rss_gib": engine.rss_bytes() / 2**30,
            "modes": {mode: cell.row() for mode, cell in cells.items()},
        }
    finally:
        if gateway is not None:
            gateway.stop()
        engine.stop()


def sent(parts: dict[str, float]) -> str:
    """What the gateway sent a wave: "1 data + 15 references", "16 data"."""
    return f"{parts['data']:g} data + {parts['reference']:g} references"


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"# What the pair saves vLLM's API server, per architecture ({result['date']})",
        "",
        "Real vLLM 0.32.0 (CPU build), the tiny random-weight models of engine/models.py, one "
        f"server at a time; {result['waves']} waves per mode of {SEEDS} concurrent seeds of a new "
        f"{result['seconds']:g} s 16 kHz mono WAV, modes interleaved, `max_tokens` {MAX_TOKENS}. "
        "CPU per request is each thread's time on the CPU (/proc/<pid>/task/*/schedstat). "
        f"Command: `{result['command']}`.",
        "",
        "| architecture | the gateway sent a wave (by reference) | vLLM alone: API server "
        "(ms/req) | pair: API server (ms/req) | pair: gateway (ms/req) | API server, pair / "
        "alone | pair / alone (API server + gateway) | vLLM processings a wave, alone / pair | "
        "errors |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for run in result["runs"]:
        alone, pair = run["modes"]["vllm-direct"], run["modes"]["gateway"]
        base = max(alone["api_server_cpu_ms"], 1e-9)
        both = pair["api_server_cpu_ms"] + pair["gateway_cpu_ms"]
        lines.append(
            f"| {run['architecture']} | {sent(pair['gateway_parts_per_wave'])} | "
            f"{alone['api_server_cpu_ms']:.2f} | {pair['api_server_cpu_ms']:.2f} | "
            f"{pair['gateway_cpu_ms']:.2f} | {pair['api_server_cpu_ms'] / base:.2f} | "
            f"{both / base:.2f} | {alone['processings_per_wave']:g} / "
            f"{pair['processings_per_wave']:g} | {alone['errors'] + pair['errors']} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.audio_models",
        description="vLLM alone (data URIs) against the gateway by reference, per audio chat "
        "architecture, on the real CPU engine: vLLM API-server CPU per request.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--waves", type=int, default=3, help="waves per model and mode")
    parser.add_argument("--seconds", type=float, default=30.0, help="each clip's length")
    parser.add_argument("--engine-venv", dest="venv", type=Path, default=None)
    parser.add_argument("--name", default=RESULTS_NAME)
    parser.add_argument("--results-dir", type=Path, default=None)
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from engine.server import engine_venv

    args.venv = args.venv or engine_venv()
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-audio-models-") as workdir:
        for name in args.models:
            print(f"{name}: starting vLLM", flush=True)
            runs.append(await measure_model(MODELS[name], args, Path(workdir)))
    return {
        "date": date.today().isoformat(),
        "waves": args.waves,
        "seconds": args.seconds,
        "command": " ".join(["python -m bench.audio_models", *sys.argv[1:]]),
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    result = asyncio.run(run(args))
    result["seconds_total"] = time.monotonic() - started
    out = (args.results_dir or RESULTS_DIR) / f"{result['date']}-{args.name}"
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    errors = sum(cell["errors"] for run in result["runs"] for cell in run["modes"].values())
    return 1 if errors else 0
