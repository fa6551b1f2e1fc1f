"""Sending the pieces of a split clip: one upstream request each, concurrent, at most
`max_concurrent_chunks` of one request in flight, all cancelled together.

`PieceRuns.completions()` waits for every piece's chat.completion; `PieceRuns.chunks()` yields
the pieces' stream chunks in piece order (a later piece's chunks are buffered until the earlier
pieces are relayed). The first piece that fails fails the run: its upstream status and error
(`PieceFailed`, the message naming the piece and its time range), a transport failure as the
relay's 502/504 (named the same way), or vLLM's in-stream error chunk (`PieceErrorChunk`); the
other pieces are then cancelled, as they are when the client goes away.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
from aiohttp import web

from ..bridge import SSEDecoder
from ..bridge.outputs import invalid_answer
from ..errors import GatewayError
from ..metrics import GatewayMetrics
from ..upstream.pool import UpstreamPool, UpstreamResponse
from ..upstream.relay import RELAY_FAILURES, upstream_errors
from .bodies import ChunkedRequest, Piece
from .merge import Chunk, PieceCompletion, read_completion

ERROR_BODY_MAX_BYTES = 64 * 1024  # an upstream error answer is small; more is not read
DONE = b"[DONE]"
_END = object()  # a piece's stream ended


class PieceFailed(Exception):
    """A piece's non-2xx upstream answer, its message prefixed with the piece's name."""

    def __init__(self, status: int, error: dict[str, Any]) -> None:
        super().__init__(error.get("message"))
        self.status = status
        self.error = error

    def response(self) -> web.Response:
        return web.json_response({"error": self.error}, status=self.status)


class PieceErrorChunk(Exception):
    """vLLM's error chunk in a piece's stream (a failure after its 200), the message named."""

    def __init__(self, chunk: Chunk) -> None:
        super().__init__(chunk["error"].get("message"))
        self.chunk = chunk

    def response(self) -> web.Response:
        code = self.chunk["error"].get("code")
        status = code if isinstance(code, int) and 400 <= code < 600 else 500
        return web.json_response({"error": self.chunk["error"]}, status=status)


class PieceRuns:
    """The upstream requests of one chunked request. Use as `async with`: leaving cancels
    whatever is still running (the client went away, or a piece failed)."""

    def __init__(
        self,
        pool: UpstreamPool,
        target: str,
        headers: list[tuple[str, str]],
        chunked: ChunkedRequest,
        max_concurrent: int,
        metrics: GatewayMetrics,
    ) -> None:
        self._pool = pool
        self._target = target
        self._headers = headers
        self._chunked = chunked
        self._slots = asyncio.Semaphore(max_concurrent)
        self._metrics = metrics
        self._tasks: list[asyncio.Task[Any]] = []
        self._buffered: list[deque[Any]] = [deque() for _ in chunked.pieces]
        self._wake = asyncio.Event()
        self._failure: BaseException | None = None

    async def __aenter__(self) -> PieceRuns:
        self._metrics.observe_chunked(len(self._chunked.pieces))
        return self

    async def __aexit__(self, *_: Any) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def completions(self) -> list[PieceCompletion]:
        """Every piece's answer, in piece order; raises the first failure."""
        self._tasks = [asyncio.create_task(self._completion(p)) for p in self._chunked.pieces]
        done, _ = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in sorted(done, key=self._tasks.index):
            if (failure := task.exception()) is not None:
                raise failure
        return [task.result() for task in self._tasks]

    async def chunks(self) -> AsyncIterator[tuple[int, Chunk]]:
        """(piece index, chunk) of every piece's stream, in piece order, [DONE] left out;
        raises the first failure of any piece as soon as it happens."""
        self._tasks = [asyncio.create_task(self._stream(p)) for p in self._chunked.pieces]
        for index, buffered in enumerate(self._buffered):
            while True:
                if self._failure is not None:
                    raise self._failure
                if not buffered:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                item = buffered.popleft()
                if item is _END:
                    break
                yield index, item

    # --- one piece ------------------------------------------------------------------------------

    async def _completion(self, piece: Piece) -> PieceCompletion:
        label = self._chunked.label(piece)
        async with self._slots:
            upstream = await self._send(piece)
            try:
                with self._named(label):
                    raw = await upstream.read()
            finally:
                upstream.close()
        try:
            return read_completion(msgspec.json.decode(raw))
        except (msgspec.DecodeError, ValueError) as exc:
            raise _renamed(invalid_answer(str(exc)), label) from None

    async def _stream(self, piece: Piece) -> None:
        try:
            async with self._slots:
                upstream = await self._send(piece)
                try:
                    await self._read_stream(piece, upstream)
                finally:
                    upstream.close()
        except Exception as exc:  # CancelledError is not one: cancelled pieces stay quiet
            if self._failure is None:
                self._failure = exc
            self._wake.set()

    async def _read_stream(self, piece: Piece, upstream: UpstreamResponse) -> None:
        label = self._chunked.label(piece)
        content_type = upstream.header(b"content-type") or b""
        if not content_type.startswith(b"text/event-stream"):
            raise _renamed(invalid_answer("a streamed request got no event stream"), label)
        decoder = SSEDecoder()
        with self._named(label):
            async for received in upstream.chunks():
                self._buffer(piece, label, decoder.feed(received))
        self._buffer(piece, label, decoder.close())
        self._buffered[piece.index].append(_END)
        self._wake.set()

    def _buffer(self, piece: Piece, label: str, events: list[bytes]) -> None:
        for data in events:
            if data.strip() == DONE:
                continue
            try:
                chunk = msgspec.json.decode(data)
            except msgspec.DecodeError:
                continue  # vLLM sends JSON only; a stray line changes nothing (as the bridge)
            if isinstance(chunk, dict) and isinstance(chunk.get("error"), dict):
                error = {**chunk["error"], "message": _named_message(label, chunk["error"])}
                raise PieceErrorChunk({**chunk, "error": error})
            if isinstance(chunk, dict):
                self._buffered[piece.index].append(chunk)
        if events:
            self._wake.set()

    async def _send(self, piece: Piece) -> UpstreamResponse:
        """Build the piece's body (off the loop), send it, and return its 2xx answer."""
        body = await asyncio.to_thread(self._chunked.build, piece)
        label = self._chunked.label(piece)
        self._metrics.audio_chunks.inc()
        with self._named(label):
            upstream = await self._pool.request("POST", self._target, self._headers, body)
        if 200 <= upstream.status < 300:
            return upstream
        try:
            raise await _failed(upstream, label)
        finally:
            upstream.close()

    @contextmanager
    def _named(self, label: str) -> Iterator[None]:
        """The relay's 502/504 for transport failures, the message naming the piece."""
        try:
            with upstream_errors(self._pool):
                yield
        except GatewayError as exc:
            raise _renamed(exc, label) from exc


async def _failed(upstream: UpstreamResponse, label: str) -> PieceFailed:
    """The piece's error answer, its status kept and its message naming the piece."""
    received = bytearray()
    try:
        async for chunk in upstream.chunks():
            received += chunk
            if len(received) >= ERROR_BODY_MAX_BYTES:
                break
    except RELAY_FAILURES:  # the status is what counts
        pass
    try:
        answer = msgspec.json.decode(bytes(received))
    except msgspec.DecodeError:
        answer = None
    error = _error_object(answer)
    if error is None:
        text = bytes(received[:200]).decode("utf-8", "replace")
        error = {"message": f"the upstream answered {upstream.status}: {text}", "type": None}
        error |= {"param": None, "code": None}
    return PieceFailed(upstream.status, {**error, "message": _named_message(label, error)})


def _error_object(answer: Any) -> dict[str, Any] | None:
    """The OpenAI error object of an error answer: `{"error": {...}}`, or the flat
    `{"object": "error", "message": ...}` of older vLLM servers."""
    if not isinstance(answer, dict):
        return None
    if isinstance(answer.get("error"), dict):
        return dict(answer["error"])
    if isinstance(answer.get("message"), str):
        return {k: v for k, v in answer.items() if k in ("message", "type", "param", "code")}
    return None


def _named_message(label: str, error: dict[str, Any]) -> str:
    return f"{label}: {error.get('message')}"


def _renamed(error: GatewayError, label: str) -> GatewayError:
    return type(error)(f"{label}: {error.message}", param=error.param, code=error.code)
