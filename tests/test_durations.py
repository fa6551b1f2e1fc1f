"""Durations read from WAV and FLAC headers, checked against the files' real lengths."""

from __future__ import annotations

import io
import struct
import wave
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.audio.durations import read_header
from gateway.audio.samples import tone_pcm, write_wav
from tests.conftest import write_encoded_tone


def wav_bytes(frames: int, rate: int, channels: int, width: int = 2) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as clip:
        clip.setnchannels(channels)
        clip.setsampwidth(width)
        clip.setframerate(rate)
        clip.writeframes(b"\x00" * frames * channels * width)
    return out.getvalue()


@settings(max_examples=60, deadline=None)
@given(
    frames=st.integers(0, 50_000),
    rate=st.sampled_from([8000, 16000, 22050, 44100, 48000]),
    channels=st.integers(1, 4),
    width=st.sampled_from([1, 2, 3, 4]),
)
def test_wav_header_gives_the_frames_written(frames: int, rate: int, channels: int, width: int):
    data = wav_bytes(frames, rate, channels, width)
    header = read_header(data[:4096], len(data))
    assert header is not None
    assert (header.frames, header.channels, header.sample_rate) == (frames, channels, rate)
    assert header.seconds == pytest.approx(frames / rate)


def test_wav_chunks_before_data_are_skipped():
    data = wav_bytes(1600, 16000, 1)
    # Put a LIST chunk (odd length, so padded) between fmt and data.
    fmt_end = 12 + 8 + 16
    extra = b"LIST" + struct.pack("<I", 5) + b"abcde" + b"\x00"
    patched = data[:fmt_end] + extra + data[fmt_end:]
    patched = patched[:4] + struct.pack("<I", len(patched) - 8) + patched[8:]
    header = read_header(patched, len(patched))
    assert header is not None and header.frames == 1600


def test_streamed_wav_size_placeholder_uses_the_file_size():
    data = bytearray(wav_bytes(3200, 16000, 1))
    data_at = data.index(b"data")
    data[data_at + 4 : data_at + 8] = struct.pack("<I", 0xFFFFFFFF)
    assert read_header(bytes(data), len(data)).frames == 3200  # type: ignore[union-attr]
    assert read_header(bytes(data)) is None  # size unknown and no file size: unknown


def test_truncated_wav_is_bounded_by_the_file_size():
    data = wav_bytes(16000, 16000, 1)
    cut = data[: 44 + 2000]
    assert read_header(cut, len(cut)).frames == 1000  # type: ignore[union-attr]


def test_eleven_minute_wav_reads_as_eleven_minutes(tmp_path: Path):
    path = write_wav(tmp_path / "long.wav", tone_pcm(660, 440.0))
    with open(path, "rb") as handle:
        header = read_header(handle.read(65536), path.stat().st_size)
    assert header is not None and header.seconds == pytest.approx(660.0)


@pytest.mark.parametrize("seconds", [0.25, 1.0, 3.5])
def test_flac_streaminfo_gives_the_duration(tmp_path: Path, seconds: float):
    path = write_encoded_tone(tmp_path / "t.flac", seconds, 440.0, "FLAC")
    header = read_header(path.read_bytes()[:65536])
    assert header is not None
    assert header.sample_rate == 16000 and header.channels == 1
    assert header.seconds == pytest.approx(seconds)


def test_formats_without_a_length_in_the_header_are_unknown(tmp_path: Path):
    ogg = write_encoded_tone(tmp_path / "t.ogg", 1.0, 440.0, "OGG")
    assert read_header(ogg.read_bytes()[:65536]) is None
    assert read_header(b"ID3\x04\x00" + b"\x00" * 100) is None
    assert read_header(b"") is None


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=256))
def test_garbage_never_raises(blob: bytes):
    for prefix in (b"", b"RIFF\x00\x00\x00\x00WAVE", b"fLaC"):
        header = read_header(prefix + blob)
        if header is not None:
            assert header.frames >= 0 and header.sample_rate > 0 and header.channels > 0


def test_check_duration_names_the_clip_and_the_limit():
    from gateway.audio.durations import AudioHeader, check_duration
    from gateway.errors import PayloadTooLarge

    check_duration(None, 1.0, label="x", given="a.ogg", param="metadata.audio_path")
    check_duration(AudioHeader(16000, 1, 16000), 1.0, label="x", given="a.wav", param="p")
    with pytest.raises(PayloadTooLarge) as caught:
        check_duration(
            AudioHeader(16001, 1, 16000),
            1.0,
            label="metadata.audio_paths[1]",
            given="b.wav",
            param="metadata.audio_paths",
        )
    assert caught.value.code == "audio_too_long" and caught.value.status == 413
    assert "metadata.audio_paths[1]" in caught.value.message and "'b.wav'" in caught.value.message
