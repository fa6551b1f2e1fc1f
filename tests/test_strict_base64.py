"""Strict base64, checked and hashed piece by piece (`gateway.naming.strict_base64`): the same
answer as decoding the whole text at once, wherever the pieces end; the sidechannel's check
hashes inline audio in the same walk, and the clip key and the uuid take that hash."""

from __future__ import annotations

import base64
import binascii
import hashlib

import pybase64
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.affinity import base64_digest, identity_digest, sha256_digest
from gateway.clips.loaded import clip_digest, content_sha256
from gateway.naming import strict_base64
from gateway.naming.sidechannel import DEFAULT_KEYS, InlineAudio, parse_data_uri
from gateway.naming.strict_base64 import is_strict_base64, strict_base64_sha256

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


def whole_sha256(text: str) -> str | None:
    """The answer of one strict decode of the whole text."""
    try:
        return hashlib.sha256(pybase64.b64decode(text, validate=True)).hexdigest()
    except (binascii.Error, ValueError):
        return None


near_base64 = st.one_of(
    st.binary(max_size=64).map(lambda data: base64.b64encode(data).decode()),
    st.text(alphabet=ALPHABET, max_size=64),
    st.tuples(st.binary(min_size=1, max_size=32), st.binary(min_size=1, max_size=32)).map(
        lambda pair: base64.b64encode(pair[0]).decode() + base64.b64encode(pair[1]).decode()
    ),  # padding mid-text, wherever it falls
)


@given(text=near_base64, chunk=st.sampled_from([4, 8, 12, 1024]))
def test_piece_by_piece_answers_as_the_whole_text_does(text: str, chunk: int) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(strict_base64, "DECODE_CHUNK_CHARS", chunk)
        expected = whole_sha256(text)
        assert strict_base64_sha256(text) == expected
        assert is_strict_base64(text) == (expected is not None)
        lead = "data:audio/wav;base64,"
        assert strict_base64_sha256(lead + text, len(lead)) == expected


@given(data=st.binary(min_size=1, max_size=256))
def test_the_sidechannel_check_hashes_inline_audio_once_for_key_and_uuid(data: bytes) -> None:
    uri = "data:audio/wav;base64," + base64.b64encode(data).decode()
    sha = hashlib.sha256(data).hexdigest()
    hashed = parse_data_uri(uri, "metadata.audio_data", 1 << 20, sha256=True)
    assert hashed.sha256 == sha
    assert parse_data_uri(uri, "metadata.audio_data", 1 << 20).sha256 is None
    plain = InlineAudio(hashed.uri, hashed.mime, hashed.payload_start, hashed.param)
    assert clip_digest(hashed) == clip_digest(plain) == base64_digest(uri, hashed.payload_start)
    assert clip_digest(hashed) == sha256_digest(sha)
    assert content_sha256(hashed) == content_sha256(plain) == sha


def test_the_hash_taken_by_the_check_is_the_one_used() -> None:
    """The key and the uuid reuse the check's hash: inline audio is not decoded again."""
    known = InlineAudio("data:audio/wav;base64,AAAA", "audio/wav", 22, "p", sha256="ab" * 32)
    assert clip_digest(known) == sha256_digest("ab" * 32)
    assert content_sha256(known) == "ab" * 32


def test_read_hashes_only_when_asked() -> None:
    body = {"metadata": {"audio_data": "data:audio/wav;base64,QUFB"}}
    hashed = DEFAULT_KEYS.read(body, 4, 1 << 20, sha256=True)
    plain = DEFAULT_KEYS.read(body, 4, 1 << 20)
    assert hashed is not None and plain is not None
    assert hashed.clips[0].sha256 == hashlib.sha256(b"AAA").hexdigest()  # type: ignore[union-attr]
    assert plain.clips[0].sha256 is None  # type: ignore[union-attr]
    for broken in ("QUF", "QQ==QUFB", "QU*B"):
        with pytest.raises(Exception, match="base64"):
            DEFAULT_KEYS.read(
                {"metadata": {"audio_data": "data:audio/wav;base64," + broken}}, 4, 99, sha256=True
            )
    assert base64_digest("QQ==QUFB") == identity_digest("text", "QQ==QUFB")
