"""Long audio split into pieces (`[chunking]`), judged by vLLM's own code (0.33 and 0.34).

A clip longer than the threshold goes upstream as one chat request per piece, each carrying
its piece as a WAV data URI. vLLM must take every piece's body and decode one clip from each,
at the clip's rate, and the pieces must add up to the clip.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile

from tests.vllm_compat.versions import require_vllm

require_vllm()

from gateway.audio.samples import write_tone  # noqa: E402
from gateway.stub_upstream import StubState  # noqa: E402
from tests.conftest import GatewayFactory, chat_body  # noqa: E402
from tests.vllm_compat.conftest import VllmChat  # noqa: E402

CHUNKING = {
    "enabled": True,
    "threshold_seconds": 1.0,
    "max_chunk_seconds": 1.0,
    "quiet_search_seconds": 0.3,
}


@pytest.mark.parametrize("chat_part", ["audio_url", "input_audio"])
async def test_vllm_takes_every_piece_of_a_split_clip(
    make_gateway: GatewayFactory,
    stub: StubState,
    audio_dir: Path,
    vllm_chat: VllmChat,
    chat_part: str,
) -> None:
    clip = write_tone(audio_dir / "long.wav", 2.5, 440.0)
    gateway = await make_gateway(chunking=CHUNKING, splice={"chat_part": chat_part})
    response = await gateway.post(
        "/v1/chat/completions", json=chat_body({"audio_path": "long.wav"})
    )
    assert response.status == 200, await response.text()
    pieces = [r for r in stub.requests if r.path == "/v1/chat/completions"]
    assert len(pieces) >= 3
    frames = 0
    for received in pieces:
        result = await vllm_chat(json.loads(received.body))
        [(samples, rate)] = result.audio
        assert rate == soundfile.info(clip).samplerate
        frames += len(samples)
        assert result.conversation[-1]["content"].count("<audio ") == 1
    assert frames == soundfile.info(clip).frames
