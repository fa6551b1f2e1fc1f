"""`Chunker.split`: the pieces of long clips from every source and format, exact for lossless
audio, cached and single-flighted, refused when they cannot be decoded or run too long.

Clips come through the real pipeline (path policy, audio store, sources); nothing is mocked.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.audio.encoder import EncodedAudio, StreamedAudio
from gateway.chunking import Chunker, ClipPieces
from gateway.chunking.cutter import cut_clip
from gateway.chunking.pieces import OnDemandPiece
from gateway.chunking.reading import Base64File
from gateway.clips.loaded import PathClip
from gateway.config import Config
from gateway.errors import GatewayError
from gateway.metrics import GatewayMetrics
from gateway.naming.sidechannel import DEFAULT_KEYS, InlineAudio, parse_data_uri
from gateway.request.build import build_pipeline
from gateway.request.pipeline import RewritePipeline
from gateway.request.shapes import CHAT_AUDIO_URL
from tests.conftest import no_blocking_calls
from tests.objectstore import S3Server, aws_environment, s3_config, s3_server

__all__ = ["aws_environment", "s3_server"]  # fixtures, used by name

REPO_ROOT = Path(__file__).resolve().parent.parent
SHORT = {"threshold_seconds": 1.0, "max_chunk_seconds": 1.0, "quiet_search_seconds": 0.3}

# (container, subtype, extension, numpy dtype the samples compare in); lossless first.
LOSSLESS = [
    ("WAV", "PCM_16", ".wav", "int16"),
    ("WAV", "PCM_24", ".wav", "int32"),
    ("WAV", "PCM_32", ".wav", "int32"),
    ("WAV", "PCM_U8", ".wav", "int16"),
    ("WAV", "FLOAT", ".wav", "float32"),
    ("WAV", "DOUBLE", ".wav", "float64"),
    ("WAV", "ULAW", ".wav", "int16"),
    ("FLAC", "PCM_16", ".flac", "int16"),
    ("FLAC", "PCM_24", ".flac", "int32"),
    ("FLAC", "PCM_S8", ".flac", "int16"),
]
LOSSY = [
    ("OGG", "VORBIS", ".ogg"),
    ("OGG", "OPUS", ".opus"),
    ("MP3", "MPEG_LAYER_III", ".mp3"),
]


def speech_like(seconds: float, rate: int, channels: int = 1, seed: int = 0) -> np.ndarray:
    """Float noise in bursts with short pauses (values within +-0.5)."""
    rng = np.random.default_rng(seed)
    frames = int(seconds * rate)
    envelope = (np.sin(np.arange(frames) * (2 * np.pi * 0.9 / rate)) ** 2)[:, np.newaxis]
    return (rng.uniform(-0.5, 0.5, (frames, channels)) * envelope).astype(np.float32)


def encode(samples: np.ndarray, rate: int, container: str, subtype: str) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format=container, subtype=subtype)
    return buffer.getvalue()


def decode(data: bytes, dtype: str = "float32") -> tuple[np.ndarray, int]:
    samples, rate = soundfile.read(io.BytesIO(data), dtype=dtype, always_2d=True)
    return samples, rate


def config(tmp_path: Path, **sections: dict[str, Any]) -> Config:
    data: dict[str, Any] = {
        "audio": {"root": str(tmp_path), "max_file_bytes": "1GiB"},
        "chunking": {"enabled": True, **SHORT},
    }
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    return Config.model_validate(data)


MADE: list[Chunker | RewritePipeline] = []


@pytest.fixture(autouse=True)
def close_what_was_made() -> Iterator[None]:
    yield
    while MADE:
        made = MADE.pop()
        if isinstance(made, Chunker):
            made.close()
        else:
            made.resolver.close()


async def chunker_of(cfg: Config) -> tuple[Chunker, RewritePipeline]:
    pipeline = await build_pipeline(cfg, GatewayMetrics())
    chunker = Chunker(cfg.chunking, pipeline.store, cfg.audio)
    MADE.extend((pipeline, chunker))
    return chunker, pipeline


async def path_clip(pipeline: RewritePipeline, given: str) -> PathClip:
    sidechannel = DEFAULT_KEYS.read({"metadata": {"audio_path": given}}, 16, 2**40)
    assert sidechannel is not None
    refs = sidechannel.clips
    source = (await pipeline.sources(refs, presigned=pipeline.presigned))[0]  # type: ignore[arg-type]
    return PathClip(source, await pipeline.store.get(source), await source.upstream_url())


def inline_clip(data: bytes, mime: str) -> InlineAudio:
    uri = f"data:{mime};base64,{base64.b64encode(data).decode()}"
    return parse_data_uri(uri, "metadata.audio_data", 2**40)


def joined(pieces: ClipPieces, dtype: str) -> np.ndarray:
    return np.concatenate([decode(piece.data, dtype)[0] for piece in pieces.pieces])


def assert_well_formed(pieces: ClipPieces, rate: int, channels: int) -> None:
    assert [piece.index for piece in pieces.pieces] == list(range(len(pieces.pieces)))
    assert pieces.pieces[0].start_seconds == 0
    assert pieces.pieces[-1].end_seconds == pytest.approx(pieces.duration_seconds)
    for before, after in zip(pieces.pieces, pieces.pieces[1:], strict=False):
        assert before.end_frame == after.start_frame
    for piece in pieces.pieces:
        info = soundfile.info(io.BytesIO(piece.data))
        assert (piece.mime, info.format, info.samplerate, info.channels) == (
            "audio/wav",
            "WAV",
            rate,
            channels,
        )
        assert (
            info.frames == piece.end_frame - piece.start_frame <= rate * SHORT["max_chunk_seconds"]
        )
        assert piece.end_seconds - piece.start_seconds == pytest.approx(info.frames / rate)


# --- formats -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("container", "subtype", "extension", "dtype"), LOSSLESS)
async def test_lossless_pieces_concatenate_to_the_clip_exactly(
    tmp_path: Path, container: str, subtype: str, extension: str, dtype: str
) -> None:
    source = encode(speech_like(3.3, 8000, channels=2), 8000, container, subtype)
    (tmp_path / f"clip{extension}").write_bytes(source)
    chunker, pipeline = await chunker_of(config(tmp_path))
    pieces = await chunker.split(await path_clip(pipeline, f"clip{extension}"))
    assert pieces is not None and len(pieces.pieces) == 4
    assert_well_formed(pieces, 8000, 2)
    written = soundfile.info(io.BytesIO(pieces.pieces[0].data)).subtype
    assert written == ("PCM_U8" if subtype == "PCM_S8" else subtype)  # same sample format
    assert np.array_equal(joined(pieces, dtype), decode(source, dtype)[0])


@pytest.mark.parametrize(("container", "subtype", "extension"), LOSSY)
async def test_lossy_clips_are_measured_by_decoding_and_cut_as_16_bit_wav(
    tmp_path: Path, container: str, subtype: str, extension: str
) -> None:
    rate = 48000 if subtype == "OPUS" else 16000
    source = encode(speech_like(2.6, rate) * 1.9, rate, container, subtype)  # overshoots 1.0
    (tmp_path / f"clip{extension}").write_bytes(source)
    chunker, pipeline = await chunker_of(config(tmp_path))
    clip = await path_clip(pipeline, f"clip{extension}")
    assert clip.audio.header is None  # no length in the header: decoding measures it
    pieces = await chunker.split(clip)
    assert pieces is not None
    assert_well_formed(pieces, rate, 1)
    assert {soundfile.info(io.BytesIO(p.data)).subtype for p in pieces.pieces} == {"PCM_16"}
    reference = np.clip(decode(source)[0], -1.0, 1.0)
    pieces_samples = joined(pieces, "float32")
    assert len(pieces_samples) == len(reference)  # nothing lost or repeated at the cuts
    assert np.abs(pieces_samples - reference).max() <= 1.5 / 32768  # 16-bit rounding only


# --- where the bytes come from ------------------------------------------------------------------


async def test_inline_audio_is_cut_from_its_base64(tmp_path: Path) -> None:
    source = encode(speech_like(2.5, 16000), 16000, "FLAC", "PCM_16")
    chunker, _ = await chunker_of(config(tmp_path))
    pieces = await chunker.split(inline_clip(source, "audio/flac"))
    assert pieces is not None and len(pieces.pieces) == 3
    assert np.array_equal(joined(pieces, "int16"), decode(source, "int16")[0])


@pytest.mark.parametrize(
    ("sections", "reads"),
    [
        ({}, "base64"),
        ({"cache": {"max_bytes": 0}}, "base64"),
        ({"cache": {"max_item_bytes": 1024}}, "descriptor"),  # streamed: not in memory
        ({"splice": {"mode": "file_url"}}, "descriptor"),  # only sniffed: no bytes held
    ],
    ids=["cached", "uncached", "streamed", "file-url"],
)
async def test_a_file_is_cut_however_the_store_holds_it(
    tmp_path: Path, sections: dict[str, Any], reads: str
) -> None:
    source = encode(speech_like(2.5, 16000), 16000, "WAV", "PCM_16")
    (tmp_path / "clip.wav").write_bytes(source)
    chunker, pipeline = await chunker_of(config(tmp_path, **sections))
    clip = await path_clip(pipeline, "clip.wav")
    holds_base64 = isinstance(clip.audio, EncodedAudio) and bool(clip.audio.pieces)
    assert holds_base64 == (reads == "base64")
    try:
        with no_blocking_calls():  # every read and decode off the loop
            pieces = await chunker.split(clip)
    finally:
        if isinstance(clip.audio, StreamedAudio):
            await clip.audio.aclose()
    assert pieces is not None
    assert np.array_equal(joined(pieces, "int16"), decode(source, "int16")[0])


@pytest.mark.usefixtures("aws_environment")
@pytest.mark.parametrize("remote", ["data_uri", "presigned_url"])
async def test_an_object_is_cut_from_its_cached_bytes_or_a_spooled_get(
    tmp_path: Path, s3_server: S3Server, remote: str
) -> None:
    bucket = s3_server.bucket()
    source = s3_server.put(
        bucket, "data/clip.flac", encode(speech_like(2.5, 16000), 16000, "FLAC", "PCM_24")
    )
    cfg = config(
        tmp_path,
        audio={"root": f"s3://{bucket}/data/"},
        splice={"remote": remote},
        storage={"s3": s3_config(s3_server)},
    )
    chunker, pipeline = await chunker_of(cfg)
    clip = await path_clip(pipeline, "clip.flac")
    assert bool(clip.url) == (remote == "presigned_url")
    pieces = await chunker.split(clip)
    assert pieces is not None
    assert np.array_equal(joined(pieces, "int32"), decode(source, "int32")[0])


# --- not split ----------------------------------------------------------------------------------


async def test_a_short_clip_with_a_length_header_is_not_split_nor_decoded(tmp_path: Path) -> None:
    (tmp_path / "clip.wav").write_bytes(encode(speech_like(1.0, 16000), 16000, "WAV", "PCM_16"))
    chunker, pipeline = await chunker_of(config(tmp_path))
    clip = await path_clip(pipeline, "clip.wav")
    entries = pipeline.store.entries
    assert await chunker.split(clip) is None
    assert pipeline.store.entries == entries  # answered from the header: nothing cut or kept


async def test_a_short_mp3_is_measured_once_and_not_split(tmp_path: Path) -> None:
    clip = inline_clip(
        encode(speech_like(0.9, 16000), 16000, "MP3", "MPEG_LAYER_III"), "audio/mpeg"
    )
    chunker, pipeline = await chunker_of(config(tmp_path))
    assert await chunker.split(clip) is None
    entries = pipeline.store.entries
    assert entries == 1  # its outline: the next seeds are not decoded again
    assert await chunker.split(clip) is None
    assert pipeline.store.entries == entries


# --- single flight and cache ----------------------------------------------------------------------


@pytest.mark.parametrize("cache", [{}, {"max_bytes": 0}], ids=["cached", "uncached"])
async def test_concurrent_seeds_of_one_clip_share_one_cut(
    tmp_path: Path, cache: dict[str, Any]
) -> None:
    (tmp_path / "clip.wav").write_bytes(encode(speech_like(3.5, 16000), 16000, "WAV", "PCM_16"))
    chunker, pipeline = await chunker_of(config(tmp_path, cache=cache))
    clips = [await path_clip(pipeline, "clip.wav") for _ in range(16)]
    results = await asyncio.gather(*map(chunker.split, clips))
    assert all(result is results[0] for result in results)  # one cut's very object
    again = await chunker.split(clips[0])
    assert again == results[0]
    assert (again is results[0]) is False  # assembled from the store, or cut anew
    if not cache:
        assert pipeline.store.entries == 1 + 1 + len(again.pieces)  # clip, outline, pieces


async def test_a_rewritten_file_is_cut_again(tmp_path: Path) -> None:
    path = tmp_path / "clip.wav"
    path.write_bytes(encode(speech_like(2.5, 16000, seed=1), 16000, "WAV", "PCM_16"))
    chunker, pipeline = await chunker_of(config(tmp_path))
    first = await chunker.split(await path_clip(pipeline, "clip.wav"))
    replacement = encode(speech_like(3.5, 16000, seed=2), 16000, "WAV", "PCM_16")
    path.write_bytes(replacement)
    os.utime(path, ns=(1, 1))
    second = await chunker.split(await path_clip(pipeline, "clip.wav"))
    assert first is not None and second is not None and len(second.pieces) == 4
    assert np.array_equal(joined(second, "int16"), decode(replacement, "int16")[0])


async def test_settings_that_move_the_cuts_are_part_of_the_key(tmp_path: Path) -> None:
    (tmp_path / "clip.wav").write_bytes(encode(speech_like(3.5, 16000), 16000, "WAV", "PCM_16"))
    quiet, pipeline = await chunker_of(config(tmp_path))
    fixed = Chunker(
        config(tmp_path, chunking={"split": "fixed"}).chunking,
        pipeline.store,
        config(tmp_path).audio,
    )
    MADE.append(fixed)
    clip = await path_clip(pipeline, "clip.wav")
    quiet_pieces, fixed_pieces = await quiet.split(clip), await fixed.split(clip)
    assert quiet_pieces is not None and fixed_pieces is not None
    assert [p.end_frame for p in fixed_pieces.pieces] == [16000, 32000, 48000, 56000]
    assert [p.end_frame for p in quiet_pieces.pieces] != [16000, 32000, 48000, 56000]


# --- refusals -------------------------------------------------------------------------------------


async def test_audio_that_cannot_be_decoded_is_400_cannot_chunk_audio(tmp_path: Path) -> None:
    m4a = b"\x00\x00\x00\x18ftypM4A \x00\x00\x02\x00" + os.urandom(4000)
    chunker, _ = await chunker_of(config(tmp_path))
    with pytest.raises(GatewayError) as raised:
        await chunker.split(inline_clip(m4a, "audio/mp4"))
    error = raised.value
    assert (error.status, error.code, error.param) == (
        400,
        "cannot_chunk_audio",
        "metadata.audio_data",
    )
    assert "metadata.audio_data" in error.message and "audio/mp4" in error.message


async def test_each_seed_is_refused_under_its_own_key(tmp_path: Path) -> None:
    (tmp_path / "clip.mp3").write_bytes(b"ID3\x03\x00\x00\x00\x00\x00\x00" + os.urandom(9000))
    chunker, pipeline = await chunker_of(config(tmp_path))
    one = await path_clip(pipeline, "clip.mp3")
    sidechannel = DEFAULT_KEYS.read({"metadata": {"audio_paths": ["clip.mp3"]}}, 16, 2**40)
    assert sidechannel is not None
    source = (await pipeline.sources(sidechannel.clips, presigned=False))[0]  # type: ignore[arg-type]
    listed = PathClip(source, await pipeline.store.get(source))
    results = await asyncio.gather(
        chunker.split(one), chunker.split(listed), return_exceptions=True
    )
    assert [(r.code, r.param) for r in results] == [  # type: ignore[union-attr]
        ("cannot_chunk_audio", "metadata.audio_path"),
        ("cannot_chunk_audio", "metadata.audio_paths"),
    ]
    assert "metadata.audio_paths[0]" in results[1].message  # type: ignore[union-attr]


async def test_a_decoded_length_over_the_limit_is_413(tmp_path: Path) -> None:
    mp3 = encode(speech_like(4.0, 16000), 16000, "MP3", "MPEG_LAYER_III")
    chunker, _ = await chunker_of(config(tmp_path, audio={"max_duration_seconds": 3.0}))
    with pytest.raises(GatewayError) as raised:
        await chunker.split(inline_clip(mp3, "audio/mpeg"))
    error = raised.value
    assert (error.status, error.code, error.param) == (413, "audio_too_long", "metadata.audio_data")
    assert "audio.max_duration_seconds" in error.message


async def test_decoded_bytes_over_the_limit_is_413(tmp_path: Path) -> None:
    ogg = encode(speech_like(3.0, 16000, channels=2), 16000, "OGG", "VORBIS")
    chunker, _ = await chunker_of(config(tmp_path, audio={"max_decode_bytes": 200_000}))
    with pytest.raises(GatewayError) as raised:
        await chunker.split(inline_clip(ogg, "audio/ogg"))
    assert (raised.value.status, raised.value.code) == (413, "audio_decode_too_large")


# --- properties -----------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    form=st.sampled_from(LOSSLESS),
    rate=st.sampled_from([8000, 11025, 16000, 22050, 44100]),
    channels=st.integers(1, 3),
    seconds=st.floats(0.01, 3.0),
    seed=st.integers(0, 1000),
    piece_bytes=st.integers(1, 40_000),
    split=st.sampled_from(["quiet", "fixed"]),
    min_tail=st.floats(0.0, 0.4),
)
def test_pieces_of_any_lossless_clip_concatenate_to_it_exactly(
    form: tuple[str, str, str, str],
    rate: int,
    channels: int,
    seconds: float,
    seed: int,
    piece_bytes: int,
    split: str,
    min_tail: float,
) -> None:
    """Through the base64 reader too: the clip's base64 in random multiple-of-3 pieces."""
    container, subtype, _, dtype = form
    data = encode(speech_like(seconds, rate, channels, seed), rate, container, subtype)
    step = piece_bytes * 3
    base64_pieces = [base64.b64encode(data[at : at + step]) for at in range(0, len(data), step)]
    rules = {"threshold_seconds": 0.5, "max_chunk_seconds": 0.5, "quiet_search_seconds": 0.2}
    settings_ = Config.model_validate(
        {"chunking": {**rules, "split": split, "min_tail_seconds": min_tail}}
    ).chunking
    cut = cut_clip(Base64File(base64_pieces), settings_, max_seconds=60, max_decode_bytes=2**30)
    reference = decode(data, dtype)[0]
    assert cut.frames == len(reference)
    if cut.pieces:
        samples = np.concatenate([decode(piece.data, dtype)[0] for piece in cut.pieces])
        assert np.array_equal(samples, reference)
    else:
        assert cut.frames <= 0.5 * rate


# --- memory ---------------------------------------------------------------------------------------


@pytest.mark.timeout(600)
def test_a_60_minute_clip_is_cut_in_bounded_memory(tmp_path: Path) -> None:
    """Peak RSS growth while splitting and producing every piece (4 at a time, as the fan-out
    does), measured in a fresh process (`bench.chunker`): the pieces of a clip this long are
    over `cache.max_item_bytes`, so they are made on demand and never all held. No timing."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.chunker",
            "--measure",
            "--minutes",
            "60",
            "--format",
            "WAV",
            "--workdir",
            str(tmp_path),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=540,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["audio_seconds"] == 3600
    assert 120 <= figures["pieces"] <= 3600 // 25  # pieces of 25-30 s (quiet cuts)
    assert figures["on_demand"] and figures["pieces_held_mib"] == 0, figures
    assert figures["peak_rss_growth_mib"] <= 64, figures


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(min_size=0, max_size=600),
    piece_quanta=st.integers(1, 40),
    lead=st.text(alphabet="data:;,/x", max_size=12),
    reads=st.lists(st.tuples(st.integers(0, 700), st.integers(0, 300)), max_size=12),
)
def test_the_base64_file_reads_like_the_bytes_it_encodes(
    data: bytes, piece_quanta: int, lead: str, reads: list[tuple[int, int]]
) -> None:
    step = piece_quanta * 3
    pieces: list[bytes | str] = [
        base64.b64encode(data[at : at + step]) for at in range(0, len(data), step)
    ] or [b""]
    pieces[0] = lead + pieces[0].decode()  # type: ignore[union-attr]
    file, reference = Base64File(pieces, skip=len(lead)), io.BytesIO(data)
    assert file.seek(0, io.SEEK_END) == len(data)
    for offset, count in reads:
        assert file.seek(offset) == reference.seek(offset)
        assert file.read(count) == reference.read(count)
        assert file.tell() == reference.tell()


async def test_a_file_changed_before_its_cut_is_409(tmp_path: Path) -> None:
    """Read through its descriptor, a file is checked to be the one the request saw."""
    path = tmp_path / "clip.wav"
    path.write_bytes(encode(speech_like(2.5, 16000), 16000, "WAV", "PCM_16"))
    chunker, pipeline = await chunker_of(config(tmp_path, splice={"mode": "file_url"}))
    clip = await path_clip(pipeline, "clip.wav")
    path.write_bytes(encode(speech_like(3.5, 16000), 16000, "WAV", "PCM_16"))
    with pytest.raises(GatewayError) as raised:
        await chunker.split(clip)
    assert (raised.value.status, raised.value.code) == (409, "audio_file_changed")


async def test_pieces_over_the_item_limit_are_cut_on_demand_and_not_kept(tmp_path: Path) -> None:
    (tmp_path / "clip.wav").write_bytes(encode(speech_like(3.5, 16000), 16000, "WAV", "PCM_16"))
    cached, cached_pipeline = await chunker_of(config(tmp_path))
    whole = await cached.split(await path_clip(cached_pipeline, "clip.wav"))
    chunker, pipeline = await chunker_of(config(tmp_path, cache={"max_item_bytes": 20_000}))
    clip = await path_clip(pipeline, "clip.wav")  # 32 kB pieces: over the limit
    assert isinstance(clip.audio, StreamedAudio)  # so is the clip
    await clip.audio.aclose()
    first = await chunker.split(clip)
    assert whole is not None and first is not None and pipeline.store.entries == 0
    assert all(isinstance(piece, OnDemandPiece) for piece in first.pieces)
    assert first.close is not None and whole.close is None
    # read back in any order, each piece is the cached cut's, byte for byte
    for piece in reversed(first.pieces):
        assert piece.data == whole.pieces[piece.index].data
    assert_well_formed(first, 16000, 1)
    second = await chunker.split(clip)  # per request: its own cut, its own file
    assert second is not None and second.close is not None
    assert [p.data for p in second.pieces] == [p.data for p in first.pieces]
    first.close()
    second.close()


@pytest.mark.parametrize(("container", "subtype", "extension", "dtype"), LOSSLESS)
async def test_on_demand_pieces_concatenate_to_the_clip_exactly(
    tmp_path: Path, container: str, subtype: str, extension: str, dtype: str
) -> None:
    source = encode(speech_like(3.3, 8000, channels=2), 8000, container, subtype)
    (tmp_path / f"clip{extension}").write_bytes(source)
    for cache in ({"max_item_bytes": 1000}, {"max_item_bytes": 1000, "max_bytes": "64MiB"}):
        chunker, pipeline = await chunker_of(config(tmp_path, cache=cache))
        clip = await path_clip(pipeline, f"clip{extension}")
        pieces = await chunker.split(clip)
        assert pieces is not None and pieces.close is not None and len(pieces.pieces) == 4
        assert np.array_equal(joined(pieces, dtype), decode(source, dtype)[0])
        pieces.close()
        if isinstance(clip.audio, StreamedAudio):
            await clip.audio.aclose()


async def test_inline_audio_is_cut_on_demand_from_its_base64(tmp_path: Path) -> None:
    source = encode(speech_like(2.5, 16000), 16000, "FLAC", "PCM_16")
    chunker, _ = await chunker_of(config(tmp_path, cache={"max_item_bytes": 1000}))
    pieces = await chunker.split(inline_clip(source, "audio/flac"))
    assert pieces is not None and pieces.close is not None
    assert np.array_equal(joined(pieces, "int16"), decode(source, "int16")[0])
    pieces.close()


async def test_a_refused_on_demand_request_releases_the_clip_file(tmp_path: Path) -> None:
    """Refused after the cut (`chunking_unsupported`): the clip's file is closed at once."""
    (tmp_path / "clip.wav").write_bytes(encode(speech_like(3.5, 16000), 16000, "WAV", "PCM_16"))
    chunker, pipeline = await chunker_of(config(tmp_path, cache={"max_item_bytes": 20_000}))
    opened = len(os.listdir("/proc/self/fd"))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2}
    body["metadata"] = {"audio_path": "clip.wav"}
    shape = CHAT_AUDIO_URL
    pipeline.chunker = chunker
    with pytest.raises(GatewayError) as refused:
        await pipeline.rewrite(json.dumps(body).encode(), shape, split=True)
    assert refused.value.code == "chunking_unsupported"
    assert len(os.listdir("/proc/self/fd")) == opened
