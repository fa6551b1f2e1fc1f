"""Log output: `--log-format json` gives one JSON object per line (time, level, message; request
logs add method, route, status, code, duration_ms, request_id; a refusal has a line of its
own), and no line ever carries a secret (API keys, the upstream key, a query string) or clip
content (data URIs, base64)."""

from __future__ import annotations

import base64
import json
import logging
import signal
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer
from hypothesis import given
from hypothesis import strategies as st

from gateway.serving.access_log import REQUEST_ID_PATTERN, sane_request_id
from gateway.serving.logs import JsonFormatter
from gateway.stub_upstream import StubState
from tests.test_drain import Gateway, serve

CLIENT_KEY = "client-secret-key-0123456789"
UPSTREAM_KEY = "upstream-secret-key-9876543210"
SIGNATURE = "presigned-signature-abcdef"
ACCESS_FIELDS = {"method", "route", "path", "status", "duration_ms", "request_id"}


def record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("gateway.test", logging.WARNING, __file__, 1, message, args, None)
    made.__dict__.update(extra)
    return made


class TestJsonFormatter:
    @given(st.text(), st.sampled_from(["DEBUG", "INFO", "WARNING", "ERROR"]))
    def test_any_message_is_one_line_of_json(self, message: str, level: str) -> None:
        line = JsonFormatter().format(record("%s", message, levelname=level))
        assert "\n" not in line and "\r" not in line
        parsed = json.loads(line)
        assert parsed["message"] == message
        assert parsed["level"] == level
        assert datetime.fromisoformat(parsed["time"]).utcoffset() is not None

    def test_only_named_fields_reach_the_line(self) -> None:
        made = record("m", method="GET", status=200, authorization="Bearer x", body="data:...")
        parsed = json.loads(JsonFormatter().format(made))
        assert set(parsed) == {"time", "level", "logger", "message", "method", "status"}

    def test_an_exception_is_one_field(self) -> None:
        try:
            raise ValueError("boom")
        except ValueError:
            made = record("failed", exc_info=sys.exc_info())
        made.exc_info = made.__dict__["exc_info"]
        parsed = json.loads(JsonFormatter().format(made))
        assert "ValueError: boom" in parsed["exception"]


class TestRequestIds:
    @given(st.text(alphabet=st.characters(codec="latin-1"), max_size=300))
    def test_only_short_plain_ids_are_kept(self, header: str) -> None:
        kept = sane_request_id(header)
        assert kept in (header, None)
        if kept is not None:  # nothing a log line would need to quote or escape
            assert 1 <= len(kept) <= 128
            assert all(c.isascii() and (c.isalnum() or c in "._:@+=/-") for c in kept)

    @given(st.from_regex(r"[A-Za-z0-9._:@+=/-]{1,128}", fullmatch=True))
    def test_uuid_like_ids_are_kept(self, header: str) -> None:
        assert sane_request_id(header) == header

    def test_none_and_overlong_are_refused(self) -> None:
        assert sane_request_id(None) is None
        assert sane_request_id("a" * 129) is None
        assert sane_request_id("with space") is None
        assert sane_request_id("") is None


def json_lines(gateway: Gateway, logger: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in gateway.log if line.strip()]
    return [line for line in lines if line["logger"] == logger]


def access_lines(gateway: Gateway) -> list[dict[str, Any]]:
    return json_lines(gateway, "gateway.access")


async def exercise(gateway: Gateway, audio_dir: Path) -> dict[str, str]:
    """Requests with keys, a data URI, a query signature, good and bad request ids; returns
    the X-Request-Id each answer carried, by what the request was."""
    clip = base64.b64encode((audio_dir / "a.wav").read_bytes()).decode()
    auth = {"Authorization": f"Bearer {CLIENT_KEY}"}
    chat = {
        "model": "stub",
        "messages": [{"role": "user", "content": "Transcribe."}],
        "metadata": {"audio_data": f"data:audio/wav;base64,{clip}"},
    }
    bad_clip = {**chat, "metadata": {"audio_data": f"data:audio/wav;base64,{clip[:-5]}!!"}}
    ids: dict[str, str] = {}
    async with aiohttp.ClientSession(base_url=gateway.url) as session:
        headers = {**auth, "X-Request-Id": "trace-42.span:7"}
        async with session.post("/v1/chat/completions", json=chat, headers=headers) as response:
            assert response.status == 200
            ids["chat"] = response.headers["X-Request-Id"]
        query = f"/v1/models?X-Amz-Signature={SIGNATURE}&X-Amz-Credential=AKIAEXAMPLE"
        async with session.get(query, headers=auth) as response:
            assert response.status == 200
            ids["models"] = response.headers["X-Request-Id"]
        insane = {**auth, "X-Request-Id": "two words " + "x" * 300}
        async with session.post("/v1/chat/completions", json=bad_clip, headers=insane) as response:
            assert response.status == 400
            ids["bad_clip"] = response.headers["X-Request-Id"]
        async with session.get("/v1/models") as response:
            assert response.status == 401
            ids["no_key"] = response.headers["X-Request-Id"]
        async with session.ws_connect("/stub/ws/echo", headers=auth) as ws:
            await ws.send_str(f"hello {clip[:64]}")
            await ws.receive()
    return ids


class TestJsonLogs:
    async def test_request_logs_are_json_with_ids_and_no_secret_or_clip(
        self, stub_server: TestServer, stub: StubState, tmp_path: Path, audio_dir: Path
    ) -> None:
        sections = {
            "upstream": {"api_key": UPSTREAM_KEY},
            "server": {"api_keys": [CLIENT_KEY]},
        }
        async with serve(
            stub_server,
            tmp_path,
            *("--log-format", "json", "--log-level", "DEBUG"),  # the flag beats the file
            sections=sections,
            access_log=True,
            log_format="text",
        ) as gateway:
            ids = await exercise(gateway, audio_dir)
            gateway.signal(signal.SIGTERM)
            assert await gateway.exit_code() == 0
        text = "\n".join(gateway.log)
        clip = base64.b64encode((audio_dir / "a.wav").read_bytes()).decode()
        for secret in (CLIENT_KEY, UPSTREAM_KEY, SIGNATURE, "AKIAEXAMPLE", "base64,", clip[:40]):
            assert secret not in text
        for line in gateway.log:  # every line is one JSON object (start-up, drain, requests)
            parsed = json.loads(line)
            assert {"time", "level", "message"} <= set(parsed)
        logged = {line["request_id"]: line for line in access_lines(gateway)}
        assert len(logged) >= 5  # and the start-up wait's /gateway/health polls
        for line in logged.values():
            assert set(line) >= ACCESS_FIELDS
            assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0
        # The client's sane id is kept; the others are new, sent upstream and answered.
        assert ids["chat"] == "trace-42.span:7"
        for name in ("models", "bad_clip", "no_key"):
            assert REQUEST_ID_PATTERN.fullmatch(ids[name]) and len(ids[name]) == 32
        assert {ids[name] for name in ids} <= set(logged)
        chat, models = logged[ids["chat"]], logged[ids["models"]]
        assert (chat["method"], chat["route"], chat["status"]) == ("POST", "chat_completions", 200)
        assert (models["route"], models["path"], models["status"]) == (
            "passthrough",
            "/v1/models",
            200,
        )
        assert logged[ids["bad_clip"]]["status"] == 400
        assert logged[ids["no_key"]]["status"] == 401
        # A refusal's access line carries its error code; the refusal line the same id.
        assert logged[ids["bad_clip"]]["code"] == "invalid_audio_reference"
        assert logged[ids["no_key"]]["code"] == "invalid_api_key"
        assert "code" not in chat and "code" not in models
        refusals = {line["request_id"]: line for line in json_lines(gateway, "gateway.refusals")}
        assert set(refusals) == {ids["bad_clip"], ids["no_key"]}
        assert refusals[ids["no_key"]]["level"] == "INFO"
        assert (refusals[ids["no_key"]]["status"], refusals[ids["no_key"]]["code"]) == (
            401,
            "invalid_api_key",
        )
        # Durations are not whole milliseconds (uvloop's clock is; perf_counter_ns is not).
        assert any(line["duration_ms"] != round(line["duration_ms"]) for line in logged.values())
        [session] = [line for line in logged.values() if line["route"] == "websocket"]
        assert session["status"] == 101
        upstream_ids = {
            value
            for r in stub.requests
            for name, value in r.headers.items()
            if name.lower() == "x-request-id"
        }
        assert {ids["chat"], ids["models"]} <= upstream_ids


class TestTextLogs:
    async def test_a_request_line_names_route_status_and_id_but_not_the_query(
        self, stub_server: TestServer, tmp_path: Path
    ) -> None:
        async with serve(stub_server, tmp_path, access_log=True) as gateway:
            async with (
                aiohttp.ClientSession(base_url=gateway.url) as session,
                session.get(f"/v1/models?sig={SIGNATURE}") as response,
            ):
                assert response.status == 200
                request_id = response.headers["X-Request-Id"]
            gateway.signal(signal.SIGTERM)
            assert await gateway.exit_code() == 0
        [line] = [line for line in gateway.log if request_id in line]
        assert "GET /v1/models 200" in line
        assert "route=passthrough" in line
        assert SIGNATURE not in "\n".join(gateway.log)
        assert not line.startswith("{")
