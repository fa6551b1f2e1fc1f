"""What a gateway with `[server] workers` > 1 does at start: its port is its own (a probe, then
its sockets bound and the port's listeners looked at, so two gateways started in the same instant
never both serve), `port = 0` is one port every worker serves, and the metrics directories that
gateways killed with SIGKILL left behind are removed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import ConfigError, validate_config
from gateway.workers.metrics_dir import LOCK_NAME, PREFIX, metrics_directory, remove_stale
from gateway.workers.port import (
    Listener,
    foreign_listeners,
    open_port,
    parse_table,
    probed_port,
    read_listeners,
    refuse_shared,
)
from tests.test_config import REPO_ROOT, free_port
from tests.test_drain import (
    BOUND_SECONDS,
    START_SECONDS,
    Gateway,
    collect_stderr,
    fresh_session,
    until,
)
from tests.test_workers import (
    log_records,
    scrapes_from_both_workers,
    serve_workers,
    until_ready,
    worker_pids,
)


def workers_config(stub_server: TestServer, tmp_path: Path, *lines: str) -> Path:
    """A config of two workers with JSON logs in front of the stub, `lines` added to [server]."""
    upstream = str(stub_server.make_url("")).rstrip("/")
    server = ["workers = 2", "malloc_tuning = false", 'log_format = "json"', *lines]
    config = tmp_path / "gateway.toml"
    config.write_text("[server]\n" + "\n".join(server) + f'\n[upstream]\nurl = "{upstream}"\n')
    return config


@contextlib.contextmanager
def listening(host: str, port: int, *, reuse_port: bool = True) -> Iterator[socket.socket]:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen()
        yield sock


def inode(sock: socket.socket) -> int:
    return os.fstat(sock.fileno()).st_ino


class TestThePortIsTheGatewaysOwn:
    def test_a_listener_that_shares_the_port_with_so_reuseport_is_found(self) -> None:
        """What step 3 sees after the probe passed: another process's SO_REUSEPORT sockets on
        our address or a wildcard over it, not those on another address."""
        server = validate_config({"server": {"host": "127.0.0.1", "port": 0, "workers": 2}}).server
        port, ours = open_port(server)
        try:
            assert foreign_listeners(ours, read_listeners(port.number)) == []
            with (
                listening("127.0.0.1", port.number) as same,
                listening("0.0.0.0", port.number) as wildcard,
                listening("127.0.0.2", port.number) as elsewhere,
            ):
                found = {one.inode for one in foreign_listeners(ours, read_listeners(port.number))}
                assert inode(elsewhere) in {one.inode for one in read_listeners(port.number)}
                assert found == {inode(same), inode(wildcard)}
        finally:
            for sock in ours:
                sock.close()

    def test_a_gateway_that_bound_between_the_probe_and_the_bind_is_refused(self) -> None:
        """The window of two gateways started in the same instant, step by step: the other
        one's sockets listen only after this one's probe passed."""
        server = validate_config({"server": {"host": "127.0.0.1", "port": free_port()}}).server
        port = probed_port(server)
        with listening("127.0.0.1", port.number) as other:
            other_inode = inode(other)
            ours = port.bind_sockets()
            with pytest.raises(ConfigError) as refused:
                refuse_shared(server, ours)
        assert all(sock.fileno() == -1 for sock in ours)  # closed
        where = f"server.host/port: cannot listen on 127.0.0.1:{port.number}: another process"
        assert str(refused.value).startswith(where)
        assert f"127.0.0.1:{port.number} (socket inode {other_inode})" in str(refused.value)

    async def test_two_gateways_started_in_the_same_instant_never_both_serve(
        self, stub_server: TestServer, tmp_path: Path
    ) -> None:
        """Each refuses (status 2, naming the port) or serves; never both on one port."""
        config = workers_config(stub_server, tmp_path)
        for _ in range(2):
            port = free_port()
            argv = (sys.executable, "-m", "gateway", "serve", "--config", str(config))
            async with (
                started(*argv, "--port", str(port)) as first,
                started(*argv, "--port", str(port)) as second,
            ):
                outcomes = await asyncio.gather(settled(first), settled(second))
            assert outcomes.count("serving") <= 1, [first.log, second.log]
            for gateway, outcome in zip((first, second), outcomes, strict=True):
                if outcome != "serving":
                    assert outcome == 2, gateway.log
                    assert f"server.host/port: cannot listen on 127.0.0.1:{port}" in "\n".join(
                        gateway.log
                    )


def kernel_line(listener: Listener, state: str = "0A") -> str:
    """A /proc/net/tcp* row as Linux prints it (`tcp4_seq_show`, `tcp6_seq_show`): each 32-bit
    word of the address as the hex of its value in this machine's byte order."""
    words = [listener.address[i : i + 4] for i in range(0, len(listener.address), 4)]
    address = "".join(f"{int.from_bytes(word, sys.byteorder):08X}" for word in words)
    return (
        f"   0: {address}:{listener.port:04X} {'0' * len(address)}:0000 {state} "
        f"00000000:00000000 00:00000000 00000000  1000        0 {listener.inode} 1 0 100 0 0 10 0"
    )


@given(
    st.sampled_from([socket.AF_INET, socket.AF_INET6]).flatmap(
        lambda family: st.builds(
            Listener,
            st.just(family),
            st.binary(
                min_size=4 if family == socket.AF_INET else 16,
                max_size=4 if family == socket.AF_INET else 16,
            ),
            st.integers(0, 65535),
            st.integers(1, 2**63),
        )
    ),
    st.sampled_from(["01", "06", "0A"]),
)
def test_a_proc_table_row_reads_back_as_the_listener_it_shows(
    listener: Listener, state: str
) -> None:
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
    found = list(parse_table(listener.family, header + kernel_line(listener, state) + "\n"))
    assert found == ([listener] if state == "0A" else [])


class TestPortZero:
    async def test_every_worker_serves_the_one_port_the_supervisor_got(
        self, stub_server: TestServer, tmp_path: Path
    ) -> None:
        config = workers_config(stub_server, tmp_path, "access_log = true")
        argv = (sys.executable, "-m", "gateway", "serve", "--config", str(config), "--port", "0")
        async with started(*argv) as gateway, fresh_session() as session:
            gateway.port = await port_logged(gateway)
            await until_ready(session, gateway)
            await scrapes_from_both_workers(session, gateway)  # both answer on that port
            assert len(worker_pids(gateway)) == 2


class TestStaleMetricsDirectories:
    def test_only_a_directory_whose_lock_no_process_holds_is_removed(self, tmp_path: Path) -> None:
        killed = tmp_path / "killed"
        killed.mkdir()
        stale = directory_of_a_killed_supervisor(killed)
        not_ours = tmp_path / f"{PREFIX}not-ours"
        not_ours.mkdir()  # the prefix, but no lock file: not made by a gateway
        (tmp_path / f"{PREFIX}a-link").symlink_to(stale)
        (tmp_path / f"{PREFIX}a-file").write_text("")
        os.rename(stale, moved := tmp_path / stale.name)
        with metrics_directory(str(tmp_path)) as live:
            assert not moved.exists()  # removed when this one was made
            assert remove_stale(str(tmp_path)) == []  # the live one is held
            assert Path(live.path).is_dir() and (Path(live.path) / LOCK_NAME).is_file()
            assert not_ours.is_dir() and (tmp_path / f"{PREFIX}a-link").is_symlink()
        assert not Path(live.path).exists()

    async def test_a_start_removes_what_a_killed_supervisor_left(
        self, stub_server: TestServer, tmp_path: Path
    ) -> None:
        scratch = tmp_path / "tmp"  # serve_workers' TMPDIR
        async with serve_workers(stub_server, tmp_path) as gateway, fresh_session() as session:
            await until_ready(session, gateway)
            pids = [pid for _, pid in worker_pids(gateway)]
            [left] = scratch.iterdir()
            gateway.process.kill()
            await until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids))
        assert left.is_dir()  # SIGKILL gave it no time
        async with serve_workers(stub_server, tmp_path) as gateway, fresh_session() as session:
            await until_ready(session, gateway)
            [now] = scratch.iterdir()
            assert now != left and not left.exists()


def directory_of_a_killed_supervisor(parent: Path) -> Path:
    """A metrics directory made by another process, which was then killed with SIGKILL."""
    code = (
        "import sys\n"
        "from gateway.workers.metrics_dir import metrics_directory\n"
        "with metrics_directory(sys.argv[1]) as made:\n"
        "    print(made.path, flush=True)\n"
        "    sys.stdin.read()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    with subprocess.Popen(
        [sys.executable, "-c", code, str(parent)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    ) as process:
        assert process.stdout is not None
        path = Path(process.stdout.readline().strip())
        assert remove_stale(str(parent)) == []  # held while it lives
        process.kill()
    return path


async def port_logged(gateway: Gateway) -> int:
    """The port the supervisor says its workers share (`port = 0`)."""
    deadline = asyncio.get_running_loop().time() + START_SECONDS  # a guard, for a loaded machine
    while True:
        for record in log_records(gateway):
            if "the workers share port" in record["message"]:
                return int(record["message"].rsplit(" ", 1)[1])
        assert gateway.process.returncode is None, gateway.log
        assert asyncio.get_running_loop().time() < deadline, gateway.log
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def started(*argv: str) -> AsyncIterator[Gateway]:
    """A gateway process, its stderr collected; killed at the end (its workers drain)."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=REPO_ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    gateway = Gateway(process, 0)
    reader = asyncio.create_task(collect_stderr(process, gateway.log))
    try:
        yield gateway
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)  # the workers stop with it
            await asyncio.wait_for(process.wait(), BOUND_SECONDS)
        await reader


async def settled(gateway: Gateway) -> str | int:
    """ "serving" once both workers serve, or the exit status if it exited first."""
    deadline = asyncio.get_running_loop().time() + START_SECONDS  # a guard, for a loaded machine
    while gateway.process.returncode is None and len(worker_pids(gateway)) < 2:
        assert asyncio.get_running_loop().time() < deadline, gateway.log
        await asyncio.sleep(0.05)
    return "serving" if gateway.process.returncode is None else gateway.process.returncode
