"""`audio-gateway convert`: inline audio -> sha256-named files and back, proven against the
gateway itself (a converted row served from the clip directory gives the stub the very body
the original row gave it), streaming into an atomically replaced OUT."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.audio.samples import tone_pcm, write_wav
from gateway.stub_upstream import StubState
from tests.conftest import GatewayFactory
from tests.tools_helpers import data_uri, read_jsonl, run_json, run_tool, write_jsonl


def wav(seconds: float, frequency_hz: float, directory: Path) -> bytes:
    path = directory / f"tone-{seconds}-{frequency_hz}.wav"
    return write_wav(path, tone_pcm(seconds, frequency_hz)).read_bytes()


CLIPS = [wav(0.01 * (i + 1), 300.0 + 100 * i, Path(tempfile.mkdtemp())) for i in range(3)]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def audio_url_part(data: bytes) -> dict[str, Any]:
    return {"type": "audio_url", "audio_url": {"url": data_uri(data)}}


def input_audio_part(data: bytes) -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": b64(data), "format": "wav"}}


def request_of(row: dict[str, Any]) -> dict[str, Any]:
    return row.get("responses_create_params", row)  # type: ignore[no-any-return]


def audio_of(row: dict[str, Any]) -> list[bytes]:
    """The audio the gateway would send for a row, in order: the sidechannel's inline clip,
    then the audio parts at the front of the last user message (rows without paths)."""
    request = request_of(row)
    clips = []
    for key in ("audio_data", "audio_url"):
        uri = (request.get("metadata") or {}).get(key)
        if uri:
            clips.append(base64.b64decode(uri.split(",", 1)[1]))
    items = request.get("messages", request.get("input"))
    users = [m for m in items if isinstance(m, dict) and m.get("role") == "user"]
    content = users[-1].get("content") if users and isinstance(items, list) else None
    for part in content if isinstance(content, list) else []:
        if part.get("type") == "audio_url":
            clips.append(base64.b64decode(part["audio_url"]["url"].split(",", 1)[1]))
        elif part.get("type") == "input_audio":
            clips.append(base64.b64decode(part["input_audio"]["data"]))
        else:
            break
    return clips


# --- rows of every shape ------------------------------------------------------------------


@st.composite
def rows(draw: st.DrawFn) -> tuple[dict[str, Any], bool]:
    """A chat, Responses or NeMo Gym row, with or without inline audio; and whether the
    gateway (default config) can serve it from paths unchanged."""
    kind = draw(st.sampled_from(["chat", "responses", "nemo_gym"]))
    clip = st.sampled_from(CLIPS)
    sidechannel = draw(st.none() | clip)
    parts = draw(st.lists(clip, max_size=3))
    chat_input_audio = kind == "chat" and bool(parts) and draw(st.booleans())
    text = draw(st.text(max_size=12))
    content: Any = draw(
        st.sampled_from(["string", "list", "null"]) if not parts else st.just("list")
    )
    text_type = "text" if kind == "chat" else "input_text"
    make_part = input_audio_part if kind != "chat" or chat_input_audio else audio_url_part
    body: Any = {
        "string": text,
        "list": [*map(make_part, parts), {"type": text_type, "text": text}],
        "null": None,
    }[content]
    messages: list[Any] = [{"role": "user", "content": body}]
    if draw(st.booleans()):
        messages.insert(0, {"role": "system", "content": "Be brief."})
    metadata = {"seed": str(draw(st.integers(0, 9)))} if draw(st.booleans()) else {}
    if sidechannel is not None:
        metadata[draw(st.sampled_from(["audio_data", "audio_url"]))] = data_uri(sidechannel)
    request: dict[str, Any] = {"model": "m", "messages" if kind == "chat" else "input": messages}
    if metadata:
        request["metadata"] = metadata
    if kind == "nemo_gym":
        return {"responses_create_params": request, "expected_answer": text, "id": 1}, True
    return request, not chat_input_audio  # the default gateway sends chat audio as audio_url


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dataset=st.lists(rows(), min_size=1, max_size=6))
def test_extract_then_inline_gives_back_the_same_audio(
    dataset: list[tuple[dict[str, Any], bool]],
) -> None:
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        originals = [row for row, _ in dataset]
        write_jsonl(work / "in.jsonl", originals)
        code, extracted = run_json(
            "convert", str(work / "in.jsonl"), str(work / "paths.jsonl"),
            "--extract-to", str(work / "clips"),
        )  # fmt: skip
        assert code == 0, extracted
        code, inlined = run_json(
            "convert", str(work / "paths.jsonl"), str(work / "back.jsonl"),
            "--inline", "--audio-root", str(work / "clips"),
        )  # fmt: skip
        assert code == 0, inlined

        with_audio = [(row, movable) for row, movable in dataset if audio_of(row)]
        movable = sum(movable for _, movable in with_audio)
        assert extracted["rows_converted"] == movable
        assert extracted["rows_kept_inline"] == len(with_audio) - movable
        middle = read_jsonl(work / "paths.jsonl")
        for original, converted in zip(originals, middle, strict=True):
            moved = converted != original
            assert not moved or audio_of(converted) == []  # no inline copy left behind
        back = read_jsonl(work / "back.jsonl")
        assert [audio_of(row) for row in back] == [audio_of(row) for row in originals]
        stored = {p.name for p in (work / "clips").rglob("*.wav")}
        assert len(stored) == extracted["files_written"]


# --- proven against the gateway -------------------------------------------------------------


def route_of(request: dict[str, Any]) -> str:
    return "/v1/responses" if "input" in request else "/v1/chat/completions"


async def upstream_body(client: Any, stub: StubState, request: dict[str, Any]) -> Any:
    response = await client.post(route_of(request), data=json.dumps(request))
    assert response.status == 200, await response.text()
    return json.loads(stub.requests[-1].body)


@pytest.mark.stub(responses_accept_audio=True)
async def test_served_from_the_clip_directory_the_stub_gets_the_same_body(
    make_gateway: GatewayFactory, stub: StubState, audio_dir: Path, tmp_path: Path
) -> None:
    a, b = (audio_dir / "a.wav").read_bytes(), (audio_dir / "b.wav").read_bytes()
    originals: list[dict[str, Any]] = [
        {"model": "m", "messages": [{"role": "user", "content": "Q"}],
         "metadata": {"audio_data": data_uri(a), "seed": "1"}},
        {"model": "m", "messages": [{"role": "system", "content": "S"}, {"role": "user",
            "content": [audio_url_part(a), audio_url_part(b), {"type": "text", "text": "Q"}]}]},
        {"model": "m", "input": [{"role": "user", "content": [
            input_audio_part(b), {"type": "input_text", "text": "Q"}]}],
         "metadata": {"audio_url": data_uri(a)}},
        {"model": "m", "input": "Q", "metadata": {"audio_data": data_uri(b)}},
    ]  # fmt: skip
    write_jsonl(tmp_path / "in.jsonl", originals)
    clips = tmp_path / "clips"
    code, summary = await asyncio.to_thread(
        run_json, "convert", str(tmp_path / "in.jsonl"), str(tmp_path / "out.jsonl"),
        "--extract-to", str(clips),
    )  # fmt: skip
    assert code == 0 and summary["rows_converted"] == 4, summary
    assert summary["files_written"] == 2  # a and b, each once
    for data in (a, b):
        digest = hashlib.sha256(data).hexdigest()
        assert (clips / digest[:2] / f"{digest}.wav").read_bytes() == data
    converted = read_jsonl(tmp_path / "out.jsonl")
    assert converted[0]["metadata"]["seed"] == "1"
    assert "audio_data" not in json.dumps(converted)

    # Rows with input_audio parts already inline need an upstream whose Responses API takes
    # them (the bridge refuses client audio parts), so this compares under the Responses splice.
    gateway = await make_gateway(audio={"root": str(clips)}, responses={"audio": "input_audio"})
    for original, row in zip(originals, converted, strict=True):
        assert "audio_path" in row["metadata"] or "audio_paths" in row["metadata"]
        assert await upstream_body(gateway, stub, row) == await upstream_body(
            gateway, stub, original
        )


async def test_nemo_gym_rows_convert_check_clean_and_reach_the_stub_intact(
    make_gateway: GatewayFactory, stub: StubState, tmp_path: Path
) -> None:
    tones = [wav(1.0, 200.0 + 50 * i, tmp_path) for i in range(3)]
    originals = [
        {
            "responses_create_params": {
                "input": [{"role": "user", "content": f"What pitch is tone {i % 3}?"}],
                "metadata": {"audio_data": data_uri(tones[i % 3])},
            },
            "expected_answer": f"{200 + 50 * (i % 3)} Hz",
            "task_id": i,
        }
        for i in range(6)  # two seeds of each clip
    ]
    write_jsonl(tmp_path / "gym.jsonl", originals)
    clips, out = tmp_path / "clips", tmp_path / "gym-paths.jsonl"
    code, summary = await asyncio.to_thread(
        run_json, "convert", str(tmp_path / "gym.jsonl"), str(out), "--extract-to", str(clips)
    )
    assert code == 0 and summary["rows_converted"] == 6 and summary["files_written"] == 3
    assert summary["bytes_out"] * 50 < summary["bytes_in"]
    code, checked = await asyncio.to_thread(run_json, "check", str(out), "--audio-root", str(clips))
    assert code == 0 and checked["distinct_files"] == 3, checked
    assert checked["audio_seconds"] == pytest.approx(6.0)

    gateway = await make_gateway(audio={"root": str(clips)})
    for original, row in zip(originals, read_jsonl(out), strict=True):
        assert {k: v for k, v in row.items() if k != "responses_create_params"} == {
            k: v for k, v in original.items() if k != "responses_create_params"
        }
        response = await gateway.post("/v1/responses", json=row["responses_create_params"])
        assert response.status == 200, await response.text()
        answer = await response.json()
        assert answer["object"] == "response"  # bridged: the stub answered on chat completions
        sent = audio_of(original)[0]
        assert stub.last_report is not None
        assert [c["sha256"] for c in stub.last_report["clips"]] == [
            hashlib.sha256(sent).hexdigest()
        ]
        assert stub.requests[-1].path == "/v1/chat/completions"


# --- rows that stay, errors, the output file --------------------------------------------------


def test_a_null_metadata_keeps_only_rows_with_audio_inline(tmp_path: Path) -> None:
    """`"metadata": null` (common in dumps) cannot take audio paths: a row with inline audio
    parts stays inline, a row without audio is simply unchanged."""
    lines = [
        json.dumps({"model": "m", "messages": [{"role": "user", "content": "Q"}],
                    "metadata": None}),
        json.dumps({"model": "m", "messages": [{"role": "user", "content": [
            audio_url_part(CLIPS[0]), {"type": "text", "text": "Q"}]}], "metadata": None}),
    ]  # fmt: skip
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    code, summary = run_json(
        "convert", str(source), str(tmp_path / "out.jsonl"), "--extract-to", str(tmp_path / "c")
    )
    assert code == 0
    assert (summary["rows_unchanged"], summary["rows_kept_inline"]) == (1, 1)
    assert (tmp_path / "out.jsonl").read_bytes() == source.read_bytes()


def test_rows_that_cannot_move_stay_inline_and_plain_rows_stay_byte_for_byte(
    tmp_path: Path,
) -> None:
    a = CLIPS[0]
    lines = [
        '{"model":  "m",   "messages": [{"role": "user", "content": "no audio"}]}',
        json.dumps({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Q"}, audio_url_part(a)]}]}),  # audio after the text
        json.dumps({"model": "m", "messages": [{"role": "user", "content": [audio_url_part(a)]}],
                    "metadata": {"audio_path": "x.wav"}}),  # mixed inline and paths
        json.dumps({"model": "m", "messages": [{"role": "user", "content": "Q"}],
                    "metadata": {"audio_data": data_uri(a, "audio/x-wav")}}),  # MIME would change
        json.dumps({"model": "m", "messages": [{"role": "user", "content": "Q"}],
                    "metadata": {"audio_data": data_uri(b"not audio at all")}}),
    ]  # fmt: skip
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    code, summary = run_json(
        "convert", str(source), str(tmp_path / "out.jsonl"), "--extract-to", str(tmp_path / "c")
    )
    assert code == 0
    assert (summary["rows_unchanged"], summary["rows_kept_inline"]) == (1, 4)
    assert (tmp_path / "out.jsonl").read_bytes() == source.read_bytes()
    assert not [p for p in (tmp_path / "c").rglob("*") if p.is_file()]  # nothing left staged


def test_a_failing_row_is_copied_and_reported_and_strict_writes_nothing(
    audio_dir: Path, tmp_path: Path
) -> None:
    rows = [
        {"model": "m", "messages": [{"role": "user", "content": "Q"}],
         "metadata": {"audio_path": "a.wav"}},
        {"model": "m", "messages": [{"role": "user", "content": "Q"}],
         "metadata": {"audio_path": "missing.wav"}},
    ]  # fmt: skip
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    code, summary = run_json(
        "convert", str(source), str(out), "--inline", "--audio-root", str(audio_dir)
    )
    assert code == 1
    assert summary["rows_converted"] == 1 and summary["rows_with_errors"] == 1
    example = summary["errors"]["audio_not_found"]["examples"][0]
    assert (example["line"], example["key"], example["path"]) == (
        2,
        "metadata.audio_path",
        "missing.wav",
    )
    written = out.read_text().splitlines()
    assert json.loads(written[1]) == rows[1]  # copied unchanged
    part = json.loads(written[0])["messages"][0]["content"][0]
    assert part["audio_url"]["url"] == data_uri((audio_dir / "a.wav").read_bytes())

    strict_out = tmp_path / "strict.jsonl"
    code, summary = run_json(
        "convert",
        str(source),
        str(strict_out),
        "--inline",
        "--audio-root",
        str(audio_dir),
        "--strict",
    )
    assert code == 1 and summary["written"] is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audio", "in.jsonl", "out.jsonl"]


def test_output_is_never_the_input_nor_an_existing_file_without_force(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", [{"model": "m", "messages": []}])
    out = tmp_path / "out.jsonl"
    out.write_text("keep me\n")
    clips = str(tmp_path / "clips")
    assert run_tool("convert", str(source), str(source), "--extract-to", clips)[0] == 2
    code, _, err = run_tool("convert", str(source), str(out), "--extract-to", clips)
    assert code == 2 and "--force" in err
    assert out.read_text() == "keep me\n"
    assert run_tool("convert", str(source), str(out), "--extract-to", clips, "--force")[0] == 0
    assert out.read_bytes() == source.read_bytes()
    assert run_tool("convert", str(tmp_path / "absent.jsonl"), str(out), "--inline")[0] == 2
    assert run_tool("convert", str(source), str(out))[0] == 2  # no direction given


def test_extraction_follows_the_configured_chat_part(tmp_path: Path) -> None:
    """With `splice.chat_part = "input_audio"` the gateway sends chat clips as input_audio
    parts: those rows convert, and audio_url rows stay inline."""
    a = CLIPS[1]
    rows = [
        {"model": "m", "messages": [{"role": "user", "content": [input_audio_part(a)]}]},
        {"model": "m", "messages": [{"role": "user", "content": [audio_url_part(a)]}]},
    ]
    source = write_jsonl(tmp_path / "in.jsonl", rows)
    config = tmp_path / "parts.toml"
    config.write_text('[splice]\nchat_part = "input_audio"\n')
    code, summary = run_json(
        "convert", str(source), str(tmp_path / "out.jsonl"),
        "--extract-to", str(tmp_path / "clips"), "--config", str(config),
    )  # fmt: skip
    assert code == 0
    assert (summary["rows_converted"], summary["rows_kept_inline"]) == (1, 1)
    converted, kept = read_jsonl(tmp_path / "out.jsonl")
    digest = hashlib.sha256(a).hexdigest()
    assert converted["metadata"] == {"audio_path": f"{digest[:2]}/{digest}.wav"}
    assert converted["messages"][0]["content"] == []
    assert kept == rows[1]
