"""One worker: `python -m gateway.workers.worker`, started by the supervisor, its spec on stdin.

It serves the ordinary app (its own cache, its own record of the clips vLLM holds) on the shared
port, on the SO_REUSEPORT sockets the supervisor bound for it (inherited open), says `serving`
once it listens, drains on SIGTERM or SIGINT (forwarded by the supervisor) as a single gateway
does, and drains too when its stdin ends (the supervisor is gone). Readiness asks `Peers`, which
the supervisor keeps up to date; the metrics it serves are every worker's (gateway/metrics.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys

from ..app import create_app, metrics_key, peers_key, reference_relay_key
from ..config import ConfigError
from ..lifecycle import StopSignals, serve_app
from ..metrics import SAMPLE_SECONDS, GatewayMetrics
from ..references.held import UpstreamClips
from ..serving.logs import configure_logging
from ..serving.peers import Peers
from ..serving.tuning import event_loop_factory, tune_garbage_collector
from .wire import CLEARED, SERVING, WorkerSpec, parse_serving, read_spec

STDIN, STDOUT = 0, 1


class SupervisorLink:
    """The worker's end of the pipes: `serving N` lines update `peers`, `cleared` empties the
    record of what vLLM holds (`clips`, with references); their end stops the worker."""

    def __init__(self, peers: Peers, clips: UpstreamClips | None) -> None:
        self._peers = peers
        self._clips = clips
        self._signals: StopSignals | None = None
        self._gone = False
        self._reader: asyncio.StreamReader | None = None
        self._task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        self._reader = asyncio.StreamReader()
        pipe = open(STDIN, "rb", buffering=0, closefd=False)  # noqa: SIM115 - the transport owns it
        protocol = asyncio.StreamReaderProtocol(self._reader)
        await loop.connect_read_pipe(lambda: protocol, pipe)
        self._task = asyncio.create_task(self._listen())

    async def _listen(self) -> None:
        assert self._reader is not None
        while line := await self._reader.readline():
            if (count := parse_serving(line)) is not None:
                self._peers.serving = count
            elif line.strip() == CLEARED and self._clips is not None:
                self._clips.forget_all()
        self._gone = True
        if self._signals is not None:
            self._signals.received(signal.SIGTERM)

    def listening(self, signals: StopSignals) -> None:
        """The port is open: tell the supervisor (a few bytes to a pipe, which never blocks)."""
        self._signals = signals
        os.write(STDOUT, SERVING + b"\n")
        if self._gone:
            signals.received(signal.SIGTERM)

    def upstream_cleared(self) -> None:
        """This worker relayed a request that emptied the upstream's caches: the others forget."""
        os.write(STDOUT, CLEARED + b"\n")

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()


async def write_sampled_gauges(metrics: GatewayMetrics) -> None:
    """Every `SAMPLE_SECONDS`, this worker's function gauges go where other workers read them."""
    while True:
        metrics.write_sampled_gauges()
        await asyncio.sleep(SAMPLE_SECONDS)


async def serve_worker(spec: WorkerSpec) -> None:
    peers = Peers(spec.workers)
    app = create_app(spec.config)
    app[peers_key] = peers
    metrics = app[metrics_key]
    metrics.aggregate_from(spec.metrics_dir)
    if spec.restart:
        metrics.worker_restarts.inc()
    references = app.get(reference_relay_key)
    link = SupervisorLink(peers, references.clips if references is not None else None)
    if references is not None:
        references.on_upstream_cleared = link.upstream_cleared
    await link.open()
    sampler = asyncio.create_task(write_sampled_gauges(metrics))
    try:
        sockets = [socket.socket(fileno=fd) for fd in spec.fds]
        await serve_app(app, spec.config.server, sockets=sockets, listening=link.listening)
    finally:
        sampler.cancel()
        link.close()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler


def main() -> None:
    spec = read_spec(STDIN)
    configure_logging(spec.log_level, spec.config.server.log_format, worker=spec.index)
    tune_garbage_collector()
    try:
        loop_factory = event_loop_factory(spec.config.server.event_loop)
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(serve_worker(spec))
    except ConfigError as exc:  # found at start-up: the port, upstream.ca_file, ...
        print(f"audio-gateway: worker {spec.index}: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
