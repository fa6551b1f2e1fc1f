"""WebSocket passthrough: any `Upgrade: websocket` request is relayed as a session to the same
path upstream (vLLM's /v1/realtime first), with aiohttp's client and the `websockets` library,
over TCP, a Unix socket and TLS."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import os
import ssl
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
import websockets
from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestClient
from hypothesis import given
from hypothesis import strategies as st
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as websockets_connect

from gateway.app import create_app
from gateway.stub_upstream import StubState, create_stub_app, stub_state_key
from gateway.upstream.websocket import sendable_close_code
from tests.conftest import gateway_config, gateway_error, gateway_metrics, no_blocking_calls

BOUND_SECONDS = 10.0  # a guard against hangs, never a timing assertion
MIB = 1024 * 1024
WS_HEADERS = {  # a hand-made upgrade, to read refusals and errors as plain HTTP answers
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
    "Sec-WebSocket-Version": "13",
}

Client = TestClient[web.Request, web.Application]


def ws_url(gateway: Client, path: str) -> str:
    return str(gateway.make_url(path).with_scheme("ws"))


def websockets_client(url: str, **kwargs: Any) -> Any:
    """`websockets` connect with room for 1 MiB frames and no proxy from the environment."""
    return websockets_connect(url, max_size=16 * MIB, proxy=None, **kwargs)


async def poll(condition: Any) -> None:
    deadline = asyncio.get_running_loop().time() + BOUND_SECONDS
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def pcm_chunk(index: int) -> bytes:
    return bytes((index * 7 + i) % 256 for i in range(3200))  # 100 ms of 16 kHz PCM16


def append_event(pcm: bytes) -> str:
    return json.dumps(
        {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()}
    )


def expected_delta(pcm: bytes) -> str:
    return f"[{len(pcm)} bytes sha256={hashlib.sha256(pcm).hexdigest()[:12]}]"


class TestRealtime:
    """vLLM's realtime shape end to end: session.created, then one delta per append."""

    async def test_realtime_session_with_aiohttp(self, gateway: Client, stub: StubState) -> None:
        chunks = [pcm_chunk(i) for i in range(3)]
        async with gateway.ws_connect("/v1/realtime?intent=transcription") as ws:
            created = await ws.receive_json(timeout=BOUND_SECONDS)
            assert created["type"] == "session.created"
            await ws.send_str(json.dumps({"type": "session.update", "model": "stub-audio-model"}))
            for pcm in chunks:
                await ws.send_str(append_event(pcm))
                delta = await ws.receive_json(timeout=BOUND_SECONDS)
                assert delta == {"type": "transcription.delta", "delta": expected_delta(pcm)}
            await ws.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
            done = await ws.receive_json(timeout=BOUND_SECONDS)
            assert done["type"] == "transcription.done"
            assert done["text"] == " ".join(expected_delta(pcm) for pcm in chunks)
        assert stub.requests[-1].method == "GET"
        assert stub.requests[-1].path == "/v1/realtime?intent=transcription"

    async def test_realtime_session_with_websockets(self, gateway: Client, stub: StubState) -> None:
        headers = {"Authorization": "Bearer sk-client", "OpenAI-Beta": "realtime=v1"}
        async with websockets_client(
            ws_url(gateway, "/v1/realtime"), additional_headers=headers
        ) as ws:
            assert json.loads(await ws.recv())["type"] == "session.created"
            for index in range(5):
                await ws.send(append_event(pcm_chunk(index)))
            deltas = [json.loads(await ws.recv()) for _ in range(5)]
        assert [d["delta"] for d in deltas] == [expected_delta(pcm_chunk(i)) for i in range(5)]
        received = {k.lower(): v for k, v in stub.requests[-1].headers.items()}
        assert received["authorization"] == "Bearer sk-client"
        assert received["openai-beta"] == "realtime=v1"
        assert received["upgrade"].lower() == "websocket"  # the gateway's own handshake
        assert "sec-websocket-extensions" not in received  # per hop: nothing negotiated through


class TestSubprotocols:
    async def test_the_upstreams_choice_reaches_both_clients(
        self, gateway: Client, stub: StubState
    ) -> None:
        offered = ["chat", "stub.echo.v2", "stub.echo.v1"]
        async with gateway.ws_connect("/stub/ws/echo", protocols=offered) as ws:
            assert ws.protocol == "stub.echo.v2"
        received = {k.lower(): v for k, v in stub.requests[-1].headers.items()}
        assert [p.strip() for p in received["sec-websocket-protocol"].split(",")] == offered
        async with websockets_client(
            ws_url(gateway, "/stub/ws/echo"), subprotocols=["stub.echo.v1"]
        ) as ws:
            assert ws.subprotocol == "stub.echo.v1"

    async def test_no_common_protocol_means_none_and_the_offer_is_not_logged(
        self, gateway: Client, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A browser may carry a credential in a subprotocol (OpenAI's insecure-api-key one)."""
        secret = "openai-insecure-api-key.sk-live-0123456789"
        caplog.set_level(logging.DEBUG)
        async with websockets_client(ws_url(gateway, "/stub/ws/echo"), subprotocols=[secret]) as ws:
            assert ws.subprotocol is None
            await ws.send("still relayed")
            assert await ws.recv() == "still relayed"
        # The test's client logs what it sends, the stub (the upstream) the offer it could not
        # take; the gateway logs nothing of it.
        naming = [
            r.getMessage()
            for r in caplog.records
            if secret in r.getMessage() and not r.name.startswith("websockets.client")
        ]
        assert all("stub.echo.v1" in message for message in naming), naming


class TestFrames:
    async def test_large_binary_and_many_text_frames_in_order_aiohttp(
        self, gateway: Client
    ) -> None:
        big = os.urandom(MIB)
        texts = [f"frame {i} " + "x" * (i % 50) for i in range(1000)]
        async with gateway.ws_connect("/stub/ws/echo", max_msg_size=16 * MIB) as ws:
            for text in texts[:500]:
                await ws.send_str(text)
            await ws.send_bytes(big)
            for text in texts[500:]:
                await ws.send_str(text)
            received = [await ws.receive(timeout=BOUND_SECONDS) for _ in range(1001)]
        assert [m.type for m in received[:500]] == [WSMsgType.TEXT] * 500
        assert [m.data for m in received[:500]] == texts[:500]
        assert received[500].type is WSMsgType.BINARY and received[500].data == big
        assert [m.data for m in received[501:]] == texts[500:]

    async def test_large_binary_and_many_text_frames_in_order_websockets(
        self, gateway: Client
    ) -> None:
        big = os.urandom(MIB)
        texts = [json.dumps({"seq": i}) for i in range(1000)]
        async with websockets_client(ws_url(gateway, "/stub/ws/echo")) as ws:
            await ws.send(big)
            for text in texts:
                await ws.send(text)
            assert await ws.recv() == big
            assert [await ws.recv() for _ in texts] == texts

    async def test_backpressure_holds_a_fast_sender_back(
        self, gateway: Client, stub: StubState
    ) -> None:
        """With the upstream reading nothing, the client's sends stall after the socket
        buffers fill, instead of the gateway taking everything in; once the upstream reads
        again, every frame arrives intact and in order."""
        frame = os.urandom(MIB)
        sent = 0
        async with websockets_client(
            ws_url(gateway, "/stub/ws/echo"), additional_headers={"X-Stub-Hold": "1"}
        ) as ws:
            while sent < 96:
                try:
                    await asyncio.wait_for(ws.send(frame[:-1] + bytes([sent])), 2.0)
                except TimeoutError:
                    break
                sent += 1
            assert 0 < sent < 64, f"{sent} MiB taken in while the upstream read nothing"
            stub.hold.set()
            echoed = [await asyncio.wait_for(ws.recv(), BOUND_SECONDS) for _ in range(sent)]
        assert [message[-1] for message in echoed] == list(range(sent))
        assert all(message[:-1] == frame[:-1] for message in echoed)


class TestCloses:
    async def test_a_client_close_reaches_the_upstream_with_code_and_reason(
        self, gateway: Client, stub: StubState
    ) -> None:
        async with gateway.ws_connect("/stub/ws/echo") as ws:
            await ws.send_str("hello")
            assert await ws.receive_str(timeout=BOUND_SECONDS) == "hello"
            await asyncio.wait_for(ws.close(code=4000, message=b"client done"), BOUND_SECONDS)
            assert ws.close_code == 4000  # the gateway echoes the code it was sent
        await poll(lambda: stub.websocket_closes == [(4000, "client done")])

    async def test_an_upstream_close_reaches_the_client_with_code_and_reason(
        self, gateway: Client, stub: StubState
    ) -> None:
        async with gateway.ws_connect("/stub/ws/echo") as ws:
            await ws.send_str("close 4001 upstream done")
            message = await ws.receive(timeout=BOUND_SECONDS)
            assert (message.type, message.data, message.extra) == (
                WSMsgType.CLOSE,
                4001,
                "upstream done",
            )
        async with websockets_client(ws_url(gateway, "/stub/ws/echo")) as ws:
            await ws.send("close 4002 bye")
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), BOUND_SECONDS)
        assert closed.value.rcvd is not None
        assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (4002, "bye")
        await poll(lambda: len(stub.websocket_closes) == 2)
        assert stub.websocket_closes == [(4001, ""), (4002, "")]  # the gateway echoed them

    async def test_a_vanished_client_closes_the_upstream_session(
        self, gateway: Client, stub: StubState
    ) -> None:
        ws: ClientConnection = await websockets_client(ws_url(gateway, "/v1/realtime"))
        assert json.loads(await ws.recv())["type"] == "session.created"
        ws.transport.abort()  # gone: no close frame, just a reset connection
        await poll(lambda: stub.websocket_closes == [(1001, "client went away")])

    async def test_sessions_are_counted_and_open_ones_shown(self, gateway: Client) -> None:
        async with (
            gateway.ws_connect("/stub/ws/echo") as first,
            gateway.ws_connect("/v1/realtime") as second,
        ):
            await first.send_str("ping")
            assert await first.receive_str(timeout=BOUND_SECONDS) == "ping"
            await second.receive_json(timeout=BOUND_SECONDS)
            samples = await gateway_metrics(gateway)
            assert samples["audio_gateway_websocket_sessions"] == 2
        sessions = 'audio_gateway_requests_total{route="websocket",status="101"}'
        deadline = asyncio.get_running_loop().time() + BOUND_SECONDS
        while (samples := await gateway_metrics(gateway)).get(sessions) != 2:  # ended, counted
            assert asyncio.get_running_loop().time() < deadline, samples
            await asyncio.sleep(0.01)
        assert samples["audio_gateway_websocket_sessions"] == 0


@given(st.integers(min_value=0, max_value=6000))
def test_only_sendable_close_codes_are_sent(code: int) -> None:
    sent = sendable_close_code(code)
    assert sent == code or sent == 1000
    assert sent not in (1004, 1005, 1006, 1015) and (sent < 1016 or 3000 <= sent <= 4999)


class TestRefusalsAndFailures:
    @pytest.mark.parametrize("status", [403, 404, 426])
    async def test_a_refused_upgrade_is_relayed_as_it_is(
        self, gateway: Client, stub: StubState, status: int
    ) -> None:
        response = await gateway.get(f"/stub/status/{status}?x=1", headers=WS_HEADERS)
        assert response.status == status
        assert await response.json() == {
            "error": {"message": f"stub status {status}", "code": status}
        }
        assert stub.requests[-1].path == f"/stub/status/{status}?x=1"
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await gateway.ws_connect(f"/stub/status/{status}")
        assert refused.value.status == status
        with pytest.raises(websockets.InvalidStatus) as invalid:
            await websockets_client(ws_url(gateway, f"/stub/status/{status}"))
        assert invalid.value.response.status_code == status
        samples = await gateway_metrics(gateway)
        assert samples[f'audio_gateway_requests_total{{route="websocket",status="{status}"}}'] == 3

    async def test_a_redirect_is_relayed_not_followed(self, make_gateway) -> None:
        heads: list[bytes] = []

        async def redirect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            heads.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(
                b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://elsewhere.test/v1/realtime"
                b"\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nmoved"
            )
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(redirect, "127.0.0.1", 0)
        try:
            port = server.sockets[0].getsockname()[1]
            gateway = await make_gateway(upstream={"url": f"http://127.0.0.1:{port}"})
            response = await gateway.get("/v1/realtime", headers=WS_HEADERS, allow_redirects=False)
            assert response.status == 307
            assert response.headers["Location"] == "http://elsewhere.test/v1/realtime"
            assert await response.text() == "moved"
        finally:
            server.close()
            await server.wait_closed()
        assert len(heads) == 1 and heads[0].startswith(b"GET /v1/realtime HTTP/1.1")

    async def test_unreachable_upstream_is_502_json(self, make_gateway, stub: StubState) -> None:
        gateway = await make_gateway(upstream={"url": "http://127.0.0.1:9"})
        response = await gateway.get("/v1/realtime", headers=WS_HEADERS)
        error = await gateway_error(response, 502, None)
        assert error["code"] == "upstream_unreachable"
        assert "127.0.0.1:9" in error["message"]

    async def test_an_upstream_that_never_answers_the_upgrade_is_504(self, make_gateway) -> None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.read()  # takes the request, never answers, until the gateway goes
            finally:
                writer.close()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        try:
            port = server.sockets[0].getsockname()[1]
            gateway = await make_gateway(
                upstream={"url": f"http://127.0.0.1:{port}", "read_timeout_seconds": 0.3}
            )
            response = await gateway.get("/v1/realtime", headers=WS_HEADERS)
            error = await gateway_error(response, 504, None)
        finally:
            server.close()
            await server.wait_closed()
        assert error["code"] == "upstream_timeout"

    async def test_a_broken_client_handshake_is_400_and_nothing_goes_upstream(
        self, gateway: Client, stub: StubState
    ) -> None:
        headers = {k: v for k, v in WS_HEADERS.items() if k != "Sec-WebSocket-Key"}
        response = await gateway.get("/v1/realtime", headers=headers)
        error = await gateway_error(response, 400, None)
        assert error["code"] == "invalid_websocket_handshake"
        assert stub.request_count == 0

    async def test_without_upgrade_the_path_is_plain_passthrough(
        self, gateway: Client, stub: StubState
    ) -> None:
        response = await gateway.get("/stub/ws/echo")
        assert response.status == 400  # the stub's own answer to a GET that is no handshake
        assert stub.request_count == 1


# --- other upstream forms: a Unix socket and TLS --------------------------------------------


@pytest.fixture
async def unix_stub(audio_dir: Path) -> AsyncIterator[tuple[str, StubState]]:
    """The stub on a Unix socket (a short path: sun_path holds 108 bytes)."""
    with tempfile.TemporaryDirectory(prefix="agw-") as directory:
        path = os.path.join(directory, "vllm.sock")
        app = create_stub_app(str(audio_dir.parent))
        runner = web.AppRunner(app)
        await runner.setup()
        await web.UnixSite(runner, path).start()
        yield path, app[stub_state_key]
        await runner.cleanup()


@pytest.fixture(scope="module")
def tls_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def tls_stub(tls_ca: trustme.CA, audio_dir: Path) -> AsyncIterator[int]:
    """The stub behind TLS with a certificate for 127.0.0.1 from a private CA; its port."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls_ca.issue_cert("127.0.0.1").configure_cert(context)
    runner = web.AppRunner(create_stub_app(str(audio_dir.parent)))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    server = site._server
    assert isinstance(server, asyncio.Server)
    yield int(server.sockets[0].getsockname()[1])
    await runner.cleanup()


async def start_gateway(url: str, audio_dir: Path, **upstream: Any) -> Client:
    config = gateway_config(url, audio_dir, upstream=upstream)
    client: Client = TestClient(aiohttp.test_utils.TestServer(create_app(config)))
    await client.start_server()
    return client


async def realtime_round_trip(gateway: Client) -> None:
    async with gateway.ws_connect("/v1/realtime") as ws:
        assert (await ws.receive_json(timeout=BOUND_SECONDS))["type"] == "session.created"
        await ws.send_str(append_event(pcm_chunk(1)))
        delta = await ws.receive_json(timeout=BOUND_SECONDS)
        assert delta["delta"] == expected_delta(pcm_chunk(1))


class TestUpstreamForms:
    async def test_unix_socket_upstream(
        self, unix_stub: tuple[str, StubState], audio_dir: Path
    ) -> None:
        path, state = unix_stub
        gateway = await start_gateway(f"unix://{path}", audio_dir)
        try:
            await realtime_round_trip(gateway)
        finally:
            await gateway.close()
        assert state.requests[-1].path == "/v1/realtime"
        assert state.requests[-1].headers["Host"] == "localhost"

    async def test_tls_upstream_with_a_private_ca_never_blocking_the_loop(
        self, tls_stub: int, tls_ca: trustme.CA, audio_dir: Path, tmp_path: Path
    ) -> None:
        """Start-up, handshake and messages over TLS: blockbuster fails any blocking call it
        can see on the loop (OpenSSL reads the CA file out of its sight: a thread does that,
        by construction)."""
        ca_file = tmp_path / "ca.pem"
        tls_ca.cert_pem.write_to_path(str(ca_file))
        with no_blocking_calls():
            gateway = await start_gateway(
                f"https://127.0.0.1:{tls_stub}", audio_dir, ca_file=str(ca_file)
            )
            try:
                await realtime_round_trip(gateway)
            finally:
                await gateway.close()

    async def test_tls_upstream_with_the_wrong_ca_is_502(
        self, tls_stub: int, audio_dir: Path, tmp_path: Path
    ) -> None:
        ca_file = tmp_path / "other-ca.pem"
        trustme.CA().cert_pem.write_to_path(str(ca_file))
        gateway = await start_gateway(
            f"https://127.0.0.1:{tls_stub}", audio_dir, ca_file=str(ca_file)
        )
        try:
            response = await gateway.get("/v1/realtime", headers=WS_HEADERS)
            error = await gateway_error(response, 502, None)
        finally:
            await gateway.close()
        assert "certificate verification" in error["message"]
