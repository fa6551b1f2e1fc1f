"""deploy/grafana/audio-gateway.json: a well-formed dashboard whose every query names metrics
(and grouping labels) that a running gateway exposes, after one request of each route (and a
refusal) against the stub upstream and a local S3 server, read from its /gateway/metrics over
HTTP, or that vLLM exposes (the stub, in vLLM's names) at /metrics through the gateway, as the
PodMonitor scrapes it: without a key, also when the gateway requires API keys."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import GatewayFactory, chat_body
from tests.deploy_helpers import DEPLOY
from tests.objectstore import S3Server, aws_environment, s3_config, s3_server

__all__ = ["aws_environment", "s3_server"]  # fixtures, used by name

Client = TestClient[web.Request, web.Application]
DASHBOARD = DEPLOY / "grafana" / "audio-gateway.json"
MODEL = "stub-audio-model"
METRIC = re.compile(r"\baudio_gateway_[a-z0-9_]+\b")
VLLM_METRIC = re.compile(r"\bvllm:[a-z0-9_:]+|\bhttp_requests_total\b")
VLLM_METRICS_PATH = "/metrics"  # the PodMonitor's second endpoint (test_deploy_kubernetes.py)
GROUPING = re.compile(r"\bby \(([^)]*)\)")
MATCHER = re.compile(r"([a-z_]+)\s*(?:=~|!~|!=|=)\s*\"")
# Target labels the Prometheus operator puts on every scraped series of a PodMonitor.
SCRAPE_LABELS = {"namespace", "pod", "container", "endpoint", "instance", "job"}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression: the panels' targets and the template variables' queries."""
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            exprs.append(variable["query"]["query"])
    return exprs


# --- the dashboard itself ---------------------------------------------------------------------


def test_panels_are_well_formed(dashboard: dict[str, Any]) -> None:
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"])
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids))


def test_it_shows_what_an_operator_needs(dashboard: dict[str, Any]) -> None:
    exprs = queries(dashboard)

    def some(pattern: str) -> bool:
        return any(re.search(pattern, expr) for expr in exprs)

    assert some(r"by \(route, status\) \(rate\(audio_gateway_requests_total")
    assert some(r"histogram_quantile\(0\.99, .*audio_gateway_added_latency_seconds_bucket")
    assert some(r"audio_gateway_cache_hits_total.*/.*audio_gateway_cache_misses_total")
    assert some(r"audio_gateway_cache_bytes")
    assert some(r'audio_gateway_requests_total\{[^}]*status=~"502\|504"')  # upstream errors
    assert some(r'audio_gateway_storage_requests_total\{[^}]*outcome!="ok"')
    assert some(r"audio_gateway_websocket_sessions")
    assert some(r"by \(route, code\) \(rate\(audio_gateway_refusals_total")
    assert some(r"audio_gateway_clips_over_window_total")
    # vLLM's own, scraped through the gateway: its queue, multimodal cache and errors.
    assert some(r"vllm:num_requests_waiting")
    assert some(r"vllm:num_requests_running")
    assert some(r"vllm:mm_cache_hits_total.*/.*vllm:mm_cache_queries_total")
    assert some(r'http_requests_total\{[^}]*container="vllm"[^}]*status=~"4xx\|5xx"')
    assert some(r'vllm:request_success_total\{[^}]*finished_reason=~"abort\|error"')


# --- against a running gateway ----------------------------------------------------------------


async def exposed_after_one_request_per_route(
    client: Client, s3_server: S3Server, bucket: str, audio_dir: Path
) -> dict[str, set[str]]:
    """{sample name: its label names} from /gateway/metrics after chat (local and s3://
    clips), responses, transcriptions, a WebSocket session and a passthrough request."""
    s3_server.put(bucket, "data/a.wav", audio_dir / "a.wav")
    chat = chat_body({"audio_paths": json.dumps(["a.wav", f"s3://{bucket}/data/a.wav"])})
    sent = [
        await client.post("/v1/chat/completions", json=chat),
        await client.post(
            "/v1/responses",
            json={"model": MODEL, "input": "Transcribe.", "metadata": {"audio_path": "b.wav"}},
        ),
        await client.post(
            "/v1/audio/transcriptions", json={"model": MODEL, "metadata": {"audio_path": "c.wav"}}
        ),
        await client.get("/v1/models"),
    ]
    for response in sent:
        assert response.status == 200, await response.text()
    refused = await client.post("/v1/chat/completions", json=chat_body({"audio_path": "no.wav"}))
    assert refused.status == 404
    async with client.ws_connect("/v1/realtime") as ws:
        assert (await ws.receive_json(timeout=10))["type"] == "session.created"
    return await exposed(client, "/gateway/metrics")


async def exposed(client: Client, path: str, **headers: str) -> dict[str, set[str]]:
    """{sample name: its label names} of the Prometheus text at `path`."""
    response = await client.get(path, headers=headers)
    assert response.status == 200, await response.text()
    samples: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(await response.text()):
        for sample in family.samples:
            samples.setdefault(sample.name, set()).update(sample.labels)
    return samples


def assert_exposed(expr: str, names: set[str], exposed: dict[str, set[str]]) -> None:
    for name in names:
        assert name in exposed, f"{name} (in {expr}) is not exposed"
    labels = {label.strip() for group in GROUPING.findall(expr) for label in group.split(",")}
    labels |= set(MATCHER.findall(expr))
    for label in labels - SCRAPE_LABELS - {"le"}:
        assert all(label in exposed[name] for name in names), f"{label} in {expr}"


@pytest.mark.usefixtures("aws_environment")
async def test_every_queried_metric_and_label_is_exposed(
    dashboard: dict[str, Any], make_gateway: GatewayFactory, s3_server: S3Server, audio_dir: Path
) -> None:
    bucket = s3_server.bucket()
    client = await make_gateway(
        audio={"allowed_roots": [str(audio_dir), f"s3://{bucket}/data/"]},
        storage={"s3": s3_config(s3_server)},
    )
    gateway = await exposed_after_one_request_per_route(client, s3_server, bucket, audio_dir)
    vllm = await exposed(client, VLLM_METRICS_PATH)
    for expr in queries(dashboard):
        ours, theirs = set(METRIC.findall(expr)), set(VLLM_METRIC.findall(expr))
        assert ours or theirs, f"no gateway or vLLM metric in {expr}"
        assert not (ours and theirs), f"one query, one process: {expr}"
        if ours:
            assert_exposed(expr, ours, gateway)
        else:
            assert 'container="vllm"' in expr, expr  # vLLM's series, as the PodMonitor labels them
            assert_exposed(expr, theirs, vllm)


async def test_vllm_metrics_need_no_key_through_a_keyed_gateway(
    make_gateway: GatewayFactory,
) -> None:
    client = await make_gateway(server={"api_keys": ["sk-dashboard-test"]})
    chat = chat_body({"audio_path": "a.wav"})
    keyed = {"Authorization": "Bearer sk-dashboard-test"}
    assert (await client.post("/v1/chat/completions", json=chat, headers=keyed)).status == 200
    assert (await client.post("/v1/chat/completions", json=chat)).status == 401  # /v1: keyed
    vllm = await exposed(client, VLLM_METRICS_PATH)  # no key, as the PodMonitor scrapes it
    assert {"vllm:num_requests_waiting", "vllm:mm_cache_queries_total"} <= set(vllm)
    assert "http_requests_total" in vllm
    assert "audio_gateway_requests_total" in await exposed(client, "/gateway/metrics")
