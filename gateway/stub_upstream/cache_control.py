"""The multimodal cache at request time, and the routes that empty it.

`admit_audio` is what one chat request does to the cache (after its media were loaded: the
preprocessing delay, then vLLM's check-and-record); the routes are vLLM 0.33's `/pause`
(`entrypoints/rl/online/api_router.py`), `/sleep`, `/wake_up`, `/release_kv_cache_memory`
(`serve/dev/sleep/api_router.py`) and `/reset_mm_cache` (`serve/dev/cache/api_router.py`), with
their query parameters and answers; plus the stub's own `GET /stub/state` and
`POST /stub/mm_cache/lose` (P1 drift on demand). The stub does not model what pausing or
sleeping does to generation: requests are still answered.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from aiohttp import web

from .media import ClipReport, StubRejection
from .mm_cache import (
    DEFAULT_CACHE_GB,
    Admission,
    AudioItem,
    MmProcessorCache,
    hash_factors,
    item_key,
)
from .state import stub_state_key
from .wire import vllm_json

LOSE_IN_ENGINE_HEADER = "X-Stub-Mm-Drift"  # "1": the engine (P1) lost this request's held items
PAUSE_MODES = ("abort", "wait", "keep")  # vllm.v1.engine.PauseMode
TRUE_WORDS = {"1", "true", "on", "yes", "t", "y"}  # pydantic's bool parsing of a query value
FALSE_WORDS = {"0", "false", "off", "no", "f", "n"}


async def admit_audio(
    request: web.Request, body: dict[str, Any], items: list[AudioItem]
) -> Admission:
    """A request carrying data first waits the preprocessing delay (vLLM decodes before it
    checks the cache), so a concurrent uuid-only request for the same clip can miss."""
    state = request.app[stub_state_key]
    if state.mm_preprocess_delay_seconds > 0 and any(isinstance(i, ClipReport) for i in items):
        await asyncio.sleep(state.mm_preprocess_delay_seconds)
    factors = hash_factors(body)
    keys = [item_key(item, str(body.get("model", "")), factors) for item in items]
    lose = request.headers.get(LOSE_IN_ENGINE_HEADER) == "1"
    return state.cache_for(request).admit(items, keys, lose_in_engine=lose)


def add_mm_cache_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mm-processor-cache-gb",
        type=float,
        default=DEFAULT_CACHE_GB,
        help="vLLM's multimodal processor cache size in GiB (0: off; default %(default)s)",
    )
    parser.add_argument(
        "--mm-engine-cache-gb",
        type=float,
        default=None,
        help="the engine replica's size (default: the same); smaller makes the two drift",
    )
    parser.add_argument(
        "--api-server-count",
        type=int,
        default=1,
        help="vLLM's flag: API-server processes, each with its own processor cache; each new "
        "connection reaches the next one in turn",
    )
    parser.add_argument(
        "--api-server-per-request",
        action="store_true",
        help="with --api-server-count: each request reaches the next API server (a proxy "
        "balancing requests), not each connection",
    )
    parser.add_argument(
        "--mm-preprocess-delay-ms",
        type=float,
        default=0.0,
        help="how long a request carrying audio data takes before its clips are held",
    )
    parser.add_argument(
        "--record-bodies",
        default=None,
        metavar="PATH",
        help="write every chat-completions body received to PATH, one JSON object a line",
    )


def add_cache_control_routes(app: web.Application) -> None:
    app.router.add_post("/pause", pause)
    app.router.add_post("/resume", resume)
    app.router.add_post("/sleep", sleep)
    app.router.add_post("/wake_up", wake_up)
    app.router.add_post("/release_kv_cache_memory", release_kv_cache_memory)
    app.router.add_post("/reset_mm_cache", reset_mm_cache)
    app.router.add_get("/stub/state", stub_state)
    app.router.add_post("/stub/mm_cache/lose", lose_in_engine)


async def pause(request: web.Request) -> web.Response:
    """`mode` abort|wait|keep, `clear_cache` (default true) empties the cache in every mode."""
    _choice(request, "mode", PAUSE_MODES)
    if _flag(request, "clear_cache", True):
        _clear(request)
    return vllm_json({"status": "paused"})


async def resume(request: web.Request) -> web.Response:
    return vllm_json({"status": "resumed"})


async def sleep(request: web.Request) -> web.Response:
    """`level` 0-2 (default 1; from 1 the cache is emptied), `mode` as for /pause."""
    raw = request.query.get("level", "1")
    if not raw.lstrip("-").isdigit() or not 0 <= int(raw) <= 2:
        raise _query_error("level", "an integer from 0 to 2", raw)
    _choice(request, "mode", PAUSE_MODES)
    if int(raw) >= 1:
        _clear(request)
    return vllm_json({"status": "sleeping", "level": int(raw)})


async def wake_up(request: web.Request) -> web.Response:
    tags = request.query.getall("tags", []) or None
    return vllm_json({"status": "awake", "tags": tags})


async def release_kv_cache_memory(request: web.Request) -> web.Response:
    _clear(request)
    return vllm_json({"status": "kv_cache_released"})


async def reset_mm_cache(request: web.Request) -> web.Response:
    _clear(request)
    return web.Response(status=200)  # vLLM answers an empty 200


async def stub_state(request: web.Request) -> web.Response:
    """The counters tests and the bench read from a stub in another process."""
    state = request.app[stub_state_key]
    return vllm_json(
        {
            "request_count": state.request_count,
            "audio_requests": state.audio_requests,
            "rejected": state.rejected,
            "decodes": state.decodes,
            "streams_finished": state.streams_finished,
            "mm_cache": summed_stats(state.caches()),
            "api_servers": [cache.stats() for cache in state.caches()],
        }
    )


def summed_stats(caches: list[MmProcessorCache]) -> dict[str, int]:
    """The API servers' caches as one (each server's counters added up)."""
    total: dict[str, int] = {}
    for cache in caches:
        for name, value in cache.stats().items():
            total[name] = total.get(name, 0) + value
    return total


def _clear(request: web.Request) -> None:
    for cache in request.app[stub_state_key].caches():
        cache.clear()


async def lose_in_engine(request: web.Request) -> web.Response:
    """Body `{"keys": [...]}` (absent or null: every key): the engine's replica drops them."""
    raw = await request.read()  # cached: the recording middleware may have read it already
    try:
        body = json.loads(raw) if raw.strip() else {}
    except ValueError:
        raise StubRejection("the body must be JSON", param="keys") from None
    keys = body.get("keys") if isinstance(body, dict) else None
    if keys is not None and not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
        raise StubRejection("keys must be a list of strings", param="keys")
    caches = request.app[stub_state_key].caches()
    lost = sum(cache.lose_in_engine(keys) for cache in caches)
    return vllm_json({"lost": lost})


def _choice(request: web.Request, name: str, allowed: tuple[str, ...]) -> str:
    value = request.query.get(name, allowed[0])
    if value not in allowed:
        raise _query_error(name, f"one of {list(allowed)}", value)
    return value


def _flag(request: web.Request, name: str, default: bool) -> bool:
    raw = request.query.get(name)
    if raw is None:
        return default
    if raw.lower() in TRUE_WORDS | FALSE_WORDS:
        return raw.lower() in TRUE_WORDS
    raise _query_error(name, "a valid boolean", raw)


def _query_error(name: str, expected: str, value: str) -> StubRejection:
    """vLLM's handler for FastAPI's RequestValidationError: a 400 "Bad Request" naming
    `query.<name>` (`exception_handling/handlers/validation.py`); the message is shorter."""
    error = {"loc": f"query.{name}", "msg": f"Input should be {expected}", "input": value}
    message = f"1 validation error:\n  {error}"
    return StubRejection(message, param=f"query.{name}", kind="Bad Request")
