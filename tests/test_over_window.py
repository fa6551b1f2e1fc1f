"""A clip past the model's window sent whole (`[chunking]` off, longer than `threshold_seconds`)
counts in `audio_gateway_clips_over_window_total` once per clip sent, and is logged once per
clip identity, saying what to do; shorter clips, clips of unknown length and a gateway that
splits (`[chunking]` on) leave no such trace."""

from __future__ import annotations

import base64
import io
import logging
import wave
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from hypothesis import given
from hypothesis import strategies as st

from gateway.audio.samples import write_tone
from gateway.clips.over_window import OverWindowWatch
from gateway.metrics import GatewayMetrics
from gateway.naming.sidechannel import InlineAudio
from tests.conftest import GatewayFactory, chat_body, gateway_metrics

Client = TestClient[web.Request, web.Application]
CHAT = "/v1/chat/completions"
# A 1 s window, so that test clips stay small: pieces must fit it too.
ONE_SECOND_WINDOW = {
    "threshold_seconds": 1.0,
    "max_chunk_seconds": 1.0,
    "min_tail_seconds": 0.25,
    "quiet_search_seconds": 0.5,
}
OVER = "audio_gateway_clips_over_window_total"


def warnings_about_window(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "gateway.over_window" and r.levelno == logging.WARNING
    ]


@pytest.fixture
def long_clips(audio_dir: Path) -> tuple[str, str]:
    write_tone(audio_dir / "long.wav", 2.0, 300.0)
    write_tone(audio_dir / "longer.wav", 3.0, 500.0)
    return "long.wav", "longer.wav"


async def test_each_long_clip_is_counted_per_send_and_logged_once(
    make_gateway: GatewayFactory, long_clips: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    gateway = await make_gateway(chunking=ONE_SECOND_WINDOW)  # enabled = false by default
    long, longer = long_clips
    sent = [
        ("chat", {"audio_path": long}),
        ("chat", {"audio_path": long}),  # a second seed of the same row
        ("responses", {"audio_path": long}),
        ("chat", {"audio_paths": [longer, "a.wav"]}),
        ("chat", {"audio_path": "b.wav"}),  # 0.5 s: inside the window
    ]
    for route, metadata in sent:
        if route == "chat":
            response = await gateway.post(CHAT, json=chat_body(metadata))
        else:
            body = {"model": "m", "input": "Transcribe.", "metadata": metadata}
            response = await gateway.post("/v1/responses", json=body)
        assert response.status == 200, await response.text()
    assert (await gateway_metrics(gateway))[OVER] == 4
    logged = warnings_about_window(caplog)
    assert len(logged) == 2
    first, second = logged
    assert "'long.wav'" in first and "2.0 s" in first and "'longer.wav'" in second
    assert "[chunking] enabled = true" in first  # what to do


async def test_a_gateway_that_splits_does_not_count(
    make_gateway: GatewayFactory, long_clips: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    gateway = await make_gateway(chunking={**ONE_SECOND_WINDOW, "enabled": True})
    response = await gateway.post(CHAT, json=chat_body({"audio_path": long_clips[0]}))
    assert response.status == 200, await response.text()
    assert (await gateway_metrics(gateway))[OVER] == 0
    assert not warnings_about_window(caplog)


async def test_inline_audio_is_named_by_its_key_never_its_bytes(
    make_gateway: GatewayFactory, long_clips: tuple[str, str], audio_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    caplog.set_level(logging.INFO)
    gateway = await make_gateway(chunking=ONE_SECOND_WINDOW)
    payload = base64.b64encode((audio_dir / long_clips[0]).read_bytes()).decode()
    body = chat_body({"audio_data": f"data:audio/wav;base64,{payload}"})
    for _ in range(2):
        assert (await gateway.post(CHAT, json=body)).status == 200
    assert (await gateway_metrics(gateway))[OVER] == 2
    [line] = warnings_about_window(caplog)
    assert "metadata.audio_data" in line and "base64" not in line


# --- the watch alone ----------------------------------------------------------------------------


def inline_wav(seconds: float, rate: int, tag: int) -> InlineAudio:
    """A mono 8-bit WAV of `seconds`, its samples set by `tag` (a different clip per tag)."""
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(1)
        writer.setframerate(rate)
        writer.writeframes(bytes([tag % 256]) * round(seconds * rate))
    lead = "data:audio/wav;base64,"
    return InlineAudio(
        lead + base64.b64encode(out.getvalue()).decode(), "audio/wav", len(lead), "p"
    )


@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from([0.5, 1.0, 1.5, 4.0])), min_size=1, max_size=12
    )
)
def test_counts_every_send_and_logs_each_distinct_clip_once(
    sends: list[tuple[int, float]],
) -> None:
    metrics = GatewayMetrics()
    watch = OverWindowWatch(1.0, metrics)
    logger = logging.getLogger("gateway.over_window")
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    try:
        for tag, seconds in sends:
            watch.see([inline_wav(seconds, 100, tag * 10 + int(seconds * 2))])
    finally:
        logger.removeHandler(handler)
    over = [(tag, seconds) for tag, seconds in sends if seconds > 1.0]
    assert metrics.registry.get_sample_value(OVER) == len(over)
    assert len(seen) == len(set(over))
