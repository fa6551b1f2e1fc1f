"""create_app(config): the whole gateway wired on one screen.

request -> sidechannel (what audio?) -> audio store (the bytes) -> splice -> relay
                                                  └─ a long clip ([chunking]): split -> fan-out
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import msgspec
from aiohttp import web
from aiohttp.typedefs import Middleware

from . import __version__
from .audio.roots import local_roots
from .auth import ApiKeys, require_api_key
from .bridge import (
    BridgedRequest,
    carries_audio_parts,
    refuse_bridged_previous,
    refuse_lookup,
    responses_to_chat,
)
from .bridge.relay import bridge_headers, chat_target, relay_bridged
from .chunking.answers import answer_chunked
from .chunking.bodies import ChunkedRequest
from .chunking.fanout import PieceRuns
from .config import Config, ConfigError
from .errors import GatewayError, InvalidRequest, PayloadTooLarge
from .metrics import GatewayMetrics
from .models.placement import Placement
from .references.body import ReferencedBody
from .references.held import UpstreamClips
from .references.models import ModelReferences
from .references.relay import ReferenceRelay
from .request.build import build_pipeline
from .request.pipeline import RewritePipeline
from .request.shapes import (
    CHAT_AUDIO_URL,
    CHAT_INPUT_AUDIO,
    RESPONSES,
    RouteShape,
    parse_json_object,
)
from .request.speech import SpeechUploads
from .serving.access_log import answer_with_request_id, assign_request_ids
from .serving.drain import InFlight
from .serving.peers import Peers
from .serving.readiness import Readiness
from .serving.refusals import refusal_response
from .upstream.answered import answered_in_full
from .upstream.body import SegmentedPayload
from .upstream.content_coding import read_decoded_body
from .upstream.model_list import fetch_model_list
from .upstream.pool import UpstreamPool
from .upstream.relay import (
    create_upstream_pool,
    relay,
    request_body_chunks,
    request_headers_for_upstream,
    upstream_target,
)
from .upstream.websocket import WebSocketRelay, WebSocketUpgrades

config_key = web.AppKey("config_key", Config)
metrics_key = web.AppKey("metrics_key", GatewayMetrics)
upstream_key = web.AppKey("upstream_key", UpstreamPool)
pipeline_key = web.AppKey("pipeline_key", RewritePipeline)
placement_key = web.AppKey("placement_key", Placement)
speech_key = web.AppKey("speech_key", SpeechUploads)
websocket_relay_key = web.AppKey("websocket_relay_key", WebSocketRelay)
in_flight_key = web.AppKey("in_flight_key", InFlight)
readiness_key = web.AppKey("readiness_key", Readiness)
# Only with [splice] repeats = "reference": what the upstream holds, and the retrying relay.
reference_relay_key = web.AppKey("reference_relay_key", ReferenceRelay)
# Only in a worker of a gateway with [server] workers > 1 (gateway/workers): the others' state.
peers_key = web.AppKey("peers_key", Peers)

CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client that went away before the answer

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def create_app(config: Config) -> web.Application:
    in_flight = InFlight()  # what a drain waits for (drain.py; the drain itself: lifecycle.py)
    middlewares: list[Middleware] = [in_flight.middleware()]
    if config.server.access_log:
        middlewares.append(assign_request_ids)
    middlewares.append(errors_as_json)
    if api_keys := ApiKeys(config.server.api_keys):  # checked before a handler reads a body
        middlewares.append(require_api_key(api_keys))
    app = web.Application(
        client_max_size=config.server.max_body_bytes,
        middlewares=middlewares,
        # Bodies stay as the client encoded them: passthrough relays them untouched (as nginx
        # does) and the rewritten routes decode them themselves (content_coding.py).
        handler_args={"auto_decompress": False},
    )
    app[config_key] = config
    app[metrics_key] = GatewayMetrics()
    app[in_flight_key] = in_flight
    if config.server.access_log:
        app.on_response_prepare.append(answer_with_request_id)
    app.cleanup_ctx.append(upstream_pool)
    app.cleanup_ctx.append(readiness)
    app.cleanup_ctx.append(rewrite_pipeline)
    app.cleanup_ctx.append(websocket_relay)

    # Each request's model: the [models] tables, else found ([placement]; the upstream's list).
    app[placement_key] = placement = Placement(config, partial(_model_list, app))
    chat_shape = CHAT_INPUT_AUDIO if config.splice.chat_part == "input_audio" else CHAT_AUDIO_URL
    if (splice := config.splice).repeats == "reference":
        clips = UpstreamClips(
            splice.reference_max_clips, splice.reference_wait_ms / 1000, app[metrics_key]
        )
        models = ModelReferences(
            app[metrics_key],
            miss_ratio=splice.reference_miss_ratio,
            retry_seconds=splice.reference_retry_seconds,
            refuses_uuid_only=placement.refuses_uuid_only,  # the model's profile says so
        )
        app[reference_relay_key] = ReferenceRelay(clips, models, app[metrics_key])
        chat_shape = dataclasses.replace(chat_shape, references=True)
    app.router.add_get("/gateway/health", health, name="gateway_health")
    app.router.add_get("/gateway/ready", ready, name="gateway_ready")
    app.router.add_get("/gateway/metrics", metrics, name="gateway_metrics")
    chat = rewriting(chat_shape, "chat_completions")
    app.router.add_post("/v1/chat/completions", chat, name="chat_completions")
    if config.responses.audio == "chat_bridge":
        responses = bridging(dataclasses.replace(chat_shape, name="responses"), "responses")
    else:
        responses = rewriting(RESPONSES, "responses")
    app.router.add_post("/v1/responses", responses, name="responses")
    app.router.add_post("/v1/audio/transcriptions", speech, name="transcriptions")
    app.router.add_post("/v1/audio/translations", speech, name="translations")
    app.router.register_resource(websockets := WebSocketUpgrades(name="websocket"))
    websockets.add_route("GET", websocket)
    lookup = "/v1/responses/{response_id}{tail:(/.*)?}"  # GET, DELETE, /cancel, /input_items
    app.router.add_route("*", lookup, response_lookup, name="response_lookup")
    app.router.add_route("*", "/{tail:.*}", passthrough, name="passthrough")
    return app


async def upstream_pool(app: web.Application) -> AsyncIterator[None]:
    config = app[config_key].upstream
    try:
        ssl_context = await asyncio.to_thread(config.origin().ssl_context)  # reads the CA files
    except OSError as exc:  # ssl.SSLError included
        raise ConfigError(f"upstream.ca_file: cannot load {config.ca_file!r}: {exc}") from exc
    affinity = app[config_key].routing.affinity_headers
    app[upstream_key] = create_upstream_pool(config, ssl_context, affinity)
    yield
    app[upstream_key].close()


async def readiness(app: web.Application) -> AsyncIterator[None]:
    in_flight = app[in_flight_key]
    roots = local_roots(app[config_key].audio)
    peers = app.get(peers_key)
    check_peers = peers.verdict if peers is not None else None
    app[readiness_key] = Readiness(
        app[upstream_key], lambda: in_flight.draining, roots, check_peers
    )
    yield
    app[readiness_key].close()


async def rewrite_pipeline(app: web.Application) -> AsyncIterator[None]:
    config = app[config_key]
    pipeline = await build_pipeline(config, app[metrics_key], placement=app[placement_key])
    app[pipeline_key] = pipeline
    app[speech_key] = SpeechUploads(pipeline, config.audio, config.server.max_body_bytes)
    yield
    pipeline.close()


async def _model_list(app: web.Application) -> Any:
    """The upstream's /v1/models answer, for the placement (once the pool is up)."""
    return await fetch_model_list(app[upstream_key])


async def websocket_relay(app: web.Application) -> AsyncIterator[None]:
    pool = app[upstream_key]  # its origin and TLS context, built once at start-up
    app[websocket_relay_key] = await WebSocketRelay.open(
        app[config_key].upstream, pool.origin, pool.ssl, app[metrics_key]
    )
    yield
    await app[websocket_relay_key].close()


def rewriting(shape: RouteShape, route: str) -> Handler:
    """The handler of a route whose body may carry the audio sidechannel; `route` is its name
    in the router, its `route` label in the metrics."""

    async def handle(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        raw = await read_decoded_body(request, request.app[config_key].server.max_body_bytes)
        body = parse_json_object(raw)
        pipeline = request.app[pipeline_key]
        payload = await pipeline.rewrite(raw, shape, body, split=True)
        rewritten = payload is not raw
        if not rewritten:  # sent as it came, with the key of the client's own audio if any
            payload = pipeline.passed(raw, body, shape)
        request.app[metrics_key].observe_added_latency(route, time.perf_counter() - started)
        if isinstance(payload, ChunkedRequest):
            return await fan_out(request, payload)
        headers = request_headers_for_upstream(request, json_body=rewritten, decoded=True)
        if isinstance(payload, ReferencedBody):
            relay = request.app[reference_relay_key]
            return await relay.relay_route(request, request.app[upstream_key], headers, payload)
        try:
            return await _relay(request, headers=headers, body=payload)
        finally:
            if isinstance(payload, SegmentedPayload):
                await payload.aclose()

    return handle


def bridging(shape: RouteShape, route: str) -> Handler:
    """/v1/responses in chat_bridge mode: a row with the sidechannel or audio parts in its
    input goes to the upstream's chat completions (spliced as `shape` says); any other body
    goes on untouched."""

    async def handle(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        raw = await read_decoded_body(request, request.app[config_key].server.max_body_bytes)
        body = parse_json_object(raw)
        refuse_bridged_previous(body)
        pipeline = request.app[pipeline_key]
        audio = pipeline.keys.carries(body) or carries_audio_parts(body)
        bridged = responses_to_chat(body) if audio else None
        payload: bytes | SegmentedPayload | ChunkedRequest | ReferencedBody = raw
        if bridged is not None:
            params = bridged.part_params
            payload = await pipeline.rewrite(
                raw, shape, body=bridged.chat, split=True, part_params=params
            )
            if payload is raw:  # inline audio only: nothing to resolve, but chat to send
                key = pipeline.unchanged_key(bridged.chat, shape)
                payload = SegmentedPayload([msgspec.json.encode(bridged.chat)], key)
        request.app[metrics_key].observe_added_latency(route, time.perf_counter() - started)
        if bridged is not None and isinstance(payload, ChunkedRequest):
            return await fan_out(request, payload, bridged)
        if bridged is not None and isinstance(payload, ReferencedBody):
            headers = request_headers_for_upstream(request, json_body=True, decoded=True)
            pool = request.app[upstream_key]
            relay = request.app[reference_relay_key]
            return await relay.relay_bridged(request, pool, headers, payload, bridged)
        if bridged is None or not isinstance(payload, SegmentedPayload):
            headers = request_headers_for_upstream(request, decoded=True)
            return await _relay(request, headers=headers, body=raw)
        headers = request_headers_for_upstream(request, json_body=True, decoded=True)
        try:
            return await relay_bridged(
                request, request.app[upstream_key], headers=headers, body=payload, bridged=bridged
            )
        finally:
            await payload.aclose()

    return handle


async def fan_out(
    request: web.Request, chunked: ChunkedRequest, bridged: BridgedRequest | None = None
) -> web.StreamResponse:
    """A long clip split into pieces: one upstream chat request per piece, at most
    `chunking.max_concurrent_chunks` in flight, their answers merged into one."""
    app = request.app
    pool, settings = app[upstream_key], app[config_key].chunking
    target = chat_target(pool, request) if bridged else upstream_target(pool, request)
    # The gateway reads and merges the answers: no compressed ones (as for the bridge).
    headers = bridge_headers(request_headers_for_upstream(request, json_body=True, decoded=True))
    limit = settings.max_concurrent_chunks
    try:
        async with PieceRuns(pool, target, headers, chunked, limit, app[metrics_key]) as runs:
            return await answer_chunked(request, runs, chunked, settings.join, bridged)
    finally:
        await chunked.aclose()


async def speech(request: web.Request) -> web.StreamResponse:
    """Speech-to-text: a sidechannel clip becomes the multipart `file` upload vLLM expects."""
    started = time.perf_counter()
    outgoing = await request.app[speech_key].prepare(request)
    if outgoing is None:
        return await passthrough(request)
    if outgoing.rewritten:
        route = request.match_info.route.name or "unmatched"
        request.app[metrics_key].observe_added_latency(route, time.perf_counter() - started)
    try:
        return await _relay(
            request,
            headers=outgoing.headers,
            body=outgoing.body,
            content_length=outgoing.content_length,
        )
    finally:
        if isinstance(outgoing.body, SegmentedPayload):
            await outgoing.body.aclose()


async def passthrough(request: web.Request) -> web.StreamResponse:
    """Every other route: relayed untouched, the body streamed through."""
    headers = request_headers_for_upstream(request)
    if not request.body_exists:
        response = await _relay(request, headers=headers, body=None)
    else:
        body = request_body_chunks(request)
        length = request.content_length
        response = await _relay(request, headers=headers, body=body, content_length=length)
    if (references := request.app.get(reference_relay_key)) is not None:
        references.after_passthrough(request, response)
    return response


async def response_lookup(request: web.Request) -> web.StreamResponse:
    """A stored response named by id: the bridge stores nothing, so one of its ids is a clear
    404; any other id is the upstream's, relayed untouched."""
    refuse_lookup(request.match_info["response_id"])
    return await passthrough(request)


async def websocket(request: web.Request) -> web.StreamResponse:
    """An `Upgrade: websocket` request on any other path: relayed as a WebSocket session."""
    return await request.app[websocket_relay_key].relay(request)


async def _relay(
    request: web.Request, *, headers: list[tuple[str, str]], **kwargs: Any
) -> web.StreamResponse:
    app = request.app
    pool = app[upstream_key]
    return await relay(request, pool, upstream_target(pool, request), headers=headers, **kwargs)


async def health(request: web.Request) -> web.Response:
    store, placement = request.app[pipeline_key].store, request.app[placement_key]
    answer: dict[str, Any] = {
        "status": "ok",
        "version": __version__,
        "upstream": request.app[config_key].upstream.url,
        "cache": {"entries": store.entries, "bytes": store.bytes},
        # each model name with rules now: its profile, and how it was placed (gateway.models)
        "models": {name: rules.as_json() for name, rules in placement.known().items()},
    }
    if (references := request.app.get(reference_relay_key)) is not None:
        # this worker's: each worker learns alone ([server] workers)
        answer["references"] = {"models": references.models.status()}
    return web.json_response(answer)


async def ready(request: web.Request) -> web.Response:
    """Readiness: 200 while not draining and the upstream answers GET /health, else 503."""
    verdict = await request.app[readiness_key].check()
    return verdict.response()


async def metrics(request: web.Request) -> web.Response:
    body = request.app[metrics_key].render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The one place where gateway errors become OpenAI-style JSON responses (each one
    counted by code and logged: serving/refusals.py); it also counts every answer by route and
    status (one middleware, not two: this runs on every request): 499 for a client that left
    before its answer's end, a streamed answer's own status once it was written to its end
    (`upstream/answered.py`)."""
    route = request.match_info.route.name or "unmatched"
    counters = request.app[metrics_key]
    count = counters.count_request
    try:
        response = await handler(request)
    except GatewayError as exc:
        response = _refuse(request, route, counters, exc)
    except web.HTTPRequestEntityTooLarge as exc:
        too_large = PayloadTooLarge(
            f"the request body exceeds server.max_body_bytes ({exc.text})",
            code="request_too_large",
        )
        response = _refuse(request, route, counters, too_large)
    except web.HTTPException as exc:
        if exc.status < 400:
            count(route, exc.status)
            raise
        error = InvalidRequest(exc.reason, code=f"http_{exc.status}")
        response = _refuse(request, route, counters, error, exc.status)
    except (asyncio.CancelledError, ConnectionError) as gone:  # the client went away
        if (answered := answered_in_full(request)) is None:
            count(route, CLIENT_CLOSED_REQUEST)
            raise
        response = _keep(answered, cancelled=isinstance(gone, asyncio.CancelledError))
    except BaseException:
        count(route, 500)
        raise
    count(route, response.status)
    return response


def _refuse(
    request: web.Request,
    route: str,
    counters: GatewayMetrics,
    error: GatewayError,
    status: int | None = None,
) -> web.Response:
    counters.count_refusal(route, error.code)
    return refusal_response(request, error, route, status)


def _keep(answered: web.StreamResponse, *, cancelled: bool) -> web.StreamResponse:
    """The client went away once it had the whole answer (the handler was still releasing
    what the request held, or ending the body): the answer stands, and aiohttp logs it once
    this handler returns; the cancellation, if that was how, is taken back."""
    task = asyncio.current_task()
    if cancelled and task is not None:
        task.uncancel()
    return answered
