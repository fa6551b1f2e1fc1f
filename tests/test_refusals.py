"""Refusals are visible: every error answer the gateway makes itself counts in
`audio_gateway_refusals_total{route, code}` and leaves one log line (INFO for a 4xx, WARNING for
a 5xx) naming route, status, code and the request id the answer carries, with no secret or
clip content; an upstream's own error answers are relayed, not counted as refusals."""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.serving.access_log import REQUEST_ID_PATTERN
from tests.conftest import GatewayFactory, chat_body, gateway_error, gateway_metrics

Client = TestClient[web.Request, web.Application]
KEY = "sk-refusal-test-key-0123456789"
CHAT = "/v1/chat/completions"
REFUSALS = 'audio_gateway_refusals_total{code="%s",route="%s"}'


def refusal_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "gateway.refusals"]


async def test_each_refusal_is_counted_by_route_and_code(gateway: Client) -> None:
    await gateway_error(
        await gateway.post(CHAT, json=chat_body({"audio_path": "missing.wav"})),
        404,
        "metadata.audio_path",
    )
    await gateway_error(
        await gateway.post(CHAT, json=chat_body({"audio_path": "missing.wav"})),
        404,
        "metadata.audio_path",
    )
    await gateway_error(await gateway.post("/v1/responses", data=b"{nope"), 400, None)
    samples = await gateway_metrics(gateway)
    assert samples[REFUSALS % ("audio_not_found", "chat_completions")] == 2
    assert samples[REFUSALS % ("invalid_json", "responses")] == 1
    refused = {k: v for k, v in samples.items() if k.startswith("audio_gateway_refusals_total")}
    assert sum(refused.values()) == 3


async def test_an_upstream_error_answer_is_relayed_not_counted(gateway: Client) -> None:
    response = await gateway.get("/stub/status/400")
    assert response.status == 400
    samples = await gateway_metrics(gateway)
    assert not [k for k in samples if k.startswith("audio_gateway_refusals_total")]
    assert samples['audio_gateway_requests_total{route="passthrough",status="400"}'] == 1


async def test_a_refusal_logs_one_info_line_with_the_clients_request_id(
    gateway: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.refusals")
    response = await gateway.post(
        CHAT,
        json=chat_body({"audio_path": "missing.wav"}),
        headers={"X-Request-Id": "trace-7.span:2"},
    )
    await gateway_error(response, 404, "metadata.audio_path")
    assert response.headers["X-Request-Id"] == "trace-7.span:2"
    [record] = refusal_records(caplog)
    assert record.levelno == logging.INFO
    fields = {k: record.__dict__[k] for k in ("route", "status", "code", "param", "request_id")}
    assert fields == {
        "route": "chat_completions",
        "status": 404,
        "code": "audio_not_found",
        "param": "metadata.audio_path",
        "request_id": "trace-7.span:2",
    }
    message = record.getMessage()
    assert "404 audio_not_found" in message and "request_id=trace-7.span:2" in message


async def test_without_a_client_id_the_answer_carries_the_logged_one(
    gateway: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """The access log is off (the default): the gateway still makes an id for a refusal."""
    caplog.set_level(logging.INFO, logger="gateway.refusals")
    response = await gateway.post(CHAT, json=chat_body({"audio_path": "../outside.wav"}))
    assert response.status == 403
    given = response.headers["X-Request-Id"]
    assert REQUEST_ID_PATTERN.fullmatch(given) and len(given) == 32
    [record] = refusal_records(caplog)
    assert record.__dict__["request_id"] == given
    assert record.__dict__["code"] == (await response.json())["error"]["code"]


async def test_refusal_lines_hold_no_key_and_no_clip(
    make_gateway: GatewayFactory, audio_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    gateway = await make_gateway(server={"api_keys": [KEY]})
    wrong = {"Authorization": "Bearer sk-wrong-but-secret-42"}
    clip = base64.b64encode((audio_dir / "a.wav").read_bytes()).decode()
    bad_clip = chat_body({"audio_data": f"data:audio/wav;base64,{clip[:-8]}!!!!"})
    sent: list[tuple[str, dict[str, Any], dict[str, str]]] = [
        (CHAT, chat_body({"audio_path": "a.wav"}), wrong),
        (CHAT, bad_clip, {"Authorization": f"Bearer {KEY}"}),
    ]
    for path, body, headers in sent:
        response = await gateway.post(path, json=body, headers=headers)
        assert 400 <= response.status < 500
    records = refusal_records(caplog)
    assert [r.__dict__["status"] for r in records] == [401, 400]
    assert records[0].__dict__["code"] == "invalid_api_key"
    text = caplog.text
    for secret in (KEY, "sk-wrong-but-secret-42", clip[:40], "base64,"):
        assert secret not in text


async def test_an_unreachable_upstream_is_a_warning_with_its_cause(
    make_gateway: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.refusals")
    down = await make_gateway(upstream={"url": "http://127.0.0.1:9"})
    response = await down.get("/v1/models")
    await gateway_error(response, 502, None)
    [record] = refusal_records(caplog)
    assert record.levelno == logging.WARNING
    assert record.__dict__["code"] == "upstream_unreachable"
    assert "127.0.0.1:9" in record.getMessage()
    samples = await gateway_metrics(down)
    assert samples[REFUSALS % ("upstream_unreachable", "passthrough")] == 1


async def test_a_body_over_the_limit_is_counted_under_its_code(
    make_gateway: GatewayFactory,
) -> None:
    gateway = await make_gateway(server={"max_body_bytes": 1024})
    response = await gateway.post(CHAT, json=chat_body({"pad": "x" * 4096}))
    await gateway_error(response, 413, None)
    samples = await gateway_metrics(gateway)
    assert samples[REFUSALS % ("request_too_large", "chat_completions")] == 1
