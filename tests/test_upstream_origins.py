"""Upstream URL forms: https (verified against the system store plus `upstream.ca_file`) and
unix:// sockets (vLLM's --uds), each with the vLLM-faithful stub behind it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trustme
import uvloop
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.__main__ import build_parser, serve_config
from gateway.app import create_app
from gateway.config import ConfigError
from gateway.stub_upstream import StubState, create_stub_app, stub_state_key
from tests.conftest import GatewayFactory, chat_body, gateway_config, gateway_error, sha256_of
from tests.test_config import CLI_TIMEOUT_SECONDS, free_port, start_gateway, wait_for_health

CHAT = "/v1/chat/completions"
BOUND_SECONDS = 5.0


@contextlib.asynccontextmanager
async def serve_stub(
    audio_dir: Path, site_for: type[web.BaseSite], **site_args: object
) -> AsyncIterator[tuple[web.AppRunner, StubState]]:
    """The vLLM-faithful stub served on `site_for(runner, **site_args)`."""
    app = create_stub_app(str(audio_dir.parent))
    runner = web.AppRunner(app)
    await runner.setup()
    await site_for(runner, **site_args).start()  # type: ignore[arg-type]
    yield runner, app[stub_state_key]
    await runner.cleanup()


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def ca_file(ca: trustme.CA, tmp_path: Path) -> str:
    path = tmp_path / "private-ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture
async def tls_stub(audio_dir: Path, ca: trustme.CA) -> AsyncIterator[tuple[int, StubState]]:
    """The stub over TLS on 127.0.0.1, its certificate (127.0.0.1, localhost) from `ca`."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    async with serve_stub(
        audio_dir, web.TCPSite, host="127.0.0.1", port=0, ssl_context=context
    ) as (runner, state):
        yield runner.addresses[0][1], state


@pytest.fixture
async def unix_stub(audio_dir: Path, tmp_path: Path) -> AsyncIterator[tuple[str, StubState]]:
    """The stub on a Unix socket, as `vllm serve --uds PATH` serves."""
    path = str(tmp_path / "vllm.sock")
    async with serve_stub(audio_dir, web.UnixSite, path=path) as (_, state):
        yield path, state


class TestHttps:
    async def test_chat_rewrite_over_verified_tls(
        self, make_gateway: GatewayFactory, tls_stub, ca_file: str, audio_dir: Path
    ) -> None:
        port, stub = tls_stub
        gateway = await make_gateway(
            upstream={"url": f"https://127.0.0.1:{port}", "ca_file": ca_file}
        )
        response = await gateway.post(CHAT, json=chat_body({"audio_path": "a.wav"}))
        assert response.status == 200, await response.text()
        clip = (await response.json())["stub"]["clips"][0]
        assert clip["sha256"] == sha256_of(audio_dir / "a.wav")
        assert stub.requests[-1].headers["Host"] == f"127.0.0.1:{port}"

    async def test_streamed_sse_and_passthrough_by_host_name(
        self, make_gateway: GatewayFactory, tls_stub, ca_file: str
    ) -> None:
        port, stub = tls_stub
        gateway = await make_gateway(
            upstream={"url": f"https://localhost:{port}", "ca_file": ca_file}
        )
        stub.hold.set()
        response = await gateway.post(CHAT, json=chat_body({"audio_path": "b.wav"}, stream=True))
        assert response.status == 200
        assert (await response.text()).endswith("data: [DONE]\n\n")
        models = await gateway.get("/v1/models")
        assert (await models.json())["data"][0]["id"] == "stub-audio-model"
        assert stub.requests[-1].headers["Host"] == f"localhost:{port}"

    @pytest.mark.parametrize("trust", ["another-ca", "system-store-only"])
    async def test_untrusted_certificate_is_502_naming_verification(
        self, make_gateway: GatewayFactory, tls_stub, tmp_path: Path, trust: str
    ) -> None:
        port, stub = tls_stub
        upstream = {"url": f"https://127.0.0.1:{port}"}
        if trust == "another-ca":
            other = tmp_path / "other-ca.pem"
            trustme.CA().cert_pem.write_to_path(str(other))
            upstream["ca_file"] = str(other)
        gateway = await make_gateway(upstream=upstream)
        for method, path in [("GET", "/v1/models"), ("POST", CHAT)]:
            response = await gateway.request(method, path, json=chat_body({"audio_path": "a.wav"}))
            error = await gateway_error(response, 502, None)
            assert "certificate verification" in error["message"], error
            assert f"127.0.0.1:{port}" in error["message"]
        assert stub.request_count == 0

    async def test_certificate_for_another_name_is_502(
        self, make_gateway: GatewayFactory, audio_dir: Path, ca: trustme.CA, ca_file: str
    ) -> None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("vllm.internal").configure_cert(context)
        async with serve_stub(
            audio_dir, web.TCPSite, host="127.0.0.1", port=0, ssl_context=context
        ) as (runner, _):
            url = f"https://127.0.0.1:{runner.addresses[0][1]}"
            gateway = await make_gateway(upstream={"url": url, "ca_file": ca_file})
            error = await gateway_error(await gateway.get("/v1/models"), 502, None)
            assert "certificate verification" in error["message"], error

    async def test_plain_http_to_a_tls_port_is_502(
        self, make_gateway: GatewayFactory, tls_stub
    ) -> None:
        port, _ = tls_stub
        gateway = await make_gateway(upstream={"url": f"http://127.0.0.1:{port}"})
        await gateway_error(await gateway.get("/v1/models"), 502, None)


class TestUnixSocket:
    async def test_chat_rewrite(
        self, make_gateway: GatewayFactory, unix_stub, audio_dir: Path
    ) -> None:
        path, stub = unix_stub
        gateway = await make_gateway(upstream={"url": f"unix://{path}"})
        response = await gateway.post(CHAT, json=chat_body({"audio_paths": ["a.wav", "c.wav"]}))
        assert response.status == 200, await response.text()
        clips = (await response.json())["stub"]["clips"]
        assert [c["sha256"] for c in clips] == [
            sha256_of(audio_dir / n) for n in ("a.wav", "c.wav")
        ]
        assert stub.requests[-1].headers["Host"] == "localhost"  # what curl --unix-socket sends

    async def test_streamed_sse_arrives_event_by_event(
        self, make_gateway: GatewayFactory, unix_stub
    ) -> None:
        path, stub = unix_stub
        gateway = await make_gateway(upstream={"url": f"unix://{path}"})
        try:
            response = await gateway.post(
                CHAT,
                json=chat_body({"audio_path": "b.wav"}, stream=True),
                headers={"X-Stub-Hold": "1"},
            )
            assert response.status == 200
            first = await asyncio.wait_for(response.content.readuntil(b"\n\n"), BOUND_SECONDS)
            assert first.startswith(b"data: ")
            assert stub.streams_finished == 0  # still held open upstream
        finally:
            stub.hold.set()
        assert (await response.read()).endswith(b"data: [DONE]\n\n")

    async def test_passthrough(self, make_gateway: GatewayFactory, unix_stub) -> None:
        path, stub = unix_stub
        gateway = await make_gateway(upstream={"url": f"unix://{path}"})
        models = await gateway.get("/v1/models")
        assert (await models.json())["data"][0]["id"] == "stub-audio-model"
        body = {"model": "m", "prompt": "three small words"}
        tokens = await gateway.post("/tokenize", json=body)
        assert (await tokens.json())["count"] == 3
        assert json.loads(stub.requests[-1].body) == body
        assert (await gateway.head("/v1/models")).status == 200

    async def test_missing_socket_is_502_naming_it(
        self, make_gateway: GatewayFactory, tmp_path: Path
    ) -> None:
        path = tmp_path / "absent.sock"
        gateway = await make_gateway(upstream={"url": f"unix://{path}"})
        error = await gateway_error(await gateway.get("/v1/models"), 502, None)
        assert str(path) in error["message"]


class TestOnUvloop:
    """`audio-gateway serve` runs on uvloop, which drops a connection whose protocol fails in
    `connection_made` (asyncio only logs it): the Unix-socket path, on uvloop."""

    def test_unix_socket_chat_and_passthrough(self, audio_dir: Path, tmp_path: Path) -> None:
        async def scenario() -> None:
            path = str(tmp_path / "vllm.sock")
            async with serve_stub(audio_dir, web.UnixSite, path=path) as (_, stub):
                config = gateway_config(f"unix://{path}", audio_dir)
                async with TestClient(TestServer(create_app(config))) as gateway:
                    async with asyncio.timeout(BOUND_SECONDS):
                        chat = await gateway.post(CHAT, json=chat_body({"audio_path": "a.wav"}))
                        assert chat.status == 200, await chat.text()
                        assert (await gateway.get("/v1/models")).status == 200
                assert stub.request_count == 2

        uvloop.run(scenario())


class TestCommandLine:
    @pytest.mark.parametrize(
        "url",
        ["http://127.0.0.1:8000", "https://vllm.internal:8443/prefix", "unix:///run/vllm.sock"],
    )
    def test_upstream_flag_takes_every_form(self, url: str) -> None:
        config = serve_config(build_parser().parse_args(["serve", "--upstream", url]))
        assert config.upstream.url == url.rstrip("/")

    @pytest.mark.parametrize("url", ["unix://relative.sock", "unix:///", "ftp://h:1", "vllm:8000"])
    def test_upstream_flag_refuses_other_forms(self, url: str) -> None:
        with pytest.raises(ConfigError, match=r"upstream\.url"):
            serve_config(build_parser().parse_args(["serve", "--upstream", url]))

    def test_serve_relays_to_a_unix_socket_named_on_the_command_line(self, tmp_path: Path) -> None:
        # No server on the socket: the 502 naming it proves where the gateway connects.
        socket_path = tmp_path / "vllm.sock"
        port = free_port()
        process = start_gateway("serve", "--port", f"{port}", "--upstream", f"unix://{socket_path}")
        try:
            base = f"http://127.0.0.1:{port}"
            assert wait_for_health(f"{base}/gateway/health", process)["upstream"] == (
                f"unix://{socket_path}"
            )
            with pytest.raises(urllib.error.HTTPError) as raised:
                urllib.request.urlopen(f"{base}/v1/models", timeout=CLI_TIMEOUT_SECONDS)
            assert raised.value.code == 502
            assert str(socket_path) in json.loads(raised.value.read())["error"]["message"]
        finally:
            process.terminate()
            process.wait(timeout=CLI_TIMEOUT_SECONDS)
            if process.stderr is not None:
                process.stderr.close()

    def test_unreadable_ca_file_stops_serve_naming_the_key(self, tmp_path: Path) -> None:
        config = tmp_path / "gateway.toml"
        missing = tmp_path / "missing-ca.pem"
        config.write_text(
            f"[server]\nport = {free_port()}\nmalloc_tuning = false\n"
            f'[upstream]\nurl = "https://127.0.0.1:9"\nca_file = "{missing}"\n'
        )
        process = start_gateway("serve", "--config", str(config))
        try:
            assert process.wait(timeout=CLI_TIMEOUT_SECONDS) == 2
            assert process.stderr is not None
            stderr = process.stderr.read().decode()
            assert "upstream.ca_file" in stderr and str(missing) in stderr
        finally:
            if process.stderr is not None:
                process.stderr.close()
