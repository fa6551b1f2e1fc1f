"""The supervisor: the process `audio-gateway serve` started when `[server] workers` > 1.

It checks the port and binds every worker's sockets on it (`port.py`), makes a private
directory for the workers' metrics (`metrics_dir.py`), and starts the workers, each with its
sockets (inherited, open) and in its own process
group (a Ctrl-C in a terminal reaches the supervisor alone, which forwards it once). It tells
every worker how many serve whenever that changes (their readiness needs all of them), and
passes on a worker's word that it relayed a request emptying vLLM's caches (`/reset_mm_cache`,
`/pause`, `/sleep`), so every worker's record of the clips vLLM holds forgets them.

- SIGTERM or SIGINT: forwarded to every worker, which drains as a single gateway does (a second
  one is forwarded too: it hurries the drain); the supervisor exits once all have, 0 if all
  exited cleanly. A worker still running `KILL_SLACK_SECONDS` after its drain should have ended
  gets SIGKILL.
- A worker that dies while serving is logged (an error, with its exit code or signal), its
  gauges leave the metrics, and a new worker takes its place and number
  (`audio_gateway_worker_restarts_total` counts it); readiness says `workers_not_serving` until
  it serves.
- A worker that exits before it ever served (a start-up error: the port, `upstream.ca_file`)
  stops the gateway: the others drain and the supervisor exits with that worker's status (2 for
  a start-up error), so a worker that cannot start never loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass

from prometheus_client import multiprocess

from ..config import Config
from ..lifecycle import CANCELLED_GRACE_SECONDS, CUT_GRACE_SECONDS, STOP_SIGNALS
from .metrics_dir import MetricsDirectory, metrics_directory
from .port import Port, open_port
from .wire import CLEARED, SERVING, WorkerSpec, encode_spec, serving_line

log = logging.getLogger(__name__)

KILL_SLACK_SECONDS = 10.0  # past a worker's own bound on its drain
METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
WORKER_MODULE = "gateway.workers.worker"
CLEAN_EXITS = frozenset({0, -signal.SIGTERM, -signal.SIGINT})  # during a stop


def run_workers(config: Config, log_level: str) -> int:
    """Serve with `config.server.workers` workers until stopped; the exit status."""
    port, first_sockets = open_port(config.server)
    if port.number != config.server.port:
        log.info("server.port = 0: the workers share port %d", port.number)
    config = config.with_overrides(server={"port": port.number})
    with metrics_directory() as metrics:
        supervisor = Supervisor(config, log_level, metrics, port, first_sockets)
        return asyncio.run(supervisor.run())


@dataclass(eq=False)
class Worker:
    index: int
    process: asyncio.subprocess.Process
    serving: bool = False


class Supervisor:
    def __init__(
        self,
        config: Config,
        log_level: str,
        metrics: MetricsDirectory,
        port: Port,
        first_sockets: list[socket.socket],
    ) -> None:
        self.config = config
        self.log_level = log_level
        self.metrics_dir = metrics.path
        self._metrics_lock = metrics.lock_fd  # inherited: the directory is live while they run
        self.port = port
        self._first_sockets = first_sockets  # the checked ones (port.py), for worker 1
        self.workers: dict[int, Worker] = {}
        self.stopping: signal.Signals | None = None
        self.status = 0
        self._watchers: set[asyncio.Task[None]] = set()
        self._all_exited = asyncio.Event()
        self._starting = False  # the first start of the workers is under way

    @property
    def count(self) -> int:
        return self.config.server.workers

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, self.stop, signum)
        try:
            self._starting = True
            for index in range(1, self.count + 1):
                if self.stopping is not None:  # a signal came: start no more
                    break
                await self.start(index)
            self._starting = False
            if self.stopping is not None and not self.workers:
                self._all_exited.set()
            await self._all_exited.wait()
        finally:
            for signum in STOP_SIGNALS:
                loop.remove_signal_handler(signum)
            self.kill_all()
            for sock in self._first_sockets:  # no worker took them: stopped before it started
                sock.close()
        log.info("stopped")
        return self.status

    async def start(self, index: int, *, restart: bool = False) -> None:
        """Start worker `index` on sockets of its own (OSError when they cannot be bound or
        the process cannot be started); the supervisor keeps no copy of them, so they close
        with the worker."""
        sockets, self._first_sockets = self._first_sockets or self.port.bind_sockets(), []
        try:
            fds = tuple(sock.fileno() for sock in sockets)
            spec = WorkerSpec(
                self.config,
                index,
                self.count,
                self.metrics_dir,
                self.log_level,
                restart=restart,
                fds=fds,
            )
            process = await asyncio.create_subprocess_exec(
                *(sys.executable, "-m", WORKER_MODULE),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                env={**os.environ, METRICS_DIR_ENV: self.metrics_dir},
                process_group=0,  # a terminal's Ctrl-C reaches the supervisor alone
                pass_fds=(*fds, self._metrics_lock),
            )
        finally:
            for sock in sockets:
                sock.close()
        assert process.stdin is not None
        process.stdin.write(encode_spec(spec) + serving_line(self.serving()))
        worker = self.workers[index] = Worker(index, process)
        if self.stopping is not None:  # a signal came while it was being started
            self._signal(worker, self.stopping)
        watcher = asyncio.create_task(self.watch(worker))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)

    def serving(self) -> int:
        return sum(worker.serving for worker in self.workers.values())

    def tell_serving(self) -> None:
        self.tell(serving_line(self.serving()))

    def tell(self, line: bytes, but: Worker | None = None) -> None:
        """Write `line` to every running worker (`but` one)."""
        for worker in self.workers.values():
            stdin = worker.process.stdin
            if worker is not but and stdin is not None and not stdin.is_closing():
                stdin.write(line)

    async def watch(self, worker: Worker) -> None:
        process = worker.process
        assert process.stdout is not None
        while line := await process.stdout.readline():
            if line.strip() == SERVING and not worker.serving:
                worker.serving = True
                log.info("worker %d of %d serving (pid %d)", worker.index, self.count, process.pid)
                self.tell_serving()
            elif line.strip() == CLEARED:
                self.tell(CLEARED + b"\n", but=worker)
        code = await process.wait()
        del self.workers[worker.index]
        # Its live gauges leave the metrics; its counters stay in the sums.
        multiprocess.mark_process_dead(process.pid, self.metrics_dir)  # type: ignore[no-untyped-call]
        self.tell_serving()
        await self.exited(worker, code)
        if not self.workers and self.stopping is not None:
            self._all_exited.set()

    async def exited(self, worker: Worker, code: int) -> None:
        how = describe_exit(code)
        pid = worker.process.pid
        if self.stopping is not None:
            if code not in CLEAN_EXITS:
                log.error("worker %d (pid %d) %s while stopping", worker.index, pid, how)
                self.status = self.status or 1
        elif not worker.serving:
            log.error("worker %d (pid %d) %s before it served: stopping", worker.index, pid, how)
            self.status = 2 if code == 2 else 1
            self.stop(signal.SIGTERM)
        else:
            log.error(
                "worker %d (pid %d) %s while serving: starting a new one", worker.index, pid, how
            )
            try:
                await self.start(worker.index, restart=True)
            except OSError as error:  # no silent half capacity: stop the gateway
                log.error(
                    "worker %d could not be started again (%s): stopping", worker.index, error
                )
                self.status = 1
                self.stop(signal.SIGTERM)

    def stop(self, signum: signal.Signals) -> None:
        """Forward `signum` to every worker (the first one also bounds how long they take)."""
        first = self.stopping is None
        self.stopping = self.stopping or signum
        if first:
            log.info("%s: stopping %d worker(s)", signum.name, len(self.workers))
        for worker in self.workers.values():
            self._signal(worker, signum)
        if first:
            loop = asyncio.get_running_loop()
            loop.call_later(self.kill_after(signum), self.kill_all)
            if not self.workers and not self._starting:
                self._all_exited.set()

    def kill_after(self, signum: signal.Signals) -> float:
        server = self.config.server
        drain = server.drain_seconds if signum == signal.SIGTERM else 0.0
        grace = CUT_GRACE_SECONDS + CANCELLED_GRACE_SECONDS + KILL_SLACK_SECONDS
        return drain + server.shutdown_timeout_seconds + grace

    def kill_all(self) -> None:
        for worker in self.workers.values():
            log.warning(
                "worker %d (pid %d) still running: killing it", worker.index, worker.process.pid
            )
            self._signal(worker, signal.SIGKILL)

    @staticmethod
    def _signal(worker: Worker, signum: signal.Signals) -> None:
        if worker.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # it ended; its watcher will see it
                worker.process.send_signal(signum)


def describe_exit(code: int) -> str:
    """`code` as `Process.returncode` gives it (a signal as its negative), in words."""
    if code >= 0:
        return f"exited with status {code}"
    try:
        return f"was killed by {signal.Signals(-code).name}"
    except ValueError:  # a signal without a name (a real-time one)
        return f"was killed by signal {-code}"
