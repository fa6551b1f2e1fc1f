"""`audio-gateway check`: every error the server gives, found on the right line with the
server's code; a clean file passes; the summary's figures; exit status 0 / 1 / 2."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import wave
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from gateway.audio.policy import PathPolicy
from gateway.audio.samples import write_tone
from gateway.config import Config
from gateway.tools import jobs, progress
from gateway.tools.check import ROWS_IN_FLIGHT_PER_JOB, RowChecker, check_rows
from gateway.tools.jsonl import Line
from tests.conftest import write_encoded_tone
from tests.tools_helpers import data_uri, error_examples, run_json, run_tool, write_jsonl

CHECK_CONFIG = """
[server]
max_body_bytes = 4096
[audio]
root = "{root}"
max_clips = 2
max_file_bytes = 200000
max_duration_seconds = 2.0
max_decode_bytes = 400000
"""


def chat(metadata: Any = None, **fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "Transcribe."}]}
    if metadata is not None:
        row["metadata"] = metadata
    row.update(fields)
    return row


def nemo_gym(metadata: dict[str, Any]) -> dict[str, Any]:
    params = {"input": [{"role": "user", "content": "Transcribe."}], "metadata": metadata}
    return {"responses_create_params": params, "expected_answer": "a tone", "id": 7}


@pytest.fixture
def bad_audio(audio_dir: Path, tmp_path: Path) -> Path:
    """Next to a.wav/b.wav/c.wav: files each breaking one rule of the check config."""
    write_tone(audio_dir / "long.wav", 3.0)  # 96 KB: over 2 s, within 200 kB
    write_tone(audio_dir / "big.wav", 7.0)  # 224 KB: over max_file_bytes
    with wave.open(str(audio_dir / "wide.wav"), "wb") as wide:  # 1 s, 128 KB, 8 channels of
        wide.setnchannels(8)  # 8-bit: 512 kB of float32 once decoded, over max_decode_bytes
        wide.setsampwidth(1)
        wide.setframerate(16_000)
        wide.writeframes(bytes(16_000 * 8))
    (audio_dir / "notaudio.wav").write_text("this is a text file, not a RIFF/WAVE one\n")
    (audio_dir / "folder.wav").mkdir()
    write_tone(audio_dir / "x.aac", 0.1)  # a regular file: its extension is what is wrong
    write_tone(tmp_path / "outside.wav", 0.1)
    return audio_dir


P, PS, D = "metadata.audio_path", "metadata.audio_paths", "metadata.audio_data"
NEMO_P = "responses_create_params.metadata.audio_path"
AAC = "data:audio/aac;base64,QUJD"


def path(given: Any) -> dict[str, Any]:
    return chat({"audio_path": given})


def paths(*given: str) -> dict[str, Any]:
    return chat({"audio_paths": list(given)})


def responses(metadata: dict[str, Any], items: Any = "Q") -> dict[str, Any]:
    return {"model": "m", "input": items, "metadata": metadata}


# (code, the row that must get it, the key, the path as written)
BAD_ROWS: list[tuple[str, Any, str | None, str | None]] = [
    ("invalid_json", '{"messages": [', None, None),
    ("invalid_json", "[1, 2]", None, None),
    ("conflicting_audio_keys", chat({"audio_path": "a.wav", "audio_data": "x"}), D, None),
    ("empty_audio_reference", path(""), P, ""),
    ("empty_audio_reference", paths(), PS, None),
    ("invalid_audio_reference", path(5), P, None),
    ("invalid_audio_reference", chat({"audio_data": "data:text/plain;base64,QUJD"}), D, None),
    ("invalid_audio_reference", chat({"audio_paths": "not json"}), PS, None),
    ("too_many_clips", paths("a.wav", "b.wav", "c.wav"), PS, None),
    # within [audio] max_clips, over its model's limit: Audio Flamingo 3 takes 1 a prompt
    ("too_many_clips", {**paths("a.wav", "b.wav"), "model": "nvidia/audio-flamingo-3-hf"}, PS,
     None),
    ("unsupported_audio_format", paths("a.wav", "x.aac"), PS, "x.aac"),
    ("unsupported_by_audio_bridge", {**responses({"audio_path": "a.wav"}), "tools": [{}]},
     "tools[0].type", None),
    ("not_a_regular_file", path("folder.wav"), P, "folder.wav"),
    ("not_audio", path("notaudio.wav"), P, "notaudio.wav"),
    ("audio_path_forbidden", path("../outside.wav"), P, "../outside.wav"),
    ("audio_not_found", paths("a.wav", "missing.wav"), PS, "missing.wav"),
    ("audio_not_found", nemo_gym({"audio_path": "gone.wav"}), NEMO_P, "gone.wav"),
    ("audio_too_large", path("big.wav"), P, "big.wav"),
    ("audio_too_long", path("long.wav"), P, "long.wav"),
    ("audio_decode_too_large", path("wide.wav"), P, "wide.wav"),
    # as the server: every clip is sniffed before any length is checked
    ("not_audio", paths("long.wav", "notaudio.wav"), PS, "notaudio.wav"),
    ("invalid_messages", {"model": "m", "messages": "hi", "metadata": {"audio_path": "a.wav"}},
     "messages", None),
    ("invalid_input", responses({"audio_path": "a.wav"}, items=5), "input", None),
    ("invalid_content", chat({"audio_path": "a.wav"}, messages=[{"role": "user", "content": 5}]),
     "messages", None),
    ("request_too_large", chat({"audio_path": "a.wav"}, user="x" * 5000), None, None),
    ("request_too_large", chat(user="x" * 5000), None, None),
]  # fmt: skip

GOOD_ROWS = [
    chat({"audio_path": "a.wav"}),
    chat({"audio_paths": '["b.wav", "c.wav"]'}),
    nemo_gym({"audio_path": "c.wav"}),
    chat(),
    {"model": "m", "input": "no audio here"},
]


def test_every_server_error_is_found_on_its_line(bad_audio: Path, tmp_path: Path) -> None:
    config = tmp_path / "check.toml"
    config.write_text(CHECK_CONFIG.format(root=bad_audio))
    rows: list[Any] = []
    expected: dict[str, list[tuple[int, str | None, str | None]]] = {}
    for index, (code, row, key, path) in enumerate(BAD_ROWS):
        rows.append(GOOD_ROWS[index % len(GOOD_ROWS)])  # clean rows between the bad ones
        rows.append(row)
        expected.setdefault(code, []).append((len(rows), key, path))
    data = write_jsonl(tmp_path / "bad.jsonl", rows)

    code, summary = run_json("check", str(data), "--config", str(config))

    assert code == 1
    assert error_examples(summary) == expected
    assert {c: g["count"] for c, g in summary["errors"].items()} == {
        c: len(v) for c, v in expected.items()
    }
    assert summary["rows"] == len(rows)
    assert summary["rows_with_errors"] == len(BAD_ROWS)
    for group in summary["errors"].values():
        for example in group["examples"]:
            assert example["file"] == str(data)
            assert not example["path"] or repr(example["path"]) in example["message"]


def test_relative_paths_without_a_root_are_audio_root_unset(
    audio_dir: Path, tmp_path: Path
) -> None:
    rows = [chat({"audio_path": str(audio_dir / "a.wav")}), chat({"audio_path": "a.wav"})]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    config = tmp_path / "roots.toml"
    config.write_text(f'[audio]\nallowed_roots = ["{audio_dir}"]\n')

    code, summary = run_json("check", str(data), "--config", str(config))

    assert code == 1
    assert list(summary["errors"]) == ["audio_root_unset"]
    assert summary["errors"]["audio_root_unset"]["examples"][0]["line"] == 2


def test_only_the_first_five_examples_of_a_code_are_kept(audio_dir: Path, tmp_path: Path) -> None:
    rows = [chat({"audio_path": f"missing-{i}.wav"}) for i in range(8)]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    code, summary = run_json("check", str(data), "--audio-root", str(audio_dir))
    group = summary["errors"]["audio_not_found"]
    assert code == 1 and group["count"] == 8
    assert [e["line"] for e in group["examples"]] == [1, 2, 3, 4, 5]
    assert [e["path"] for e in group["examples"]] == [f"missing-{i}.wav" for i in range(5)]


def test_a_clean_file_passes_with_its_audio_totals(audio_dir: Path, tmp_path: Path) -> None:
    inline = (audio_dir / "b.wav").read_bytes()
    rows = [
        chat({"audio_path": "a.wav"}),
        chat({"audio_paths": ["a.wav", "c.wav"]}),
        nemo_gym({"audio_paths": '["b.wav"]'}),
        chat({"audio_data": data_uri(inline), "seed": "3"}),
        chat(),
    ]
    data = write_jsonl(tmp_path / "clean.jsonl", [*rows[:3], "", *rows[3:]])

    code, summary = run_json("check", str(data), "--audio-root", str(audio_dir), "--jobs", "3")

    assert code == 0, summary["errors"]
    assert summary["errors"] == {} and summary["rows_with_errors"] == 0
    assert (summary["rows"], summary["rows_with_audio"]) == (5, 4)
    assert (summary["clips"], summary["inline_clips"], summary["distinct_files"]) == (5, 1, 3)
    sizes = {name: (audio_dir / name).stat().st_size for name in ("a.wav", "b.wav", "c.wav")}
    assert summary["audio_bytes"] == 2 * sizes["a.wav"] + 2 * sizes["b.wav"] + sizes["c.wav"]
    assert summary["audio_seconds"] == pytest.approx(0.25 + 0.25 + 0.75 + 0.5 + 0.5)
    assert summary["clips_without_duration"] == 0
    assert summary["longest_clip"] == {
        "file": str(data),
        "line": 2,
        "key": "metadata.audio_paths[1]",
        "path": "c.wav",
        "seconds": 0.75,
    }


def test_the_table_names_totals_and_errors_and_stderr_stays_quiet(
    audio_dir: Path, tmp_path: Path
) -> None:
    rows = [chat({"audio_path": "a.wav"}), chat({"audio_path": "nope.wav"})]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    code, out, err = run_tool("check", str(data), "--audio-root", str(audio_dir))
    assert code == 1
    assert err == ""  # not a terminal: no progress bar
    assert "rows read         2" in out
    assert "audio_not_found: 1 row(s)" in out
    assert f"{data}:2  metadata.audio_path: audio file 'nope.wav' does not exist" in out


@pytest.mark.parametrize(
    "problem", ["missing data file", "unknown config key", "missing config", "root not a dir"]
)
def test_usage_errors_exit_2(audio_dir: Path, tmp_path: Path, problem: str) -> None:
    data = write_jsonl(tmp_path / "rows.jsonl", [chat({"audio_path": "a.wav"})])
    bad_config = tmp_path / "bad.toml"
    bad_config.write_text("[audio]\nroots = 1\n")
    argv = {
        "missing data file": [str(data), str(tmp_path / "absent.jsonl")],
        "unknown config key": [str(data), "--config", str(bad_config)],
        "missing config": [str(data), "--config", str(tmp_path / "absent.toml")],
        "root not a dir": [str(data), "--audio-root", str(tmp_path / "absent")],
    }[problem]
    code, out, err = run_tool("check", *argv)
    assert code == 2
    assert out == ""
    assert err.startswith("audio-gateway check: ")


def test_the_installed_command_exits_with_the_status(audio_dir: Path, tmp_path: Path) -> None:
    good = write_jsonl(tmp_path / "good.jsonl", [chat({"audio_path": "a.wav"})])
    bad = write_jsonl(tmp_path / "bad.jsonl", [chat({"audio_path": "zz.wav"})])
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    statuses = [
        subprocess.run(
            [sys.executable, "-m", "gateway", "check", str(path), "--audio-root", str(audio_dir)],
            capture_output=True,
            env=env,
            timeout=60,
        ).returncode
        for path in (good, bad, tmp_path / "absent.jsonl")
    ]
    assert statuses == [0, 1, 2]


async def test_check_and_the_server_give_each_bad_row_the_same_code(
    make_gateway: Any, stub: Any, bad_audio: Path
) -> None:
    """One code path: each bad row, sent to a gateway with the same config, gets the code
    and `param` check reported."""
    gateway = await make_gateway(
        server={"max_body_bytes": 4096},
        audio={
            "max_clips": 2,
            "max_file_bytes": 200000,
            "max_duration_seconds": 2.0,
            "max_decode_bytes": 400000,
        },
    )
    for code, row, key, _ in BAD_ROWS:
        request = row.get("responses_create_params", row) if isinstance(row, dict) else row
        raw = request if isinstance(request, str) else json.dumps(request)
        route = (
            "/v1/responses"
            if '"input"' in raw and '"messages"' not in raw
            else "/v1/chat/completions"
        )
        response = await gateway.post(route, data=raw, headers={"Content-Type": "application/json"})
        error = (await response.json())["error"]
        assert (error["code"], error["param"]) == (
            code,
            key and key.split("responses_create_params.")[-1],
        ), raw[:80]
    assert not stub.audio_requests


def test_a_rows_model_is_held_to_its_clips_per_prompt(audio_dir: Path, tmp_path: Path) -> None:
    """The model placed by a `[models]` table (and its override) or by its served name; a model
    check cannot place gets the global settings."""
    config = tmp_path / "models.toml"
    config.write_text(
        f'[audio]\nroot = "{audio_dir}"\n'
        '[models."af3"]\narchitecture = "AudioFlamingo3ForConditionalGeneration"\n'
        '[models."af3-two"]\narchitecture = "AudioFlamingo3ForConditionalGeneration"\n'
        "clips_per_prompt = 2\n"
    )
    two = paths("a.wav", "b.wav")
    rows = [
        {**two, "model": "af3"},
        {**two, "model": "af3-two"},
        {**two, "model": "org/GLM-ASR-Nano-2512"},
        {**two, "model": "my-finetune"},
        {**paths("a.wav"), "model": "af3"},
    ]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    code, summary = run_json("check", str(data), "--config", str(config))
    assert code == 1
    assert error_examples(summary) == {"too_many_clips": [(1, PS, None), (3, PS, None)]}
    assert summary["rows"] == 5 and summary["rows_with_errors"] == 2


def test_a_13_mb_inline_row_is_checked(audio_dir: Path, tmp_path: Path) -> None:
    clip = write_tone(tmp_path / "long.wav", 300.0)  # 9.6 MB of WAV: a 12.8 MB row
    data = write_jsonl(tmp_path / "big.jsonl", [chat({"audio_data": data_uri(clip.read_bytes())})])
    assert data.stat().st_size > 12_000_000
    code, summary = run_json("check", str(data))
    assert code == 0, summary["errors"]
    assert summary["inline_clips"] == 1 and summary["audio_bytes"] == clip.stat().st_size
    assert summary["audio_seconds"] == pytest.approx(300.0)


def test_the_progress_bar_shows_rows_per_second_on_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress, "POSTFIX_EVERY_SECONDS", 0.0)
    with closing(progress.Progress(300, "check", enabled=True)) as bar:
        for _ in range(3):
            bar.advance(100)
    err = capsys.readouterr().err
    assert "check: 100%" in err and "3 rows" in err and "rows/s" in err
    with closing(progress.Progress(300, "check")) as quiet:  # stderr is no terminal under pytest
        quiet.advance(300)
    assert capsys.readouterr().err == ""


def test_network_file_systems_get_more_jobs() -> None:
    mounts = [
        ("/", "ext4"),
        ("/mnt/data", "nfs4"),
        ("/mnt/data/local", "xfs"),
        ("/s3", "fuse.s3fs"),
    ]
    assert jobs.filesystem_type("/mnt/data/audio/a.wav", mounts) == "nfs4"
    assert jobs.filesystem_type("/mnt/data/local/a.wav", mounts) == "xfs"
    assert jobs.filesystem_type("/mnt/database", mounts) == "ext4"
    assert [jobs.is_network_filesystem(k) for k in ("nfs4", "xfs", "fuse.s3fs", "lustre")] == [
        True, False, True, True,
    ]  # fmt: skip
    assert jobs.default_jobs([]) == jobs.LOCAL_JOBS


def test_rows_are_streamed_not_read_ahead(audio_dir: Path) -> None:
    """An endless input still yields results: only a bounded window of rows is held."""
    consumed = 0

    def endless() -> Iterator[Line]:
        nonlocal consumed
        for number in itertools.count(1):
            consumed += 1
            yield Line("endless.jsonl", number, json.dumps(path("a.wav")).encode() + b"\n")

    config = Config.model_validate({"audio": {"root": str(audio_dir)}})
    checker = RowChecker(config, PathPolicy.from_config(config.audio))
    results = check_rows(endless(), checker, jobs=2)
    try:
        first = [next(results) for _ in range(3)]
    finally:
        results.close()
    assert [row.line.number for row in first] == [1, 2, 3]
    assert all(row.error is None and row.clips for row in first)
    assert consumed <= 2 * ROWS_IN_FLIGHT_PER_JOB + 3


def test_the_body_limit_counts_the_row_without_its_line_end(
    audio_dir: Path, tmp_path: Path
) -> None:
    body = json.dumps(path("a.wav"))
    data = tmp_path / "rows.jsonl"
    data.write_text(body + "\r\n")
    for limit, expected in ((len(body), 0), (len(body) - 1, 1)):
        config = tmp_path / "limit.toml"
        config.write_text(f'[server]\nmax_body_bytes = {limit}\n[audio]\nroot = "{audio_dir}"\n')
        code, summary = run_json("check", str(data), "--config", str(config))
        assert code == expected, summary["errors"]
        assert list(summary["errors"]) == ([] if expected == 0 else ["request_too_large"])


def test_flac_lengths_are_read_and_ogg_counts_as_unknown(audio_dir: Path, tmp_path: Path) -> None:
    write_encoded_tone(audio_dir / "d.flac", 1.5, 500.0, "FLAC")
    write_encoded_tone(audio_dir / "e.ogg", 1.0, 500.0, "OGG")
    rows = [path("d.flac"), path("e.ogg"), path("a.wav")]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    code, summary = run_json("check", str(data), "--audio-root", str(audio_dir))
    assert code == 0, summary["errors"]
    assert summary["audio_seconds"] == pytest.approx(1.75)
    assert summary["clips_without_duration"] == 1
    assert summary["longest_clip"]["path"] == "d.flac"


def test_responses_rows_follow_the_servers_responses_mode(audio_dir: Path, tmp_path: Path) -> None:
    """Bridged (the default), a Responses row's inline AAC goes out as an audio_url part;
    with `[responses] audio = "input_audio"` it needs an input_audio format and is refused."""
    data = write_jsonl(tmp_path / "rows.jsonl", [responses({"audio_data": AAC})])
    code, summary = run_json("check", str(data))
    assert code == 0, summary["errors"]
    config = tmp_path / "input_audio.toml"
    config.write_text('[responses]\naudio = "input_audio"\n')
    code, summary = run_json("check", str(data), "--config", str(config))
    assert code == 1
    assert list(summary["errors"]) == ["unsupported_audio_format"]
