"""`GET /metrics`: what the stub counts, under the names and labels vLLM 0.33 exposes.

vLLM's engine series carry `model_name` and `engine`; the ones here are those the dashboard
(deploy/grafana/audio-gateway.json) reads: the request queue (`vllm:num_requests_running`,
`vllm:num_requests_waiting`: the stub has no queue, so POSTs in flight and 0), the
multimodal processor cache (`vllm:mm_cache_queries_total`, `vllm:mm_cache_hits_total`, in
items), finished requests by reason (`vllm:request_success_total`), and the HTTP answers by
handler and status class (`http_requests_total`, as prometheus-fastapi-instrumentator groups
them in vLLM's API server).
"""

from __future__ import annotations

from collections import Counter

from .state import StubState

MODEL = "stub-audio-model"
ENGINE_LABELS = f'engine="0",model_name="{MODEL}"'


def render(state: StubState, answers: Counter[tuple[str, str, str]]) -> str:
    """Prometheus text for `state`; `answers` counts (handler, method, status class)."""
    cache = state.mm_cache
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{ENGINE_LABELS}}} {state.in_flight}",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{ENGINE_LABELS}}} 0",
        "# TYPE vllm:mm_cache_queries counter",
        f"vllm:mm_cache_queries_total{{{ENGINE_LABELS}}} {cache.hits + cache.misses}",
        "# TYPE vllm:mm_cache_hits counter",
        f"vllm:mm_cache_hits_total{{{ENGINE_LABELS}}} {cache.hits}",
        "# TYPE vllm:request_success counter",
        f'vllm:request_success_total{{{ENGINE_LABELS},finished_reason="stop"}} '
        f"{state.request_count}",
        "# TYPE http_requests counter",
    ]
    for (handler, method, status), count in sorted(answers.items()):
        labels = f'handler="{handler}",method="{method}",status="{status}"'
        lines.append(f"http_requests_total{{{labels}}} {count}")
    return "\n".join(lines) + "\n"
