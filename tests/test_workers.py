"""`[server] workers = 2` against real processes (`python -m gateway serve` in front of the stub):
requests spread over both workers on one port, every scrape of `/gateway/metrics` counts all of
them whichever worker answers, references never miss because of the other worker, a worker that
dies is logged and started again (readiness waits for it), SIGTERM drains them all, and a worker
that cannot start stops the gateway with status 2."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from hypothesis import assume, example, given
from hypothesis import strategies as st

from gateway.config import MAX_WORKERS, ConfigError, validate_config
from gateway.serving.peers import Peers
from gateway.stub_upstream import StubState
from gateway.workers.metrics_dir import metrics_directory
from gateway.workers.port import open_port
from gateway.workers.supervisor import Supervisor, describe_exit
from gateway.workers.wire import (
    WorkerSpec,
    encode_spec,
    parse_serving,
    read_spec,
    serving_line,
)
from tests.conftest import chat_body, parse_metrics
from tests.test_config import REPO_ROOT, free_port
from tests.test_drain import (
    BOUND_SECONDS,
    CHAT,
    Gateway,
    fresh_session,
    held_stream,
    serve,
    until,
)

WORKERS: dict[str, Any] = {"workers": 2, "access_log": True, "log_format": "json"}
REQUESTS_TOTAL = 'audio_gateway_requests_total{route="chat_completions",status="200"}'
ADDED_LATENCY_COUNT = 'audio_gateway_added_latency_seconds_count{route="chat_completions"}'
SCRAPES_PER_WORKER = 3


def serve_workers(
    stub_server: TestServer, tmp_path: Path, **options: Any
) -> contextlib.AbstractAsyncContextManager[Gateway]:
    """`serve` with `WORKERS`; the metrics directory under `tmp_path`, where it stays when the
    test's end kills the supervisor (SIGKILL leaves it no time to remove it)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    return serve(stub_server, tmp_path, env={"TMPDIR": str(scratch)}, **options, **WORKERS)


def log_records(gateway: Gateway) -> list[dict[str, Any]]:
    return [json.loads(line) for line in gateway.log if line.startswith("{")]


def served_by(gateway: Gateway, route: str) -> Counter[int]:
    """How many `route` requests each worker answered, from the JSON access log."""
    return Counter(
        record["worker"]
        for record in log_records(gateway)
        if record["logger"] == "gateway.access" and record.get("route") == route
    )


async def readiness(session: aiohttp.ClientSession, gateway: Gateway) -> tuple[int, Any]:
    async with session.get(f"{gateway.url}/gateway/ready") as response:
        return response.status, await response.json()


async def readiness_past_resets(
    session: aiohttp.ClientSession, gateway: Gateway
) -> tuple[int, Any]:
    """`readiness`, asked again when the connection is reset: the kernel resets connections
    that were queued on a killed worker's listener (SO_REUSEPORT gives each its own queue)."""
    while True:
        with contextlib.suppress(aiohttp.ClientConnectorError):
            return await readiness(session, gateway)
        await asyncio.sleep(0.01)


async def until_ready(session: aiohttp.ClientSession, gateway: Gateway) -> None:
    deadline = asyncio.get_running_loop().time() + BOUND_SECONDS
    while (await readiness(session, gateway))[0] != 200:
        assert asyncio.get_running_loop().time() < deadline, "\n".join(gateway.log)
        await asyncio.sleep(0.05)


async def scrape(session: aiohttp.ClientSession, gateway: Gateway) -> dict[str, float]:
    async with session.get(f"{gateway.url}/gateway/metrics") as response:
        assert response.status == 200
        return parse_metrics(await response.text())


async def until_scraped(
    session: aiohttp.ClientSession, gateway: Gateway, name: str, value: float
) -> None:
    deadline = asyncio.get_running_loop().time() + BOUND_SECONDS
    while (await scrape(session, gateway))[name] != value:
        assert asyncio.get_running_loop().time() < deadline, f"{name} never became {value}"
        await asyncio.sleep(0.1)


async def chat(session: aiohttp.ClientSession, gateway: Gateway, body: dict[str, Any]) -> None:
    async with session.post(f"{gateway.url}{CHAT}", json=body) as response:
        assert response.status == 200, await response.text()


async def scrapes_from_both_workers(
    session: aiohttp.ClientSession, gateway: Gateway
) -> list[dict[str, float]]:
    """Scrapes on fresh connections until each worker answered `SCRAPES_PER_WORKER` of them."""
    scrapes = []
    while min(served_by(gateway, "gateway_metrics")[w] for w in (1, 2)) < SCRAPES_PER_WORKER:
        scrapes.append(await scrape(session, gateway))
        await until(lambda: sum(served_by(gateway, "gateway_metrics").values()) == len(scrapes))
        assert len(scrapes) < 200, "SO_REUSEPORT never spread the scrapes"
    return scrapes


class TestOnePortTwoWorkers:
    async def test_requests_spread_over_both_and_every_scrape_counts_them_all(
        self, stub_server: TestServer, tmp_path: Path
    ) -> None:
        sent = 40
        async with serve_workers(stub_server, tmp_path) as gateway, fresh_session() as session:
            await until_ready(session, gateway)
            for _ in range(sent):
                await chat(session, gateway, chat_body())
            await until(lambda: sum(served_by(gateway, "chat_completions").values()) == sent)
            assert set(served_by(gateway, "chat_completions")) == {1, 2}
            for samples in await scrapes_from_both_workers(session, gateway):
                assert samples[REQUESTS_TOTAL] == sent
                assert samples[ADDED_LATENCY_COUNT] == sent  # histograms are summed too
                assert samples["audio_gateway_workers"] == 2
                assert samples["audio_gateway_worker_restarts_total"] == 0
            serving = [r for r in log_records(gateway) if "serving (pid" in r["message"]]
            assert len(serving) == 2

    async def test_references_the_other_worker_sent_go_with_their_data_never_as_a_miss(
        self, stub_server: TestServer, stub: StubState, audio_dir: Path, tmp_path: Path
    ) -> None:
        clips, seeds = ["a.wav", "b.wav", "c.wav"], 8
        sections = {"audio": {"root": str(audio_dir)}, "splice": {"repeats": "reference"}}
        async with (
            serve_workers(stub_server, tmp_path, sections=sections) as gateway,
            fresh_session() as session,
        ):
            await until_ready(session, gateway)
            for _ in range(seeds):
                for clip in clips:
                    await chat(session, gateway, chat_body({"audio_path": clip}))
            await until(lambda: sum(served_by(gateway, "chat_completions").values()) == 24)
            assert set(served_by(gateway, "chat_completions")) == {1, 2}
            samples = await scrape(session, gateway)
        assert stub.rejected == stub.mm_cache.uuid_misses == 0  # no cache-miss 400 came
        retries = [v for n, v in samples.items() if n.startswith("audio_gateway_reference_retries")]
        # one sample per reason: cache_miss, upstream_error, stream_error, refused
        assert len(retries) == 4 and sum(retries) == 0
        data = samples['audio_gateway_audio_parts_total{form="data"}']
        references = samples['audio_gateway_audio_parts_total{form="reference"}']
        assert len(clips) <= data <= 2 * len(clips)  # each worker sends a clip's data once
        assert data + references == len(clips) * seeds
        assert stub.mm_cache.stats()["items"] == len(clips)

    async def test_caches_emptied_through_one_worker_are_forgotten_by_every_worker(
        self, stub_server: TestServer, stub: StubState, audio_dir: Path, tmp_path: Path
    ) -> None:
        clips = ["a.wav", "b.wav", "c.wav"]
        sections = {"audio": {"root": str(audio_dir)}, "splice": {"repeats": "reference"}}
        async with (
            serve_workers(stub_server, tmp_path, sections=sections) as gateway,
            fresh_session() as session,
        ):
            await until_ready(session, gateway)
            for _ in range(2):
                for _ in range(8):
                    for clip in clips:
                        await chat(session, gateway, chat_body({"audio_path": clip}))
                assert set(served_by(gateway, "chat_completions")) == {1, 2}
                async with session.post(f"{gateway.url}/reset_mm_cache") as response:
                    assert response.status == 200
                assert stub.mm_cache.stats()["items"] == 0
                await until_scraped(session, gateway, "audio_gateway_reference_clips", 0)
            samples = await scrape(session, gateway)
        assert stub.rejected == stub.mm_cache.uuid_misses == 0  # no reference missed
        retries = [v for n, v in samples.items() if n.startswith("audio_gateway_reference_retries")]
        assert sum(retries) == 0

    async def test_a_worker_that_dies_is_logged_and_replaced_and_readiness_waits_for_it(
        self, stub_server: TestServer, tmp_path: Path
    ) -> None:
        async with serve_workers(stub_server, tmp_path) as gateway, fresh_session() as session:
            await until_ready(session, gateway)
            for _ in range(10):
                await chat(session, gateway, chat_body())
            [(number, victim), _] = worker_pids(gateway)
            os.kill(victim, signal.SIGKILL)
            deadline = asyncio.get_running_loop().time() + BOUND_SECONDS
            while (answer := await readiness_past_resets(session, gateway))[0] == 200:
                assert asyncio.get_running_loop().time() < deadline, "readiness never failed"
                await asyncio.sleep(0.01)
            assert answer[1]["reason"] == "workers_not_serving", answer
            await until_ready(session, gateway)
            assert len(worker_pids(gateway)) == 3  # the two first ones and the new one
            assert worker_pids(gateway)[2][0] == number  # which takes its number
            died = [r for r in log_records(gateway) if r["level"] == "ERROR"]
            assert [r["message"] for r in died] == [
                f"worker {number} (pid {victim}) was killed by SIGKILL while serving: "
                "starting a new one"
            ]
            samples = await scrape(session, gateway)
            assert samples[REQUESTS_TOTAL] == 10  # the dead worker's counts stay in the sums
            assert samples["audio_gateway_worker_restarts_total"] == 1
            assert samples["audio_gateway_workers"] == 2

    async def test_sigterm_drains_every_worker_and_the_metrics_directory_goes(
        self, stub_server: TestServer, stub: StubState, tmp_path: Path
    ) -> None:
        scratch = tmp_path / "tmp"  # serve_workers' TMPDIR
        streams = 12
        async with (
            serve_workers(stub_server, tmp_path) as gateway,
            fresh_session() as session,
        ):
            await until_ready(session, gateway)
            [metrics_dir] = scratch.iterdir()
            assert metrics_dir.name.startswith("audio-gateway-metrics-")
            async with contextlib.AsyncExitStack() as stack:
                held = [
                    await stack.enter_async_context(held_stream(session, gateway))
                    for _ in range(streams)
                ]
                gateway.signal(signal.SIGTERM)
                await until(lambda: len(waited_for(gateway)) == 2)  # both listeners closed
                assert sum(waited_for(gateway)) == streams and stopped_workers(gateway) == 0
                stub.hold.set()
                for response in held:  # each finishes: nothing was cut
                    assert (await response.read()).endswith(b"data: [DONE]\n\n")
            assert await gateway.exit_code() == 0
        assert stopped_workers(gateway) == 2
        assert list(scratch.iterdir()) == []

    async def test_a_terminal_ctrl_c_reaches_each_worker_once_so_streams_finish(
        self, stub_server: TestServer, stub: StubState, tmp_path: Path
    ) -> None:
        """SIGINT to the whole foreground process group: a worker that got it twice (from the
        terminal and from the supervisor) would cut its streams at once."""
        async with (
            serve_workers(stub_server, tmp_path, new_session=True) as gateway,
            fresh_session() as session,
        ):
            await until_ready(session, gateway)
            async with contextlib.AsyncExitStack() as stack:
                held = [
                    await stack.enter_async_context(held_stream(session, gateway)) for _ in range(6)
                ]
                os.killpg(gateway.process.pid, signal.SIGINT)
                await until(lambda: len(waited_for(gateway, "SIGINT")) == 2)
                stub.hold.set()
                for response in held:
                    assert (await response.read()).endswith(b"data: [DONE]\n\n")
            assert await gateway.exit_code() == 0
        assert not [r for r in log_records(gateway) if "again" in r["message"]]

    async def test_workers_drain_and_exit_when_the_supervisor_is_killed(
        self, stub_server: TestServer, tmp_path: Path
    ) -> None:
        async with serve_workers(stub_server, tmp_path) as gateway, fresh_session() as session:
            await until_ready(session, gateway)
            pids = [pid for _, pid in worker_pids(gateway)]
            gateway.process.kill()
            await until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids))
        assert len(waited_for(gateway)) == 2 and stopped_workers(gateway) == 2

    async def test_a_worker_that_cannot_start_stops_the_gateway_with_status_2(
        self, tmp_path: Path
    ) -> None:
        config = tmp_path / "gateway.toml"
        config.write_text(
            '[server]\nworkers = 2\nmalloc_tuning = false\n[upstream]\nurl = "https://127.0.0.1:9"\n'
            'ca_file = "/nonexistent/ca.pem"\n'
        )
        code, stderr = await run_serve("--config", str(config), "--port", str(free_port()))
        assert code == 2
        assert re.search(r"audio-gateway: worker [12]: upstream\.ca_file: cannot load", stderr)
        assert "before it served: stopping" in stderr

    async def test_a_port_another_socket_listens_on_is_refused(self, tmp_path: Path) -> None:
        config = tmp_path / "gateway.toml"
        config.write_text("[server]\nworkers = 2\nmalloc_tuning = false\n")
        with socket.socket() as other:  # SO_REUSEPORT too: it would let the workers share it
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            other.bind(("127.0.0.1", 0))
            other.listen()
            port = other.getsockname()[1]
            code, stderr = await run_serve("--config", str(config), "--port", str(port))
        assert code == 2
        assert f"audio-gateway: server.host/port: cannot listen on 127.0.0.1:{port}" in stderr


def worker_pids(gateway: Gateway) -> list[tuple[int, int]]:
    """(number, pid) of each worker that said it serves, in that order (the supervisor's log)."""
    messages = [r["message"] for r in log_records(gateway) if "serving (pid" in r["message"]]
    return [(int(m.split()[1]), int(m.split("(pid ")[1].rstrip(")"))) for m in messages]


def stopped_workers(gateway: Gateway) -> int:
    return sum(1 for r in log_records(gateway) if r.get("worker") and r["message"] == "stopped")


def waited_for(gateway: Gateway, signal_name: str = "SIGTERM") -> list[int]:
    """Per worker that closed its listener on the signal: the requests in flight it waited for."""
    lines = [r["message"] for r in log_records(gateway)]
    closed = [m for m in lines if m.startswith(f"{signal_name}: listener closed")]
    return [int(m.split("waiting up to ")[1].split(" for ")[1].split(" ")[0]) for m in closed]


async def run_serve(*args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "gateway", "serve", *args),
        cwd=REPO_ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), BOUND_SECONDS * 2)
    assert process.returncode is not None
    return process.returncode, stderr.decode()


class TestTheSetting:
    @pytest.mark.parametrize("value", [0, MAX_WORKERS + 1, -1, "2", 1.5, True])
    def test_out_of_bounds_or_not_an_integer_is_a_start_up_error(self, value: object) -> None:
        with pytest.raises(ConfigError, match=r"server\.workers"):
            validate_config({"server": {"workers": value}})

    def test_default_is_one(self) -> None:
        assert validate_config({}).server.workers == 1


class TestPeers:
    def test_ready_only_once_every_worker_serves(self) -> None:
        peers = Peers(3)
        for serving in range(3):
            peers.serving = serving
            verdict = peers.verdict()
            assert verdict is not None and verdict.reason == "workers_not_serving"
            assert f"{serving} of 3 workers are serving" in verdict.message
        peers.serving = 3
        assert peers.verdict() is None


class TestWire:
    @given(st.integers(min_value=0, max_value=10**6))
    def test_a_serving_line_reads_back_as_its_count(self, count: int) -> None:
        assert parse_serving(serving_line(count)) == count

    @given(st.binary(max_size=40))
    def test_any_other_line_is_not_a_count(self, line: bytes) -> None:
        assume(not line.strip().startswith(b"serving "))
        assert parse_serving(line) is None

    @given(
        st.integers(min_value=1, max_value=MAX_WORKERS),
        st.integers(min_value=1, max_value=MAX_WORKERS),
        st.booleans(),
        st.binary(max_size=64),
    )
    def test_a_spec_reads_back_and_leaves_what_follows_it(
        self, index: int, workers: int, restart: bool, after: bytes
    ) -> None:
        config = validate_config({"server": {"workers": workers, "api_keys": ["k-1"]}})
        spec = WorkerSpec(config, index, workers, "/tmp/metrics", "DEBUG", restart=restart)
        read_end, write_end = os.pipe()
        try:
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(encode_spec(spec) + after)
            assert read_spec(read_end) == spec
            assert os.read(read_end, len(after) + 1) == after
        finally:
            os.close(read_end)


class TestExitWords:
    @given(st.integers(min_value=-64, max_value=255))
    @example(-32)  # no name: glibc keeps 32 and 33 for its threads
    def test_every_status_reads_as_words(self, code: int) -> None:
        words = describe_exit(code)
        assert words.startswith("exited with status" if code >= 0 else "was killed by")
        assert (
            (str(code) in words)
            if code >= 0
            else words.endswith(
                signal.Signals(-code).name if -code in set(signal.Signals) else str(-code)
            )
        )


class TestAStopDuringStartUp:
    async def test_a_signal_before_the_first_worker_started_stops_the_gateway_cleanly(
        self, stub_server: TestServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The signal lands while the first worker is being spawned: no other is started, the
        one started is stopped with it (not killed), and the supervisor waits for it."""
        upstream = str(stub_server.make_url("")).rstrip("/")
        config = validate_config(
            {
                "upstream": {"url": upstream},
                "server": {"workers": 2, "port": free_port(), "malloc_tuning": False},
            }
        )
        port, sockets = open_port(config.server)
        with metrics_directory(str(tmp_path)) as metrics:
            supervisor = Supervisor(config, "info", metrics, port, sockets)
            asyncio.get_running_loop().call_soon(supervisor.stop, signal.SIGTERM)
            status = await asyncio.wait_for(supervisor.run(), BOUND_SECONDS * 2)
        assert status == 0
        assert supervisor.workers == {}
        assert not [r for r in caplog.records if "killing it" in r.getMessage()]
