"""The real engine the system, replicas and pairs benches run: vLLM 0.32's CPU build serving the
tiny Qwen2-Audio of engine/models.py, its flags, and the chat body every one of them sends."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

MODEL = "tiny-qwen2-audio"
SEEDS = 16
# The modes whose client inlines each clip as a data URI (NeMo Gym's chat path, Skills): vLLM
# alone, and the gateway sending the client's inline audio by reference.
INLINE_MODES = ("vllm-direct", "gateway-inline-reference")
MAX_TOKENS = 4
ENGINE_FLAGS = (
    "--max-model-len", "2048", "--max-num-seqs", "16", "--max-num-batched-tokens", "4096",
    "--limit-mm-per-prompt", '{"audio": 2}',
)  # fmt: skip


def chat_body(clip: Path | None, mode: str, history: list[dict[str, Any]]) -> dict[str, Any]:
    """A chat body whose new user turn carries `clip` (as a data URI for INLINE_MODES, else as
    `metadata.audio_path`, which the gateway splices into that turn); None: text only."""
    text = {"type": "text", "text": "What is said in this clip?"}
    body: dict[str, Any] = {"model": MODEL, "max_tokens": MAX_TOKENS, "temperature": 0.0}
    content: Any = [text]
    if clip is None:
        content = "Say something."
    elif mode in INLINE_MODES:
        mime = {"wav": "audio/wav", "flac": "audio/flac", "mp3": "audio/mpeg"}[clip.suffix[1:]]
        uri = f"data:{mime};base64,{base64.b64encode(clip.read_bytes()).decode()}"
        content = [{"type": "audio_url", "audio_url": {"url": uri}}, text]
    else:
        body["metadata"] = {"audio_path": clip.name}
    body["messages"] = [*history, {"role": "user", "content": content}]
    return body
