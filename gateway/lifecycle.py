"""The served process's life: listen, and on SIGTERM drain, then shut down.

SIGTERM (Kubernetes stopping the pod):
1. `/gateway/ready` answers 503 at once; every answer from now on closes its connection.
2. New connections are still accepted and served for `server.drain_seconds`, while the
   endpoints controllers take the pod out of the Service.
3. The listener closes (new connections are refused), idle keep-alive connections are closed,
   and what is in flight (requests, streams, WebSocket sessions, both directions) gets
   `server.shutdown_timeout_seconds` to finish, reading and writing as usual.
4. Then what is left is cut: each WebSocket session gets a close frame, 1001 "gateway shutting
   down", on both sides; each other request's handler is cancelled, which drops its upstream
   request and closes its client connection (a stream ends short of its last chunk, an
   unanswered request gets no answer). After `CUT_GRACE_SECONDS` the rest is cancelled too
   (a WebSocket close handshake the peer never answers), and the process exits 0.

SIGINT (Ctrl-C) does the same without step 2: nothing to withdraw. A second SIGTERM or SIGINT
skips what is left of steps 2 and 3.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web

from .app import in_flight_key, websocket_relay_key
from .config import ConfigError, ServerConfig
from .serving.access_log import AccessLogger, access_logger
from .serving.drain import InFlight

log = logging.getLogger(__name__)

CUT_GRACE_SECONDS = 2.0  # after the cut: WebSocket close handshakes, cancelled handlers' cleanup
CANCELLED_GRACE_SECONDS = 1.0  # then for handlers cancelled last to unwind
# runner.cleanup(): by then no handler runs; aiohttp's shutdown only closes connections (it
# may wait twice this). The exit comes at most 4 s after shutdown_timeout_seconds.
CLEANUP_TIMEOUT_SECONDS = 0.5
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """SIGTERM and SIGINT: the first starts the shutdown, a second hurries it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.first: asyncio.Future[signal.Signals] = loop.create_future()
        self.again: asyncio.Future[signal.Signals] = loop.create_future()
        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, self.received, signum)

    def received(self, signum: signal.Signals) -> None:
        """`signum` came (or the caller acts as if it had)."""
        pending = self.first if not self.first.done() else self.again
        if not pending.done():
            pending.set_result(signum)
        if pending is self.again:
            log.warning("%s again: cutting what is still in flight now", signum.name)


async def serve_app(
    app: web.Application,
    server: ServerConfig,
    *,
    sockets: Sequence[socket.socket] = (),
    listening: Callable[[StopSignals], object] | None = None,
) -> None:
    """Run `app` on `server.host:port` until SIGTERM or SIGINT, then drain and shut down.

    `sockets`: listen on these instead, bound and listening already (a worker's share of the
    gateway's SO_REUSEPORT port: gateway/workers); `listening` is called once the port is open,
    with the stop signals it may also trigger."""
    runner = web.AppRunner(
        app,
        access_log=access_logger if server.access_log else None,
        access_log_class=AccessLogger,
        handler_cancellation=True,  # a client that disconnects cancels its upstream request
        shutdown_timeout=CLEANUP_TIMEOUT_SECONDS,
    )
    loop = asyncio.get_running_loop()
    signals = StopSignals(loop)  # before start-up: a SIGTERM during it still drains
    try:
        await runner.setup()
        sites: list[web.BaseSite] = [web.SockSite(runner, sock) for sock in sockets]
        sites = sites or [web.TCPSite(runner, server.host, server.port)]
        try:
            for site in sites:
                await site.start()
        except OSError as exc:  # the port is taken, the host is not ours
            where = f"{server.host}:{server.port}"
            raise ConfigError(f"server.host/port: cannot listen on {where}: {exc}") from exc
        if listening is not None:
            listening(signals)
        signum = await signals.first
        await drain(runner, sites, server, signum, signals.again)
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)
        await runner.cleanup()
    log.info("stopped")


async def drain(
    runner: web.AppRunner,
    sites: Sequence[web.BaseSite],
    server: ServerConfig,
    signum: signal.Signals,
    hurry: asyncio.Future[signal.Signals],
) -> None:
    """Steps 1-4 of the module docstring; returns once no handler runs."""
    in_flight = runner.app[in_flight_key]
    in_flight.start_draining()
    drain_seconds = server.drain_seconds if signum == signal.SIGTERM else 0.0
    if drain_seconds:
        log.info(
            "%s: draining: /gateway/ready answers 503, new connections are served for %g s",
            signum.name,
            drain_seconds,
        )
        await _until(asyncio.sleep(drain_seconds), hurry, drain_seconds)
    for site in sites:
        await site.stop()
    closed = in_flight.close_idle_connections(runner.server.connections if runner.server else [])
    timeout = server.shutdown_timeout_seconds
    log.info(
        "%s: listener closed, %d idle connection(s) closed; waiting up to %g s for %d request(s) "
        "in flight (%d WebSocket session(s))",
        signum.name,
        closed,
        timeout,
        len(in_flight),
        in_flight.websocket_sessions(),
    )
    if not await _until(in_flight.wait_idle(), hurry, timeout):
        await cut(runner.app, in_flight)


async def cut(app: web.Application, in_flight: InFlight) -> None:
    """Step 4: WebSocket sessions get 1001, other handlers are cancelled; a grace, then the rest."""
    sessions = in_flight.websocket_sessions()
    app[websocket_relay_key].go_away()
    cancelled = in_flight.cancel(websockets=False)
    log.warning(
        "shutdown_timeout_seconds is over: closing %d WebSocket session(s) with 1001, "
        "cutting %d request(s)",
        sessions,
        cancelled,
    )
    if not await _until(in_flight.wait_idle(), None, CUT_GRACE_SECONDS):
        in_flight.cancel(websockets=True)
        await _until(in_flight.wait_idle(), None, CANCELLED_GRACE_SECONDS)


async def _until(
    work: Awaitable[object], hurry: asyncio.Future[signal.Signals] | None, timeout: float
) -> bool:
    """Wait for `work`, at most `timeout` seconds and not past `hurry`; whether it finished."""
    task = asyncio.ensure_future(work)
    waiting: list[asyncio.Future[object]] = [task]
    if hurry is not None:
        waiting.append(hurry)  # type: ignore[arg-type]
    try:
        await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        return task.done()
    finally:
        task.cancel()
