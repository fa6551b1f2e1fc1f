"""vLLM's request path without an engine, as fixtures (vLLM is imported when one is used).

`vllm_chat(body)` does what a vLLM server does with a chat body before the engine: validate it
(`ChatCompletionRequest`), parse its messages (`parse_chat_messages_async`, with a tracker that
needs no ModelConfig or HF processor) and load its media with the `MediaConnector` behind it;
`--allowed-local-media-path` is the stub's (the audio root's parent). `make_vllm_chat(path)`
builds the same path with another `--allowed-local-media-path` (None: the flag unset).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy
import pytest

Decoded = tuple[numpy.ndarray, float]


@dataclass
class VllmResult:
    request: Any  # vLLM's ChatCompletionRequest
    conversation: list[dict[str, Any]]
    audio: list[Decoded]
    uuids: list[str | None]
    images: list[Any]


VllmChat = Callable[[dict[str, Any]], Awaitable[VllmResult]]


def starlette_json(error: Any) -> str:
    """vLLM's ErrorResponse as its JSONResponse writes it (Starlette's compact json.dumps)."""
    return json.dumps(error.model_dump(), ensure_ascii=False, separators=(",", ":"))


@pytest.fixture
def make_vllm_chat(monkeypatch: pytest.MonkeyPatch) -> Callable[[str | None], VllmChat]:
    """`make_vllm_chat(allowed_local_media_path)`: vLLM's chat path with that flag."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.renderers.chat_utils import chat_message

        from bench.vllm_frontend_cpu.run import ModelFreeTracker

    monkeypatch.setattr(chat_message, "AsyncMultiModalItemTracker", ModelFreeTracker)

    def make(allowed_local_media_path: str | None) -> VllmChat:
        model_config = SimpleNamespace(
            multimodal_config=None,
            allowed_local_media_path=allowed_local_media_path,
            allowed_media_domains=None,
            hf_config=SimpleNamespace(),
            is_multimodal_model=True,
            enable_prompt_embeds=False,
        )

        async def run(body: dict[str, Any]) -> VllmResult:
            request = ChatCompletionRequest.model_validate(body)
            conversation, mm_data, mm_uuids = await chat_message.parse_chat_messages_async(
                request.messages, model_config, "string"
            )
            mm_data, mm_uuids = mm_data or {}, mm_uuids or {}
            return VllmResult(
                request,
                conversation,
                list(mm_data.get("audio", [])),
                list(mm_uuids.get("audio", [])),
                list(mm_data.get("image", [])),
            )

        return run

    return make


@pytest.fixture
def vllm_chat(make_vllm_chat: Callable[[str | None], VllmChat], audio_dir: Path) -> VllmChat:
    """vLLM's chat path with the stub's `--allowed-local-media-path` (the audio root's parent)."""
    return make_vllm_chat(str(audio_dir.parent))
