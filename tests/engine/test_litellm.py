"""LiteLLM in front of the gateway in front of the real vLLM, driven with the openai SDK:

    client (openai SDK) -> LiteLLM proxy -> gateway process -> vLLM (`qwen_engine`)

The gateway and LiteLLM are real processes, started once for the module from
docs/guides/litellm.md's recipe by tests/litellm/processes.py (the LiteLLM suite's own code);
the page's deployment only names the engine's served model instead of `qwen2-audio`. What the
engine heard is read from its prompt token ids (`return_token_ids`, which LiteLLM passes to it
and whose `prompt_token_ids` it hands back on a plain answer): 25 `<|AUDIO|>` placeholders a
second of audio.

- A path in a chat content part (`file://` URL or relative) is resolved by the gateway and
  heard by the engine, streamed or not (a stream's chunks through LiteLLM lose the token ids:
  its `usage.prompt_tokens` is held to the plain answer's prompt).
- Chat `metadata.audio_path` does not reach the engine as audio through LiteLLM (the same body
  straight to the gateway does, so the assertion can fail).

Skipped without LiteLLM's venv like tests/litellm (a failure under CI=true), and without the
engine's like the rest of tests/engine (a failure where the engine is required)."""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from engine.server import EngineServer
from tests.litellm import recipe
from tests.litellm.processes import gateway, litellm_proxy
from tests.litellm.venv import require_litellm

from .conftest import Engines
from .helpers import BOUND_SECONDS, MAX_TOKENS, audio_tokens_for, chat_body, count, write_clip

require_litellm()  # a one-line skip without LiteLLM's venv (a failure under CI=true)

pytestmark = pytest.mark.timeout(180, func_only=True)
SECONDS = {"one.wav": 1.0, "two.wav": 2.0}
PROMPT = {"type": "text", "text": "What is in the audio?"}


@dataclass(frozen=True)
class Chain:
    litellm_url: str
    master_key: str
    model: str  # LiteLLM's model group
    gateway_url: str
    gateway_key: str
    clips: Path  # the gateway's root, under the engine's allowed media root


@pytest.fixture(scope="module")
def chain(
    qwen_engine: EngineServer, engines: Engines, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Chain]:
    home = tmp_path_factory.mktemp("litellm-engine")
    clips = Path(tempfile.mkdtemp(prefix="litellm-", dir=engines.media_root))
    for name, seconds in SECONDS.items():
        write_clip(clips, name, seconds)
    key, master_key = secrets.token_hex(32), "sk-" + secrets.token_hex(32)
    config = recipe.litellm_config()
    [group] = config["model_list"]
    group["litellm_params"]["model"] = f"hosted_vllm/{qwen_engine.spec.served_name}"
    try:
        with (
            gateway(home, "gateway", qwen_engine.url, clips, key) as gateway_url,
            litellm_proxy(require_litellm(), home, config, gateway_url=gateway_url,
                          gateway_key=key, master_key=master_key) as (url, _proxy),
        ):  # fmt: skip
            yield Chain(url, master_key, group["model_name"], gateway_url, key, clips)
    finally:
        shutil.rmtree(clips, ignore_errors=True)


def client_of(chain: Chain) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{chain.litellm_url}/v1", api_key=chain.master_key, max_retries=0,
        timeout=BOUND_SECONDS,
    )  # fmt: skip


def request(content: Any, **extra: Any) -> dict[str, Any]:
    """The create() arguments for one user message, with the engine's own parameters (which
    LiteLLM passes on) in extra_body."""
    return {
        "messages": [{"role": "user", "content": content}],
        "max_tokens": MAX_TOKENS,
        "extra_body": {"return_token_ids": True, "ignore_eos": True},
        **extra,
    }


def prompt_ids(chain: Chain, content: Any, **extra: Any) -> list[int]:
    """The prompt token ids vLLM built for one user message sent through LiteLLM, which hands
    back the engine's `prompt_token_ids` on a plain answer."""
    with client_of(chain) as client:
        completion = client.chat.completions.create(model=chain.model, **request(content, **extra))
    extras = completion.model_extra or {}
    assert "prompt_token_ids" in extras, completion.model_dump()
    ids: list[int] = extras["prompt_token_ids"]
    return ids


def streamed_prompt_tokens(chain: Chain, content: Any) -> int:
    """`usage.prompt_tokens` of one streamed request through LiteLLM, whose chunks drop the
    engine's `prompt_token_ids`."""
    with client_of(chain) as client:
        chunks = client.chat.completions.create(
            model=chain.model, stream=True, stream_options={"include_usage": True},
            **request(content),
        )  # fmt: skip
        with chunks:
            usages = [chunk.usage for chunk in chunks if chunk.usage is not None]
    assert usages, "no usage chunk"
    tokens: int = usages[-1].prompt_tokens
    return tokens


def audio_url(url: str) -> dict[str, Any]:
    return {"type": "audio_url", "audio_url": {"url": url}}


@pytest.mark.parametrize(("spelling", "clip"), [("file_url", "two.wav"), ("relative", "one.wav")])
def test_a_path_in_a_content_part_is_heard_by_the_engine_plain_and_streamed(
    chain: Chain, qwen_tokens: dict[str, int], spelling: str, clip: str
) -> None:
    url = (chain.clips / clip).as_uri() if spelling == "file_url" else clip
    content = [audio_url(url), PROMPT]
    ids = prompt_ids(chain, content)
    assert count(ids, qwen_tokens["<|audio_bos|>"]) == 1
    assert count(ids, qwen_tokens["<|AUDIO|>"]) == audio_tokens_for(SECONDS[clip])
    # The stream's prompt is the same one: without the clip it would be shorter by its
    # 25 placeholders a second and more.
    assert streamed_prompt_tokens(chain, content) == len(ids)


def test_chat_metadata_audio_path_does_not_reach_the_engine(
    chain: Chain, qwen_tokens: dict[str, int]
) -> None:
    metadata = {"audio_path": "two.wav"}
    ids = prompt_ids(chain, "What is in the audio?", metadata=metadata)
    assert count(ids, qwen_tokens["<|AUDIO|>"]) == 0
    # The same request straight to the gateway: the engine hears the clip.
    body = chat_body(metadata, return_token_ids=True)
    straight = urllib.request.Request(
        f"{chain.gateway_url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {chain.gateway_key}",
        },
    )
    with urllib.request.urlopen(straight, timeout=BOUND_SECONDS) as response:
        direct = json.load(response)["prompt_token_ids"]
    assert count(direct, qwen_tokens["<|AUDIO|>"]) == audio_tokens_for(SECONDS["two.wav"])
