"""Refusals made visible: each error answer the gateway makes itself is logged and named.

`refusal_response` is how the error middleware (`app.py`) answers a `GatewayError`: the
OpenAI-style JSON body, the request's id in `X-Request-Id` (the client's when it sent a sane
one, else a new one, access log on or off: the client can quote it, the log line carries it),
the error code on the response for the access log (`error_code_key`), and one record on the
`gateway.refusals` logger: INFO for a 4xx, WARNING for a 5xx (the gateway or its upstream
failed: the operator's problem, not the client's).

A refusal record has `method`, `route`, `path` (without the query), `status`, `code`, `param`
(the offending key, when there is one) and `request_id`; a 5xx's message adds the error's
message, which names the upstream or the store and never a credential. A 4xx's message is not
logged: it may quote what the client sent. No header, body or clip byte reaches the record.
"""

from __future__ import annotations

import logging

from aiohttp import web

from ..errors import GatewayError
from .access_log import REQUEST_ID_HEADER, error_code_key, request_id

refusal_logger = logging.getLogger("gateway.refusals")


def refusal_response(
    request: web.Request, error: GatewayError, route: str, status: int | None = None
) -> web.Response:
    """The answer to `error` (with `status` in place of the error's own, for an aiohttp
    HTTP error), logged once."""
    status = status or error.status
    rid = request_id(request)
    headers = dict(error.response_headers)
    headers[REQUEST_ID_HEADER] = rid
    response = web.json_response(error.to_json(), status=status, headers=headers)
    response[error_code_key] = error.code
    log_refusal(request, error, route, status, rid)
    return response


def log_refusal(
    request: web.Request, error: GatewayError, route: str, status: int, rid: str
) -> None:
    fields: dict[str, object] = {
        "method": request.method,
        "route": route,
        "path": request.raw_path.partition("?")[0],  # a query may carry a signature or token
        "status": status,
        "code": error.code,
        "param": error.param,
        "request_id": rid,
    }
    line = "refused %(method)s %(path)s: %(status)d %(code)s route=%(route)s"
    if error.param is not None:
        line += " param=%(param)s"
    line += " request_id=%(request_id)s"
    if status >= 500:
        fields["error_message"] = error.message
        refusal_logger.warning(line + ": %(error_message)s", fields, extra=fields)
    else:
        refusal_logger.info(line, fields, extra=fields)
