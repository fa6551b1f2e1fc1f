"""`audio-gateway check`: every error the server gives, found on the right line with the
server's code; a clean file passes; the summary's figures; exit status 0 / 1 / 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.samples import write_tone

from .tools_helpers import data_uri, run_json, run_tool, write_jsonl

CHECK_CONFIG = """
[server]
max_body_bytes = 4096
[audio]
root = "{root}"
max_clips = 2
max_file_bytes = 200000
max_duration_seconds = 2.0
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
    (audio_dir / "notaudio.wav").write_text("this is a text file, not a RIFF/WAVE one\n")
    (audio_dir / "folder.wav").mkdir()
    write_tone(tmp_path / "outside.wav", 0.1)
    return audio_dir


# (code, the row that must get it, the key, the path as written)
BAD_ROWS: list[tuple[str, Any, str | None, str | None]] = [
    ("invalid_json", '{"messages": [', None, None),
    ("invalid_json", "[1, 2]", None, None),
    ("conflicting_audio_keys", chat({"audio_path": "a.wav", "audio_data": "x"}), "metadata.audio_data", None),
    ("empty_audio_reference", chat({"audio_path": ""}), "metadata.audio_path", ""),
    ("empty_audio_reference", chat({"audio_paths": []}), "metadata.audio_paths", None),
    ("invalid_audio_reference", chat({"audio_path": 5}), "metadata.audio_path", None),
    ("invalid_audio_reference", chat({"audio_data": "data:text/plain;base64,QUJD"}), "metadata.audio_data", None),
    ("invalid_audio_reference", chat({"audio_paths": "not json"}), "metadata.audio_paths", None),
    ("too_many_clips", chat({"audio_paths": ["a.wav", "b.wav", "c.wav"]}), "metadata.audio_paths", None),
    ("unsupported_audio_format", chat({"audio_paths": ["a.wav", "x.aac"]}), "metadata.audio_paths", "x.aac"),
    ("not_a_regular_file", chat({"audio_path": "folder.wav"}), "metadata.audio_path", "folder.wav"),
    ("not_audio", chat({"audio_path": "notaudio.wav"}), "metadata.audio_path", "notaudio.wav"),
    ("audio_path_forbidden", chat({"audio_path": "../outside.wav"}), "metadata.audio_path", "../outside.wav"),
    ("audio_not_found", chat({"audio_paths": ["a.wav", "missing.wav"]}), "metadata.audio_paths", "missing.wav"),
    ("audio_not_found", nemo_gym({"audio_path": "gone.wav"}), "responses_create_params.metadata.audio_path", "gone.wav"),
    ("audio_too_large", chat({"audio_path": "big.wav"}), "metadata.audio_path", "big.wav"),
    ("audio_too_long", chat({"audio_path": "long.wav"}), "metadata.audio_path", "long.wav"),
    ("invalid_messages", {"model": "m", "messages": "hi", "metadata": {"audio_path": "a.wav"}}, "messages", None),
    ("invalid_input", {"model": "m", "input": 5, "metadata": {"audio_path": "a.wav"}}, "input", None),
    ("invalid_content", chat({"audio_path": "a.wav"}, messages=[{"role": "user", "content": 5}]), "messages", None),
    ("request_too_large", chat({"audio_path": "a.wav"}, user="x" * 5000), None, None),
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
    found = {
        code: [(e["line"], e["key"], e["path"]) for e in group["examples"]]
        for code, group in summary["errors"].items()
    }
    assert found == expected
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
