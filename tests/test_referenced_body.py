"""A body in reference mode renders with any subset of its clips by reference, as often as
needed (a retry renders it again with every clip's data), and each render is valid JSON with
exactly the clips asked for left out."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway.references.body import ReferencedBody
from gateway.references.held import NO_KWARGS, kwargs_key
from gateway.splice import splice_chat
from gateway.upstream.body import Placeholders, SegmentedPayload

CLIPS = {"a": b"QUFB" * 5, "b": b"QkJC" * 3, "c": b"Q0ND"}


def build(names: list[str], url_names: set[str], body_extra: dict[str, Any]) -> ReferencedBody:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    body.update(body_extra)
    placeholders = Placeholders()
    parts, sizes = [], []
    for name in names:
        if name in url_names:
            parts.append({"type": "audio_url", "audio_url": {"url": f"file:///{name}.wav"}})
            sizes.append(None)
        else:
            token = placeholders.add(b"data:audio/wav;base64,", (CLIPS[name],))
            parts.append({"type": "audio_url", "audio_url": {"url": token}})
            sizes.append(len(CLIPS[name]))
        parts[-1]["uuid"] = name
    splice_chat(body, parts)
    return ReferencedBody.of(body, placeholders, parts, sizes)


def parsed(payload: SegmentedPayload) -> dict[str, Any]:
    raw = b"".join(s for s in payload.segments if isinstance(s, bytes))
    assert len(raw) == payload.size
    result: dict[str, Any] = json.loads(raw)
    return result


@given(
    st.lists(st.sampled_from(sorted(CLIPS)), min_size=1, max_size=5),
    st.sets(st.sampled_from(sorted(CLIPS))),
    st.sets(st.sampled_from(sorted(CLIPS))),
)
def test_any_subset_by_reference_then_all_with_data(
    names: list[str], by_url: set[str], referenced: set[str]
) -> None:
    body = build(names, by_url, {})
    references = frozenset((name, NO_KWARGS) for name in referenced)
    first = parsed(body.render(references))["messages"][-1]["content"]
    for name, part in zip(names, first, strict=False):
        assert part["uuid"] == name
        if name in referenced:
            assert part == {"type": "audio_url", "audio_url": None, "uuid": name}
        elif name in by_url:
            assert part["audio_url"] == {"url": f"file:///{name}.wav"}
        else:
            assert part["audio_url"]["url"] == "data:audio/wav;base64," + CLIPS[name].decode()
    again = parsed(body.render(frozenset()))["messages"][-1]["content"]
    assert all(part["audio_url"] is not None for part in again[: len(names)])
    assert again[-1] == {"type": "text", "text": "hi"}
    count, saved = body.by_reference(references)
    assert count == sum(name in referenced for name in names)
    assert saved == sum(len(CLIPS[n]) for n in names if n in referenced and n not in by_url)


def test_keys_carry_the_kwargs() -> None:
    extra = {"mm_processor_kwargs": {"x": 1}}
    body = build(["a", "a", "b"], set(), extra)
    assert body.keys == (("a", kwargs_key(extra)), ("b", kwargs_key(extra)))
