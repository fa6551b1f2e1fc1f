"""What the stub remembers: every request (when recording), counters, and the hold gate."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .api_servers import ApiServers
from .body_log import BodyLog
from .mm_cache import DEFAULT_CACHE_GB, GIB, MmProcessorCache


@dataclass
class ReceivedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    # Every header line as it came, in order, repeats kept (`headers` keeps one per name).
    raw_headers: tuple[tuple[str, str], ...] = ()

    def header_values(self, name: str) -> list[str]:
        """Every value sent under `name`, in any case."""
        return [value for key, value in self.raw_headers if key.lower() == name.lower()]


@dataclass
class StubState:
    allowed_local_media_path: str | None = None
    allowed_media_domains: tuple[str, ...] | None = None  # None: any host (vLLM's default)
    audio_fetch_timeout_seconds: float = 10.0
    record: bool = True
    responses_accept_audio: bool = False
    trust_request_mm_kwargs: bool = False  # vLLM's --trust-request-mm-kwargs
    requests: list[ReceivedRequest] = field(default_factory=list)
    last_report: dict[str, Any] | None = None  # the `stub` report of the last model request
    request_count: int = 0
    in_flight: int = 0  # requests being answered now (vllm:num_requests_running)
    # (handler, method, status class) -> answers, as vLLM's http_requests_total counts them
    audio_requests: int = 0
    rejected: int = 0
    decodes: int = 0  # audio items the stub decoded (a uuid-only part decodes nothing)
    mm_cache: MmProcessorCache = field(
        default_factory=lambda: MmProcessorCache(int(DEFAULT_CACHE_GB * GIB))
    )
    mm_preprocess_delay_seconds: float = 0.0
    # Several API-server processes, each with its own cache (None: one, `mm_cache`).
    api_servers: ApiServers | None = None
    body_log: BodyLog | None = None
    streams_finished: int = 0
    cancelled: int = 0
    hold: asyncio.Event = field(default_factory=asyncio.Event)
    websocket_sessions: int = 0
    # per ended WebSocket session: the close code and reason the stub received (None: none came)
    websocket_closes: list[tuple[int | None, str]] = field(default_factory=list)
    health_status: int = 200  # what GET /health answers (vLLM: 200, or 503 once its engine died)

    def caches(self) -> list[MmProcessorCache]:
        """Every API server's processor cache (`mm_cache` is the first)."""
        return self.api_servers.caches if self.api_servers is not None else [self.mm_cache]

    def cache_for(self, request: web.Request) -> MmProcessorCache:
        """The cache of the API server this request reached."""
        return self.mm_cache if self.api_servers is None else self.api_servers.cache_for(request)


stub_state_key = web.AppKey("stub_state_key", StubState)
