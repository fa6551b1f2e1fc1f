"""Clips by reference (`[splice] repeats = "reference"`), judged by vLLM's own code (0.33, 0.34).

The first request carries the clip's data and its uuid; the stub, like vLLM, then holds it,
and the repeat goes as the uuid alone. vLLM must take both bodies the gateway sent: the first
decodes to the clip, the second gives the uuid and no data, with the same prompt.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.vllm_compat.versions import require_vllm

require_vllm()

from gateway.stub_upstream import StubState  # noqa: E402
from tests.conftest import GatewayFactory, chat_body  # noqa: E402
from tests.vllm_compat.conftest import VllmChat  # noqa: E402

REFERENCE = {"repeats": "reference"}
VARIANTS: dict[str, dict[str, Any]] = {
    "chat/audio-url": {"splice": REFERENCE},
    "chat/input-audio": {"splice": {**REFERENCE, "chat_part": "input_audio"}},
    "responses/chat-bridge": {"splice": REFERENCE, "responses": {"audio": "chat_bridge"}},
}


async def send(gateway: Any, sections: dict[str, Any]) -> None:
    metadata = {"audio_path": "b.wav"}
    if "responses" in sections:
        body = {"model": "stub-audio-model", "input": "Transcribe the audio.", "metadata": metadata}
        response = await gateway.post("/v1/responses", json=body)
    else:
        response = await gateway.post("/v1/chat/completions", json=chat_body(metadata))
    assert response.status == 200, await response.text()


@pytest.mark.parametrize("name", list(VARIANTS))
async def test_vllm_takes_the_data_then_the_uuid_alone(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, vllm_chat: VllmChat, name: str
) -> None:
    sections = VARIANTS[name]
    gateway = await make_gateway(**sections)
    key = hashlib.sha256((audio_dir / "b.wav").read_bytes()).hexdigest()
    results = []
    for _ in range(2):
        await send(gateway, sections)
        results.append(await vllm_chat(json.loads(stub.requests[-1].body)))
    with_data, by_reference = results
    assert len(with_data.audio) == 1 and with_data.audio[0] is not None
    assert by_reference.audio == [None]  # the uuid alone: vLLM loads nothing
    assert with_data.uuids == by_reference.uuids == [key]
    assert with_data.conversation == by_reference.conversation
