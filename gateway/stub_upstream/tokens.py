"""vLLM 0.33's token-id fields on the stub's chat answers, produced when a request asks.

Shapes and places from vLLM 0.33's `entrypoints/openai/chat_completion/protocol.py` and
`serving.py`:
- `return_token_ids`: `prompt_token_ids` at the top of the answer (streamed: in the first
  chunk only) and `choices[].token_ids` (streamed: each chunk's new tokens);
- `logprobs` (with `top_logprobs` k): `choices[].logprobs.content`, one entry per generated
  token, `{"token", "logprob", "bytes", "top_logprobs": [k entries, the sampled one first]}`
  (streamed: each chunk's entries); a chunk that adds no token carries `{"content": []}` and
  `token_ids: []`, as vLLM's code path gives them;
- `return_tokens_as_token_ids`: tokens written `token_id:N` (the sampled entry's `bytes` stay
  those of its decoded text, top entries' those of the `token_id:N` string, as in vLLM).

The tokenizer is a deterministic toy: one token a word (its id from the word's crc32), a
chat template of role markers, and per audio clip `AUDIO_BOS`, N x `AUDIO_PAD`, `AUDIO_EOS`,
N from the clip's duration at `AUDIO_TOKENS_PER_SECOND` (Qwen2-Audio's rate), as a model's
processor expands its audio placeholder. `/tokenize` (prompt or chat form, as vLLM's) uses
the same template, so its ids equal the generation's `prompt_token_ids` for the same messages.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
from aiohttp import web

from .cache_control import admit_audio
from .media import ClipReport, StubRejection
from .mm_kwargs import check_request_mm_kwargs
from .parts import chat_message_clips
from .state import stub_state_key
from .wire import vllm_json

IM_START, IM_END, NEWLINE = 151644, 151645, 198
AUDIO_PAD, AUDIO_BOS, AUDIO_EOS = 151646, 151647, 151648
AUDIO_TOKENS_PER_SECOND = 25  # Qwen2-Audio: 100 mel frames/s, pooled 4x
PCM16_MONO_16K_BYTES_PER_SECOND = 32_000  # a clip without a stated length: its size, as PCM
WORD_IDS = 150_000  # word ids are 1000 + crc32 % WORD_IDS, below the special ids
MAX_MODEL_LEN = 4096
AUDIO_PART_TYPES = ("audio_url", "input_audio")


def word_token_id(word: str) -> int:
    return 1000 + zlib.crc32(word.encode()) % WORD_IDS


def audio_token_count(clip: ClipReport) -> int:
    """How many placeholder tokens the clip takes in the prompt: deterministic per clip."""
    seconds = clip.duration_seconds
    if seconds is None:
        seconds = clip.bytes / PCM16_MONO_16K_BYTES_PER_SECOND
    return max(1, math.ceil(seconds * AUDIO_TOKENS_PER_SECOND))


def prompt_token_ids(messages: list[Any], clips: list[ClipReport], generation: bool) -> list[int]:
    """The chat template applied: each message's role markers around its text and audio (the
    clips, in part order), then the assistant's turn when `generation` (vLLM's default)."""
    remaining = iter(clips)
    ids: list[int] = []
    for message in messages:
        ids += [IM_START, word_token_id(str(message.get("role"))), NEWLINE]
        ids += _content_ids(message.get("content"), remaining)
        ids += [IM_END, NEWLINE]
    if generation:
        ids += [IM_START, word_token_id("assistant"), NEWLINE]
    return ids


def _content_ids(content: Any, clips: Iterator[ClipReport]) -> list[int]:
    if isinstance(content, str):
        return [word_token_id(word) for word in content.split()]
    ids: list[int] = []
    for part in content if isinstance(content, list) else []:
        kind = part.get("type")
        if kind in AUDIO_PART_TYPES:
            ids += [AUDIO_BOS, *[AUDIO_PAD] * audio_token_count(next(clips)), AUDIO_EOS]
        elif isinstance(part.get("text"), str):
            ids += [word_token_id(word) for word in part["text"].split()]
    return ids


@dataclass(frozen=True, slots=True)
class TokenRequest:
    """What a chat request asks for, validated as vLLM's `check_logprobs` does."""

    token_ids: bool
    logprobs: bool
    top_logprobs: int
    as_token_ids: bool

    @classmethod
    def of(cls, body: dict[str, Any]) -> TokenRequest | None:
        """None when the request asks for no token field (the answer stays as it was)."""
        top = body.get("top_logprobs")
        if top is not None and (not isinstance(top, int | float) or isinstance(top, bool)):
            raise StubRejection("`top_logprobs` must be an integer.")
        if top is not None and top < 0:
            if top != -1:
                raise StubRejection("`top_logprobs` must be a positive value or -1.")
            raise StubRejection("the stub has no full vocabulary to return for top_logprobs=-1")
        if top and not body.get("logprobs"):
            raise StubRejection("when using `top_logprobs`, `logprobs` must be set to true.")
        asked = cls(
            bool(body.get("return_token_ids")),
            bool(body.get("logprobs")),
            int(top or 0),
            bool(body.get("return_tokens_as_token_ids")),
        )
        return asked if asked.token_ids or asked.logprobs else None


class TokenFields:
    """The token fields of one answer: generated tokens are the answer's pieces (reasoning
    first, as generated), each piece one token."""

    def __init__(
        self, asked: TokenRequest, messages: list[Any], clips: list[ClipReport], pieces: list[str]
    ) -> None:
        self.asked = asked
        self.prompt_ids = prompt_token_ids(messages, clips, generation=True)
        self.pieces = pieces
        self.ids = [word_token_id(piece.strip()) for piece in pieces]
        self._streamed = 0  # pieces already sent in stream chunks

    def answer(self, answer: dict[str, Any]) -> dict[str, Any]:
        """A whole (non-streamed) answer with its fields, in vLLM's places."""
        choice = answer["choices"][0]
        if self.asked.logprobs:
            choice["logprobs"] = self._logprobs(range(len(self.ids)))
        if self.asked.token_ids:
            choice["token_ids"] = self.ids
            answer["prompt_token_ids"] = self.prompt_ids
        self._usage(answer)
        return answer

    def chunk(self, chunk: dict[str, Any]) -> dict[str, Any]:
        """A stream chunk with its fields: the first chunk (the role) gets the prompt ids;
        each delta with text gets its token (the last one also carries `finish_reason`)."""
        self._usage(chunk)
        if not chunk["choices"]:
            return chunk
        choice, delta = chunk["choices"][0], chunk["choices"][0]["delta"]
        if "role" in delta:
            if self.asked.token_ids:
                chunk["prompt_token_ids"] = self.prompt_ids
            return chunk
        start = self._streamed
        ending = choice.get("finish_reason") is not None and self._streamed < len(self.pieces)
        if delta.get("content") or delta.get("reasoning") or delta.get("tool_calls") or ending:
            self._streamed += 1  # one piece a chunk, as the stub streams them
        new = range(start, self._streamed)
        if self.asked.logprobs:
            choice["logprobs"] = self._logprobs(new)
        if self.asked.token_ids:
            choice["token_ids"] = [self.ids[i] for i in new]
        return chunk

    def _usage(self, message: dict[str, Any]) -> None:
        usage = message.get("usage")
        if isinstance(usage, dict):
            usage["prompt_tokens"] = len(self.prompt_ids)
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]

    def _logprobs(self, indexes: range) -> dict[str, Any]:
        return {"content": [self._entry(i) for i in indexes]}

    def _entry(self, index: int) -> dict[str, Any]:
        token_id, text = self.ids[index], self.pieces[index]
        token = f"token_id:{token_id}" if self.asked.as_token_ids else text
        logprob = _logprob(token_id)
        top = [(token_id, token, logprob)]
        for rank in range(1, self.asked.top_logprobs):
            other = 1000 + (token_id - 1000 + rank) % WORD_IDS
            name = f"token_id:{other}" if self.asked.as_token_ids else f"<{other}>"
            top.append((other, name, logprob - rank))
        return {
            "token": token,
            "logprob": logprob,
            "bytes": list(text.encode()),
            "top_logprobs": [
                {"token": name, "logprob": value, "bytes": list(name.encode())}
                for _, name, value in top[: self.asked.top_logprobs]
            ],
        }


def _logprob(token_id: int) -> float:
    """A deterministic log probability in (-1, 0]."""
    return -(token_id % 997) / 1000


def token_fields(
    body: dict[str, Any], messages: list[Any], clips: list[ClipReport], pieces: list[str]
) -> TokenFields | None:
    """The answer's token fields when the request asks for any (else None)."""
    asked = TokenRequest.of(body)
    return TokenFields(asked, messages, clips, pieces) if asked is not None else None


async def tokenize(request: web.Request) -> web.Response:
    """vLLM's `/tokenize`: `{"prompt"}` or `{"messages"}` (the chat template, audio clips
    expanded to their placeholders); `return_token_strs` adds the tokens' text."""
    try:
        body = msgspec.json.decode(await request.read())
    except msgspec.DecodeError as exc:
        raise StubRejection(f"invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise StubRejection("the body must be a JSON object")
    if isinstance(body.get("messages"), list):
        messages = body["messages"]
        state = request.app[stub_state_key]
        check_request_mm_kwargs(body, state.trust_request_mm_kwargs)
        items = [item for message in messages for item in await chat_message_clips(message, state)]
        clips = (await admit_audio(request, body, items)).clips  # uuid-only parts: held items
        tokens = prompt_token_ids(messages, clips, bool(body.get("add_generation_prompt", True)))
        words = None
    else:
        words = str(body.get("prompt", "")).split()
        tokens = [word_token_id(word) for word in words]
    strs = (words or [f"<{t}>" for t in tokens]) if body.get("return_token_strs") else None
    return vllm_json(
        {"count": len(tokens), "max_model_len": MAX_MODEL_LEN, "tokens": tokens, "token_strs": strs}
    )
