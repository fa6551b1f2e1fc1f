"""vLLM's request path without an engine, as fixtures (vLLM is imported when one is used).

`vllm_chat(body)` does what a vLLM server does with a chat body before the engine: validate it
(`ChatCompletionRequest`), parse its messages (`parse_chat_messages_async`, with a tracker that
needs no ModelConfig or HF processor) and load its media with the `MediaConnector` behind it;
`--allowed-local-media-path` is the stub's (the audio root's parent).
"""

from __future__ import annotations

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


@pytest.fixture
def vllm_chat(monkeypatch: pytest.MonkeyPatch, audio_dir: Path) -> VllmChat:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.renderers.chat_utils import chat_message

        from bench.vllm_frontend_cpu import ModelFreeTracker

    monkeypatch.setattr(chat_message, "AsyncMultiModalItemTracker", ModelFreeTracker)
    model_config = SimpleNamespace(
        multimodal_config=None,
        allowed_local_media_path=str(audio_dir.parent),
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
