"""Request logs (`server.access_log = true`): one line per request, with a request id.

A line says `method`, `route` (the route's name, as in the metrics), `path` (raw, without the
query string: a query may carry a signature or a token), `status`, `code` (the OpenAI error
code of an error the gateway made itself, else absent), `duration_ms` (from the request's
first middleware to the answer's last byte, on `time.perf_counter_ns`: event loops such as
uvloop keep a millisecond clock; a WebSocket session's whole length), `remote` and
`request_id`. No header, body or query ever reaches it, so API keys and clip bytes cannot.

The request id is the client's `X-Request-Id` when it is sane (`REQUEST_ID_PATTERN`), else a
new one (32 hex digits) that replaces it on the way upstream, so vLLM (which takes it as its own
request id under `--enable-request-id-headers`) logs the same id. The answer carries it in
`X-Request-Id` unless the upstream's answer already has one.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.web_request import BaseRequest

perf_counter_ns = time.perf_counter_ns  # `time` is also the name of log()'s argument

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

REQUEST_ID_HEADER = "X-Request-Id"
# Short, and nothing that needs quoting in a log line: ids like UUIDs, hex, "trace:span", "a.b-c".
REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9._:@+=/-]{1,128}")
request_id_key = web.RequestKey("request_id_key", str)
started_ns_key = web.RequestKey("started_ns_key", int)  # time.perf_counter_ns() on arrival
# The error code of a refusal the gateway made (set by serving/refusals.py on its response).
error_code_key = web.ResponseKey("error_code_key", str)
access_logger = logging.getLogger("gateway.access")


def request_id(request: BaseRequest) -> str:
    """The id of a request that went through `assign_request_ids`, else the client's sane
    one, else a new one (a request aiohttp answered itself, such as a malformed one)."""
    given = request.get(request_id_key)
    if isinstance(given, str):
        return given
    return sane_request_id(request.headers.get(REQUEST_ID_HEADER)) or new_id()


def sane_request_id(header: str | None) -> str | None:
    """The client's `X-Request-Id` if it is fit for a log line, else None."""
    return header if header is not None and REQUEST_ID_PATTERN.fullmatch(header) else None


def new_id() -> str:
    return uuid.uuid4().hex


@web.middleware
async def assign_request_ids(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Gives each request its id and arrival time (installed with the access log only: it
    costs a clone when the client sent no id)."""
    request[started_ns_key] = perf_counter_ns()  # set before the clone, which copies it
    if (given := sane_request_id(request.headers.get(REQUEST_ID_HEADER))) is not None:
        request[request_id_key] = given
        return await handler(request)
    request[request_id_key] = generated = new_id()  # set before the clone, which copies it
    headers = request.headers.copy()
    headers[REQUEST_ID_HEADER] = generated
    return await handler(request.clone(headers=headers))


async def answer_with_request_id(request: web.Request, response: web.StreamResponse) -> None:
    """`on_response_prepare`: the answer names the request's id (unless it already does)."""
    if (rid := request.get(request_id_key)) is not None:
        response.headers.setdefault(REQUEST_ID_HEADER, rid)


class AccessLogger(AbstractAccessLogger):
    """aiohttp's access log hook: one record per answered request, fields as `extra`."""

    def log(self, request: BaseRequest, response: web.StreamResponse, time: float) -> None:
        match_info = getattr(request, "match_info", None)  # absent on a malformed request
        route = (match_info.route.name if match_info is not None else None) or "unmatched"
        started = request.get(started_ns_key)
        seconds = time if started is None else (perf_counter_ns() - started) / 1e9
        fields: dict[str, object] = {
            "method": request.method,
            "route": route,
            "path": request.raw_path.partition("?")[0],
            "status": response.status,
            "duration_ms": round(seconds * 1000, 3),
            "remote": request.remote,
            "request_id": request_id(request),
        }
        line = "%(method)s %(path)s %(status)d %(duration_ms).1f ms route=%(route)s"
        if (code := response.get(error_code_key)) is not None:
            fields["code"] = code
            line += " code=%(code)s"
        self.logger.info(line + " request_id=%(request_id)s", fields, extra=fields)
