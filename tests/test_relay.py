"""The relay: every other route passes through untouched, SSE streams event by event, upstream
errors are relayed as they are, transport failures become 502/504, disconnects cancel."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from yarl import URL

from gateway.stub_upstream import StubState
from gateway.stub_upstream.tokens import word_token_id
from tests.conftest import chat_body, gateway_error, parse_metrics, sha256_of

CHAT = "/v1/chat/completions"
BOUND_SECONDS = 5.0
HOP_BY_HOP_SENT = {
    "Connection": "keep-alive, X-Hop-Named",
    "X-Hop-Named": "named in Connection, so hop-by-hop",
    "Keep-Alive": "timeout=5",
    "Proxy-Authorization": "Basic cHJveHk6c2VjcmV0",
    "TE": "trailers",
    "Trailer": "X-Checksum",
}

HOP_BY_HOP_RECEIVED = {
    "X-Hop-Named": "named in Connection, so hop-by-hop",
    "Keep-Alive": "timeout=5",
    "Proxy-Authenticate": "Basic",
    "Trailer": "X-Checksum",
    "X-End-To-End": "kept",
}


def lower_keys(headers: dict[str, str]) -> dict[str, str]:
    return {key.lower(): value for key, value in headers.items()}


async def poll(condition: Any, seconds: float = BOUND_SECONDS) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class TestPassthrough:
    async def test_models(self, gateway, stub: StubState) -> None:
        response = await gateway.get("/v1/models")
        assert response.status == 200
        assert response.content_type == "application/json"
        assert (await response.json())["data"][0]["id"] == "stub-audio-model"
        assert stub.requests[-1].method == "GET"
        assert stub.requests[-1].path == "/v1/models"

    async def test_health(self, gateway, stub: StubState) -> None:
        response = await gateway.get("/health")
        assert response.status == 200
        assert await response.read() == b""
        assert stub.requests[-1].path == "/health"

    async def test_metrics(self, gateway, stub: StubState) -> None:
        await gateway.get("/v1/models")
        response = await gateway.get("/metrics")
        assert response.status == 200
        assert response.content_type == "text/plain"
        # The stub counts both requests: these are vLLM's metrics, not the gateway's.
        labels = 'engine="0",finished_reason="stop",model_name="stub-audio-model"'
        success = f"vllm:request_success_total{{{labels}}}"
        assert parse_metrics(await response.text())[success] == 2

    async def test_tokenize(self, gateway, stub: StubState) -> None:
        body = {"model": "m", "prompt": "three small words"}
        response = await gateway.post("/tokenize", json=body)
        assert response.status == 200
        tokens = [word_token_id(word) for word in ("three", "small", "words")]
        expected = {"count": 3, "max_model_len": 4096, "tokens": tokens, "token_strs": None}
        assert await response.json() == expected
        assert json.loads(stub.requests[-1].body) == body

    async def test_completions_body_and_headers_pass_through(
        self, gateway, stub, stub_server
    ) -> None:
        raw = b'{"model": "m",  "prompt": "hi",\n "metadata": {"audio_path": "a.wav"}}'
        response = await gateway.post(
            "/v1/completions",
            data=raw,
            headers={
                "Content-Type": "application/json",
                "Authorization": "Bearer sk-test-123",
                "X-Request-Id": "req-42",
                "Accept": "application/json",
            },
        )
        assert response.status == 200
        assert response.headers["X-Stub-Echo"] == "1"
        echo = await response.json()
        assert echo["method"] == "POST"
        assert echo["path_qs"] == "/v1/completions"
        # Not a rewritten route: even a sidechannel-looking body goes through untouched.
        assert echo["body_sha256"] == hashlib.sha256(raw).hexdigest()
        assert stub.requests[-1].body == raw
        headers = lower_keys(echo["headers"])
        assert headers["authorization"] == "Bearer sk-test-123"
        assert headers["x-request-id"] == "req-42"
        assert headers["content-type"] == "application/json"
        assert headers["content-length"] == str(len(raw))
        stub_url = stub_server.make_url("")
        assert headers["host"] == f"{stub_url.host}:{stub_url.port}"  # the upstream's, not ours

    async def test_non_ascii_header_bytes_reach_the_upstream_unchanged(self, gateway, stub) -> None:
        # aiohttp's client sends this as UTF-8 bytes; the gateway must pass them on unchanged.
        response = await gateway.get("/v1/models", headers={"X-Note": "café ✓"})
        assert response.status == 200
        forwarded = {k.lower(): v for k, v in stub.requests[-1].headers.items()}
        assert forwarded["x-note"] == "café ✓"

    @pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
    async def test_arbitrary_paths_methods_and_query_strings(self, gateway, method: str) -> None:
        target = "/v1/some/route/x-1?b=2&a=1&a=3&empty=&q=a%20b%2Fc"
        response = await gateway.request(method, URL(target, encoded=True), data=b"payload")
        assert response.status == 200, await response.text()
        echo = await response.json()
        assert echo["method"] == method
        assert echo["path_qs"] == target
        assert echo["body_sha256"] == hashlib.sha256(b"payload").hexdigest()

    async def test_head_request(self, gateway, stub: StubState) -> None:
        response = await gateway.head("/v1/anything")
        assert response.status == 200
        assert response.headers["X-Stub-Echo"] == "1"
        assert await response.read() == b""
        assert stub.requests[-1].method == "HEAD"

    async def test_authorization_reaches_upstream_on_chat(self, gateway, stub, audio_dir) -> None:
        response = await gateway.post(
            CHAT,
            json=chat_body({"audio_path": "a.wav"}),
            headers={"Authorization": "Bearer sk-chat", "X-Trace": "t-1"},
        )
        assert response.status == 200
        assert (await response.json())["stub"]["clips"][0]["sha256"] == sha256_of(
            audio_dir / "a.wav"
        )
        headers = lower_keys(stub.requests[-1].headers)
        assert headers["authorization"] == "Bearer sk-chat"
        assert headers["x-trace"] == "t-1"

    @pytest.mark.parametrize("path", ["/v1/echo-me", CHAT])
    async def test_hop_by_hop_headers_are_not_forwarded(self, gateway, stub, path: str) -> None:
        response = await gateway.post(
            path,
            json=chat_body({"audio_path": "a.wav"}),
            headers={**HOP_BY_HOP_SENT, "Authorization": "Bearer keep", "X-End-To-End": "keep"},
        )
        assert response.status == 200, await response.text()
        received = lower_keys(stub.requests[-1].headers)
        for name in HOP_BY_HOP_SENT:
            assert name.lower() not in received, received
        assert received["authorization"] == "Bearer keep"
        assert received["x-end-to-end"] == "keep"

    async def test_hop_by_hop_response_headers_are_not_relayed(self, make_gateway) -> None:
        async def handler(request: web.Request) -> web.Response:
            response = web.Response(text="upstream body", headers=HOP_BY_HOP_RECEIVED)
            response.headers["Connection"] = "keep-alive, X-Hop-Named"
            return response

        app = web.Application()
        app.router.add_get("/v1/hop", handler)
        async with TestServer(app) as upstream:
            gateway = await make_gateway(upstream={"url": str(upstream.make_url(""))})
            response = await gateway.get("/v1/hop")
            assert response.status == 200
            assert await response.text() == "upstream body"
            assert response.headers["X-End-To-End"] == "kept"
            assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
            for name in ("X-Hop-Named", "Keep-Alive", "Proxy-Authenticate", "Trailer"):
                assert name not in response.headers, response.headers

    async def test_query_string_on_chat_reaches_upstream(self, gateway, stub, audio_dir) -> None:
        target = "/v1/chat/completions?api-version=2024-06-01&x=a%20b"
        response = await gateway.post(
            URL(target, encoded=True), json=chat_body({"audio_path": "c.wav"})
        )
        assert response.status == 200, await response.text()
        assert stub.requests[-1].path == target
        clip = (await response.json())["stub"]["clips"][0]
        assert clip["sha256"] == sha256_of(audio_dir / "c.wav")

    async def test_upstream_url_path_prefix_is_kept(self, make_gateway, stub_server, stub) -> None:
        origin = str(stub_server.make_url("")).rstrip("/")
        gateway = await make_gateway(upstream={"url": f"{origin}/vllm/"})
        response = await gateway.get("/v1/files?limit=2")
        assert response.status == 200
        assert (await response.json())["path_qs"] == "/vllm/v1/files?limit=2"

    @pytest.mark.parametrize("sized", [True, False], ids=["content-length", "chunked"])
    async def test_large_response_streams_back_intact(self, make_gateway, sized: bool) -> None:
        blob = os.urandom(3 * 1024 * 1024 + 5)

        async def handler(request: web.Request) -> web.StreamResponse:
            if sized:
                return web.Response(body=blob, content_type="application/octet-stream")
            response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            for start in range(0, len(blob), 100_000):
                await response.write(blob[start : start + 100_000])
            await response.write_eof()
            return response

        app = web.Application()
        app.router.add_get("/v1/files/big/content", handler)
        async with TestServer(app) as upstream:
            gateway = await make_gateway(upstream={"url": str(upstream.make_url(""))})
            response = await gateway.get("/v1/files/big/content")
            assert response.status == 200
            body = await response.read()
            assert hashlib.sha256(body).digest() == hashlib.sha256(blob).digest()
            assert response.headers["Content-Type"] == "application/octet-stream"

    async def test_large_body_streams_through(self, gateway, stub: StubState) -> None:
        blob = os.urandom(3 * 1024 * 1024 + 17)  # over aiohttp's 1 MiB client_max_size

        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(blob), 256 * 1024):
                yield blob[start : start + 256 * 1024]

        response = await gateway.put(
            "/v1/files/upload", data=chunks(), headers={"Content-Type": "application/octet-stream"}
        )
        assert response.status == 200, await response.text()
        echo = await response.json()
        assert (echo["body_bytes"], echo["body_sha256"]) == (
            len(blob),
            hashlib.sha256(blob).hexdigest(),
        )


class TestUpstreamStatus:
    @pytest.mark.parametrize("code", [400, 401, 404, 418, 422, 429, 500, 503])
    @pytest.mark.parametrize("method", ["GET", "POST"])
    async def test_upstream_errors_are_relayed_as_they_are(
        self, gateway, stub: StubState, code: int, method: str
    ) -> None:
        response = await gateway.request(method, f"/stub/status/{code}")
        assert response.status == code
        assert await response.json() == {"error": {"message": f"stub status {code}", "code": code}}
        assert stub.request_count == 1

    async def test_non_json_upstream_error_is_relayed(self, gateway) -> None:
        response = await gateway.post("/tokenize", data=b"{broken", headers={"X": "y"})
        assert response.status == 400
        assert (await response.json())["error"]["type"] == "BadRequestError"


class TestStreaming:
    async def test_first_event_arrives_before_upstream_finishes(
        self, gateway, stub: StubState, audio_dir
    ) -> None:
        try:
            response = await asyncio.wait_for(
                gateway.post(
                    CHAT,
                    json=chat_body({"audio_path": "b.wav"}, stream=True),
                    headers={"X-Stub-Hold": "1"},
                ),
                BOUND_SECONDS,
            )
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/event-stream")
            assert response.headers["X-Accel-Buffering"] == "no"
            first = await asyncio.wait_for(response.content.readuntil(b"\n\n"), BOUND_SECONDS)
            assert stub.streams_finished == 0  # the upstream is still holding its stream open
            assert first.startswith(b"data: ")
            event = json.loads(first[len(b"data: ") :])
            assert event["stub"]["clips"][0]["sha256"] == sha256_of(audio_dir / "b.wav")
        finally:
            stub.hold.set()
        rest = await asyncio.wait_for(response.read(), BOUND_SECONDS)
        assert rest.endswith(b"data: [DONE]\n\n")
        events = [e for e in rest.split(b"\n\n") if e]
        assert len(events) >= 3
        assert all(e.startswith(b"data: ") for e in events)
        assert stub.streams_finished == 1

    async def test_stream_without_audio(self, gateway, stub: StubState) -> None:
        stub.hold.set()
        response = await gateway.post(CHAT, json=chat_body(stream=True))
        assert response.status == 200
        assert response.headers["X-Accel-Buffering"] == "no"
        text = await response.text()
        assert text.count("data: ") >= 3
        assert text.endswith("data: [DONE]\n\n")


class TestTransportFailures:
    async def test_unreachable_upstream_is_502(self, make_gateway) -> None:
        gateway = await make_gateway(upstream={"url": f"http://127.0.0.1:{closed_port()}"})
        for method, path, body in [
            ("GET", "/v1/models", None),
            ("POST", CHAT, chat_body({"audio_path": "a.wav"})),
            ("POST", CHAT, chat_body()),
        ]:
            response = await gateway.request(method, path, json=body)
            error = await gateway_error(response, 502, None)
            assert "unreachable" in error["message"]

    async def test_upstream_timeout_is_504(self, make_gateway, stub: StubState) -> None:
        gateway = await make_gateway(upstream={"read_timeout_seconds": 0.2})
        started = asyncio.get_running_loop().time()
        response = await gateway.get("/stub/slow?seconds=1")
        error = await gateway_error(response, 504, None)
        assert "in time" in error["message"] or "timeout" in error["message"].lower()
        assert asyncio.get_running_loop().time() - started < 0.9
        assert stub.request_count == 1

    async def test_timeout_after_the_stream_started_cuts_the_client_off(
        self, make_gateway, stub: StubState
    ) -> None:
        # The status line is gone already, so a 504 is impossible: the client must see the
        # stream end abnormally, not a clean end that looks like a complete answer.
        gateway = await make_gateway(upstream={"read_timeout_seconds": 0.3})
        response = await gateway.post(
            CHAT, json=chat_body(stream=True), headers={"X-Stub-Hold": "1"}
        )
        assert response.status == 200
        await asyncio.wait_for(response.content.readuntil(b"\n\n"), BOUND_SECONDS)
        with pytest.raises(aiohttp.ClientPayloadError):
            await asyncio.wait_for(response.read(), BOUND_SECONDS)
        assert stub.streams_finished == 0

    async def test_gateway_survives_failures(self, make_gateway, stub: StubState) -> None:
        gateway = await make_gateway(upstream={"read_timeout_seconds": 0.2})
        await gateway_error(await gateway.get("/stub/slow?seconds=1"), 504, None)
        response = await gateway.get("/v1/models")
        assert response.status == 200


class TestCancellation:
    async def test_client_disconnect_cancels_the_upstream_request(
        self, gateway, stub: StubState
    ) -> None:
        request = asyncio.create_task(gateway.get("/stub/hang"))
        await poll(lambda: stub.request_count == 1)
        await asyncio.sleep(0.05)
        assert stub.cancelled == 0
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        await poll(lambda: stub.cancelled == 1)

    async def test_disconnect_mid_stream_cancels_the_upstream_stream(
        self, gateway, stub: StubState
    ) -> None:
        response = await gateway.post(
            CHAT, json=chat_body({"audio_path": "a.wav"}, stream=True), headers={"X-Stub-Hold": "1"}
        )
        await asyncio.wait_for(response.content.readuntil(b"\n\n"), BOUND_SECONDS)
        response.close()  # the client goes away while the upstream is still holding the stream
        await asyncio.sleep(0.3)
        stub.hold.set()  # an upstream stream still attached would now run to its end
        await asyncio.sleep(0.1)
        assert stub.streams_finished == 0
        followup = await gateway.get("/v1/models")  # the gateway is fine afterwards
        assert followup.status == 200


class TestInterimResponses:
    """An upstream's 1xx answers are not the response: the final one that follows is."""

    async def test_early_hints_are_skipped(self, make_gateway) -> None:
        requests_seen: list[bytes] = []

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            requests_seen.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(
                b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n"
                b'X-Final: yes\r\n\r\n{"ok": true}'
            )
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            gateway = await make_gateway(upstream={"url": f"http://127.0.0.1:{port}"})
            response = await gateway.get("/v1/models", headers={"Expect": "100-continue"})
            assert response.status == 200
            assert response.headers["X-Final"] == "yes"
            assert "Link" not in response.headers
            assert await response.json() == {"ok": True}
            assert b"expect:" not in requests_seen[0].lower()  # aiohttp answered it already
        finally:
            server.close()
            await server.wait_closed()
