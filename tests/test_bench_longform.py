"""bench/longform cannot rot: its three modes on two short clips, real subprocesses, checked
answers (the bench asserts every frame was heard). Nothing here asserts a timing."""

from __future__ import annotations

import json
from pathlib import Path

from bench.longform.run import main


def test_longform_on_two_short_clips(tmp_path: Path) -> None:
    args = ["--clips", "2", "--min-minutes", "0.6", "--max-minutes", "1.2"]
    main([*args, "--delay-per-audio-second", "0", "--results-dir", str(tmp_path / "new")])
    (saved,) = (tmp_path / "new").glob("*-longform.json")
    result = json.loads(saved.read_text())
    rows = {row["mode"]: row for row in result["rows"]}
    assert set(rows) == {"chunked-4", "sequential", "unsplit"}
    assert rows["chunked-4"]["audio_heard"] == rows["sequential"]["audio_heard"] == 1.0
    assert rows["unsplit"]["audio_heard"] < 1.0  # a 30 s model keeps 30 s of each clip
    assert rows["chunked-4"]["longest_piece_seconds"] <= 30.0
    assert (
        (tmp_path / "new" / saved.name.replace(".json", ".md"))
        .read_text()
        .startswith("# Long audio")
    )
