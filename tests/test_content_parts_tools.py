"""The dataset tools and content parts naming paths: `check` holds such rows to the server's
rules and names each part as the server does; `convert` leaves path parts as they are."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway.stub_upstream import StubState
from tests.conftest import GatewayFactory
from tests.tools_helpers import error_examples, read_jsonl, run_json, write_jsonl


def url_part(url: str) -> dict[str, Any]:
    return {"type": "audio_url", "audio_url": {"url": url}}


def chat(*content: dict[str, Any], metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Transcribe."}, *content]},
    ]
    row: dict[str, Any] = {"model": "m", "messages": messages}
    if metadata is not None:
        row["metadata"] = metadata
    return row


def nemo_gym(*content: dict[str, Any]) -> dict[str, Any]:
    params = {"input": [{"role": "user", "content": list(content)}]}
    return {"responses_create_params": params, "expected_answer": "a tone"}


def file_part(url: str) -> dict[str, Any]:
    return {"type": "input_file", "file_url": url}


def test_check_counts_path_parts_like_sidechannel_clips(audio_dir: Path, tmp_path: Path) -> None:
    rows = [
        chat(url_part("file://" + str(audio_dir / "a.wav")), url_part("b.wav")),
        chat(url_part("data:audio/wav;base64,UklGRg==")),  # inline parts: vLLM's to judge
        chat(url_part("c.wav"), metadata={"audio_path": "a.wav"}),
        nemo_gym(file_part("c.wav"), {"type": "input_text", "text": "Transcribe."}),
    ]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    code, summary = run_json("check", str(data), "--audio-root", str(audio_dir))
    assert code == 0, summary["errors"]
    assert (summary["rows"], summary["rows_with_audio"], summary["clips"]) == (4, 3, 5)
    assert summary["longest_clip"]["key"] in (
        "messages[1].content[1].audio_url.url",
        "responses_create_params.input[0].content[0].file_url",
    )
    assert summary["longest_clip"]["path"] == "c.wav"


BAD_ROWS: list[tuple[str, dict[str, Any], str, str | None]] = [
    (
        "audio_path_forbidden",
        chat(url_part("file:///etc/passwd.wav")),
        "messages[1].content[1].audio_url.url",
        "file:///etc/passwd.wav",
    ),
    (
        "audio_not_found",
        chat(url_part("a.wav"), url_part("missing.wav")),
        "messages[1].content[2].audio_url.url",
        "missing.wav",
    ),
    (
        "invalid_audio_reference",
        chat(url_part("file://server/a.wav")),
        "messages[1].content[1].audio_url.url",
        "file://server/a.wav",
    ),
    (
        "too_many_clips",
        chat(url_part("a.wav"), url_part("b.wav"), metadata={"audio_path": "c.wav"}),
        "messages[1].content[2].audio_url.url",
        "b.wav",
    ),
    (
        "audio_not_found",
        nemo_gym(file_part("missing.wav")),
        "responses_create_params.input[0].content[0].file_url",
        "missing.wav",
    ),
    (
        "unsupported_by_audio_bridge",
        nemo_gym(file_part("a.wav"), file_part("notes.pdf")),
        "responses_create_params.input[0].content[1]",
        None,
    ),
]


def test_check_names_each_bad_part_as_the_server_does(audio_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "check.toml"
    config.write_text(f'[audio]\nroot = "{audio_dir}"\nmax_clips = 2\n')
    data = write_jsonl(tmp_path / "bad.jsonl", [row for _, row, _, _ in BAD_ROWS])
    code, summary = run_json("check", str(data), "--config", str(config))
    assert code == 1
    expected: dict[str, list[tuple[int, str, str | None]]] = {}
    for line, (error, _, key, path) in enumerate(BAD_ROWS, start=1):
        expected.setdefault(error, []).append((line, key, path))
    assert error_examples(summary) == expected
    assert summary["rows_with_audio"] == len(BAD_ROWS)


async def test_the_server_agrees(make_gateway: GatewayFactory, stub: StubState) -> None:
    gateway = await make_gateway(audio={"max_clips": 2})
    for error, row, key, _ in BAD_ROWS:
        request = row.get("responses_create_params", row)
        route = "/v1/responses" if "input" in request else "/v1/chat/completions"
        response = await gateway.post(route, json=request)
        sent = (await response.json())["error"]
        assert (sent["code"], sent["param"]) == (error, key.split("responses_create_params.")[-1])
    assert stub.requests == []


def test_convert_leaves_path_parts_as_they_are(audio_dir: Path, tmp_path: Path) -> None:
    only_parts = chat(url_part("file://" + str(audio_dir / "a.wav")), url_part("b.wav"))
    both = chat(url_part("b.wav"), metadata={"audio_path": "a.wav"})
    source = write_jsonl(tmp_path / "in.jsonl", [only_parts, both])
    out = tmp_path / "out.jsonl"
    code, summary = run_json(
        "convert", str(source), str(out), "--inline", "--audio-root", str(audio_dir)
    )
    assert code == 0, summary
    converted = read_jsonl(out)
    assert converted[0] == only_parts
    content = converted[1]["messages"][1]["content"]
    assert content[0]["audio_url"]["url"].startswith("data:audio/wav;base64,")  # the sidechannel
    assert content[1:] == both["messages"][1]["content"]  # the path part, untouched
    assert json.dumps(converted[1]).count("b.wav") == 1
