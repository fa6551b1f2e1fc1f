"""Sending a body whose clips may go by reference, and sending it once more with their data.

`ReferenceRelay.relay` asks the record (`held.py`) which clips the upstream holds and the
model's state (`models.py`) whether they may go by reference, sends those as uuid-only parts,
and watches the start of the answer before the client sees any of it. When the upstream did
not have them, the whole request goes again with every clip's data (and uuid), and the client
sees only that second answer:

- a 400 whose `error.message` starts with `Cache miss for` (vLLM 0.33's processor cache);
- any other 400 (a model or proxy that refuses uuid-only parts: Voxtral under
  `--tokenizer-mode mistral`, vLLM with `--mm-processor-cache-gb 0`); when the copy with data
  succeeds, the model's clips go with data from now on (`models.py`), and a client's own bad
  request, which fails with data too, is relayed as that second answer;
- a 500 (vLLM's engine cache drifted from its API server's: "Internal server error");
- a 2xx event stream with an error event, or cut, before the first event with content,
  reasoning or a tool call: these first events are held back until one arrives.

A miss for clips whose data the model accepted moments before counts toward switching that
model to data (`models.py`). Nothing is retried once content may have reached the client, nor
a request that carried no reference, nor a retry; any other answer is relayed as it is. The
answer itself is written by the caller's `Answer` (the plain relay, or the Responses bridge),
given the upstream response with the held-back events put back in front.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import msgspec
from aiohttp import web

from ..bridge import BridgedRequest
from ..bridge.relay import bridge_headers, bridged_answer, chat_target
from ..metrics import GatewayMetrics
from ..upstream.pool import UpstreamPool, UpstreamResponse
from ..upstream.relay import RELAY_FAILURES, relay_answer, upstream_errors, upstream_target
from ..upstream.sse_watch import AnswerWatch, is_cache_miss
from .body import ReferencedBody
from .held import ClipKey, Sending, UpstreamClips
from .models import ModelReferences

log = logging.getLogger("gateway.reference_relay")  # named before the move: log filters key on it

Answer = Callable[[UpstreamResponse], Awaitable[web.StreamResponse]]
# vLLM 0.33's routes that empty its processor cache (/pause unless clear_cache=false, /sleep
# from level 1): any success forgets every clip, which costs data, never a miss.
CACHE_CLEARING_PATHS = frozenset(
    {"/pause", "/sleep", "/reset_mm_cache", "/release_kv_cache_memory"}
)
MISS_BODY_MAX_BYTES = 64 * 1024  # a 400 larger than this is not vLLM's cache-miss error
RETRY_REASONS = ("cache_miss", "upstream_error", "stream_error", "refused")


class ReferenceRelay:
    def __init__(
        self, clips: UpstreamClips, models: ModelReferences, metrics: GatewayMetrics
    ) -> None:
        self.clips = clips
        self.models = models  # which models' clips may go by reference (models.py)
        self._parts = {form: metrics.audio_parts.labels(form) for form in ("data", "reference")}
        self._retries = {
            reason: metrics.reference_retries.labels(reason) for reason in RETRY_REASONS
        }
        self._saved = metrics.reference_bytes_saved
        # Told when a relayed request emptied the upstream's caches (the other workers forget
        # too, gateway/workers).
        self.on_upstream_cleared: Callable[[], None] | None = None

    async def relay(
        self,
        pool: UpstreamPool,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: ReferencedBody,
        answer: Answer,
    ) -> web.StreamResponse:
        """Send `body` to `target` (by reference where the record and the model allow) and
        `answer` with the upstream's response, sending it again with every clip's data when
        that one missed or was refused."""
        references, sending = await self._plan(body)
        # Taken as it is sent: a reference that misses says the layout forgets clips, even when
        # a sibling's miss (the same clip's other seeds, sent at once) made the gateway forget it.
        recent = self.clips.recently_held(references)
        try:
            upstream = await self._send(pool, target, headers, body, references, sending)
            if not references:
                return await answer(_Watched(upstream, [], upstream.chunks(), sending, watch=True))
            reason, held, rest = await _first_answer(upstream)
            if reason is None:
                self._saved.inc(body.by_reference(references)[1])
                if recent:
                    self.models.fared(body.model, references, missed=False)
                if _is_ok_stream(upstream):  # held back until content (or its clean end)
                    sending.succeeded()
                return await answer(_Watched(upstream, held, rest, sending, watch=False))
            upstream.close()
            self._retries[reason].inc()
            if reason == "cache_miss" and recent:
                self.models.fared(body.model, references, missed=True)
            self.clips.forget(body.keys)
            sending.ended()
            sending = self.clips.sending(list(body.keys))
            if reason == "refused":  # learned only if the same request with data succeeds
                refusal = _error_message(held)
                sending.then(lambda: self.models.refused(body.model, refusal))
            upstream = await self._send(pool, target, headers, body, frozenset(), sending)
            return await answer(_Watched(upstream, [], upstream.chunks(), sending, watch=True))
        finally:
            sending.ended()

    async def _plan(self, body: ReferencedBody) -> tuple[frozenset[ClipKey], Sending]:
        """The clips that go by reference, and the `Sending` of the others."""
        if not self.models.references(body.model, body.keys):  # the model takes data now
            return frozenset(), self.clips.sending(list(body.keys))
        held, sending = await self.clips.plan(body.keys)
        references = self.models.references(body.model, held)
        if len(references) < len(held):  # clips that missed in a trial: with their data
            sending.add(self.clips.sending(list(held - references)))
        return references, sending

    async def relay_route(
        self,
        request: web.Request,
        pool: UpstreamPool,
        headers: Sequence[tuple[str, str]],
        body: ReferencedBody,
    ) -> web.StreamResponse:
        """Chat completions: the client's own route, answered as the upstream answers."""
        target = upstream_target(pool, request)
        return await self.relay(
            pool, target, headers, body, lambda up: relay_answer(request, pool, up)
        )

    async def relay_bridged(
        self,
        request: web.Request,
        pool: UpstreamPool,
        headers: Sequence[tuple[str, str]],
        body: ReferencedBody,
        bridged: BridgedRequest,
    ) -> web.StreamResponse:
        """The Responses bridge: the upstream's chat route, answered as Responses."""
        target = chat_target(pool, request)
        return await self.relay(
            pool,
            target,
            bridge_headers(list(headers)),
            body,
            lambda up: bridged_answer(request, pool, up, bridged),
        )

    def after_passthrough(self, request: web.Request, response: web.StreamResponse) -> None:
        """A relayed `POST /pause`, `/sleep` or `/reset_mm_cache` that succeeded emptied the
        upstream's caches: forget every clip."""
        if (
            request.method == "POST"
            and request.path in CACHE_CLEARING_PATHS
            and 200 <= response.status < 300
        ):
            self.clips.forget_all()
            if self.on_upstream_cleared is not None:
                self.on_upstream_cleared()

    async def _send(
        self,
        pool: UpstreamPool,
        target: str,
        headers: Sequence[tuple[str, str]],
        body: ReferencedBody,
        references: frozenset[ClipKey],
        sending: Sending,
    ) -> UpstreamResponse:
        payload = body.render(references)
        count, _ = body.by_reference(references) if references else (0, 0)
        if count:
            self._parts["reference"].inc(count)
        if count < len(body.parts):
            self._parts["data"].inc(len(body.parts) - count)
        with upstream_errors(pool):
            upstream = await pool.request("POST", target, headers, payload)
        if _is_ok_stream(upstream):
            sending.rendered()
        return upstream


async def _first_answer(
    upstream: UpstreamResponse,
) -> tuple[str | None, list[bytes], AsyncIterator[bytes]]:
    """Why the upstream's answer to a request with references calls for a retry (None: it
    does not), the body pieces read to tell, and the rest of the body. Closes `upstream`
    when the caller is cancelled meanwhile (the client went away)."""
    try:
        if upstream.status == 500:
            return "upstream_error", [], _nothing()
        if upstream.status == 400:
            return await _bad_request(upstream)
        if _is_ok_stream(upstream):
            return await _held_back(upstream)
        return None, [], upstream.chunks()
    except BaseException:
        upstream.close()
        raise


async def _bad_request(
    upstream: UpstreamResponse,
) -> tuple[str | None, list[bytes], AsyncIterator[bytes]]:
    """Any 400 calls for a retry with the data: vLLM's cache miss, or a refusal of uuid-only
    parts (a model or proxy that takes none); a larger body than a miss is not read."""
    length = upstream.content_length
    if length is None or length > MISS_BODY_MAX_BYTES:
        return "refused", [], _nothing()
    chunks = upstream.chunks()
    received = [chunk async for chunk in chunks]
    reason = "cache_miss" if is_cache_miss(b"".join(received)) else "refused"
    return reason, received, chunks


def _error_message(received: list[bytes]) -> str:
    """The `error.message` of an OpenAI-style error body (else its start), for the log."""
    text = b"".join(received)
    try:
        message = msgspec.json.decode(text)["error"]["message"]
    except (msgspec.DecodeError, KeyError, TypeError):
        return text[:200].decode(errors="replace")
    return str(message)[:500]


async def _held_back(
    upstream: UpstreamResponse,
) -> tuple[str | None, list[bytes], AsyncIterator[bytes]]:
    """Read the stream until its first content (None: go on) or its failure ("stream_error")."""
    watch = AnswerWatch()
    held: list[bytes] = []
    chunks = upstream.chunks()
    while True:
        try:
            chunk = await anext(chunks)
        except StopAsyncIteration:
            return None, held, chunks  # a complete answer without content: relayed as it is
        except RELAY_FAILURES as exc:
            log.info("upstream stream cut before any content (%r): retrying with data", exc)
            return "stream_error", held, chunks
        held.append(chunk)
        verdict = watch.feed(chunk)
        if verdict == "error":
            return "stream_error", held, chunks
        if verdict is not None:
            return None, held, chunks


def _is_ok_stream(upstream: UpstreamResponse) -> bool:
    """A 2xx event stream: vLLM's streamed chat answer."""
    content_type = upstream.header(b"content-type") or b""
    return 200 <= upstream.status < 300 and content_type.startswith(b"text/event-stream")


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield


class _Watched(UpstreamResponse):
    """The upstream response with the pieces already read put back in front; it marks the
    request's clips as held once the answer succeeded: complete, or with `watch`, a 2xx
    stream's first content."""

    def __init__(
        self,
        upstream: UpstreamResponse,
        held: list[bytes],
        rest: AsyncIterator[bytes],
        sending: Sending,
        *,
        watch: bool,
    ) -> None:
        # Not UpstreamResponse.__init__: this one delegates to `upstream`, it owns no connection.
        self._upstream = upstream
        self.status = upstream.status
        self.headers = upstream.headers
        self.released = False
        self._held = held
        self._rest = rest
        self._sending = sending
        self._ok = 200 <= upstream.status < 300
        self._watch = AnswerWatch() if watch and _is_ok_stream(upstream) else None

    async def chunks(self) -> AsyncIterator[bytes]:
        held, self._held = self._held, []
        for chunk in held:
            yield chunk
        async for chunk in self._rest:
            self._see(chunk)
            yield chunk
        if self._ok and (self._watch is None or self._watch.verdict != "error"):
            self._sending.succeeded()

    def _see(self, chunk: bytes) -> None:
        watch = self._watch
        if watch is None or watch.verdict is not None:
            return
        verdict = watch.feed(chunk)
        if verdict is not None and verdict != "error":
            self._sending.succeeded()

    def close(self) -> None:
        self._upstream.close()
