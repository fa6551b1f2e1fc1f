"""BASELINE, NOT THE GATEWAY: what NeMo Gym's vllm_model does per request today, as a server.

Kept deliberately naive so `bench/` can show what audio-gateway saves. Per request it does a
synchronous whole-file read on the event loop, standard-library `base64.b64encode`, splices the
`audio_url` data-URI parts in front of the last user message's content (the same placement as
the gateway), re-serialises the whole body with the standard `json`, and forwards it with an
aiohttp client. No cache, no streaming, no limits. It runs on uvloop like the gateway, so the
comparison is about the per-request work, not the event loop.

With `--s3-endpoint URL --s3-bucket B` the paths are keys of that bucket, fetched per request
with an async GET (obstore), then encoded and spliced the same way: the object-storage baseline.

Run alone: `python -m bench.shared.seed_reference --port 8090 --upstream URL --audio-root DIR`.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

MIME_BY_EXTENSION = {".wav": "audio/wav", ".flac": "audio/flac", ".mp3": "audio/mpeg"}

audio_root_key = web.AppKey("audio_root_key", str)
upstream_key = web.AppKey("upstream_key", str)
session_key = web.AppKey("session_key", aiohttp.ClientSession)
object_store_key = web.AppKey("object_store_key", object)


def create_seed_reference_app(
    upstream: str, audio_root: str, object_store: object = None
) -> web.Application:
    app = web.Application(client_max_size=2 * 1024**3)
    app[upstream_key] = upstream.rstrip("/")
    app[audio_root_key] = audio_root
    app[object_store_key] = object_store
    app.cleanup_ctx.append(client_session)
    app.router.add_post("/v1/chat/completions", chat_completions)
    return app


async def client_session(app: web.Application) -> AsyncIterator[None]:
    app[session_key] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
    yield
    await app[session_key].close()


def audio_parts(paths: list[str], root: str) -> list[dict[str, Any]]:
    blobs = []
    for path in paths:
        with open(os.path.join(root, path), "rb") as handle:  # blocking, on the loop: as today
            blobs.append(handle.read())
    return encoded_parts(paths, blobs)


async def object_audio_parts(paths: list[str], store: Any) -> list[dict[str, Any]]:
    import obstore

    blobs = [bytes(await (await obstore.get_async(store, path)).bytes_async()) for path in paths]
    return encoded_parts(paths, blobs)


def encoded_parts(paths: list[str], blobs: list[bytes]) -> list[dict[str, Any]]:
    parts = []
    for path, data in zip(paths, blobs, strict=True):
        mime = MIME_BY_EXTENSION.get(os.path.splitext(path)[1].lower(), "audio/wav")
        encoded = base64.b64encode(data).decode("ascii")
        parts.append({"type": "audio_url", "audio_url": {"url": f"data:{mime};base64,{encoded}"}})
    return parts


def splice_into_last_user_message(body: dict[str, Any], parts: list[dict[str, Any]]) -> None:
    for message in reversed(body["messages"]):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            message["content"] = parts + list(content or [])
            return
    body["messages"].append({"role": "user", "content": parts})


async def chat_completions(request: web.Request) -> web.Response:
    body = json.loads(await request.read())
    metadata = body.get("metadata") or {}
    paths = metadata.pop("audio_paths", None) or (
        [metadata.pop("audio_path")] if "audio_path" in metadata else []
    )
    if not metadata:
        body.pop("metadata", None)
    store = request.app[object_store_key]
    if paths and store is not None:
        splice_into_last_user_message(body, await object_audio_parts(paths, store))
    elif paths:
        splice_into_last_user_message(body, audio_parts(paths, request.app[audio_root_key]))
    payload = json.dumps(body)
    url = request.app[upstream_key] + request.path
    async with request.app[session_key].post(
        url, data=payload, headers={"Content-Type": "application/json"}
    ) as upstream:
        answer = await upstream.read()
        return web.Response(body=answer, status=upstream.status, content_type=upstream.content_type)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.shared.seed_reference",
        description="The naive per-request baseline (bench only).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--audio-root", required=True)
    parser.add_argument("--s3-endpoint", default=None, help="fetch paths from this S3 API")
    parser.add_argument("--s3-bucket", default=None)
    parser.add_argument("--s3-region", default="us-east-1")
    args = parser.parse_args(argv)
    import uvloop

    store = None
    if args.s3_endpoint:
        from obstore.store import S3Store

        store = S3Store(
            args.s3_bucket, endpoint=args.s3_endpoint, region=args.s3_region, allow_http=True
        )
    web.run_app(
        create_seed_reference_app(args.upstream, args.audio_root, store),
        host=args.host,
        port=args.port,
        access_log=None,
        print=None,
        loop=uvloop.new_event_loop(),
    )


if __name__ == "__main__":
    main()
