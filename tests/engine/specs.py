"""The vLLM configurations the real-engine tests serve, by name (standard library and
engine/server.py only, so any test venv can start them: the engine suite and the Gym suite)."""

from __future__ import annotations

import json
from pathlib import Path

from engine.server import EngineSpec

QWEN = "tiny-qwen2-audio"
# A second server of the same model under the same served name: the replica beside QWEN that
# vllm-router spreads over in the many-replicas tests.
QWEN_REPLICA = "tiny-qwen2-audio-replica"
WHISPER = "tiny-whisper"
# The three audio chat models started one at a time, by the module that tests them.
VOXTRAL = "tiny-voxtral"
AUDIO_FLAMINGO3 = "tiny-audio-flamingo3"
GLM_ASR = "tiny-glm-asr"
# About 4 MB: the processed features of one clip are 128 x 3000 float32 (1.5 MB) whatever its
# length, so this holds two clips and a third evicts the oldest.
MM_CACHE_GB = "0.004"


def specs(models: dict[str, Path], media_root: Path) -> dict[str, EngineSpec]:
    """Every server, by name: `models` is what `engine.server.build_models` returns,
    `media_root` the directory `--allowed-local-media-path` names. QWEN_REPLICA is QWEN again
    (the same flags, name and clip root), a second replica of one deployment."""
    # vLLM tries torchcodec first and warns on every request that it cannot (no FFmpeg here)
    soundfile = json.dumps({"audio": {"audio_backend": "soundfile"}})
    silence_torchcodec = ["--media-io-kwargs", soundfile]
    # Tool calls from random weights: a named (or required) choice is held to its schema by
    # xgrammar, which without `disable_any_whitespace` lets the model emit whitespace until
    # max_tokens; `auto` needs a parser the tiny tokenizer can serve (hermes needs tokens it
    # lacks, pythonic none).
    structured = json.dumps({"backend": "xgrammar", "disable_any_whitespace": True})
    tool_calls = [
        *("--structured-outputs-config", structured),
        *("--enable-auto-tool-choice", "--tool-call-parser", "pythonic"),
    ]
    qwen = EngineSpec(
        QWEN,
        models["qwen2-audio"],
        flags=[
            *("--max-model-len", "2048", "--max-num-seqs", "16"),
            *("--max-num-batched-tokens", "4096"),
            *("--limit-mm-per-prompt", json.dumps({"audio": 2})),
            *("--mm-processor-cache-gb", MM_CACHE_GB),
            *("--allowed-local-media-path", str(media_root)),
            *silence_torchcodec,
            *tool_calls,
        ],
        env={"VLLM_SERVER_DEV_MODE": "1"},
    )
    return {
        QWEN: qwen,
        QWEN_REPLICA: qwen,
        WHISPER: EngineSpec(
            WHISPER,
            models["whisper"],
            flags=["--max-model-len", "448", *silence_torchcodec],
            uds=True,
        ),
    }


def special_tokens(model_dir: Path) -> dict[str, int]:
    """A tiny model's special tokens by name (the Qwen2-Audio's `<|AUDIO|>` is 415), from its
    tokenizer."""
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    return {token["content"]: token["id"] for token in tokenizer["added_tokens"]}


def model_specs(models: dict[str, Path], media_root: Path) -> dict[str, EngineSpec]:
    """Voxtral, Audio Flamingo 3 and GLM-ASR, by served name: each with the model's own clip
    limit and window (a 45 s clip fits `--max-model-len`), the processor cache at its default,
    `--allowed-local-media-path` on `media_root`; Voxtral in Mistral's format and tokenizer."""
    soundfile = json.dumps({"audio": {"audio_backend": "soundfile"}})
    common = [
        *("--max-model-len", "2048", "--max-num-seqs", "16"),
        *("--max-num-batched-tokens", "4096"),
        *("--allowed-local-media-path", str(media_root)),
        *("--media-io-kwargs", soundfile),
    ]
    mistral = ["--tokenizer-mode", "mistral", "--config-format", "mistral"]
    return {
        VOXTRAL: EngineSpec(VOXTRAL, models["voxtral"], flags=[*common, *mistral]),
        AUDIO_FLAMINGO3: EngineSpec(AUDIO_FLAMINGO3, models["audio-flamingo3"], flags=common),
        GLM_ASR: EngineSpec(GLM_ASR, models["glm-asr"], flags=common),
    }
