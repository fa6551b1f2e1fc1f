"""The end-to-end path in one test: a path sidechannel reaches the stub byte-identical."""

from __future__ import annotations

from pathlib import Path

from gateway.stub_upstream import StubState
from tests.conftest import chat_body, sha256_of


async def test_audio_path_arrives_byte_identical(gateway, stub: StubState, audio_dir: Path) -> None:
    response = await gateway.post("/v1/chat/completions", json=chat_body({"audio_path": "a.wav"}))
    assert response.status == 200, await response.text()
    answer = await response.json()
    clips = answer["stub"]["clips"]
    assert [clip["sha256"] for clip in clips] == [sha256_of(audio_dir / "a.wav")]
    assert clips[0]["mime"] == "audio/wav"
    assert answer["stub"]["has_metadata"] is False
    assert answer["stub"]["last_message_part_types"] == ["audio_url", "text"]
