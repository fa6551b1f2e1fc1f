"""The generated reference pages are what the code says now: each block of
docs/reference/{configuration,cli,metrics}.md is regenerated from the config models and
config.example.toml, the argument parser, and a running gateway's /gateway/metrics, and must
equal the committed page. After adding a key, flag or metric: `python -m docs.gen`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from docs import gen
from gateway.__main__ import build_parser
from gateway.config import Config

STALE = "stale: run `python -m docs.gen` and commit the pages"


def assert_current(name: str, block: str) -> None:
    page = gen.PAGES[name].read_text()
    assert gen.splice_block(page, name, block) == page, STALE


def test_configuration_reference_is_current() -> None:
    assert_current("config", gen.render_config())


def test_cli_reference_is_current() -> None:
    assert_current("cli", gen.render_cli())


async def test_metrics_reference_is_current(tmp_path: Path) -> None:
    exposition = await gen.scrape_gateway(str(tmp_path))
    assert "audio_gateway_requests" in exposition.text  # a real scrape, not an empty page
    assert_current("metrics", gen.render_metrics(exposition))


class TestCoverage:
    """What the generated pages hold, checked against the sources directly."""

    def test_every_config_key_has_a_row(self) -> None:
        page = gen.PAGES["config"].read_text()
        for section, model in gen.model_sections(Config):
            assert f"## `[{section}]`" in page
            for name, field in model.model_fields.items():
                if not gen.is_section(field):
                    assert re.search(rf"^\| `{name}` \|", page, re.MULTILINE), f"{section}.{name}"

    def test_every_flag_has_a_row(self) -> None:
        page = gen.PAGES["cli"].read_text()
        for name, _, parser in gen.subcommands(build_parser()):
            section = page.split(f"## `audio-gateway {name}`", 1)[1].split("\n## ", 1)[0]
            for action in parser._actions:
                for flag in action.option_strings:
                    if flag not in ("-h", "--help"):
                        assert f"`{flag}" in section, f"{name} {flag}"

    async def test_every_served_metric_has_a_row(self, tmp_path: Path) -> None:
        exposition = await gen.scrape_gateway(str(tmp_path))
        page = gen.PAGES["metrics"].read_text()
        served = set(re.findall(r"^# TYPE (\S+) ", exposition.text, re.MULTILINE))
        for name in served:
            if not name.endswith("_created"):
                assert re.search(rf"`{name}(_total)?`", page), name


class TestBlocks:
    MARKED = "intro\n{begin}\nold\n{end}\noutro\n"

    def page(self, name: str) -> str:
        return self.MARKED.format(begin=gen.begin_marker(name), end=gen.end_marker(name))

    @given(st.text())
    def test_splicing_keeps_the_prose_and_is_idempotent(self, block: str) -> None:
        once = gen.splice_block(self.page("x"), "x", block)
        assert once.startswith("intro\n") and once.endswith("\noutro\n")
        assert gen.splice_block(once, "x", block) == once

    def test_a_page_without_its_markers_is_refused(self) -> None:
        with pytest.raises(ValueError, match="marker"):
            gen.splice_block("no markers here", "x", "block")

    @given(st.text())
    def test_a_cell_is_one_line_without_a_bare_pipe(self, text: str) -> None:
        cell = gen.cell(text)
        assert "\n" not in cell and "\r" not in cell
        assert re.search(r"(?<!\\)\|", cell) is None


class TestExampleComments:
    def test_a_comment_and_its_continuation_lines(self) -> None:
        comments = gen.example_comments(
            '[a]\n# about a\nx = "#not a comment"   # the x\n'
            "                        # and more\ny = 1\n[a.b]\nz = 2  # zed\n"
        )
        assert comments.keys == {"a.x": "the x and more", "a.y": "", "a.b.z": "zed"}
        assert comments.sections == {"a": "about a", "a.b": ""}

    @given(st.text(alphabet="abc #'\"=", max_size=30))
    def test_a_hash_inside_quotes_never_starts_the_comment(self, value: str) -> None:
        quoted = '"' + value.replace('"', "") + '"'
        assert gen.trailing_comment(f"k = {quoted}") == ""
        assert gen.trailing_comment(f"k = {quoted}  # why") == "why"
