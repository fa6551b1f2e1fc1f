"""The drain on SIGTERM, against a real `python -m gateway serve` process in front of the stub:
readiness fails at once, new connections are served for `drain_seconds` and refused after,
what is in flight (an SSE stream, a WebSocket session with messages both ways) finishes within
`shutdown_timeout_seconds`, what is still open then is cut (WebSocket 1001, a stream short of
its end), and the process exits 0 once it has cut, not after waiting the timeout out again.

Nothing a test checks has to happen before a timer of the gateway's runs out: on a shared,
loaded machine the test process may stall for seconds. Times are held only from below (the
drain lasts at least `drain_seconds`, the cut comes no sooner than the timeout) or against a
second whole timeout."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestServer

from gateway.serving.drain import InFlight
from gateway.stub_upstream import StubState
from tests.test_config import REPO_ROOT, free_port

START_SECONDS = 60.0  # a guard against hangs (start-up on a loaded machine), never an assertion
BOUND_SECONDS = 30.0
CHAT = "/v1/chat/completions"
LOOPS = ["asyncio", "uvloop"]


@dataclass
class Gateway:
    process: asyncio.subprocess.Process
    port: int
    log: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def signal(self, signum: signal.Signals) -> float:
        self.process.send_signal(signum)
        return asyncio.get_running_loop().time()

    async def exit_code(self) -> int:
        return await asyncio.wait_for(self.process.wait(), BOUND_SECONDS)


def fresh_session() -> aiohttp.ClientSession:
    """A client whose every request opens a new connection."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))


@contextlib.asynccontextmanager
async def serve(
    stub_server: TestServer,
    tmp_path: Path,
    *args: str,
    sections: dict[str, dict[str, Any]] | None = None,
    env: dict[str, str] | None = None,
    new_session: bool = False,
    **server: Any,
) -> AsyncIterator[Gateway]:
    """`python -m gateway serve --config FILE ARGS` in front of the stub: `[server]` keys from
    `server`, other sections from `sections`, environment variables added from `env`; with
    `new_session`, in a process group of its own (as a terminal's foreground job)."""
    upstream = str(stub_server.make_url("")).rstrip("/")
    tables: dict[str, dict[str, Any]] = {"server": {"malloc_tuning": False, **server}}
    for name, values in (sections or {}).items():
        tables.setdefault(name, {}).update(values)
    tables.setdefault("upstream", {}).setdefault("url", upstream)
    text = "".join(
        f"[{name}]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in values.items())
        for name, values in tables.items()
    )
    config = tmp_path / "gateway.toml"
    await asyncio.to_thread(config.write_text, text)
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gateway", "serve", "--config", str(config), "--port", str(port)),
        *args,
        cwd=REPO_ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
        start_new_session=new_session,
    )
    gateway = Gateway(process, port)
    reader = asyncio.create_task(collect_stderr(process, gateway.log))
    try:
        await wait_until_up(gateway)
        yield gateway
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await reader


async def collect_stderr(process: asyncio.subprocess.Process, log: list[str]) -> None:
    assert process.stderr is not None
    async for line in process.stderr:
        log.append(line.decode(errors="replace").rstrip("\n"))


async def wait_until_up(gateway: Gateway) -> None:
    """Until a served gateway answers /gateway/health (its log shown if it exits first)."""
    deadline = asyncio.get_running_loop().time() + START_SECONDS
    async with fresh_session() as session:
        while True:
            assert gateway.process.returncode is None, "\n".join(gateway.log)
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"{gateway.url}/gateway/health") as response:
                    if response.status == 200:
                        return
            assert asyncio.get_running_loop().time() < deadline, "serve never came up"
            await asyncio.sleep(0.05)


async def listener_closed(gateway: Gateway) -> float:
    """Polls with new connections until one is refused; when that was (loop time)."""
    deadline = asyncio.get_running_loop().time() + BOUND_SECONDS
    async with fresh_session() as session:
        while True:
            try:
                async with session.get(f"{gateway.url}/gateway/health") as response:
                    await response.read()
            except aiohttp.ClientConnectorError:
                return asyncio.get_running_loop().time()
            assert asyncio.get_running_loop().time() < deadline, "the listener stayed open"
            await asyncio.sleep(0.05)


async def until(condition: Any) -> None:
    deadline = asyncio.get_running_loop().time() + BOUND_SECONDS
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "never happened"
        await asyncio.sleep(0.02)


async def idle_keep_alive_connection(
    gateway: Gateway,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that got one answer and stays open for the next request."""
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
    writer.write(b"GET /gateway/health HTTP/1.1\r\nHost: gateway\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"Connection: close" not in head
    [length] = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")]
    await reader.readexactly(int(length.split(b":")[1]))
    return reader, writer


async def until_draining(session: aiohttp.ClientSession, gateway: Gateway) -> None:
    """Polls readiness until it says `draining` (the signal arrives on its own time), and
    checks it says nothing else meanwhile but `ready`."""
    deadline = asyncio.get_running_loop().time() + BOUND_SECONDS
    while (answer := await readiness(session, gateway))[0] == 200:
        assert asyncio.get_running_loop().time() < deadline, "readiness never failed"
        await asyncio.sleep(0.01)
    assert answer == (
        503,
        {
            "status": "not_ready",
            "reason": "draining",
            "message": "the gateway is shutting down (drain started by SIGTERM or SIGINT)",
        },
    )


async def readiness(session: aiohttp.ClientSession, gateway: Gateway) -> tuple[int, Any]:
    async with session.get(f"{gateway.url}/gateway/ready") as response:
        return response.status, await response.json()


@contextlib.asynccontextmanager
async def held_stream(
    session: aiohttp.ClientSession, gateway: Gateway
) -> AsyncIterator[aiohttp.ClientResponse]:
    """A streamed chat answer the stub holds after its first chunk (until `stub.hold` is set);
    the first chunk has arrived when this yields."""
    body = {"model": "stub", "messages": [{"role": "user", "content": "one two"}], "stream": True}
    headers = {"X-Stub-Hold": "1"}
    async with session.post(f"{gateway.url}{CHAT}", json=body, headers=headers) as response:
        assert response.status == 200
        first = await response.content.readuntil(b"\n\n")
        assert first.startswith(b"data: ")
        yield response


TIMER_SLACK_SECONDS = 0.01
# A drain no test outlives (past every guard above): what must happen during it never races its
# end, however slowly a loaded machine runs the test.
UNENDING_DRAIN_SECONDS = 4 * BOUND_SECONDS


class TestReadinessAndNewConnections:
    async def test_ready_fails_at_once_and_new_connections_are_served_while_draining(
        self, stub_server: TestServer, stub: StubState, tmp_path: Path
    ) -> None:
        async with (
            serve(stub_server, tmp_path, drain_seconds=UNENDING_DRAIN_SECONDS) as gateway,
            fresh_session() as fresh,
        ):
            assert await readiness(fresh, gateway) == (200, {"status": "ready"})
            stub.health_status = 503  # then the upstream fails its health check
            await asyncio.sleep(1.1)  # past the kept result
            status, body = await readiness(fresh, gateway)
            assert (status, body["reason"]) == (503, "upstream_status")
            stub.health_status = 200
            await asyncio.sleep(1.1)
            assert (await readiness(fresh, gateway))[0] == 200
            gateway.signal(signal.SIGTERM)
            await until_draining(fresh, gateway)
            # A new connection during the drain is served, and told to go away after.
            async with fresh.get(f"{gateway.url}/v1/models") as response:
                assert response.status == 200
                assert response.headers["Connection"] == "close"
            gateway.signal(signal.SIGTERM)  # a second one ends the drain: nothing is in flight
            await listener_closed(gateway)
            assert await gateway.exit_code() == 0

    async def test_the_listener_closes_no_sooner_than_drain_seconds_then_refuses(
        self, stub_server: TestServer, stub: StubState, tmp_path: Path
    ) -> None:
        drain_seconds = 2.0
        async with (
            serve(stub_server, tmp_path, drain_seconds=drain_seconds) as gateway,
            aiohttp.ClientSession() as kept,
        ):
            async with held_stream(kept, gateway) as stream:
                sent_at = gateway.signal(signal.SIGTERM)
                closed_at = await listener_closed(gateway)
                # Not before the drain is over; uvloop's timers tick in milliseconds and may fire
                # up to one early (1.998 s was seen), so a few milliseconds are let go.
                assert closed_at - sent_at >= drain_seconds - TIMER_SLACK_SECONDS
                assert gateway.process.returncode is None  # the stream is still in flight
                stub.hold.set()
                rest = await stream.content.read()
            assert rest.endswith(b"data: [DONE]\n\n")
            assert await gateway.exit_code() == 0


@pytest.mark.parametrize("event_loop_name", LOOPS)
class TestInFlightFinishes:
    async def test_sse_stream_finishes_after_the_listener_closed(
        self, stub_server: TestServer, stub: StubState, tmp_path: Path, event_loop_name: str
    ) -> None:
        timeout = 30.0
        async with (
            serve(
                stub_server,
                tmp_path,
                event_loop=event_loop_name,
                shutdown_timeout_seconds=timeout,
            ) as gateway,
            aiohttp.ClientSession() as session,
            held_stream(session, gateway) as stream,
        ):
            idle, idle_writer = await idle_keep_alive_connection(gateway)
            sent_at = gateway.signal(signal.SIGTERM)
            await listener_closed(gateway)
            assert await asyncio.wait_for(idle.read(), BOUND_SECONDS) == b""  # closed by the drain
            idle_writer.close()
            stub.hold.set()
            rest = await stream.content.read()
            assert rest.endswith(b"data: [DONE]\n\n")
            assert json.loads(rest.split(b"\n\n")[0].removeprefix(b"data: "))["choices"]
            assert await gateway.exit_code() == 0
            # It exits once the stream is done, without waiting out the timeout.
            assert asyncio.get_running_loop().time() - sent_at < timeout

    async def test_an_upload_in_flight_keeps_arriving_after_sigterm(
        self, stub_server: TestServer, stub: StubState, tmp_path: Path, event_loop_name: str
    ) -> None:
        """aiohttp's own shutdown drops the bytes a closing connection receives: not this one."""
        resume = asyncio.Event()
        first, rest = b"a" * 64 * 1024, b"b" * 64 * 1024

        async def body() -> AsyncIterator[bytes]:
            yield first
            await resume.wait()
            yield rest

        async with (
            serve(stub_server, tmp_path, event_loop=event_loop_name) as gateway,
            aiohttp.ClientSession() as session,
        ):
            upload = asyncio.ensure_future(session.post(f"{gateway.url}/stub/upload", data=body()))
            await until(lambda: stub.request_count > 0)  # the head went through to the stub
            gateway.signal(signal.SIGTERM)
            await listener_closed(gateway)
            resume.set()
            async with await upload as response:
                echoed = await response.json()
            assert response.status == 200
            assert echoed["body_sha256"] == hashlib.sha256(first + rest).hexdigest()
            assert await gateway.exit_code() == 0

    async def test_websocket_messages_flow_both_ways_after_sigterm(
        self, stub_server: TestServer, stub: StubState, tmp_path: Path, event_loop_name: str
    ) -> None:
        async with (
            serve(stub_server, tmp_path, event_loop=event_loop_name) as gateway,
            aiohttp.ClientSession() as session,
            session.ws_connect(f"{gateway.url}/stub/ws/echo") as ws,
        ):
            await ws.send_str("before")
            assert (await ws.receive(BOUND_SECONDS)).data == "before"
            gateway.signal(signal.SIGTERM)
            await listener_closed(gateway)
            for index in range(3):  # the client's messages still reach the upstream, and back
                await ws.send_str(f"after {index}")
                assert (await ws.receive(BOUND_SECONDS)).data == f"after {index}"
            await ws.send_bytes(b"\x00\x01binary")
            assert (await ws.receive(BOUND_SECONDS)).data == b"\x00\x01binary"
            assert gateway.process.returncode is None
            await ws.close(code=1000, message=b"done")
            assert await gateway.exit_code() == 0
        assert stub.websocket_closes[-1][0] == 1000


@pytest.mark.parametrize("event_loop_name", LOOPS)
class TestCutAfterTheTimeout:
    async def test_what_is_still_open_is_cut_and_the_process_exits(
        self, stub_server: TestServer, stub: StubState, tmp_path: Path, event_loop_name: str
    ) -> None:
        timeout = 5.0
        async with (
            serve(
                stub_server,
                tmp_path,
                event_loop=event_loop_name,
                shutdown_timeout_seconds=timeout,
            ) as gateway,
            aiohttp.ClientSession() as session,
            session.ws_connect(f"{gateway.url}/stub/ws/echo") as ws,
            held_stream(session, gateway) as stream,
        ):
            # By hand: aiohttp's client would retry a GET the server closed without answering.
            reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
            writer.write(b"GET /stub/hang HTTP/1.1\r\nHost: gateway\r\n\r\n")
            await until(lambda: any(r.path == "/stub/hang" for r in stub.requests))
            await ws.send_str("ping")
            assert (await ws.receive(BOUND_SECONDS)).data == "ping"
            sent_at = gateway.signal(signal.SIGTERM)
            close = await ws.receive(BOUND_SECONDS + timeout)
            cut_at = asyncio.get_running_loop().time()
            assert close.type is WSMsgType.CLOSE
            assert (close.data, close.extra) == (1001, "gateway shutting down")
            assert cut_at - sent_at >= timeout  # served until the timeout, not cut before
            with pytest.raises(aiohttp.ClientPayloadError):
                await stream.content.read()  # the stream ends short of its last chunk
            assert await reader.read() == b""  # no answer: the connection closes
            writer.close()
            assert await gateway.exit_code() == 0
            exited_after_cut = asyncio.get_running_loop().time() - cut_at
        # Not twice the timeout: the cut ends the shutdown, nothing waits out `timeout` again.
        # (Its own bound, lifecycle.CUT_GRACE_SECONDS and a little, is the code's timers: a
        # wall-clock assertion of it fails whenever a loaded machine stalls the process that long.)
        assert exited_after_cut < timeout
        assert (1001, "gateway shutting down") in stub.websocket_closes
        log = "\n".join(gateway.log)
        assert "closing 1 WebSocket session(s) with 1001, cutting 2 request(s)" in log


class TestSignals:
    async def test_a_second_sigterm_cuts_at_once(
        self, stub_server: TestServer, tmp_path: Path
    ) -> None:
        timeout = 60.0
        async with (
            serve(stub_server, tmp_path, shutdown_timeout_seconds=timeout) as gateway,
            aiohttp.ClientSession() as session,
            held_stream(session, gateway) as stream,
        ):
            sent_at = gateway.signal(signal.SIGTERM)
            await listener_closed(gateway)
            gateway.signal(signal.SIGTERM)
            with pytest.raises(aiohttp.ClientPayloadError):
                await stream.content.read()
            assert await gateway.exit_code() == 0
            assert asyncio.get_running_loop().time() - sent_at < timeout

    async def test_sigint_skips_drain_seconds(
        self, stub_server: TestServer, tmp_path: Path
    ) -> None:
        drain_seconds = 60.0
        async with serve(stub_server, tmp_path, drain_seconds=drain_seconds) as gateway:
            sent_at = gateway.signal(signal.SIGINT)
            assert await gateway.exit_code() == 0
            assert asyncio.get_running_loop().time() - sent_at < drain_seconds
        assert "Traceback" not in "\n".join(gateway.log)


class TestIdleConnections:
    async def test_an_answer_still_being_written_is_not_cut_by_the_drain(self) -> None:
        """The drain closes idle connections; one whose handler has returned but whose answer
        aiohttp has not written yet is not idle (closed then, the answer was lost: a listener's
        last poll at the drain's end saw it cut, under load)."""
        in_flight = InFlight()
        reached, release = asyncio.Event(), asyncio.Event()

        async def hello(request: web.Request) -> web.Response:
            return web.json_response({"status": "ok"})

        async def before_writing(request: web.Request, response: web.StreamResponse) -> None:
            reached.set()  # the handler has returned; aiohttp is about to write its answer
            await release.wait()

        app = web.Application(middlewares=[in_flight.middleware()])
        app.router.add_get("/", hello)
        app.on_response_prepare.append(before_writing)
        async with TestServer(app) as server, aiohttp.ClientSession() as session:
            answer = asyncio.ensure_future(session.get(server.make_url("/")))
            await reached.wait()
            in_flight.start_draining()
            assert server.runner.server is not None
            assert in_flight.close_idle_connections(server.runner.server.connections) == 0
            release.set()
            async with await answer as response:
                assert await response.json() == {"status": "ok"}
            await asyncio.wait_for(in_flight.wait_idle(), BOUND_SECONDS)
