"""The upstream's `GET /v1/models` as placement reads it: parsed when it is a 200 with JSON,
`ModelListUnavailable` otherwise, and never more than `MODEL_LIST_MAX_BYTES` of it held."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.origin import parse_origin
from gateway.upstream.model_list import (
    MODEL_LIST_MAX_BYTES,
    ModelListUnavailable,
    fetch_model_list,
)
from gateway.upstream.pool import UpstreamPool

CARDS = {"object": "list", "data": [{"id": "m", "root": "org/Voxtral-Mini-3B-2507"}]}


def answers(make: Callable[[web.Request], web.StreamResponse]) -> web.Application:
    async def models(request: web.Request) -> web.StreamResponse:
        return make(request)

    app = web.Application()
    app.router.add_get("/v1/models", models)
    return app


async def fetched(app: web.Application) -> object:
    """`fetch_model_list` through a pool of its own to `app`, served on a free port."""
    server = TestServer(app)
    await server.start_server()
    origin = parse_origin(str(server.make_url("")).rstrip("/"))
    pool = UpstreamPool(
        origin, ssl_context=None, connect_timeout=5, read_timeout=5, max_connections=4
    )
    try:
        return await fetch_model_list(pool)
    finally:
        pool.close()
        await server.close()


async def test_the_cards_are_parsed() -> None:
    assert await fetched(answers(lambda _: web.json_response(CARDS))) == CARDS


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (lambda _: web.json_response({"error": "no"}, status=500), "answered 500"),
        (lambda _: web.Response(text="<html>", content_type="text/html"), "is not JSON"),
        (
            lambda _: web.Response(body=b"[" + b"0," * (MODEL_LIST_MAX_BYTES // 2) + b"0]"),
            f"more than {MODEL_LIST_MAX_BYTES} bytes",
        ),
    ],
    ids=["error status", "not JSON", "too large"],
)
async def test_an_answer_placement_cannot_use_is_unavailable(
    answer: Callable[[web.Request], web.StreamResponse], says: str
) -> None:
    with pytest.raises(ModelListUnavailable, match=says):
        await fetched(answers(answer))
