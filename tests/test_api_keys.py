"""API keys: with `server.api_keys` set, /v1 requests (WebSocket upgrades included) need one, and
a 401 comes before any body is read or file touched; `upstream.api_key` replaces the client's
credential upstream; no key ever shows in logs, errors, health or the config's repr."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

import pytest
import websockets
from aiohttp import web
from aiohttp.test_utils import TestClient
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr
from websockets.asyncio.client import connect as websockets_connect

from gateway.auth import ApiKeys, bearer_credential, is_protected, with_upstream_key
from gateway.config import Config, ConfigError, validate_config
from gateway.stub_upstream import StubState
from tests.conftest import cache_stats, chat_body, gateway_error
from tests.test_config import CLI_TIMEOUT_SECONDS, free_port, start_gateway, wait_for_health

Client = TestClient[web.Request, web.Application]
CHAT = "/v1/chat/completions"
KEYS = ["sk-gateway-one-7f3a", "sk-gateway-two-91cc"]
UPSTREAM_KEY = "sk-vllm-only-55e1"
BOUND_SECONDS = 10.0  # a guard against hangs, never a timing assertion


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
async def locked(make_gateway: Any) -> Client:
    """A gateway that requires one of KEYS."""
    client: Client = await make_gateway(server={"api_keys": KEYS})
    return client


async def assert_refused(response: Any) -> dict[str, Any]:
    error = await gateway_error(response, 401, None)
    assert error["code"] == "invalid_api_key"
    assert response.headers["WWW-Authenticate"] == "Bearer"
    return error


async def raw_head(gateway: Client, request: bytes) -> bytes:
    """Send raw request bytes (nothing normalises them) and read the answer's head."""
    reader, writer = await asyncio.open_connection(gateway.host, gateway.port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), BOUND_SECONDS)
    finally:
        writer.close()


class TestFrontDoor:
    @pytest.mark.parametrize(
        "headers",
        [
            {},
            bearer("sk-wrong"),
            bearer(KEYS[0] + "x"),
            bearer(KEYS[0][:-1]),
            {"Authorization": KEYS[0]},  # no scheme
            {"Authorization": f"Basic {KEYS[0]}"},
            {"Authorization": "Bearer "},
        ],
    )
    async def test_no_or_wrong_key_is_401_and_nothing_goes_upstream(
        self, locked: Client, stub: StubState, headers: dict[str, str]
    ) -> None:
        for method, path in [("POST", CHAT), ("POST", "/v1/responses"), ("GET", "/v1/models")]:
            response = await locked.request(method, path, json=chat_body(), headers=headers)
            error = await assert_refused(response)
            assert all(key not in error["message"] for key in KEYS)
        assert stub.request_count == 0

    @pytest.mark.parametrize("key", KEYS)
    async def test_each_configured_key_is_accepted(
        self, locked: Client, stub: StubState, key: str
    ) -> None:
        response = await locked.post(
            CHAT, json=chat_body({"audio_path": "a.wav"}), headers=bearer(key)
        )
        assert response.status == 200, await response.text()
        response = await locked.get("/v1/models", headers={"Authorization": f"bearer  {key} "})
        assert response.status == 200  # the scheme is case-insensitive, as in RFC 9110
        assert stub.request_count == 2

    async def test_routes_outside_v1_stay_open(self, locked: Client) -> None:
        for path in ["/gateway/health", "/gateway/metrics", "/health", "/metrics", "/ping"]:
            response = await locked.get(path)
            assert response.status == 200, (path, await response.text())
        response = await locked.options("/v1/models")  # CORS preflight carries no key (vLLM)
        assert response.status == 200

    async def test_extra_slashes_do_not_get_round_the_check(self, locked: Client) -> None:
        for path in [
            b"//v1/models",
            b"/v1",
            b"///v1/chat/completions",
            b"/gateway/../v1/chat/completions",  # aiohttp keeps dot segments; vLLM may not
            b"/x/%2E%2E/v1/models",
            b"/./v1/models",
            b"/invocations",  # vLLM's unguarded inference route
            b"/v2/models",
        ]:
            head = await raw_head(locked, b"GET %b HTTP/1.1\r\nHost: gateway\r\n\r\n" % path)
            assert head.startswith(b"HTTP/1.1 401 "), (path, head)

    async def test_refusals_are_counted_by_route(self, locked: Client) -> None:
        await assert_refused(await locked.post(CHAT, json=chat_body()))
        metrics = await (await locked.get("/gateway/metrics")).text()
        assert 'audio_gateway_requests_total{route="chat_completions",status="401"} 1.0' in metrics


class TestNothingTouchedBeforeTheKey:
    async def test_a_401_touches_no_file(self, locked: Client, audio_dir: Path) -> None:
        """A FIFO answers 400 not_a_regular_file once the resolver looks at it; without a key
        the answer is 401, and the cache saw no lookup of the regular file either."""
        os.mkfifo(audio_dir / "pipe.wav")
        for metadata in [{"audio_path": "pipe.wav"}, {"audio_paths": ["a.wav", "b.wav"]}]:
            await assert_refused(await locked.post(CHAT, json=chat_body(metadata)))
        assert (await cache_stats(locked))["misses"] == 0
        response = await locked.post(
            CHAT, json=chat_body({"audio_path": "pipe.wav"}), headers=bearer(KEYS[0])
        )
        error = await gateway_error(response, 400, "metadata.audio_path")
        assert error["code"] == "not_a_regular_file"

    async def test_a_401_comes_before_the_body_is_read(self, locked: Client) -> None:
        """The head announces 64 MiB that never come: only an answer that reads nothing of
        the body can arrive."""
        head = await raw_head(
            locked,
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\n"
            b"Content-Type: application/json\r\nContent-Length: 67108864\r\n\r\n",
        )
        assert head.startswith(b"HTTP/1.1 401 ")


class TestWebSocketUpgrades:
    async def test_an_upgrade_needs_a_key_too(self, locked: Client, stub: StubState) -> None:
        url = str(locked.make_url("/v1/realtime").with_scheme("ws"))
        for headers in [{}, bearer("sk-wrong")]:
            with pytest.raises(websockets.InvalidStatus) as refused:
                await websockets_connect(url, additional_headers=headers, proxy=None)
            assert refused.value.response.status_code == 401
        assert stub.request_count == 0
        async with websockets_connect(url, additional_headers=bearer(KEYS[1]), proxy=None) as ws:
            assert '"session.created"' in str(await ws.recv())
        async with locked.ws_connect("/v1/realtime", headers=bearer(KEYS[0])) as ws:
            assert (await ws.receive_json(timeout=BOUND_SECONDS))["type"] == "session.created"


class TestUpstreamKey:
    async def test_the_upstream_key_replaces_the_clients(
        self, make_gateway: Any, stub: StubState
    ) -> None:
        gateway: Client = await make_gateway(
            server={"api_keys": KEYS}, upstream={"api_key": UPSTREAM_KEY}
        )
        sent = {"Authorization": f"Bearer {KEYS[0]}", "X-Trace": "t-1"}
        await gateway.post(CHAT, json=chat_body({"audio_path": "a.wav"}), headers=sent)
        bridged = {"model": "m", "input": "Q", "metadata": {"audio_path": "a.wav"}}
        await gateway.post("/v1/responses", json=bridged, headers=sent)
        transcription = {"model": "m", "metadata": {"audio_path": "a.wav"}}
        await gateway.post("/v1/audio/transcriptions", json=transcription, headers=sent)
        await gateway.post("/v1/completions", json={"prompt": "hi"}, headers=sent)
        async with gateway.ws_connect("/v1/realtime", headers=sent) as ws:
            await ws.receive_json(timeout=BOUND_SECONDS)
        assert [r.path for r in stub.requests] == [
            CHAT, CHAT, "/v1/audio/transcriptions", "/v1/completions", "/v1/realtime"
        ]  # fmt: skip
        for received in stub.requests:
            authorizations = [
                v for k, v in received.headers.items() if k.lower() == "authorization"
            ]
            assert authorizations == [f"Bearer {UPSTREAM_KEY}"], received.path
            assert received.headers["X-Trace"] == "t-1"

    async def test_without_gateway_keys_the_upstream_key_still_replaces(
        self, make_gateway: Any, stub: StubState
    ) -> None:
        gateway: Client = await make_gateway(upstream={"api_key": UPSTREAM_KEY})
        await gateway.get("/v1/models", headers={"Authorization": "Bearer client-own"})
        await gateway.get("/v1/models")
        assert [r.headers["Authorization"] for r in stub.requests] == [f"Bearer {UPSTREAM_KEY}"] * 2

    async def test_without_an_upstream_key_the_clients_header_passes(
        self, locked: Client, stub: StubState
    ) -> None:
        await locked.get("/v1/models", headers=bearer(KEYS[0]))
        assert stub.requests[-1].headers["Authorization"] == f"Bearer {KEYS[0]}"


class TestSecretsStaySecret:
    async def test_keys_never_reach_logs_errors_or_health(
        self, make_gateway: Any, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.DEBUG)
        secrets = [*KEYS, UPSTREAM_KEY]
        gateway: Client = await make_gateway(
            server={"api_keys": KEYS}, upstream={"api_key": UPSTREAM_KEY}
        )
        await gateway.get("/v1/models", headers=bearer("sk-wrong"))
        await gateway.post(CHAT, json=chat_body({"audio_path": "a.wav"}), headers=bearer(KEYS[0]))
        async with gateway.ws_connect("/v1/realtime", headers=bearer(KEYS[1])) as ws:
            await ws.receive_json(timeout=BOUND_SECONDS)
        down: Client = await make_gateway(
            server={"api_keys": KEYS}, upstream={"url": "http://127.0.0.1:9", "api_key": "sk-x9"}
        )
        failed = await down.get("/v1/models", headers=bearer(KEYS[0]))
        assert failed.status == 502
        texts = [
            caplog.text,
            await failed.text(),
            await (await gateway.get("/gateway/health")).text(),
            await (await gateway.get("/gateway/metrics")).text(),
        ]
        assert not [s for s in [*secrets, "sk-x9"] for text in texts if s in text]

    def test_config_repr_dump_and_errors_hide_keys(self) -> None:
        config = Config.model_validate(
            {"server": {"api_keys": KEYS}, "upstream": {"api_key": UPSTREAM_KEY}}
        )
        shown = repr(config) + str(config) + str(config.model_dump())
        assert all(key not in shown for key in [*KEYS, UPSTREAM_KEY])
        with pytest.raises(ConfigError) as raised:
            validate_config({"server": {"api_keys": ["sk has spaces"]}})
        assert "server.api_keys.0" in str(raised.value)
        assert "sk has spaces" not in str(raised.value)


class TestConfigSources:
    def test_environment_extends_keys_and_overrides_the_upstream_key(self) -> None:
        config = Config.model_validate(
            {"server": {"api_keys": ["file-key"]}, "upstream": {"api_key": "file-up"}}
        )
        environ = {
            "AUDIO_GATEWAY_API_KEYS": " env-one, env-two ,",
            "AUDIO_GATEWAY_UPSTREAM_API_KEY": "env-up",
        }
        merged = config.with_environment(environ)
        keys = [key.get_secret_value() for key in merged.server.api_keys]
        assert keys == ["file-key", "env-one", "env-two"]
        assert merged.upstream.api_key.get_secret_value() == "env-up"
        assert config.with_environment({}) == config

    @pytest.mark.parametrize("bad", ["", "has space", "tab\tkey", "comma,key", "ключ"])
    def test_unusable_keys_are_refused(self, bad: str) -> None:
        with pytest.raises(ConfigError) as raised:
            validate_config({"server": {"api_keys": [bad]}})
        assert "server.api_keys.0" in str(raised.value)

    def test_serve_takes_keys_from_file_environment_and_flags(self, tmp_path: Path) -> None:
        config = tmp_path / "keys.toml"
        config.write_text('[server]\napi_keys = ["from-file"]\n')
        port = free_port()
        env = {**os.environ, "AUDIO_GATEWAY_API_KEYS": "from-env"}
        process = start_gateway(
            "serve",
            *("--config", str(config), "--port", f"{port}", "--upstream", "http://127.0.0.1:9"),
            *("--api-key", "from-flag-1", "--api-key", "from-flag-2"),
            env=env,
        )
        try:
            wait_for_health(f"http://127.0.0.1:{port}/gateway/health", process)
            statuses = {
                key: _status(f"http://127.0.0.1:{port}/v1/models", key)
                for key in ["from-file", "from-env", "from-flag-1", "from-flag-2", "other", None]
            }
        finally:
            process.terminate()
            _, stderr = process.communicate(timeout=CLI_TIMEOUT_SECONDS)
        # Accepted keys get past the door to the (unreachable) upstream: 502, not 401.
        assert statuses == {
            "from-file": 502,
            "from-env": 502,
            "from-flag-1": 502,
            "from-flag-2": 502,
            "other": 401,
            None: 401,
        }
        assert b"from-" not in stderr


def _status(url: str, key: str | None) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers=bearer(key) if key else {})
    try:
        with urllib.request.urlopen(request, timeout=CLI_TIMEOUT_SECONDS) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


# --- the pure parts ---------------------------------------------------------------------------

printable_keys = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters=","),
    min_size=1,
    max_size=40,
)


@given(st.lists(printable_keys, min_size=1, max_size=4), printable_keys)
def test_a_credential_is_accepted_exactly_when_it_is_a_key(keys: list[str], offered: str) -> None:
    accepted = ApiKeys([SecretStr(key) for key in keys])
    assert accepted.accept(f"Bearer {offered}") is (offered in keys)
    assert accepted.accept(f"Bearer {keys[-1]}")
    assert not accepted.accept(None) and not accepted.accept(keys[0])


@given(st.text(max_size=30))
def test_bearer_credential_takes_only_the_bearer_scheme(value: str) -> None:
    credential = bearer_credential(value)
    if credential is not None:
        assert value.strip().lower().startswith("bearer ")
        assert credential == credential.strip() and credential in value


@given(st.text(max_size=20))
def test_everything_under_v1_is_protected_but_preflights(suffix: str) -> None:
    assert is_protected("POST", "/v1/" + suffix)
    assert is_protected("GET", "//v1/" + suffix)
    assert is_protected("GET", "/gateway/../v1/" + suffix)
    assert not is_protected("OPTIONS", "/v1/" + suffix)


@pytest.mark.parametrize("prefix", ["/v2", "/inference", "/cohere", "/invocations"])
def test_the_other_inference_prefixes_are_guarded_too(prefix: str) -> None:
    """vLLM's own --api-key guards /v2, /inference and /cohere besides /v1; /invocations runs
    the same inference and vLLM leaves it open: the gateway, as the front door, does not."""
    assert is_protected("POST", prefix) and is_protected("POST", prefix + "/x")
    assert not is_protected("POST", prefix + "x")


GUARDED_NAMES = ("v1", "v2", "inference", "cohere", "invocations")


@given(st.text(max_size=20).filter(lambda path: not any(n in path for n in GUARDED_NAMES)))
def test_paths_outside_v1_are_open(path: str) -> None:
    assert not is_protected("GET", "/" + path)
    assert not is_protected("GET", "/v10/" + path) and not is_protected("GET", "/v1x" + path)
    assert not is_protected("GET", "/v10/../" + path)


def test_upstream_key_header_replaces_every_authorization() -> None:
    headers = [("authorization", "Bearer a"), ("X-A", "1"), ("Authorization", "Basic b")]
    assert with_upstream_key(headers, SecretStr("up")) == [
        ("X-A", "1"),
        ("Authorization", "Bearer up"),
    ]
    assert with_upstream_key(headers, SecretStr("")) is headers
