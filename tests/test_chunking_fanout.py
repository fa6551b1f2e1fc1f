"""Long clips split, sent concurrently and merged, end to end: a real gateway in front of the
stub acting as a 3 s model (`ModelWindow`), which answers each request with what it heard
(frames and the sha256 of the decoded PCM), so every piece, its order and the cuts are
checked against the clip's own samples."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy
import pytest
from aiohttp.test_utils import TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.stub_upstream.window import Action, ModelWindow, window_key
from tests.chunking_helpers import (
    CHAT,
    CHUNKING,
    RATE,
    assert_pieces_are_the_clip,
    heard,
    pcm_digest,
    post_chat,
    windowed_stub,
    write_long_clips,
)
from tests.conftest import chat_body, gateway_error, gateway_metrics


@pytest.fixture
async def stub_server(audio_dir: Path) -> AsyncIterator[TestServer]:
    async for server in windowed_stub(audio_dir):
        yield server


@pytest.fixture
def window(stub_server: TestServer) -> ModelWindow:
    return stub_server.app[window_key]


@pytest.fixture
def long_pcm(audio_dir: Path) -> numpy.ndarray:
    return write_long_clips(audio_dir)


@pytest.fixture
async def chunking(make_gateway: Any) -> Any:
    return await make_gateway(chunking=CHUNKING)


# --- not streamed ---------------------------------------------------------------------------


@pytest.mark.parametrize("split", ["fixed", "quiet"])
async def test_every_piece_heard_once_in_order(
    make_gateway: Any, long_pcm: numpy.ndarray, window: ModelWindow, split: str
) -> None:
    gateway = await make_gateway(chunking={**CHUNKING, "split": split})
    response = await post_chat(gateway)
    answer = await response.json()
    assert response.status == 200, answer
    words = heard(answer["choices"][0]["message"]["content"])
    assert_pieces_are_the_clip(words, long_pcm)
    assert answer["object"] == "chat.completion" and len(answer["choices"]) == 1
    assert answer["choices"][0]["finish_reason"] == "stop"
    # the stub counts a word a token, and 1 prompt token per request
    count = len(words)
    assert answer["usage"] == {
        "prompt_tokens": count,
        "completion_tokens": count,
        "total_tokens": 2 * count,
    }
    if split == "fixed":
        assert [int(w["frames"]) for w in words] == [48000, 48000, 48000, 22400]
    else:  # cut in the quiet gaps (every third 0.7 s), so one piece more than fixed windows
        assert count == 5 and all(int(w["frames"]) < 48000 for w in words)


async def test_chunking_off_sends_the_clip_whole_and_a_3s_model_truncates_it(
    gateway: Any, long_pcm: numpy.ndarray, window: ModelWindow
) -> None:
    answer = await (await post_chat(gateway)).json()
    (word,) = heard(answer["choices"][0]["message"]["content"])
    assert (int(word["frames"]), int(word["total_frames"])) == (48000, len(long_pcm))
    assert word["pcm_sha256"] == pcm_digest(long_pcm[:48000])


async def test_a_short_clip_goes_whole_with_the_same_body(
    make_gateway: Any, gateway: Any, stub: Any, long_pcm: numpy.ndarray
) -> None:
    chunked = await make_gateway(chunking=CHUNKING)
    bodies = []
    for client in (gateway, chunked):
        response = await client.post(CHAT, json=chat_body({"audio_path": "b.wav"}, n=2))
        assert response.status == 200, await response.text()  # n=2: refused only when split
        bodies.append(stub.requests[-1].body)
    assert bodies[0] == bodies[1]


async def test_out_of_order_completion_keeps_piece_order(
    chunking: Any, long_pcm: numpy.ndarray, window: ModelWindow
) -> None:
    # the first to arrive answers last, the last first
    window.rule = lambda clips, arrival: Action(delay_seconds=0.3 - 0.1 * arrival)
    answer = await (await post_chat(chunking)).json()
    assert_pieces_are_the_clip(heard(answer["choices"][0]["message"]["content"]), long_pcm)


@pytest.mark.parametrize("limit", [1, 2, 3])
async def test_at_most_max_concurrent_chunks_in_flight(
    make_gateway: Any, long_pcm: numpy.ndarray, window: ModelWindow, limit: int
) -> None:
    gateway = await make_gateway(chunking={**CHUNKING, "max_concurrent_chunks": limit})
    window.delay_seconds = 0.1
    response = await post_chat(gateway)
    assert response.status == 200, await response.text()
    assert window.arrivals == 4
    assert window.max_in_flight == limit  # reached, never exceeded


async def test_length_wins_and_join_is_configurable(
    make_gateway: Any, long_pcm: numpy.ndarray
) -> None:
    gateway = await make_gateway(chunking={**CHUNKING, "join": "\n--\n"})
    answer = await (await post_chat(gateway)).json()
    assert_pieces_are_the_clip(
        heard(answer["choices"][0]["message"]["content"], "\n--\n"), long_pcm
    )
    # max_tokens 1 keeps each piece's one word: no piece is cut, "stop"
    answer = await (await post_chat(gateway, max_tokens=1)).json()
    assert answer["choices"][0]["finish_reason"] == "stop"


async def test_metrics_count_chunked_requests_and_pieces(
    chunking: Any, long_pcm: numpy.ndarray
) -> None:
    assert (await post_chat(chunking)).status == 200
    response = await chunking.post(CHAT, json=chat_body({"audio_path": "a.wav"}))
    assert response.status == 200
    samples = await gateway_metrics(chunking)
    assert samples["audio_gateway_chunked_requests_total"] == 1
    assert samples["audio_gateway_audio_chunks_total"] == 4
    assert samples["audio_gateway_audio_chunks_per_request_count"] == 1
    assert samples["audio_gateway_audio_chunks_per_request_sum"] == 4


# --- refusals and what is not split ---------------------------------------------------------

REFUSALS = [
    ({"n": 2}, "n"),
    ({"logprobs": True, "top_logprobs": 2}, "logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"return_token_ids": True}, "return_token_ids"),
    ({"return_tokens_as_token_ids": True}, "return_tokens_as_token_ids"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
]


@pytest.mark.parametrize("fields, param", REFUSALS)
async def test_unmergeable_requests_are_refused_before_sending(
    chunking: Any, stub: Any, long_pcm: numpy.ndarray, fields: dict[str, Any], param: str
) -> None:
    error = await gateway_error(await post_chat(chunking, **fields), 400, param)
    assert error["code"] == "chunking_unsupported"
    assert stub.request_count == 0


async def test_rows_with_several_clips_are_not_split(
    chunking: Any, stub: Any, long_pcm: numpy.ndarray, window: ModelWindow
) -> None:
    body = chat_body({"audio_paths": ["long.wav", "long2.wav"]}, n=2)
    response = await chunking.post(CHAT, json=body)
    answer = await response.json()
    assert response.status == 200, answer
    assert stub.request_count == 1
    words = heard(answer["choices"][0]["message"]["content"])
    assert [int(w["total_frames"]) for w in words] == [len(long_pcm), 7 * RATE]


async def test_a_one_path_list_is_split(chunking: Any, long_pcm: numpy.ndarray) -> None:
    response = await chunking.post(CHAT, json=chat_body({"audio_paths": ["long.wav"]}))
    assert_pieces_are_the_clip(
        heard((await response.json())["choices"][0]["message"]["content"]), long_pcm
    )


async def test_inline_audio_is_split(
    chunking: Any, audio_dir: Path, long_pcm: numpy.ndarray
) -> None:
    uri = (
        "data:audio/wav;base64," + base64.b64encode((audio_dir / "long.wav").read_bytes()).decode()
    )
    response = await chunking.post(CHAT, json=chat_body({"audio_data": uri}))
    assert_pieces_are_the_clip(
        heard((await response.json())["choices"][0]["message"]["content"]), long_pcm
    )


@pytest.mark.parametrize(
    "splice, part",
    [
        ({"chat_part": "input_audio", "part_uuid": True}, "input_audio"),
        ({"mode": "file_url", "part_uuid": True}, "audio_url"),
    ],
)
async def test_pieces_travel_as_data_in_every_wire_form(
    make_gateway: Any, stub: Any, long_pcm: numpy.ndarray, splice: dict[str, Any], part: str
) -> None:
    gateway = await make_gateway(chunking=CHUNKING, splice=splice)
    response = await post_chat(gateway)
    assert_pieces_are_the_clip(
        heard((await response.json())["choices"][0]["message"]["content"]), long_pcm
    )
    assert len(stub.requests) == 4
    for received in stub.requests:
        audio, text = json.loads(received.body)["messages"][-1]["content"]
        assert audio["type"] == part and text == {"type": "text", "text": "Transcribe the audio."}
        if part == "input_audio":
            assert audio["input_audio"]["format"] == "wav"
            data = audio["input_audio"]["data"]
        else:
            lead = "data:audio/wav;base64,"
            assert audio["audio_url"]["url"].startswith(lead)
            data = audio["audio_url"]["url"][len(lead) :]
        assert audio["uuid"] == hashlib.sha256(base64.b64decode(data)).hexdigest()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    delays=st.lists(st.sampled_from([0.0, 0.02, 0.06]), min_size=4, max_size=4),
    limit=st.integers(1, 4),
    stream=st.booleans(),
)
async def test_any_completion_order_gives_the_clip_in_order(
    make_gateway: Any,
    long_pcm: numpy.ndarray,
    window: ModelWindow,
    delays: list[float],
    limit: int,
    stream: bool,
) -> None:
    """Whatever order the pieces finish in, and however many run at once, the answer is the
    clip's pieces in order, and no more than `limit` were ever in flight."""
    digests = [pcm_digest(long_pcm[start : start + 48000]) for start in range(0, 166400, 48000)]
    window.rule = lambda clips, arrival: Action(delays[digests.index(clips[0].pcm_sha256)])
    window.max_in_flight = 0
    gateway = await make_gateway(chunking={**CHUNKING, "max_concurrent_chunks": limit})
    response = await post_chat(gateway, stream=stream)
    assert response.status == 200, await response.text()
    if stream:
        chunks = [json.loads(d) for d in sse_lines(await response.text()) if d != "[DONE]"]
        text = "".join(
            c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]
        )
    else:
        text = (await response.json())["choices"][0]["message"]["content"]
    assert_pieces_are_the_clip(heard(text), long_pcm)
    assert window.max_in_flight <= limit


def sse_lines(text: str) -> list[str]:
    return [line[6:] for line in text.split("\n") if line.startswith("data: ")]


async def test_reference_mode_pieces_carry_their_uuid_and_always_their_data(
    make_gateway: Any, long_pcm: numpy.ndarray, stub: Any
) -> None:
    """`repeats = "reference"` and chunking: a piece is named by its own sha256 but never sent
    by reference, so the second seed's pieces are decoded again and the answer is whole."""
    gateway = await make_gateway(chunking=CHUNKING, splice={"repeats": "reference"})
    for seed in range(2):
        sent = len(stub.requests)
        response = await post_chat(gateway)
        answer = await response.json()
        assert response.status == 200, answer
        assert_pieces_are_the_clip(heard(answer["choices"][0]["message"]["content"]), long_pcm)
        parts = [
            part
            for received in stub.requests[sent:]
            for part in json.loads(received.body)["messages"][-1]["content"]
            if part["type"] == "audio_url"
        ]
        assert len(parts) == len(stub.requests) - sent > 1, seed
        for part in parts:
            data = part["audio_url"]["url"].split(",", 1)[1]
            assert part["uuid"] == hashlib.sha256(base64.b64decode(data)).hexdigest()
    metrics = await gateway_metrics(gateway)
    assert metrics.get('audio_gateway_audio_parts_total{form="reference"}', 0) == 0


def _open_clip_files(audio_dir: Path) -> list[str]:
    links = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the listing's own descriptor
            links.append(os.readlink(f"/proc/self/fd/{fd}"))
    return [link for link in links if link.startswith(str(audio_dir))]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_clip_too_big_to_keep_is_cut_on_demand_and_released(
    make_gateway: Any, long_pcm: numpy.ndarray, audio_dir: Path, stream: bool
) -> None:
    """Pieces over `cache.max_item_bytes` are read from the clip as they are sent: the answer
    is the same, nothing is kept, and the clip's file is closed when the request is over."""
    gateway = await make_gateway(chunking=CHUNKING, cache={"max_item_bytes": 50_000})
    response = await post_chat(gateway, stream=stream)
    text = await response.text()
    assert response.status == 200, text
    if stream:
        deltas = [
            json.loads(line[6:])["choices"][0]["delta"].get("content", "")
            for line in text.splitlines()
            if line.startswith("data: {")
        ]
        content = "".join(d for d in deltas if d)
    else:
        content = json.loads(text)["choices"][0]["message"]["content"]
    assert_pieces_are_the_clip(heard(content), long_pcm)
    health = await (await gateway.get("/gateway/health")).json()
    assert health["cache"]["entries"] == 0
    assert _open_clip_files(audio_dir) == []
