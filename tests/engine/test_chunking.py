"""`[chunking]` against the real vLLM: a 45 s clip is split so the engine hears all of it (the
audio tokens summed over the pieces are the clip's 45 s), plain and streamed; the same clip
unsplit is heard for its first 30 s only (750 audio tokens, no error), as vLLM truncates it.
A chunked answer has no token ids, so the pieces are read from the summed `usage`."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.server import EngineServer
from tests.conftest import gateway_metrics

from .helpers import (
    CHAT,
    MAX_AUDIO_TOKENS,
    MAX_TOKENS,
    TOKENS_PER_SECOND,
    chat_body,
    count,
    make_gateway_client,
    post_json,
    stream_chat,
    write_clip,
)

pytestmark = pytest.mark.timeout(180, func_only=True)
SECONDS = 45.0
CHUNKING = {
    "enabled": True,
    "threshold_seconds": 30.0,
    "max_chunk_seconds": 30.0,
    "split": "fixed",  # 30 s + 15 s: the pieces' lengths, so their token counts, are known
}


async def unsplit_prompt(engine: EngineServer, clip_dir: Path, qwen_tokens: dict[str, int]) -> int:
    """The prompt tokens of the unsplit request, after asserting it heard 30 s."""
    gateway = await make_gateway_client(engine, clip_dir)
    try:
        body = chat_body({"audio_path": "long.wav"}, return_token_ids=True)
        answer = await post_json(gateway, CHAT, body)
    finally:
        await gateway.close()
    ids = answer["prompt_token_ids"]
    assert count(ids, qwen_tokens["<|AUDIO|>"]) == MAX_AUDIO_TOKENS
    assert answer["usage"]["prompt_tokens"] == len(ids)
    return len(ids)


async def test_unsplit_the_engine_hears_the_first_30_seconds(
    qwen_engine: EngineServer, clip_dir: Path, qwen_tokens: dict[str, int]
) -> None:
    write_clip(clip_dir, "long.wav", SECONDS)
    await unsplit_prompt(qwen_engine, clip_dir, qwen_tokens)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_split_the_engine_hears_all_of_it(
    qwen_engine: EngineServer, clip_dir: Path, qwen_tokens: dict[str, int], stream: bool
) -> None:
    write_clip(clip_dir, "long.wav", SECONDS)
    # Everything but the audio placeholders, once per piece: from the unsplit request.
    text_tokens = await unsplit_prompt(qwen_engine, clip_dir, qwen_tokens) - MAX_AUDIO_TOKENS

    # Placed as deployed (vLLM's /v1/models names the model's directory): Qwen2-Audio's profile
    # cuts at its 30 s window, as the global settings do.
    placement = {"ask_upstream": True}
    gateway = await make_gateway_client(
        qwen_engine, clip_dir, chunking=CHUNKING, placement=placement
    )
    try:
        body = chat_body({"audio_path": "long.wav"})
        if stream:
            body["stream_options"] = {"include_usage": True}
            events = await stream_chat(gateway, body)
            assert events[-1] == "[DONE]"
            usage = events[-2]["usage"]
            finish = [e["choices"][0]["finish_reason"] for e in events[:-1] if e["choices"]]
            assert finish[-1] == "length"
        else:
            answer = await post_json(gateway, CHAT, body)
            usage = answer["usage"]
            assert answer["choices"][0]["finish_reason"] == "length"
        metrics = await gateway_metrics(gateway)
        placed = (await (await gateway.get("/gateway/health")).json())["models"]
    finally:
        await gateway.close()
    assert placed["tiny-qwen2-audio"]["architecture"] == "Qwen2AudioForConditionalGeneration"
    assert placed["tiny-qwen2-audio"]["placed_by"].startswith("model directory ")
    assert metrics["audio_gateway_audio_chunks_total"] == 2
    assert usage["completion_tokens"] == 2 * MAX_TOKENS
    heard_tokens = usage["prompt_tokens"] - 2 * text_tokens
    assert heard_tokens == SECONDS * TOKENS_PER_SECOND  # 750 + 375
