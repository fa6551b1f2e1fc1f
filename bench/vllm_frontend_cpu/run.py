"""vLLM 0.33's front-end audio CPU for recorded chat bodies, measured on vLLM's own code.

Run with the vllm-compat venv's python (`VLLM_COMPAT_VENV=/work/venv-vllm .ci/vllm-compat`
builds it), from the repository root:

    /work/venv-vllm/bin/python -m bench.vllm_frontend_cpu BODIES.jsonl [--json [OUT.json]]

BODIES.jsonl holds one chat-completions body a line, as the stub writes them
(`python -m gateway.stub_upstream --record-bodies BODIES.jsonl`). For each body, in process and
without an engine or weights, it runs what a vLLM API server runs before its multimodal cache
(research notes `vllm_uuid_cache.md` §2, steps 1 and 3):

1. FastAPI's body handling: `json.loads`, then `ChatCompletionRequest.model_validate`;
2. `parse_chat_messages_async`: the content-part parser and, per audio item carrying data, the
   `MediaConnector` fetch and decode (`AudioMediaIO`, native rate, on vLLM's media thread pool;
   `--audio-backend`, default soundfile, is the server's `--media-io-kwargs
   '{"audio": {"audio_backend": ...}}'`); a uuid-only part loads nothing;
3. the model's data parser, `MultiModalDataParser(target_sr, target_channels=1)`
   (Qwen2-Audio's and Whisper's: 16 kHz mono), which resamples and down-mixes.

Not counted: the chat template and tokenisation (the same with or without data), and the HF
processor (skipped on a cache hit either way). CPU is the process's (`time.process_time`,
every thread), bodies one at a time, so each body's figure is its own. A body's audio CPU is
its cost minus that of its text-only twin (the same body with its audio parts taken out, run
alternately with it), so what any request costs (JSON, validation, the text parts) is not
counted as audio; a uuid-only part costs about nothing. With `--repeat N` each body and its
twin run N times (default 3) and the medians count. vLLM resamples with torchaudio by
default; where torchaudio does not import (the lean venv has none: vLLM pins a CUDA build)
this uses soxr and says so (`resample_method` in the output). 16 kHz mono clips are not
resampled at all.
soundfile is the cheapest decoder here; vLLM's default `auto` tries torchcodec first, which on a
host without FFmpeg fails and logs a warning per clip before falling back to soundfile (several
ms more per clip): the default understates what a decode costs.

The output, JSON on stdout (vLLM logs to stderr): bodies, audio_cpu_seconds (the total),
audio_cpu_ms_per_body (mean, p50, max), frontend_cpu_seconds (whole bodies),
text_only_cpu_seconds (their twins), audio_items_decoded, audio_items_by_reference
(uuid-only), resample_method, audio_backend; with `--json` also per_body (cpu_ms,
text_only_ms, audio_ms, decoded, by_reference, in file order), and with `--json OUT.json` the
whole report goes to that file.
"""

from __future__ import annotations

import asyncio
import functools
import json
import statistics
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.vllm_frontend_cpu.flags import build_parser

with warnings.catch_warnings():  # vLLM's imports warn about the torch build
    warnings.simplefilter("ignore")
    from vllm.config.multimodal import MultiModalConfig
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.multimodal.parse import MultiModalDataParser
    from vllm.renderers.chat_utils import chat_message
    from vllm.renderers.chat_utils.item_tracker import AsyncMultiModalItemTracker

TARGET_SAMPLE_RATE = 16_000  # Qwen2-Audio's and Whisper's feature extractors


class ModelFreeTracker(AsyncMultiModalItemTracker):  # type: ignore[misc]
    """vLLM's own tracker; only the placeholder strings and the per-prompt item limit (vLLM's
    default, 999) come from no model (tests/vllm_compat uses it too)."""

    @functools.cached_property
    def model_cls(self) -> Any:
        return SimpleNamespace(get_placeholder_str=lambda modality, i: f"<{modality} {i}>")

    @functools.cached_property
    def mm_processor(self) -> Any:
        limit = MultiModalConfig().get_limit_per_prompt("audio")

        def validate_num_items(modality: str, count: int) -> None:
            if count > limit:
                raise ValueError(f"At most {limit} {modality}(s) may be provided in one prompt.")

        return SimpleNamespace(info=SimpleNamespace(validate_num_items=validate_num_items))


AUDIO_PART_KEYS = ("audio_url", "input_audio")


@dataclass
class BodyCost:
    cpu_ms: float  # the whole body through vLLM's front end
    text_only_ms: float  # the same body with its audio parts taken out
    audio_ms: float  # the difference (0 when noise makes it negative)
    decoded: int
    by_reference: int


@dataclass
class Report:
    bodies: int
    audio_cpu_seconds: float
    audio_cpu_ms_per_body: dict[str, float]
    frontend_cpu_seconds: float
    text_only_cpu_seconds: float
    audio_items_decoded: int
    audio_items_by_reference: int
    resample_method: str
    audio_backend: str
    per_body: list[BodyCost] = field(repr=False)


class Frontend:
    """vLLM's request path up to its multimodal cache, for one body at a time."""

    def __init__(
        self, allowed_local_media_path: str | None, resample_method: str, audio_backend: str
    ) -> None:
        chat_message.AsyncMultiModalItemTracker = ModelFreeTracker  # the parser builds this one
        self.model_config = SimpleNamespace(
            multimodal_config=None,
            allowed_local_media_path=allowed_local_media_path or "",
            allowed_media_domains=None,
            hf_config=SimpleNamespace(),
            is_multimodal_model=True,
            enable_prompt_embeds=False,
        )
        self.server_media_io_kwargs = {"audio": {"audio_backend": audio_backend}}
        self.data_parser = MultiModalDataParser(
            target_sr=TARGET_SAMPLE_RATE,
            target_channels=1,
            audio_resample_method=resample_method,
        )

    async def run(self, line: bytes) -> tuple[int, int]:
        """One body through vLLM; returns (items decoded, items by reference)."""
        request = ChatCompletionRequest.model_validate(json.loads(line))
        _, mm_data, _ = await chat_message.parse_chat_messages_async(
            request.messages,
            self.model_config,
            "string",
            media_io_kwargs=_merged(self.server_media_io_kwargs, request.media_io_kwargs),
            mm_processor_kwargs=request.mm_processor_kwargs,
        )
        audio = list((mm_data or {}).get("audio", []))
        if mm_data:
            self.data_parser.parse_mm_data(mm_data)
        decoded = sum(item is not None for item in audio)
        return decoded, len(audio) - decoded

    async def cost(self, line: bytes, repeat: int) -> BodyCost:
        """Medians of `repeat` runs of the body and of its text-only twin, interleaved."""
        text_only = without_audio(line)
        whole, bare = [], []
        for _ in range(repeat):
            started = time.process_time()
            decoded, by_reference = await self.run(line)
            middle = time.process_time()
            await self.run(text_only)
            whole.append((middle - started) * 1000)
            bare.append((time.process_time() - middle) * 1000)
        cpu, text = statistics.median(whole), statistics.median(bare)
        return BodyCost(cpu, text, max(0.0, cpu - text), decoded, by_reference)


def without_audio(line: bytes) -> bytes:
    """The body with every audio part taken out of its messages: what the same request costs
    vLLM with no audio at all (template, text and the rest are the same with or without)."""
    body = json.loads(line)
    for message in body.get("messages", []):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            message["content"] = [part for part in content if not _is_audio(part)]
    return json.dumps(body).encode()


def _is_audio(part: Any) -> bool:
    if not isinstance(part, dict):
        return False
    return part.get("type") in AUDIO_PART_KEYS or any(key in part for key in AUDIO_PART_KEYS)


def _merged(
    server: dict[str, dict[str, Any]], request: dict[str, dict[str, Any]] | None
) -> dict[str, dict[str, Any]]:
    """The server's media_io_kwargs with the request's over them, per modality, as vLLM's
    online renderer merges them."""
    merged = {modality: dict(kwargs) for modality, kwargs in server.items()}
    for modality, kwargs in (request or {}).items():
        merged.setdefault(modality, {}).update(kwargs)
    return merged


def resample_method() -> str:
    try:
        import torchaudio  # noqa: F401
    except (ImportError, OSError):
        return "soxr"
    return "torchaudio"


async def measure(
    lines: list[bytes],
    *,
    repeat: int = 1,
    allowed_local_media_path: str | None = None,
    audio_backend: str = "soundfile",
) -> Report:
    method = resample_method()
    frontend = Frontend(allowed_local_media_path, method, audio_backend)
    if lines:
        await frontend.run(lines[0])  # warm-up: lazy imports, pydantic and decoder set-up
    costs = [await frontend.cost(line, repeat) for line in lines]
    audio = [c.audio_ms for c in costs] or [0.0]
    return Report(
        bodies=len(costs),
        audio_cpu_seconds=sum(audio) / 1000,
        audio_cpu_ms_per_body={
            "mean": statistics.fmean(audio),
            "p50": statistics.median(audio),
            "max": max(audio),
        },
        frontend_cpu_seconds=sum(c.cpu_ms for c in costs) / 1000,
        text_only_cpu_seconds=sum(c.text_only_ms for c in costs) / 1000,
        audio_items_decoded=sum(c.decoded for c in costs),
        audio_items_by_reference=sum(c.by_reference for c in costs),
        resample_method=method,
        audio_backend=audio_backend,
        per_body=costs,
    )


def read_bodies(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    report = asyncio.run(
        measure(
            read_bodies(args.bodies),
            repeat=max(1, args.repeat),
            allowed_local_media_path=args.allowed_local_media_path,
            audio_backend=args.audio_backend,
        )
    )
    result = asdict(report)
    if args.json not in (None, "-"):
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    shown = result if args.json == "-" else {k: v for k, v in result.items() if k != "per_body"}
    print(json.dumps(shown, indent=1))
    return 0
