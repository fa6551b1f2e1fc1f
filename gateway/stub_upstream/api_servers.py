"""Layouts of vLLM's front end that defeat references, for tests and the bench.

- **Several API servers** (`--api-server-count N`, or data parallelism with its internal load
  balancer): vLLM 0.32 gives each API-server process a processor cache of its own
  (`multimodal/cache/factories.py`: IPC caching only with one API process) and the processes
  share one port, the kernel handing each new connection to one of them. `ApiServers` holds one
  `MmProcessorCache` per process and gives each connection the next process in turn (with
  `per_request`, each request: a proxy balancing requests over N servers).
- **`--tokenizer-mode mistral`** (Voxtral): vLLM hands the raw messages to mistral-common,
  which validates each audio chunk while rendering the chat template, before any cache is
  asked: a uuid-only part is a 400 even when the clip is held (`renderers/mistral.py`); a part
  with data and a uuid is taken. `refuse_uuid_only` raises that 400.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from aiohttp import web

from .media import StubRejection
from .mm_cache import MmProcessorCache

TokenizerMode = Literal["auto", "mistral"]

# pydantic's messages, as mistral-common's AudioURLChunk / AudioChunk raise them (vLLM 0.32).
AUDIO_URL_CHUNK_ERROR = (
    "2 validation errors for AudioURLChunk\n"
    "audio_url.str\n"
    "  Input should be a valid string [type=string_type, input_value=None, "
    "input_type=NoneType]\n"
    "audio_url.AudioURL\n"
    "  Input should be a valid dictionary or instance of AudioURL [type=model_type, "
    "input_value=None, input_type=NoneType]"
)
AUDIO_CHUNK_ERROR = (
    "1 validation error for AudioChunk\n"
    "input_audio\n"
    "  Input should be a valid dictionary or instance of RawAudio [type=model_type, "
    "input_value=None, input_type=NoneType]"
)


class ApiServers:
    """One processor cache per API-server process; a connection stays with its process."""

    def __init__(self, caches: list[MmProcessorCache], *, per_request: bool = False) -> None:
        self.caches = caches
        self.per_request = per_request
        self._turn = 0
        self._by_connection: dict[int, MmProcessorCache] = {}

    def __iter__(self) -> Iterator[MmProcessorCache]:
        return iter(self.caches)

    def cache_for(self, request: web.Request) -> MmProcessorCache:
        """The cache of the process this request reached."""
        if len(self.caches) == 1:
            return self.caches[0]
        if self.per_request:
            return self._next()
        connection = id(request.protocol)
        cache = self._by_connection.get(connection)
        if cache is None:
            if len(self._by_connection) > 4096:  # closed connections' ids: forget them
                self._by_connection.clear()
            self._by_connection[connection] = cache = self._next()
        return cache

    def _next(self) -> MmProcessorCache:
        cache = self.caches[self._turn % len(self.caches)]
        self._turn += 1
        return cache


def refuse_uuid_only(messages: Any) -> None:
    """mistral-common's 400 for the first audio part without data (a uuid-only part)."""
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            if not isinstance(part, dict) or part.get("uuid") is None:
                continue
            if part.get("type") == "audio_url" and not _url(part.get("audio_url")):
                raise StubRejection(AUDIO_URL_CHUNK_ERROR)
            if part.get("type") == "input_audio" and not _data(part.get("input_audio")):
                raise StubRejection(AUDIO_CHUNK_ERROR)


def _url(value: Any) -> Any:
    return value.get("url") if isinstance(value, dict) else value


def _data(value: Any) -> Any:
    return value.get("data") if isinstance(value, dict) else value
