"""The README and the documentation site hold to their rules: a short README, no project history
in user docs, every internal link and anchor resolving, every page in the nav.

(`mkdocs build --strict` in .ci/run checks the site's links too; these tests also cover the
README, which is not part of the site, and run without mkdocs installed.)"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

REPO_ROOT = Path(__file__).resolve().parent.parent
README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
MKDOCS = REPO_ROOT / "mkdocs.yml"
README_MAX_LINES = 250

# Project history has no place in user docs: issue numbers, commit ids, "this round".
HISTORY_PATTERNS = {
    "an issue number": re.compile(r"\b(?:issues?|PR|pull request)\s*#?\d+", re.IGNORECASE),
    "a #N reference": re.compile(r"(?<![\w/&])#\d+\b"),
    # 7-40 hex digits with at least one digit and one letter, not part of a longer run (a sha256)
    "a commit id": re.compile(
        r"(?<![0-9A-Za-z])(?=[0-9a-f]{0,39}[0-9])(?=[0-9a-f]{0,39}[a-f])[0-9a-f]{7,40}(?![0-9A-Za-z])"
    ),
    "a development round": re.compile(r"\b(?:this|last|previous|next|earlier) round\b", re.I),
}
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def user_docs() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) outside fenced code blocks, inline code removed."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, re.sub(r"`[^`]*`", "", line)


def slugify(heading: str) -> str:
    """The anchor Python-Markdown's toc extension (MkDocs) gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.replace("`", "").replace("**", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (a repeated heading gets `_1`, `_2`, ...)."""
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (heading := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            slug = slugify(heading.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}_{count}")
    return found


def broken_links(path: Path) -> list[str]:
    problems = []
    for number, line in prose_lines(path.read_text()):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(REPO_ROOT)}:{number}: {target}"
            if not linked.is_file():
                problems.append(f"{where} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                problems.append(f"{where} (no such heading)")
    return problems


def nav_files(entries: Any) -> Iterator[str]:
    if isinstance(entries, str):
        yield entries
    elif isinstance(entries, list):
        for entry in entries:
            yield from nav_files(entry)
    elif isinstance(entries, dict):
        for value in entries.values():
            yield from nav_files(value)


class TestReadme:
    def test_is_short(self) -> None:
        lines = len(README.read_text().splitlines())
        assert lines <= README_MAX_LINES, (
            f"README.md has {lines} lines; the docs/ site holds the rest"
        )

    @pytest.mark.parametrize("command", ["pip install .", "audio-gateway demo", "python -m pytest"])
    def test_names_the_commands(self, command: str) -> None:
        assert command in README.read_text()

    def test_links_into_every_guide_and_reference_page(self) -> None:
        text = README.read_text()
        for page in sorted((DOCS / "guides").glob("*.md")) + sorted(
            (DOCS / "reference").glob("*.md")
        ):
            assert f"({page.relative_to(REPO_ROOT)})" in text, page.name


@pytest.mark.parametrize("path", user_docs(), ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_no_project_history(path: Path) -> None:
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        for what, pattern in HISTORY_PATTERNS.items():
            if match := pattern.search(line):
                found.append(f"line {number}: {what}: {match.group(0)!r}")
    assert not found, found


@pytest.mark.parametrize("path", user_docs(), ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_internal_links_resolve(path: Path) -> None:
    assert broken_links(path) == []


class TestNav:
    def config(self) -> dict[str, Any]:
        loaded: dict[str, Any] = yaml.safe_load(MKDOCS.read_text())
        return loaded

    def test_every_nav_entry_exists(self) -> None:
        missing = [name for name in nav_files(self.config()["nav"]) if not (DOCS / name).is_file()]
        assert missing == []

    def test_every_page_is_in_the_nav(self) -> None:
        listed = set(nav_files(self.config()["nav"]))
        pages = {str(page.relative_to(DOCS)) for page in DOCS.rglob("*.md")}
        assert pages - listed == set(), "add these pages to mkdocs.yml's nav"


class TestCheckers:
    """The checkers above catch what they are for (each could otherwise pass on anything)."""

    @pytest.mark.parametrize(
        "line",
        ["fixed in issue 17", "see #42", "as of commit 461df82", "this round's hot path"],
    )
    def test_history_is_found(self, line: str) -> None:
        assert any(pattern.search(line) for pattern in HISTORY_PATTERNS.values())

    @pytest.mark.parametrize(
        "line",
        [
            "a known issue with vLLM",
            "`41f2631d3580b272355b000991dbe51b7147638b6275a301d5d5a1a6cfc1cff4.wav`",
            "two rounds of 4 pieces",
            "[Probes](deploy.md#probes)",
            "decoded 1.5 s; deadbeef",
        ],
    )
    def test_plain_text_is_not_history(self, line: str) -> None:
        assert not any(pattern.search(line) for pattern in HISTORY_PATTERNS.values())

    def test_a_broken_link_and_anchor_are_found(self, tmp_path: Path) -> None:
        page = REPO_ROOT / "docs" / "guides" / "migrate.md"
        probe = page.parent / "_probe_links.md"
        probe.write_text("[a](nope.md) [b](migrate.md#no-such) [c](migrate.md#how-fast)\n")
        try:
            problems = broken_links(probe)
        finally:
            probe.unlink()
        assert len(problems) == 2, problems

    @given(st.text(alphabet=st.characters(codec="ascii", categories=["L", "N", "Zs", "P"])))
    def test_slugs_are_anchor_safe(self, heading: str) -> None:
        assert re.fullmatch(r"[a-z0-9_-]*", slugify(heading))

    @pytest.mark.parametrize(
        ("heading", "slug"),
        [
            ("## `[storage.s3]`", "storages3"),
            ("## Sizing `reference_max_clips`", "sizing-reference_max_clips"),
            (
                "## `convert --inline`: paths back to inline audio",
                "convert-inline-paths-back-to-inline-audio",
            ),
            (
                "### HTTP/1.1 framing (RFC 9112), as nginx relays it",
                "http11-framing-rfc-9112-as-nginx-relays-it",
            ),
        ],
    )
    def test_slugs_match_mkdocs(self, heading: str, slug: str) -> None:
        assert slugify(heading.lstrip("# ")) == slug
