"""The stub's answers timed and written as vLLM's API server writes them.

- **Paced answers** (`pace_answers`, `pace_ms`; CLI `--pace-answers N --pace-ms MS`): vLLM's
  engine finishes a wave of requests one or two at a time, tens of milliseconds apart, and its
  API server writes each answer as it is done. The stub holds its model answers (a 200 to a
  POST under `/v1/`, not yet started) and releases them in batches of at most N, at least MS
  apart: an answer joins the batch still to go while it has room, else it goes in the next one
  (at once when the last batch is MS or more ago). Errors are not paced (vLLM refuses before
  its engine runs); streams are not either (their handler has started them).
- **Head and body apart** (`split_head_body`; CLI `--split-head-body`): uvicorn writes an
  answer's status line and headers at `http.response.start` and its body at
  `http.response.body`, two `transport.write()` calls in one task step, so a reader often gets
  them in two reads. The stub then writes every buffered answer's head and body in two
  separate writes, back to back, as uvicorn does. (A streamed answer's head already goes out
  alone when the stream starts.)
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class AnswerPacer:
    """Release times for answers: at most `answers` per batch, batches `interval` apart."""

    def __init__(self, answers: int, interval_seconds: float) -> None:
        if answers < 1 or interval_seconds <= 0:
            raise ValueError("pacing needs at least one answer a batch and a positive interval")
        self.answers = answers
        self.interval_seconds = interval_seconds
        self._batch_at = float("-inf")  # loop time the latest batch is (or was) released
        self._in_batch = 0

    def release_at(self, now: float) -> float:
        """The loop time an answer ready at `now` goes out: with the batch still to go when it
        has room, else in a new batch `interval` after the last one (or at once, if that is
        past). Answers go out in the order they were ready."""
        if self._in_batch >= self.answers or self._batch_at < now:
            self._batch_at = max(now, self._batch_at + self.interval_seconds)
            self._in_batch = 0
        self._in_batch += 1
        return self._batch_at

    async def wait_turn(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        delay = self.release_at(now) - now
        if delay > 0:
            await asyncio.sleep(delay)


answer_pacer_key = web.AppKey("answer_pacer_key", AnswerPacer)
split_head_body_key = web.AppKey("split_head_body_key", bool)


def install_answer_shaping(
    app: web.Application, pace_answers: int, pace_ms: float, split_head_body: bool
) -> None:
    """Pace and/or split the app's answers (nothing to do when neither is asked)."""
    if pace_answers > 0:  # a pace with no interval is refused by AnswerPacer
        app[answer_pacer_key] = AnswerPacer(pace_answers, pace_ms / 1000)
    app[split_head_body_key] = split_head_body
    if pace_answers > 0 or split_head_body:
        app.middlewares.append(shape_answers)


@web.middleware
async def shape_answers(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)
    if response.prepared or not isinstance(response, web.Response):
        return response  # a stream: already started
    pacer = request.app.get(answer_pacer_key)
    if pacer is not None and _is_model_answer(request, response):
        await pacer.wait_turn()
    if request.app[split_head_body_key] and isinstance(response.body, bytes):
        return await write_head_then_body(request, response)
    return response


def _is_model_answer(request: web.Request, response: web.Response) -> bool:
    return request.method == "POST" and request.path.startswith("/v1/") and response.status == 200


async def write_head_then_body(request: web.Request, response: web.Response) -> web.StreamResponse:
    """`response` on the wire as uvicorn writes it: the head in one write, the body in the next."""
    body = response.body
    assert isinstance(body, bytes)
    split = web.StreamResponse(status=response.status, reason=response.reason)
    split.headers.extend(response.headers)
    split.content_length = len(body)
    await split.prepare(request)  # StreamResponse sends its head at once, alone
    await split.write(body)
    await split.write_eof()
    return split


def add_answer_shaping_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--pace-answers",
        type=int,
        default=0,
        metavar="N",
        help="release model answers at most N at a time, --pace-ms apart, as vLLM's engine "
        "finishes them (0: each at once)",
    )
    parser.add_argument(
        "--pace-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="milliseconds between two batches of paced answers",
    )
    parser.add_argument(
        "--split-head-body",
        action="store_true",
        help="write an answer's head and body in two separate writes, as uvicorn does",
    )
