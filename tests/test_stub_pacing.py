"""The stub answering as vLLM does (`gateway/stub_upstream/pacing.py`): answers released a few at
a time, head and body written apart; and the gateway relaying such answers whole, buffered and
streamed, when their head and body reach it in separate reads."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httptools
import pytest
from aiohttp.test_utils import TestServer
from hypothesis import given
from hypothesis import strategies as st

from gateway.stub_upstream import create_stub_app
from gateway.stub_upstream.app import build_parser
from gateway.stub_upstream.pacing import AnswerPacer
from tests.conftest import GatewayFactory, chat_body
from tests.test_upstream_framing import (
    BOUND_SECONDS,
    CHAT,
    ClientView,
    Gateway,
    RawUpstream,
    raw_upstream,
    reply,
    scripted,
)

__all__ = ["raw_upstream", "scripted"]  # fixtures this module uses

ANSWER = json.dumps({"object": "chat.completion", "choices": [{"index": 0}]}).encode()
SPLIT_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    + f"content-length: {len(ANSWER)}\r\n\r\n".encode()
)
EVENTS = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


def chunked(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n\r\n"


class TestAnswerPacer:
    @given(
        answers=st.integers(1, 4),
        interval=st.floats(0.001, 0.1),
        gaps=st.lists(st.floats(0, 0.2), max_size=40),
    )
    def test_batches_of_at_most_n_lie_the_interval_apart(
        self, answers: int, interval: float, gaps: list[float]
    ) -> None:
        pacer = AnswerPacer(answers, interval)
        now, releases = 0.0, []
        for gap in gaps:
            now += gap
            released = pacer.release_at(now)
            assert released >= now
            releases.append(released)
        assert releases == sorted(releases)  # in the order they were ready
        batches = Counter(releases)
        assert max(batches.values(), default=0) <= answers
        times = sorted(batches)
        gaps_between = [later - earlier for earlier, later in itertools.pairwise(times)]
        assert all(gap >= interval * (1 - 1e-9) for gap in gaps_between)

    def test_a_burst_goes_out_n_at_a_time(self) -> None:
        pacer = AnswerPacer(2, 0.025)
        assert [pacer.release_at(1.0) for _ in range(5)] == pytest.approx(
            [1.0, 1.0, 1.025, 1.025, 1.05]
        )

    def test_an_answer_after_a_quiet_spell_goes_at_once(self) -> None:
        pacer = AnswerPacer(1, 0.025)
        assert pacer.release_at(1.0) == 1.0
        assert pacer.release_at(1.01) == 1.025  # the window of the last batch is still open
        assert pacer.release_at(2.0) == 2.0

    @pytest.mark.parametrize("answers, interval", [(0, 0.01), (2, 0.0), (2, -0.01)])
    def test_nonsense_is_refused(self, answers: int, interval: float) -> None:
        with pytest.raises(ValueError):
            AnswerPacer(answers, interval)


def test_the_flags() -> None:
    args = build_parser().parse_args(
        ["--pace-answers", "2", "--pace-ms", "25", "--split-head-body"]
    )
    assert (args.pace_answers, args.pace_ms, args.split_head_body) == (2, 25.0, True)
    args = build_parser().parse_args([])
    assert (args.pace_answers, args.pace_ms, args.split_head_body) == (0, 0.0, False)


@pytest.fixture
async def split_stub(audio_dir: Path) -> AsyncIterator[TestServer]:
    server = TestServer(create_stub_app(str(audio_dir.parent), split_head_body=True))
    await server.start_server()
    yield server
    await server.close()


async def raw_exchange(port: int, request: bytes) -> tuple[ClientView, list[bytes]]:
    """Send `request`; the answer as an independent parser read it, and each read's bytes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    view, reads = ClientView(), []
    parser = httptools.HttpResponseParser(view)
    try:
        writer.write(request)
        async with asyncio.timeout(BOUND_SECONDS):
            while not view.complete and (data := await reader.read(65536)):
                reads.append(data)
                parser.feed_data(data)
        view.status = parser.get_status_code()
    finally:
        writer.close()
    return view, reads


def post(path: str, body: bytes) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: stub\r\nContent-Type: application/json\r\n"
    return head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body


async def test_the_split_stub_answer_is_one_whole_message(split_stub: TestServer) -> None:
    assert split_stub.port is not None
    view, reads = await raw_exchange(split_stub.port, post(CHAT, json.dumps(chat_body()).encode()))
    assert view.complete and view.status == 200
    assert int(view.headers["content-length"]) == len(view.body)
    assert view.headers["content-type"] == "application/json"
    assert json.loads(view.body)["choices"][0]["message"]["content"] == "no audio"
    assert b"".join(reads).endswith(view.body)


@pytest.mark.stub(split_head_body=True, pace_answers=2, pace_ms=5)
@pytest.mark.parametrize("stream", [False, True])
async def test_a_paced_split_stub_behind_the_gateway(
    make_gateway: GatewayFactory, stream: bool
) -> None:
    gateway = await make_gateway()
    metadata = {"audio_path": "a.wav"}

    async def one() -> bytes:
        response = await gateway.post(CHAT, json=chat_body(metadata, stream=stream))
        assert response.status == 200
        return await response.read()

    answers = await asyncio.gather(*(one() for _ in range(6)))
    for answer in answers:
        if stream:
            assert answer.endswith(b"data: [DONE]\n\n")
        else:
            assert "sha256=" in json.loads(answer)["choices"][0]["message"]["content"]


ScriptedGateway = Callable[..., Awaitable[tuple[Gateway, RawUpstream]]]


async def test_a_split_buffered_answer_is_relayed_whole(scripted: ScriptedGateway) -> None:
    """The upstream writes the head, pauses, then the body: the gateway reads them apart."""
    gateway, upstream = await scripted(reply(SPLIT_HEAD, ANSWER), reply(SPLIT_HEAD, ANSWER))
    for _ in range(2):  # the second over the same upstream connection
        response = await gateway.post(CHAT, json=chat_body())
        assert response.status == 200
        assert response.headers["Content-Type"] == "application/json"
        assert await response.read() == ANSWER
    assert upstream.connections == 1


async def test_a_split_stream_is_relayed_whole(scripted: ScriptedGateway) -> None:
    gateway, _ = await scripted(reply(STREAM_HEAD, chunked(EVENTS)))
    response = await gateway.post(CHAT, json=chat_body(stream=True))
    assert response.status == 200
    assert response.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    assert await response.read() == EVENTS
