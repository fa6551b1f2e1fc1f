"""Every sidechannel form through the gateway to the real vLLM, with the official `openai` SDK,
plain and streamed. What the engine heard is read from its own prompt token ids
(`return_token_ids`): 25 `<|AUDIO|>` placeholders per second of audio, one `<|audio_bos|>` per
clip; on the Responses bridge, which has no token ids, from `usage`."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI

from engine.server import EngineServer

from .helpers import (
    MAX_TOKENS,
    Client,
    audio_tokens_for,
    count,
    gateway_sdk,
    make_gateway_client,
    write_clip,
)

pytestmark = pytest.mark.timeout(180, func_only=True)
MODEL = "tiny-qwen2-audio"
PROMPT = [{"role": "user", "content": "What is in the audio?"}]
SECONDS = {"one.wav": 1.0, "two.wav": 2.0}


@pytest.fixture
def clips(clip_dir: Path) -> Path:
    for name, seconds in SECONDS.items():
        write_clip(clip_dir, name, seconds)
    return clip_dir


def data_uri(path: Path) -> str:
    return "data:audio/wav;base64," + base64.b64encode(path.read_bytes()).decode()


@pytest.fixture
async def sdk(
    qwen_engine: EngineServer, clips: Path, request: pytest.FixtureRequest
) -> AsyncIterator[AsyncOpenAI]:
    """The SDK on a gateway in front of the engine; `request.param` = config sections."""
    sections: dict[str, Any] = getattr(request, "param", {})
    async with gateway_sdk(qwen_engine, clips, **sections) as client:
        yield client


def heard(prompt_token_ids: list[int], tokens: dict[str, int]) -> tuple[int, int]:
    """(clips, audio placeholders) in a prompt the engine built."""
    return count(prompt_token_ids, tokens["<|audio_bos|>"]), count(
        prompt_token_ids, tokens["<|AUDIO|>"]
    )


# (id, gateway config sections, how the SDK call carries the sidechannel, clips sent)
FORMS: list[tuple[str, dict[str, Any], Any, list[str]]] = [
    ("audio_path", {}, lambda d: {"metadata": {"audio_path": "two.wav"}}, ["two.wav"]),
    (
        "audio_paths_list",
        {},
        lambda d: {"extra_body": {"metadata": {"audio_paths": ["one.wav", "two.wav"]}}},
        ["one.wav", "two.wav"],
    ),
    (
        "audio_paths_json_string",
        {},
        lambda d: {"metadata": {"audio_paths": json.dumps(["two.wav", "one.wav"])}},
        ["two.wav", "one.wav"],
    ),
    (
        "audio_data",
        {},
        lambda d: {"metadata": {"audio_data": data_uri(d / "one.wav")}},
        ["one.wav"],
    ),
    (
        "legacy_audio_url",
        {},
        lambda d: {"metadata": {"audio_url": data_uri(d / "two.wav")}},
        ["two.wav"],
    ),
    (
        "key_prefix",
        {"sidechannel": {"key_prefix": "gateway_"}},
        lambda d: {"metadata": {"gateway_audio_path": "one.wav", "run": "kept"}},
        ["one.wav"],
    ),
]


def form_cases() -> list[Any]:
    return [
        pytest.param(sections, carry, sent, stream, id=f"{name}-{'stream' if stream else 'plain'}")
        for name, sections, carry, sent in FORMS
        for stream in (False, True)
    ]


@pytest.mark.parametrize(("sections", "carry", "sent", "stream"), form_cases())
async def test_every_sidechannel_form_reaches_the_engine(
    qwen_engine: EngineServer,
    clips: Path,
    qwen_tokens: dict[str, int],
    sections: dict[str, Any],
    carry: Any,
    sent: list[str],
    stream: bool,
) -> None:
    gateway = await make_gateway_client(qwen_engine, clips, **sections)
    kwargs = carry(clips)
    # ignore_eos: random weights may sample an end token anywhere; always MAX_TOKENS
    kwargs.setdefault("extra_body", {}).update(return_token_ids=True, ignore_eos=True)
    try:
        async with AsyncOpenAI(
            base_url=str(gateway.make_url("/v1")), api_key="x", max_retries=0, timeout=60
        ) as client:
            if stream:
                chunks = [
                    chunk
                    async for chunk in await client.chat.completions.create(
                        model=MODEL, messages=PROMPT, max_tokens=MAX_TOKENS, stream=True, **kwargs
                    )
                ]
                prompt_ids = chunks[0].model_extra["prompt_token_ids"]  # on the role chunk
                assert chunks[-1].choices[0].finish_reason == "length"
                generated = [c.choices[0].model_extra.get("token_ids") for c in chunks if c.choices]
                assert sum(len(ids or []) for ids in generated) == MAX_TOKENS
            else:
                completion = await client.chat.completions.create(
                    model=MODEL, messages=PROMPT, max_tokens=MAX_TOKENS, **kwargs
                )
                prompt_ids = completion.model_extra["prompt_token_ids"]
                assert completion.usage is not None
                assert completion.usage.prompt_tokens == len(prompt_ids)
                assert len(completion.choices[0].model_extra["token_ids"]) == MAX_TOKENS
    finally:
        await gateway.close()
    expected = sum(audio_tokens_for(SECONDS[name]) for name in sent)
    assert heard(prompt_ids, qwen_tokens) == (len(sent), expected)


async def chat_prompt_ids(gateway: Client, metadata: dict[str, Any], **extra: Any) -> list[int]:
    body = {
        "model": MODEL,
        "messages": PROMPT,
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "metadata": metadata,
        "return_token_ids": True,
        **extra,
    }
    response = await gateway.post("/v1/chat/completions", json=body)
    text = await response.text()
    assert response.status == 200, text
    ids: list[int] = json.loads(text)["prompt_token_ids"]
    return ids


@pytest.mark.parametrize("part", ["input_audio", "audio_url"])
async def test_both_chat_part_kinds(
    qwen_engine: EngineServer, clips: Path, qwen_tokens: dict[str, int], part: str
) -> None:
    gateway = await make_gateway_client(qwen_engine, clips, splice={"chat_part": part})
    try:
        ids = await chat_prompt_ids(gateway, {"audio_paths": ["one.wav", "two.wav"]})
    finally:
        await gateway.close()
    assert heard(ids, qwen_tokens) == (2, 25 + 50)


async def test_file_url_mode_has_the_engine_read_the_file(
    qwen_engine: EngineServer, clips: Path, qwen_tokens: dict[str, int]
) -> None:
    gateway = await make_gateway_client(qwen_engine, clips, splice={"mode": "file_url"})
    try:
        ids = await chat_prompt_ids(gateway, {"audio_path": "two.wav"})
    finally:
        await gateway.close()
    assert heard(ids, qwen_tokens) == (1, 50)


async def test_file_url_outside_the_allowed_media_path_is_the_engines_400(
    qwen_engine: EngineServer, tmp_path: Path
) -> None:
    # The gateway's root is outside --allowed-local-media-path: vLLM itself refuses the file,
    # which shows the file_url test above had the engine read the file.
    write_clip(tmp_path, "outside.wav", 1.0)
    gateway = await make_gateway_client(qwen_engine, tmp_path, splice={"mode": "file_url"})
    try:
        body = {"model": MODEL, "messages": PROMPT, "metadata": {"audio_path": "outside.wav"}}
        response = await gateway.post("/v1/chat/completions", json=body)
        text = await response.text()
    finally:
        await gateway.close()
    assert response.status == 400, text
    assert "allowed-local-media-path" in text or "allowed_local_media_path" in text, text


RESPONSES_FORMS = [
    pytest.param({"metadata": {"audio_path": "two.wav"}}, ["two.wav"], id="audio_path"),
    pytest.param(
        {"metadata": {"audio_paths": json.dumps(["one.wav", "two.wav"])}},
        ["one.wav", "two.wav"],
        id="audio_paths_json_string",
    ),
    pytest.param(
        {"extra_body": {"metadata": {"audio_paths": ["two.wav", "one.wav"]}}},
        ["two.wav", "one.wav"],
        id="audio_paths_list",
    ),
]


@pytest.mark.parametrize(("carry", "sent"), RESPONSES_FORMS)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_the_responses_bridge(
    qwen_engine: EngineServer,
    clips: Path,
    qwen_tokens: dict[str, int],
    carry: dict[str, Any],
    sent: list[str],
    stream: bool,
) -> None:
    gateway = await make_gateway_client(qwen_engine, clips)
    try:
        # The same conversation as chat, with token ids: what the bridge's usage must equal.
        metadata = carry.get("metadata") or carry["extra_body"]["metadata"]
        chat_ids = await chat_prompt_ids(gateway, dict(metadata))
        async with AsyncOpenAI(
            base_url=str(gateway.make_url("/v1")), api_key="x", max_retries=0, timeout=60
        ) as client:
            question = PROMPT[0]["content"]
            if stream:
                events = [
                    event
                    async for event in await client.responses.create(
                        model=MODEL, input=question, max_output_tokens=MAX_TOKENS, stream=True,
                        **carry,
                    )
                ]  # fmt: skip
                answer = events[-1].response
                assert events[-1].type == f"response.{answer.status}", events[-1]
            else:
                answer = await client.responses.create(
                    model=MODEL, input=question, max_output_tokens=MAX_TOKENS, **carry
                )
    finally:
        await gateway.close()
    expected = sum(audio_tokens_for(SECONDS[name]) for name in sent)
    assert heard(chat_ids, qwen_tokens) == (len(sent), expected)
    assert answer.usage is not None
    assert answer.usage.input_tokens == len(chat_ids)
    # Cut at max_output_tokens (vLLM's finish_reason "length"), unless the random weights
    # sampled an end token first (the bridge has no ignore_eos).
    assert 1 <= answer.usage.output_tokens <= MAX_TOKENS
    if answer.usage.output_tokens == MAX_TOKENS:
        assert answer.status == "incomplete"
        assert answer.incomplete_details is not None
        assert answer.incomplete_details.reason == "max_output_tokens"
    else:
        assert answer.status == "completed"


async def test_a_missing_clip_never_reaches_the_engine(sdk: AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        await sdk.chat.completions.create(
            model=MODEL, messages=PROMPT, metadata={"audio_path": "missing.wav"}
        )
    assert raised.value.param == "metadata.audio_path"
