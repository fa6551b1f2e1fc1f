"""The Models guide's table is the built-in profiles (gateway/models/builtin.py), row for row,
and the guides that assume a model point to it."""

from __future__ import annotations

from pathlib import Path

from gateway.models.builtin import ARCHITECTURES, Architecture

REPO_ROOT = Path(__file__).resolve().parent.parent
GUIDE = REPO_ROOT / "docs" / "guides" / "models.md"
TRANSLATIONS = {
    "translates": "to any",
    "english": "into English",
    "transcribes": "transcribes",
    "none": "—",
    "unknown": "not known",
}


def yes(value: bool) -> str:
    return "yes" if value else "no"


def seconds(value: float | None, none: str) -> str:
    return none if value is None else f"{value:g} s"


def row(entry: Architecture) -> list[str]:
    p = entry.profile
    return [
        f"`{entry.architecture}`",
        entry.name,
        yes(p.chat),
        yes(p.transcriptions),
        TRANSLATIONS[p.translations],
        seconds(p.window_seconds, "—"),
        seconds(p.max_clip_seconds, "any"),
        "any" if p.clips_per_prompt is None else str(p.clips_per_prompt),
        f"{p.sample_rate / 1000:g} kHz, {'any' if p.accepts_stereo else 'mono'}",
        yes(p.accepts_uuid_only_parts),
        yes(entry.run_here),
    ]


def documented_rows() -> list[list[str]]:
    text = GUIDE.read_text()
    table = text.split("<!-- models table:", 1)[1].split("\n\n", 2)[1]
    lines = [line for line in table.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def test_the_table_is_the_built_in_profiles() -> None:
    assert documented_rows() == [row(entry) for entry in ARCHITECTURES]


def test_the_readme_and_the_guides_point_to_it() -> None:
    assert "docs/guides/models.md" in (REPO_ROOT / "README.md").read_text()
    for guide in ("repeated-clips", "long-audio", "normalize", "speech-to-text"):
        text = (REPO_ROOT / "docs" / "guides" / f"{guide}.md").read_text()
        assert "](models.md" in text, guide
