"""The stub's aiohttp app: the vLLM routes it answers, and the helper routes tests use."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import time
from collections import Counter
from typing import Any

import msgspec
from aiohttp import web

from .api_servers import ApiServers
from .body_log import BodyLog
from .cache_control import add_cache_control_routes, add_mm_cache_arguments, admit_audio
from .chat_answer import ChatAnswer
from .media import AUDIO_FETCH_TIMEOUT_SECONDS, ClipReport, StubRejection
from .mm_cache import DEFAULT_CACHE_GB, GIB, AudioItem, MmProcessorCache
from .mm_kwargs import check_request_mm_kwargs
from .pacing import add_answer_shaping_arguments, install_answer_shaping
from .parts import chat_message_clips, responses_item_clips
from .realtime import echo_session, realtime
from .served import ServedModel, add_served_arguments, served_from_arguments
from .speech import add_speech_routes
from .state import ReceivedRequest, StubState, stub_state_key
from .tokens import TokenFields, token_fields, tokenize
from .tool_calls import check_tool_usage
from .vllm_metrics import count_http_request, http_requests_key, vllm_metrics
from .window import (
    ANSWER_KEY,
    ModelWindow,
    add_window_arguments,
    window_from_arguments,
    window_key,
    windowed,
)
from .wire import compact_json, start_event_stream, vllm_json

served_key = web.AppKey("served_key", ServedModel)


def create_stub_app(
    allowed_local_media_path: str | None = None,
    *,
    record: bool = True,
    responses_accept_audio: bool = False,
    allowed_media_domains: list[str] | None = None,
    window: ModelWindow | None = None,
    mm_processor_cache_gb: float = DEFAULT_CACHE_GB,
    mm_engine_cache_gb: float | None = None,
    mm_preprocess_delay_seconds: float = 0.0,
    record_bodies: str | None = None,
    trust_request_mm_kwargs: bool = False,
    pace_answers: int = 0,
    pace_ms: float = 0,
    split_head_body: bool = False,
    api_server_count: int = 1,
    api_server_per_request: bool = False,
    served: ServedModel | None = None,
) -> web.Application:
    """`responses_accept_audio` emulates an upstream whose Responses API takes `input_audio`
    and `audio_url` parts; vLLM 0.33's refuses them (the default). `allowed_media_domains` is
    vLLM's --allowed-media-domains (None: any host); the fetch timeout is
    VLLM_AUDIO_FETCH_TIMEOUT from the environment, as vLLM reads it. `window` makes chat
    completions a short-window, slow, observable model (`window.py`). The multimodal processor
    cache (`mm_cache.py`): `mm_processor_cache_gb` as vLLM's flag (0: off), the engine replica's
    size (None: the same), and the delay a data-carrying request waits before its clips are
    held. `record_bodies`: a JSONL file of every chat body received (`body_log.py`).
    `trust_request_mm_kwargs` is vLLM's --trust-request-mm-kwargs: without it a request's
    non-empty `mm_processor_kwargs` / `media_io_kwargs` is vLLM's 400 (`mm_kwargs.py`).
    `pace_answers`/`pace_ms` release model answers at most N at a time, MS apart, and
    `split_head_body` writes an answer's head and body separately, as vLLM and uvicorn do
    (`pacing.py`). `served`: the model's name and root on /v1/models, and the refusals of its
    front end (`served.py`). `api_server_count` API servers each keep their own processor
    cache (`api_servers.py`)."""
    middlewares = [_count, windowed] if window is not None else [_count]
    app = web.Application(client_max_size=2 * 1024**3, middlewares=middlewares)
    if window is not None:
        app[window_key] = window
    timeout = float(os.environ.get("VLLM_AUDIO_FETCH_TIMEOUT", AUDIO_FETCH_TIMEOUT_SECONDS))
    engine_bytes = None if mm_engine_cache_gb is None else round(mm_engine_cache_gb * GIB)
    caches = [
        MmProcessorCache(round(mm_processor_cache_gb * GIB), engine_bytes)
        for _ in range(max(api_server_count, 1))
    ]
    body_log = BodyLog(record_bodies) if record_bodies else None
    app[stub_state_key] = StubState(
        allowed_local_media_path=os.path.realpath(allowed_local_media_path)
        if allowed_local_media_path
        else None,
        allowed_media_domains=tuple(allowed_media_domains)
        if allowed_media_domains is not None
        else None,
        audio_fetch_timeout_seconds=timeout,
        record=record,
        responses_accept_audio=responses_accept_audio,
        trust_request_mm_kwargs=trust_request_mm_kwargs,
        mm_cache=caches[0],
        api_servers=ApiServers(caches, per_request=api_server_per_request)
        if api_server_count > 1
        else None,
        mm_preprocess_delay_seconds=mm_preprocess_delay_seconds,
        body_log=body_log,
    )
    app[http_requests_key] = Counter()
    app[served_key] = served or ServedModel()
    install_answer_shaping(app, pace_answers, pace_ms, split_head_body)
    if body_log is not None:
        app.cleanup_ctx.append(body_log.lifetime)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/responses", responses)
    add_speech_routes(app)
    add_cache_control_routes(app)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", vllm_health)
    app.router.add_get("/metrics", vllm_metrics)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_get("/v1/realtime", realtime)
    app.router.add_get("/stub/ws/echo", echo_session)
    app.router.add_get("/stub/hang", hang)
    app.router.add_get("/stub/slow", slow)
    app.router.add_route("*", "/stub/status/{code}", status)
    app.router.add_route("*", "/{tail:.*}", echo)
    return app


@web.middleware
async def _count(request: web.Request, handler: Any) -> web.StreamResponse:
    state = request.app[stub_state_key]
    state.request_count += 1
    if state.record:
        body = await request.read()
        state.requests.append(
            ReceivedRequest(
                request.method,
                request.path_qs,
                dict(request.headers),
                body,
                tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers),
            )
        )
    model_call = request.method == "POST"  # what vLLM's engine would run
    state.in_flight += model_call
    try:
        response: web.StreamResponse = await handler(request)
    except StubRejection as exc:
        state.rejected += 1
        response = vllm_error(str(exc), kind=exc.kind, param=exc.param)
    finally:
        state.in_flight -= model_call
    count_http_request(request, response.status)
    return response


def vllm_error(
    message: str, status: int = 400, kind: str = "BadRequestError", param: str | None = None
) -> web.Response:
    """vLLM's ErrorResponse, serialised as Starlette's JSONResponse does (compact)."""
    return vllm_json(
        {"error": {"message": message, "type": kind, "param": param, "code": status}}, status
    )


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = msgspec.json.decode(await request.read())  # as fast as vLLM's pydantic-core
    except msgspec.DecodeError as exc:
        raise StubRejection(f"invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise StubRejection("the body must be a JSON object")
    return body


# --- chat completions -------------------------------------------------------------------------


async def chat_completions(request: web.Request) -> web.StreamResponse:
    body = await _json_body(request)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise StubRejection("'messages' must be a non-empty list")
    state = request.app[stub_state_key]
    check_request_mm_kwargs(body, state.trust_request_mm_kwargs)
    check_tool_usage(body)
    if state.body_log is not None:
        await state.body_log.append(await request.read())
    items: list[AudioItem] = []
    for message in messages:
        items.extend(await chat_message_clips(message, state))
    request.app[served_key].check_prompt(items)
    admission = await admit_audio(request, body, items)  # a 400 on a miss, before any stream
    clips = admission.clips
    report = state.last_report = _report(body, clips, messages[-1] if messages else None)
    state.audio_requests += bool(clips)
    text = request.get(ANSWER_KEY) or _summary(clips)  # a model window says what it kept
    answer = ChatAnswer(text, body, request.headers.get("X-Stub-Reasoning"))
    tokens = token_fields(body, messages, clips, answer.pieces())  # None unless asked
    if admission.engine_misses:
        return await _engine_failure(request, body, report)
    if body.get("stream"):
        return await _stream_chat(request, body, report, answer, tokens)
    choice = {"index": 0, "message": answer.reply(), "logprobs": None}
    choice |= {"finish_reason": answer.finish_reason, "stop_reason": None, "token_ids": None}
    result = {
        "id": f"chatcmpl-stub-{state.request_count}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "stub"),
        "choices": [choice],
        "usage": answer.usage(),
        "prompt_token_ids": None,  # vLLM's fields, null unless `return_token_ids`
        "stub": report,
    }
    return vllm_json(tokens.answer(result) if tokens else result)


def _report(body: dict[str, Any], clips: list[ClipReport], last: Any) -> dict[str, Any]:
    parts = last.get("content") if isinstance(last, dict) else None
    return {
        "clips": [clip.to_json() for clip in clips],
        "metadata": body.get("metadata"),
        "has_metadata": "metadata" in body,
        "last_message_part_types": [p.get("type") for p in parts if isinstance(p, dict)]
        if isinstance(parts, list)
        else None,
    }


def _summary(clips: list[ClipReport]) -> str:
    if not clips:
        return "no audio"
    return "; ".join(
        f"{c.container} {c.bytes} B {c.duration_seconds or 0:.2f} s sha256={c.sha256[:12]}"
        for c in clips
    )


async def _stream_chat(
    request: web.Request,
    body: dict[str, Any],
    report: dict[str, Any],
    answer: ChatAnswer,
    tokens: TokenFields | None,
) -> web.StreamResponse:
    """vLLM's sequence: the role chunk, then a delta a token (reasoning first; each word but
    the last with its trailing space), the last one carrying `finish_reason`, the usage chunk
    when asked, `[DONE]`. With `X-Stub-Hold: 1` the stream holds after its first chunk, with
    `X-Stub-Hold: 2` after its first content delta."""
    response = await start_event_stream(request)

    async def send(chunk: dict[str, Any]) -> None:
        await _sse(response, tokens.chunk(chunk) if tokens else chunk)

    base = _chunk_base(body)
    await send(_role_chunk(base, report))
    await _maybe_hold(request, "1")
    deltas = answer.deltas()
    first_content = len(answer.thought_pieces())
    for index, delta in enumerate(deltas):
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        if index == len(deltas) - 1:
            choice |= {"finish_reason": answer.finish_reason, "stop_reason": None}
        await send({**base, "choices": [choice | {"token_ids": None}]})
        if index == first_content:
            await _maybe_hold(request, "2")
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        await send({**base, "choices": [], "usage": answer.usage()})
    await response.write(b"data: [DONE]\n\n")
    return await _finish_sse(request, response)


def _chunk_base(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body.get("model", "stub"),
    }


def _role_chunk(base: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """vLLM's first chunk: the role, with empty content (no token yet), and its
    `prompt_token_ids` / `prompt_text` fields (null unless asked)."""
    choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}
    choice["finish_reason"] = None
    fields = {"prompt_token_ids": None, "prompt_text": None}
    return {**base, "choices": [choice], **fields, "stub": report}


async def _engine_failure(
    request: web.Request, body: dict[str, Any], report: dict[str, Any]
) -> web.StreamResponse:
    """The engine lost a held item (P0/P1 drift): vLLM's GenerationError, a 500 or, streamed,
    after the role chunk (`chat_completion/serving.py:585-686, 947-953, 497-507`)."""
    message, kind = "Internal server error", "InternalServerError"
    if not body.get("stream"):
        return vllm_error(message, 500, kind)
    response = await start_event_stream(request)
    await _sse(response, _role_chunk(_chunk_base(body), report))
    error = {"error": {"message": message, "type": kind, "param": None, "code": 500}}
    await response.write(f"data: {compact_json(error)}\n\n".encode())
    await response.write(b"data: [DONE]\n\n")
    return await _finish_sse(request, response)


# --- responses --------------------------------------------------------------------------------


async def responses(request: web.Request) -> web.StreamResponse:
    body = await _json_body(request)
    metadata = body.get("metadata")
    if metadata is not None and (
        not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values())
    ):
        raise StubRejection("metadata must map strings to strings")
    items = body.get("input")
    state = request.app[stub_state_key]
    check_request_mm_kwargs(body, state.trust_request_mm_kwargs)
    parts: list[AudioItem] = []
    last: Any = None
    if isinstance(items, list):
        for item in items:
            parts.extend(await responses_item_clips(item, state))
            last = item
    elif not isinstance(items, str):
        raise StubRejection("'input' must be a string or a list of items")
    clips = (await admit_audio(request, body, parts)).clips
    report = state.last_report = _report(body, clips, last)
    state.audio_requests += bool(clips)
    result = {
        "id": f"resp-stub-{state.request_count}",
        "object": "response",
        "status": "completed",
        "model": body.get("model", "stub"),
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": _summary(clips)}],
            }
        ],
        "stub": report,
    }
    if not body.get("stream"):
        return vllm_json(result)
    response = await start_event_stream(request)
    await _sse(
        response,
        {"type": "response.created", "response": {**result, "status": "in_progress"}},
        "response.created",
    )
    await _maybe_hold(request)
    await _sse(
        response,
        {"type": "response.output_text.delta", "delta": _summary(clips)},
        "response.output_text.delta",
    )
    await _sse(response, {"type": "response.completed", "response": result}, "response.completed")
    return await _finish_sse(request, response)


# --- SSE plumbing -----------------------------------------------------------------------------


async def _sse(
    response: web.StreamResponse, data: dict[str, Any], event: str | None = None
) -> None:
    prefix = f"event: {event}\n" if event else ""
    await response.write(f"{prefix}data: {compact_json(data)}\n\n".encode())


async def _maybe_hold(request: web.Request, position: str = "1") -> None:
    """With `X-Stub-Hold: <position>` the stream pauses there until `stub.hold` is set."""
    if request.headers.get("X-Stub-Hold") == position:
        await request.app[stub_state_key].hold.wait()


async def _finish_sse(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    await response.write_eof()
    request.app[stub_state_key].streams_finished += 1
    return response


# --- other vLLM routes, and test helpers ------------------------------------------------------


async def models(request: web.Request) -> web.Response:
    return vllm_json({"object": "list", "data": [request.app[served_key].card()]})


async def vllm_health(request: web.Request) -> web.Response:
    return web.Response(status=request.app[stub_state_key].health_status)


async def echo(request: web.Request) -> web.Response:
    """Any other route: says what arrived, so passthrough can be checked byte for byte."""
    body = await request.read()
    return web.json_response(
        {
            "method": request.method,
            "path_qs": request.path_qs,
            "headers": dict(request.headers),
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "body_bytes": len(body),
        },
        headers={"X-Stub-Echo": "1"},
    )


async def status(request: web.Request) -> web.Response:
    code = int(request.match_info["code"])
    return web.json_response(
        {"error": {"message": f"stub status {code}", "code": code}}, status=code
    )


async def slow(request: web.Request) -> web.Response:
    await asyncio.sleep(float(request.query.get("seconds", "5")))
    return web.json_response({"slow": True})


async def hang(request: web.Request) -> web.Response:
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        request.app[stub_state_key].cancelled += 1
        raise
    raise AssertionError("unreachable")


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    app = create_stub_app(
        args.allowed_local_media_path,
        record=False,
        responses_accept_audio=args.responses_accept_audio,
        allowed_media_domains=args.allowed_media_domains,
        window=window_from_arguments(args),
        mm_processor_cache_gb=args.mm_processor_cache_gb,
        mm_engine_cache_gb=args.mm_engine_cache_gb,
        mm_preprocess_delay_seconds=args.mm_preprocess_delay_ms / 1000,
        record_bodies=args.record_bodies,
        trust_request_mm_kwargs=args.trust_request_mm_kwargs,
        pace_answers=args.pace_answers,
        pace_ms=args.pace_ms,
        split_head_body=args.split_head_body,
        api_server_count=args.api_server_count,
        api_server_per_request=args.api_server_per_request,
        served=served_from_arguments(args),
    )
    # run_app calls `print` once every site listens: the start-up line says where.
    listening = (
        f"stub upstream (vLLM-compatible, no model) listening on http://{args.host}:{args.port}"
    )
    web.run_app(
        app,
        host=args.host,
        port=args.port,
        access_log=None,
        handler_cancellation=True,
        print=lambda _: print(listening, flush=True),
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gateway.stub_upstream",
        description="A stub of vLLM's OpenAI-compatible server for tests, the demo and the "
        "benchmark: it parses and decodes audio as vLLM does, and answers without a model.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on")
    parser.add_argument(
        "--allowed-local-media-path",
        default=None,
        help="vLLM's flag: the directory file:// audio URLs may name (none: refused)",
    )
    parser.add_argument(
        "--responses-accept-audio",
        action="store_true",
        help="take input_audio / audio_url parts on /v1/responses (vLLM 0.33 refuses them)",
    )
    parser.add_argument(
        "--allowed-media-domains",
        nargs="+",
        default=None,
        help="vLLM's flag: the hosts http(s) audio URLs may name (none given: any)",
    )
    add_window_arguments(parser)
    add_mm_cache_arguments(parser)
    parser.add_argument(
        "--trust-request-mm-kwargs",
        action="store_true",
        help="vLLM's flag: take per-request mm_processor_kwargs / media_io_kwargs (else 400)",
    )
    add_answer_shaping_arguments(parser)
    add_served_arguments(parser)
    return parser


if __name__ == "__main__":
    main()
