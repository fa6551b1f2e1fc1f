"""The stub's `/metrics`: the vLLM series a client, the gateway's docs and the dashboard read.

- `vllm:mm_cache_queries_total` / `vllm:mm_cache_hits_total`, labelled `engine="0"` and
  `model_name`, counted as vLLM 0.32 counts them (`mm_cache.py`): every item of an admitted
  request, uuid-only or with data, is a query; a hit when the processor cache held its key.
  A refused request (a uuid-only miss, any other 400) counts nothing there.
- The request queue (`vllm:num_requests_running`, `vllm:num_requests_waiting`): the stub has
  no queue, so the POSTs in flight, and 0.
- `vllm:request_success_total{finished_reason}`: every request the stub answered.
- `http_requests_total{handler,method,status}`, as vLLM's prometheus-fastapi-instrumentator
  counts answers: by route, method and status class ("2xx", "4xx", ...), with `/metrics`,
  `/health`, `/load`, `/ping`, `/version` and `/server_info` left out; the stub's own helper
  routes (`/stub/...`) too.
"""

from __future__ import annotations

from collections import Counter

from aiohttp import web

from .state import stub_state_key

MODEL_NAME = "stub-audio-model"
UNCOUNTED_PATHS = frozenset({"/metrics", "/health", "/load", "/ping", "/version", "/server_info"})
http_requests_key = web.AppKey("http_requests_key", Counter[tuple[str, str, str]])


def count_http_request(request: web.Request, status: int) -> None:
    """One answer, as the instrumentator counts it (the stub's vLLM routes have no path
    parameters: the path is the route's template)."""
    path = request.path
    if path in UNCOUNTED_PATHS or path.startswith("/stub/"):
        return
    request.app[http_requests_key][(path, request.method, f"{status // 100}xx")] += 1


async def vllm_metrics(request: web.Request) -> web.Response:
    state = request.app[stub_state_key]
    queries = sum(cache.queries for cache in state.caches())
    hits = sum(cache.hits for cache in state.caches())
    labels = f'engine="0",model_name="{MODEL_NAME}"'
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{labels}}} {float(state.in_flight)}",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{labels}}} 0.0",
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{{labels},finished_reason="stop"}} '
        f"{float(state.request_count)}",
        "# TYPE vllm:mm_cache_queries_total counter",
        f"vllm:mm_cache_queries_total{{{labels}}} {float(queries)}",
        "# TYPE vllm:mm_cache_hits_total counter",
        f"vllm:mm_cache_hits_total{{{labels}}} {float(hits)}",
        "# TYPE http_requests_total counter",
    ]
    for (handler, method, status), count in sorted(request.app[http_requests_key].items()):
        series = f'handler="{handler}",method="{method}",status="{status}"'
        lines.append(f"http_requests_total{{{series}}} {float(count)}")
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")
