"""The clip key's pure rules (`gateway.affinity`) and `[routing] affinity_headers` at start-up.

Property tests: the same clips give the same key whatever carried them (a file's bytes, base64,
a data URI of any MIME type, an `input_audio` part, a resolved part) and whatever else the body
holds; different clips (or the same clips in another order) give different keys."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.affinity import (
    KEY_HEX_CHARS,
    base64_digest,
    bytes_digest,
    check_header_names,
    clip_key,
    identity_digest,
    part_digests,
    with_clip_key,
)
from gateway.affinity.headers import REFUSED_NAMES
from gateway.affinity.parts import part_digest, url_digest
from gateway.hop_headers import FRAMING_HEADERS, HOP_BY_HOP_HEADERS
from gateway.naming.strict_base64 import DECODE_CHUNK_CHARS
from tests.test_config import config_error, run_cli

clips = st.binary(min_size=1, max_size=512)
texts = st.text(max_size=40)
mimes = st.sampled_from(["audio/wav", "audio/x-wav", "audio/mpeg", "audio/flac", "audio/ogg"])
TCHARS = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def carried(data: bytes, carrier: str, mime: str) -> dict[str, Any]:
    """`data` as a client part of one kind."""
    if carrier == "input_audio":
        return {"type": "input_audio", "input_audio": {"data": b64(data), "format": "wav"}}
    url = f"data:{mime};base64,{b64(data)}"
    if carrier == "bare":
        return {"type": "audio_url", "audio_url": url}
    return {"type": "audio_url", "audio_url": {"url": url}, "uuid": "client-given"}


carriers = st.sampled_from(["input_audio", "audio_url", "bare"])


def messages_of(parts: list[dict[str, Any]], text: str, extra: list[Any]) -> list[Any]:
    """The parts in one user message after `text`, with other messages before it."""
    content = [{"type": "text", "text": text}, *parts]
    return [*extra, {"role": "user", "content": content}]


other_messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "assistant"]), "content": texts}),
    max_size=2,
)


# --- the key -------------------------------------------------------------------------------


@given(clips, carriers, carriers, mimes, mimes, texts, texts, other_messages)
def test_same_clip_same_key_whatever_carried_it(
    data: bytes,
    one: str,
    other: str,
    mime_one: str,
    mime_other: str,
    text_one: str,
    text_other: str,
    extra: list[Any],
) -> None:
    first = part_digests(messages_of([carried(data, one, mime_one)], text_one, []), {})
    second = part_digests(messages_of([carried(data, other, mime_other)], text_other, extra), {})
    as_file = [bytes_digest(data)]
    assert clip_key(first) == clip_key(second) == clip_key(as_file)


@given(st.lists(clips, min_size=1, max_size=4), st.data())
def test_a_resolved_part_counts_as_its_clip_where_it_stands(
    datas: list[bytes], data: st.DataObject
) -> None:
    """Parts the gateway read (digest by place) and parts the client inlined, interleaved in
    any way, give the key of the clips in message order."""
    resolved_flags = data.draw(st.lists(st.booleans(), min_size=len(datas), max_size=len(datas)))
    parts = [carried(d, "audio_url", "audio/wav") for d in datas]
    resolved = {
        (0, j + 1): bytes_digest(d)
        for j, (d, r) in enumerate(zip(datas, resolved_flags, strict=True))
        if r
    }
    for j, flag in enumerate(resolved_flags):
        if flag:  # what a path part looks like before the gateway reads it
            parts[j] = {"type": "audio_url", "audio_url": {"url": f"file:///clips/{j}.wav"}}
    digests = part_digests(messages_of(parts, "q", []), resolved)
    assert clip_key(digests) == clip_key(map(bytes_digest, datas))


@given(st.lists(clips, min_size=1, max_size=4, unique=True), st.data())
def test_different_clips_different_keys(datas: list[bytes], data: st.DataObject) -> None:
    others = data.draw(st.lists(clips, min_size=1, max_size=4).filter(lambda o: o != datas))
    assert clip_key(map(bytes_digest, datas)) != clip_key(map(bytes_digest, others))
    if len(datas) > 1:  # the same clips in another order
        assert clip_key(map(bytes_digest, datas)) != clip_key(map(bytes_digest, datas[::-1]))


@given(st.lists(texts, min_size=1, max_size=4))
def test_the_key_is_plain_lowercase_hex_with_no_per_process_salt(digests: list[str]) -> None:
    key = clip_key(digests)
    assert key is not None and len(key) == KEY_HEX_CHARS
    assert set(key) <= set("0123456789abcdef")
    framed = b"".join(b"%d:%s" % (len(d.encode()), d.encode()) for d in digests)
    expected = hashlib.sha256(b"audio-gateway clip key v1\x00" + framed).hexdigest()
    assert key == expected[:KEY_HEX_CHARS]  # a fleet of gateways computes the same


def test_megabytes_of_base64_decode_piece_by_piece_as_one() -> None:
    data = os.urandom(2 * DECODE_CHUNK_CHARS + 12345)  # its base64 spans several pieces
    uri = f"data:audio/wav;base64,{b64(data)}"
    assert url_digest(uri) == base64_digest(b64(data)) == bytes_digest(data)
    # Padding before the end is not base64, even where a piece ends.
    padded = "A" * (DECODE_CHUNK_CHARS - 4) + "AA==" + "AAAA"
    assert base64_digest(padded) == identity_digest("text", padded)
    assert base64_digest(b64(data)[:-1] + "*") == identity_digest("text", b64(data)[:-1] + "*")


def test_no_clips_no_key() -> None:
    assert clip_key([]) is None
    body = messages_of([{"type": "image_url", "image_url": {"url": "x"}}], "q", [])
    assert part_digests(body, {}) == []
    assert part_digests("not a list", {}) == []


def test_digests_of_what_the_gateway_did_not_hash() -> None:
    assert url_digest("https://example.com/a.wav") == identity_digest(
        "url", "https://example.com/a.wav"
    )
    assert url_digest("data:audio/wav,plain") == identity_digest("url", "data:audio/wav,plain")
    assert base64_digest("not base64!") == identity_digest("text", "not base64!")
    uuid_only = {"type": "audio_url", "audio_url": None, "uuid": "K"}
    assert part_digest(uuid_only) == identity_digest("uuid", "K")
    assert part_digest({"type": "input_audio", "input_audio": None, "uuid": "K"}) == (
        identity_digest("uuid", "K")
    )
    file = ("/data/a.wav", 1_700_000_000_000_000_000, 1234)
    assert identity_digest("file", file) != identity_digest("file", (*file[:2], 1235))
    assert identity_digest("file", file).startswith("file:")


# --- the headers ---------------------------------------------------------------------------


@given(st.lists(st.tuples(st.sampled_from(["X-Session-ID", "x-session-id", "Other"]), texts)))
def test_the_key_replaces_every_case_variant_once(headers: list[tuple[str, str]]) -> None:
    sent = with_clip_key(headers, ["X-Session-ID"], "k")
    assert [v for n, v in sent if n.lower() == "x-session-id"] == ["k"]
    assert [h for h in sent if h[0] == "Other"] == [h for h in headers if h[0] == "Other"]


@given(st.lists(st.text(TCHARS, min_size=1, max_size=12), unique_by=str.lower, max_size=4))
def test_tokens_are_accepted(names: list[str]) -> None:
    names = [
        n for n in names if n.lower() not in REFUSED_NAMES and not n.lower().startswith("proxy-")
    ]
    assert list(check_header_names(names)) == names


def test_every_header_the_relay_drops_is_refused_as_a_key_header() -> None:
    for name in HOP_BY_HOP_HEADERS | FRAMING_HEADERS:
        with pytest.raises(ValueError, match="the relay or the client owns"):
            check_header_names([name.title()])


@pytest.mark.parametrize(
    ("names", "reason"),
    [
        (["X Session"], "not an HTTP header name"),
        ([""], "not an HTTP header name"),
        (["X-Session:ID"], "not an HTTP header name"),
        (["X-Séance"], "not an HTTP header name"),
        (["Host"], "the relay or the client owns"),
        (["content-length"], "the relay or the client owns"),
        (["Transfer-Encoding"], "the relay or the client owns"),
        (["CONNECTION"], "the relay or the client owns"),
        (["Keep-Alive"], "the relay or the client owns"),
        (["upgrade"], "the relay or the client owns"),
        (["TE"], "the relay or the client owns"),
        (["Trailers"], "the relay or the client owns"),
        (["Authorization"], "the relay or the client owns"),
        (["Proxy-Authorization"], "the relay or the client owns"),
        (["proxy-anything"], "the relay or the client owns"),
        (["Cookie"], "the relay or the client owns"),
        (["Content-Type"], "the relay or the client owns"),
        (["X-Session-ID", "x-session-id"], "name one header"),
    ],
)
def test_a_bad_header_name_is_a_config_error_naming_the_key(names: list[str], reason: str) -> None:
    message = config_error({"routing": {"affinity_headers": names}})
    assert "routing.affinity_headers: " in message
    assert reason in message


def test_serve_refuses_a_bad_header_name_at_start_up(tmp_path: Path) -> None:
    bad = tmp_path / "routing.toml"
    bad.write_text('[routing]\naffinity_headers = ["Transfer-Encoding"]\n')
    result = run_cli("serve", "--config", str(bad))
    assert result.returncode == 2
    assert "routing.affinity_headers" in result.stderr
    assert "Traceback" not in result.stderr
