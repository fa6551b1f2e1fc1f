"""A local S3 API server, moto in server mode on 127.0.0.1, that counts what it answers.

Used by bench's object-storage workload and by the tests: "one GET per clip" is counted where
the GETs arrive, not inferred from the gateway's own metrics.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from moto.server import ThreadedMotoServer

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Any]


@dataclass
class RequestLog:
    """(method, path, Range header) of every request answered; werkzeug serves on threads."""

    seen: list[tuple[str, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, method: str, path: str | None = None, *, ranged: bool | None = None) -> int:
        """Requests of `method` (to `path`, or any), only ranged / unranged ones if asked."""
        with self.lock:
            return sum(
                1
                for m, p, r in self.seen
                if m == method
                and (path is None or p == path)
                and (ranged is None or bool(r) == ranged)
            )


class CountingApp:
    """A WSGI middleware in front of moto's app that notes each request."""

    def __init__(self, app: WsgiApp, log: RequestLog) -> None:
        self.app = app
        self.log = log

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        request = (environ["REQUEST_METHOD"], environ["PATH_INFO"], environ.get("HTTP_RANGE", ""))
        with self.log.lock:
            self.log.seen.append(request)
        return self.app(environ, start_response)


class LocalS3:
    """moto's ThreadedMotoServer on a free 127.0.0.1 port, counting; `stop()` ends it."""

    def __init__(self) -> None:
        # werkzeug (moto's server) logs every request at INFO to stderr through a handler of
        # its own, whatever `verbose` says: one line per GET floods the bench's output.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        self.log = RequestLog()
        wsgi = self._server._server
        assert wsgi is not None
        wsgi.app = CountingApp(wsgi.app, self.log)
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"

    def stop(self) -> None:
        self._server.stop()
