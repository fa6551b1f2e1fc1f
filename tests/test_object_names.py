"""Object names and prefixes (pure), the 3-byte aligner of object chunks, and the config keys
that name object roots: examples and hypothesis properties."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.audio.sources.objects import ThreeAligner
from gateway.config import ConfigError, validate_config
from gateway.errors import AudioOutsideRoots, InvalidRequest
from gateway.naming.object_names import (
    MalformedName,
    ObjectName,
    ObjectPolicy,
    check_key,
    parse_object_url,
    parse_prefix,
)
from gateway.naming.sidechannel import PathAudio

segment = st.text(
    st.characters(blacklist_characters="/\\\x00", blacklist_categories=("Cs",)), min_size=1
).filter(lambda s: s not in (".", ".."))
keys = st.lists(segment, min_size=1, max_size=5).map("/".join)


def ref(given: str) -> PathAudio:
    return PathAudio(given, "metadata.audio_path", "metadata.audio_path")


def policy(*prefixes: str, root: str | None = None) -> ObjectPolicy:
    return ObjectPolicy(
        parse_prefix(root) if root else None, tuple(parse_prefix(p) for p in prefixes)
    )


@given(keys)
def test_keys_in_normal_form_are_taken_as_they_are(key: str) -> None:
    assert check_key(key) == key
    assert parse_object_url(f"s3://audio-bucket/{key}") == ObjectName("audio-bucket", key)


@given(keys, keys, st.sampled_from(["", ".", ".."]))
def test_a_dot_dotdot_or_empty_segment_anywhere_is_refused(head: str, tail: str, bad: str) -> None:
    for key in (f"{bad}/{tail}", f"{head}/{bad}/{tail}", f"{head}/{bad}"):
        with pytest.raises(MalformedName):
            check_key(key)


@given(keys, keys)
def test_a_backslash_anywhere_is_refused(head: str, tail: str) -> None:
    with pytest.raises(MalformedName):
        check_key(f"{head}\\{tail}")


@given(keys, keys)
def test_containment_is_a_folder_prefix_of_the_same_bucket(prefix: str, key: str) -> None:
    allowed = parse_prefix(f"s3://audio-bucket/{prefix}")
    inside = ObjectName("audio-bucket", f"{prefix}/{key}")
    assert allowed.contains(inside)
    assert not allowed.contains(ObjectName("other-bucket", inside.key))
    assert not allowed.contains(ObjectName("audio-bucket", f"{prefix}x/{key}"))
    assert not allowed.contains(ObjectName("audio-bucket", prefix))  # the folder itself


def test_a_whole_bucket_may_be_allowed() -> None:
    assert parse_prefix("s3://audio-bucket").contains(ObjectName("audio-bucket", "a/b.wav"))
    assert parse_prefix("s3://audio-bucket/").prefix == ""


@given(keys)
def test_relative_keys_join_the_object_root_and_are_checked_like_urls(key: str) -> None:
    rooted = policy("s3://audio-bucket/corpus/", root="s3://audio-bucket/corpus/")
    assert rooted.resolve(ref(key)) == ObjectName("audio-bucket", f"corpus/{key}")
    with pytest.raises(InvalidRequest):
        rooted.resolve(ref(f"{key}/../x.wav"))


def test_only_object_references_are_claimed() -> None:
    local_root = policy("s3://audio-bucket/data/")
    assert local_root.claims(ref("s3://audio-bucket/data/a.wav"))
    assert local_root.claims(ref("gs://audio-bucket/data/a.wav"))  # claimed, to be refused
    assert not local_root.claims(ref("a.wav")) and not local_root.claims(ref("/x/a.wav"))
    object_root = policy(root="s3://audio-bucket/data/")
    assert object_root.claims(ref("a.wav")) and not object_root.claims(ref("/x/a.wav"))


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ("s3://audio-bucket/data/a.wav", None),
        ("s3://audio-bucket/data/sub/../a.wav", InvalidRequest),
        ("s3://audio-bucket/datax/a.wav", AudioOutsideRoots),
        ("s3://Audio-Bucket/data/a.wav", InvalidRequest),  # not a bucket name S3 allows
        ("s3://ab/data/a.wav", InvalidRequest),
        ("gs://audio-bucket/data/a.wav", InvalidRequest),
    ],
)
def test_resolve_examples(given: str, error: type[Exception] | None) -> None:
    allowed = policy("s3://audio-bucket/data/")
    if error is None:
        assert allowed.resolve(ref(given)).url == given
    else:
        with pytest.raises(error):
            allowed.resolve(ref(given))


@given(st.lists(st.binary(max_size=40), max_size=12))
def test_aligned_pieces_base64_encode_to_the_whole(chunks: list[bytes]) -> None:
    aligner = ThreeAligner()
    pieces = [bytes(p) for chunk in chunks for p in aligner.feed(chunk)] + [aligner.finish()]
    assert all(len(piece) % 3 == 0 for piece in pieces[:-1])
    whole = b"".join(chunks)
    assert b"".join(pieces) == whole
    assert b"".join(base64.b64encode(p) for p in pieces) == base64.b64encode(whole)


def test_config_takes_object_roots_and_refuses_malformed_ones() -> None:
    config = validate_config(
        {"audio": {"root": "s3://audio-bucket/corpus", "allowed_roots": ["/data", "s3://b2b/x/"]}}
    )
    assert config.audio.effective_roots() == ["/data"]
    assert [p.url for p in config.audio.object_roots()] == ["s3://b2b/x/"]
    assert config.audio.local_root() == "" and config.audio.object_root() is not None
    assert config.storage.s3.presign_seconds == 3600 and config.splice.remote == "data_uri"
    for bad in ("s3://audio-bucket/a/../b/", "s3://x/a/"):
        with pytest.raises(ConfigError, match=r"audio\.root"):
            validate_config({"audio": {"root": bad}})


def test_file_url_mode_needs_presigned_urls_for_objects() -> None:
    with pytest.raises(ConfigError, match="presigned_url"):
        validate_config({"audio": {"root": "s3://audio-bucket/a/"}, "splice": {"mode": "file_url"}})
    validate_config(
        {
            "audio": {"root": "s3://audio-bucket/a/"},
            "splice": {"mode": "file_url", "remote": "presigned_url"},
        }
    )
