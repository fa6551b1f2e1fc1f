"""The requests in flight, so a drain can wait for them without stopping any of them.

aiohttp's own graceful shutdown (`Server.pre_shutdown`, then `RequestHandler.shutdown`) marks
every connection closing, and a closing connection drops the bytes it receives
(`RequestHandler.data_received` returns early): a request body still arriving and a WebSocket's
client messages stall. It then waits up to its timeout for the handler, cancels it and waits up
to the timeout again. So the gateway keeps its own account: a middleware records each running
handler's task, and the drain waits on that, touching only connections that carry no request.

Once a drain has started, every response goes out with `Connection: close`, so a keep-alive
client reconnects (to a pod that is not draining) instead of sending its next request here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web
from aiohttp.typedefs import Middleware
from aiohttp.web_protocol import RequestHandler

from ..upstream.websocket import is_websocket_upgrade

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class InFlight:
    """The requests in flight (one asyncio task each, from the handler's start until its answer
    is written), and whether a drain has started."""

    def __init__(self) -> None:
        self._tasks: dict[asyncio.Task[object], web.Request] = {}
        self._idle = asyncio.Event()
        self.draining = False

    def __len__(self) -> int:
        return len(self._tasks)

    def middleware(self) -> Middleware:
        """The outermost middleware: it sees every request and the answer that goes out."""
        tasks = self._tasks

        @web.middleware
        async def track_in_flight(request: web.Request, handler: Handler) -> web.StreamResponse:
            # The request's own task (aiohttp runs each in one): it ends once the answer is
            # written, after this returns, so its connection is not taken for idle meanwhile.
            task = asyncio.current_task()
            assert task is not None
            tasks[task] = request
            task.add_done_callback(self._done)
            try:
                response = await handler(request)
            except web.HTTPException as exc:  # a redirect, say: still the last on its connection
                if self.draining:
                    exc.force_close()
                raise
            if self.draining:
                response.force_close()
            return response

        return track_in_flight

    def _done(self, task: asyncio.Task[object]) -> None:
        del self._tasks[task]
        if not self._tasks:
            self._idle.set()

    def start_draining(self) -> None:
        self.draining = True

    def websocket_sessions(self) -> int:
        return sum(1 for request in self._tasks.values() if is_websocket_upgrade(request))

    def close_idle_connections(self, connections: Iterable[RequestHandler]) -> int:
        """Close the connections with no request in flight (idle keep-alives, or a request whose
        head has not fully arrived); the busy ones close after their answer. A handler that has
        returned keeps its connection busy until aiohttp has written its answer: closed then,
        the answer would be cut. Returns how many."""
        busy = {request.protocol for request in self._tasks.values()}
        idle = [connection for connection in connections if connection not in busy]
        for connection in idle:
            connection.force_close()  # safe: nothing runs on it
        return len(idle)

    async def wait_idle(self) -> None:
        """Until no handler is running."""
        while self._tasks:
            self._idle.clear()
            await self._idle.wait()

    def cancel(self, *, websockets: bool) -> int:
        """Cancel the running handlers (the WebSocket sessions too, or all but them); a cancelled
        handler drops its upstream request and its client connection. Returns how many."""
        chosen = [
            task
            for task, request in self._tasks.items()
            if websockets or not is_websocket_upgrade(request)
        ]
        for task in chosen:
            task.cancel()
        return len(chosen)
