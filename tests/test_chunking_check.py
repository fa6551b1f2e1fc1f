"""`audio-gateway check` on long audio: with `[chunking]` on, the rows that would be split and
into how many pieces; with it off, the rows a model with a `threshold_seconds` window would
truncate. Lengths come from the headers (WAV, FLAC); other clips are counted apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.audio.samples import write_tone
from tests.conftest import write_encoded_tone
from tests.tools_helpers import run_json, run_tool, write_jsonl

CONFIG = """
[audio]
root = "{root}"
[chunking]
enabled = {enabled}
threshold_seconds = 2.0
max_chunk_seconds = 2.0
quiet_search_seconds = 0.5
split = "{split}"
"""


def chat(metadata: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "user", "content": "Transcribe."}],
        "metadata": metadata,
    }


@pytest.fixture
def rows(audio_dir: Path, tmp_path: Path) -> Path:
    write_tone(audio_dir / "long.wav", 5.5)  # 3 pieces (fixed), 3-4 (quiet: 1.5 s at least)
    write_encoded_tone(audio_dir / "long.flac", 4.5, 300.0, "FLAC")  # 3 pieces either way
    write_encoded_tone(audio_dir / "long.ogg", 5.0, 300.0, "OGG")  # length unknown
    return write_jsonl(
        tmp_path / "rows.jsonl",
        [
            chat({"audio_path": "a.wav"}),  # short
            chat({"audio_path": "long.wav"}),
            chat({"audio_path": "long.flac"}),
            chat({"audio_paths": ["a.wav", "long.wav"]}),  # several clips: never split
            chat({"audio_path": "long.ogg"}),
        ],
    )


def check(rows: Path, tmp_path: Path, audio_dir: Path, **values: str) -> dict[str, Any]:
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG.format(root=audio_dir, **values))
    code, summary = run_json("check", str(rows), "--config", str(config))
    assert code == 0, summary["errors"]
    long_audio: dict[str, Any] = summary["long_audio"]
    return long_audio


def test_with_chunking_off_the_rows_over_the_window_are_counted(
    rows: Path, tmp_path: Path, audio_dir: Path
) -> None:
    long_audio = check(rows, tmp_path, audio_dir, enabled="false", split="quiet")
    assert long_audio == {
        "chunking": False,
        "threshold_seconds": 2.0,
        "rows_over_threshold": 3,
        "rows_split": 0,
        "pieces": {"fewest": 0, "most": 0},
        "rows_split_if_long": 0,
    }


@pytest.mark.parametrize(("split", "most"), [("fixed", 6), ("quiet", 7)])
def test_with_chunking_on_the_split_rows_and_their_pieces_are_counted(
    rows: Path, tmp_path: Path, audio_dir: Path, split: str, most: int
) -> None:
    long_audio = check(rows, tmp_path, audio_dir, enabled="true", split=split)
    assert long_audio["rows_over_threshold"] == 3
    assert long_audio["rows_split"] == 2  # not the row with two clips
    assert long_audio["pieces"] == {"fewest": 6, "most": most}
    assert long_audio["rows_split_if_long"] == 1  # the Ogg clip: decoded by the server


def test_the_table_says_it(rows: Path, tmp_path: Path, audio_dir: Path) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG.format(root=audio_dir, enabled="true", split="quiet"))
    code, out, _ = run_tool("check", str(rows), "--config", str(config))
    assert code == 0
    assert (
        "long audio        3 row(s) with a clip over 2 s; 2 split into 6-7 pieces; 1 more if "
        in out
    )
