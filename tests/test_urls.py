"""The URL-to-path rules of content parts (`gateway.naming.urls`): examples, round trips, and
the property that matters: however a URL is spelled, the path policy never admits a file
outside the roots."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.audio.policy import PathPolicy
from gateway.audio.samples import write_tone
from gateway.errors import GatewayError
from gateway.naming.content_parts import PartRoots, part_clips
from gateway.naming.urls import MalformedFileURL, named_path

# --- examples -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("file:///data/a.wav", "/data/a.wav"),
        ("file://localhost/data/a.wav", "/data/a.wav"),
        ("file://LOCALHOST/data/a.wav", "/data/a.wav"),
        ("file:/data/a.wav", "/data/a.wav"),
        ("File:///data/a%20b.wav", "/data/a b.wav"),
        ("file:///data/%C3%A9.wav", "/data/é.wav"),
        ("file:///data/%2e%2e/etc/a.wav", "/data/../etc/a.wav"),  # the policy resolves ..
        ("file:///data/a%2Fb.wav", "/data/a/b.wav"),
        ("/data/a%20b.wav", "/data/a%20b.wav"),  # a bare path is taken as written
        ("librispeech/a.wav", "librispeech/a.wav"),
        ("clips/a:b.wav", "clips/a:b.wav"),  # a colon after a slash is no scheme
        ("s3://bucket/a.wav", "s3://bucket/a.wav"),
        ("S3://bucket/a.wav", "S3://bucket/a.wav"),
    ],
)
def test_what_a_url_names(url: str, path: str) -> None:
    assert named_path(url) == path


@pytest.mark.parametrize(
    "url",
    [
        "data:audio/wav;base64,UklGRg==",
        "http://example.com/a.wav",
        "https://example.com/a.wav",
        "ftp://example.com/a.wav",
        "gs://bucket/a.wav",
        "a:b.wav",
    ],
)
def test_urls_for_vllm_name_nothing(url: str) -> None:
    assert named_path(url) is None


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("file://server/a.wav", "host 'server'"),
        ("file://127.0.0.1/a.wav", "host '127.0.0.1'"),
        ("file:///a.wav?x=1", "query"),
        ("file:///a.wav#t=1", "fragment"),
        ("file:a.wav", "relative file URL"),
        ("file:", "relative file URL"),
        ("file://localhost", "no path"),
        ("file:///a%00.wav", "percent-encoded NUL"),
        ("file:///a\x00.wav", "NUL"),
        ("a\x00.wav", "NUL"),
    ],
)
def test_malformed_file_urls(url: str, reason: str) -> None:
    with pytest.raises(MalformedFileURL, match=reason):
        named_path(url)


# --- round trips ---------------------------------------------------------------------------------

ABSOLUTE = st.lists(
    st.text(st.characters(exclude_characters="\x00/", exclude_categories=["Cs"]), min_size=1),
    min_size=1,
).map(lambda segments: "/" + "/".join(segments))


@given(ABSOLUTE, st.sampled_from(["file://", "file://localhost", "file:"]))
def test_a_quoted_absolute_path_comes_back(path: str, lead: str) -> None:
    assert named_path(lead + quote(path)) == path


@given(st.text())
def test_what_comes_back_is_never_a_nul_nor_a_relative_file_path(url: str) -> None:
    try:
        path = named_path(url)
    except MalformedFileURL:
        return
    if path is None:
        return
    assert "\x00" not in path
    if url[:5].lower() == "file:":
        assert path.startswith("/")


# --- no spelling escapes the roots ---------------------------------------------------------------


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, PathPolicy]:
    """root/{inside.wav, sub/, up -> .., link.wav -> ../outside.wav}, and outside.wav by it."""
    base = tmp_path_factory.mktemp("urls")
    root = base / "audio"
    (root / "sub").mkdir(parents=True)
    write_tone(root / "inside.wav", 0.05, 440.0)
    write_tone(base / "outside.wav", 0.05, 440.0)
    (root / "up").symlink_to("..")
    (root / "link.wav").symlink_to(base / "outside.wav")
    return root, PathPolicy(str(root), [os.path.realpath(root)], 1 << 20)


SEGMENTS = st.sampled_from(
    ["..", ".", "%2e%2e", "%2E.", ".%2e", "", "sub", "up", "audio", "urls0", "x",
     "inside.wav", "outside.wav", "link.wav", "%2e%2e%2foutside.wav", "..%2f..", "%2F"]
)  # fmt: skip
LEADS = st.sampled_from(["file://", "file://localhost", "file:", "", "{base}"])


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=400)
@given(LEADS, st.lists(SEGMENTS, min_size=1, max_size=8), st.booleans())
def test_no_spelling_escapes_the_roots(
    tree: tuple[Path, PathPolicy], lead: str, segments: list[str], absolute: bool
) -> None:
    root, policy = tree
    lead = lead.format(base=quote(str(root.parent)))
    tail = "/".join(segments)
    url = f"{lead}/{tail}" if lead or absolute else tail
    roots = PartRoots(any_root=True, relative_root=True)
    part = {"type": "audio_url", "audio_url": {"url": url}}
    try:
        found = part_clips([{"role": "user", "content": [part]}], roots)
        if not found:
            return
        resolved = policy.resolve(found[0].ref)
    except GatewayError as error:
        assert error.status in (400, 403, 404)
        return
    real_root = os.path.realpath(root)
    assert resolved.real_path.startswith(real_root + os.sep), (url, resolved.real_path)
    assert Path(resolved.real_path).name == "inside.wav"


@pytest.mark.parametrize(
    ("spelling", "inside"),
    [
        ("file://{root}/sub/%2e%2e/inside.wav", True),
        ("file://localhost{root}/up/audio/inside.wav", True),
        ("{root}/./sub/../inside.wav", True),
        ("sub/%2e%2e/inside.wav", False),  # a relative path is not percent-decoded: no such file
        ("sub/../inside.wav", True),
        ("file://{root}/%2e%2e/outside.wav", False),
        ("file://{root}/up/outside.wav", False),
        ("file://{root}/link.wav", False),
        ("up/outside.wav", False),
    ],
)
def test_spellings_inside_resolve_and_outside_do_not(
    tree: tuple[Path, PathPolicy], spelling: str, inside: bool
) -> None:
    """The property above is not vacuous: these spellings do reach the files they name."""
    root, policy = tree
    url = spelling.format(root=quote(str(root)))
    part = {"type": "audio_url", "audio_url": url}
    found = part_clips([{"content": [part]}], PartRoots(any_root=True, relative_root=True))
    if inside:
        assert policy.resolve(found[0].ref).real_path == os.path.realpath(root / "inside.wav")
    else:
        with pytest.raises(GatewayError):
            policy.resolve(found[0].ref)
