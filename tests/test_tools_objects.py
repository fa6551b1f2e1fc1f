"""The dataset tools on object storage: `check` and `convert --inline` hold `s3://` references
to the server's own checks (names, HEAD, size limit, first-bytes sniff, decode limits, store
failures), against a real S3 API server (moto in server mode on 127.0.0.1), and each bad row
gets from a real gateway the very code and `param` check reported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import moto.settings
import pytest

from gateway.audio.samples import write_tone
from gateway.audio.sources.objects import ObjectClip
from gateway.config import load_config
from gateway.errors import GatewayError
from gateway.naming.sidechannel import PathAudio
from gateway.stub_upstream import StubState
from gateway.tools.objects import ObjectChecks
from tests.conftest import GatewayFactory
from tests.objectstore import (
    ACCESS_KEY_ID,
    REGION,
    SECRET_ACCESS_KEY,
    S3Server,
    aws_environment,
    s3_config,
    s3_server,
    silent_store,
)
from tests.test_tools_check import NEMO_P, PS, P, chat, nemo_gym, path, paths
from tests.test_tools_convert import audio_of
from tests.tools_helpers import error_examples, read_jsonl, run_json, write_jsonl

__all__ = ["aws_environment", "s3_server", "silent_store"]  # fixtures, used by name

pytestmark = pytest.mark.usefixtures("aws_environment")
Settings = dict[str, dict[str, Any]]


def write_toml(target: Path, settings: Settings) -> Path:
    """A config file of `{"section.sub": {key: value}}` (JSON scalars and lists are TOML)."""
    lines = []
    for section, values in settings.items():
        lines.append(f"[{section}]")
        lines.extend(f"{key} = {json.dumps(value)}" for key, value in values.items())
    target.write_text("\n".join(lines) + "\n")
    return target


async def server_answers(
    make_gateway: GatewayFactory, settings: Settings, rows: list[Any]
) -> list[tuple[str, str | None]]:
    """(code, param) of each row sent to a gateway with `settings`, as check names them."""
    gateway = await make_gateway(audio=settings["audio"], storage={"s3": settings["storage.s3"]})
    answers = []
    for row in rows:
        request = row.get("responses_create_params", row)
        route = "/v1/responses" if "input" in request else "/v1/chat/completions"
        error = (await (await gateway.post(route, json=request)).json())["error"]
        nested = "responses_create_params." if request is not row else ""
        answers.append((error["code"], error["param"] and nested + error["param"]))
    return answers


@pytest.fixture
def bucket(s3_server: S3Server, audio_dir: Path, tmp_path: Path) -> str:
    """A bucket with data/{a,b,c}.wav (as in `audio_dir`) and objects each breaking one rule
    of `settings`, plus other/a.wav outside the allowed prefix."""
    name = s3_server.bucket()
    for clip in ("a.wav", "b.wav", "c.wav"):
        s3_server.put(name, f"data/{clip}", audio_dir / clip)
    s3_server.put(name, "data/long.wav", write_tone(tmp_path / "long.wav", 3.0))  # over 2 s
    s3_server.put(name, "data/big.wav", write_tone(tmp_path / "big.wav", 7.0))  # over 200 kB
    s3_server.put(name, "data/fake.wav", b"<html>not audio</html>" * 10)
    s3_server.put(name, "data/empty.wav", b"")
    s3_server.put(name, "other/a.wav", audio_dir / "a.wav")
    return name


def settings_for(s3_server: S3Server, bucket: str, audio_dir: Path, **s3: Any) -> Settings:
    return {
        "audio": {
            "root": str(audio_dir),
            "allowed_roots": [str(audio_dir), f"s3://{bucket}/data/"],
            "max_file_bytes": 200_000,
            "max_duration_seconds": 2.0,
        },
        "storage.s3": s3_config(s3_server, **s3),
    }


def bad_rows(bucket: str) -> list[tuple[str, Any, str, str]]:
    """(code, row, key, path as written) for every object error of `settings_for`."""
    s3 = f"s3://{bucket}"
    return [
        ("invalid_audio_reference", path(f"{s3}/data/../a.wav"), P, f"{s3}/data/../a.wav"),
        ("invalid_audio_reference", paths("a.wav", "gs://audio/a.wav"), PS, "gs://audio/a.wav"),
        ("invalid_audio_reference", path("s3://Not_A_Bucket/a.wav"), P, "s3://Not_A_Bucket/a.wav"),
        ("audio_path_forbidden", path(f"{s3}/other/a.wav"), P, f"{s3}/other/a.wav"),
        ("audio_path_forbidden", path(f"{s3}/other/gone.wav"), P, f"{s3}/other/gone.wav"),
        ("audio_not_found", paths("a.wav", f"{s3}/data/nope.wav"), PS, f"{s3}/data/nope.wav"),
        ("audio_too_large", path(f"{s3}/data/big.wav"), P, f"{s3}/data/big.wav"),
        ("not_audio", path(f"{s3}/data/fake.wav"), P, f"{s3}/data/fake.wav"),
        ("not_audio", path(f"{s3}/data/empty.wav"), P, f"{s3}/data/empty.wav"),
        ("audio_too_long", nemo_gym({"audio_path": f"{s3}/data/long.wav"}), NEMO_P,
         f"{s3}/data/long.wav"),
    ]  # fmt: skip


async def test_check_finds_every_object_error_on_its_line_as_the_server_answers_it(
    make_gateway: GatewayFactory,
    s3_server: S3Server,
    bucket: str,
    audio_dir: Path,
    tmp_path: Path,
    stub: StubState,
) -> None:
    settings = settings_for(s3_server, bucket, audio_dir)
    config = write_toml(tmp_path / "check.toml", settings)
    good = chat({"audio_paths": ["a.wav", f"s3://{bucket}/data/b.wav"]})
    rows: list[Any] = []
    expected: dict[str, list[tuple[int, str, str]]] = {}
    for code, row, key, given in bad_rows(bucket):
        rows += [good, row]
        expected.setdefault(code, []).append((len(rows), key, given))
    data = write_jsonl(tmp_path / "bad.jsonl", rows)

    status, summary = run_json("check", str(data), "--config", str(config))

    assert status == 1
    assert error_examples(summary) == expected
    for group in summary["errors"].values():
        assert all(repr(e["path"]) in e["message"] for e in group["examples"])
    assert summary["rows_with_errors"] == len(rows) // 2
    answers = await server_answers(
        make_gateway, settings, [row for _, row, _, _ in bad_rows(bucket)]
    )
    assert answers == [(code, key) for code, _, key, _ in bad_rows(bucket)]
    assert not stub.audio_requests


def test_a_clean_file_mixing_files_and_objects_passes_with_its_totals(
    s3_server: S3Server, bucket: str, audio_dir: Path, tmp_path: Path
) -> None:
    s3 = f"s3://{bucket}/data"
    rows = [
        chat({"audio_path": f"{s3}/a.wav"}),
        chat({"audio_paths": ["a.wav", f"{s3}/c.wav"]}),
        nemo_gym({"audio_paths": json.dumps([f"{s3}/b.wav", "b.wav"])}),
        chat({"audio_path": f"{s3}/a.wav", "seed": "2"}),
        chat(),
    ]
    data = write_jsonl(tmp_path / "clean.jsonl", rows)
    config = write_toml(tmp_path / "check.toml", settings_for(s3_server, bucket, audio_dir))

    status, summary = run_json("check", str(data), "--config", str(config), "--jobs", "2")

    assert status == 0, summary["errors"]
    assert (summary["rows"], summary["rows_with_audio"], summary["clips"]) == (5, 4, 6)
    assert summary["distinct_files"] == 5  # a, b, c objects; a, b files
    size = {name: (audio_dir / name).stat().st_size for name in ("a.wav", "b.wav", "c.wav")}
    assert summary["audio_bytes"] == 3 * size["a.wav"] + 2 * size["b.wav"] + size["c.wav"]
    assert summary["audio_seconds"] == pytest.approx(3 * 0.25 + 2 * 0.5 + 0.75)
    assert summary["clips_without_duration"] == 0
    assert summary["longest_clip"] == {
        "file": str(data),
        "line": 2,
        "key": "metadata.audio_paths[1]",
        "path": f"{s3}/c.wav",
        "seconds": 0.75,
    }
    # Per object: a HEAD per reference (revalidate = true), one ranged GET per version.
    assert s3_server.heads(bucket, "data/a.wav") == 2
    assert s3_server.gets(bucket, "data/a.wav") == s3_server.gets(bucket, "data/a.wav", ranged=True)
    assert s3_server.gets(bucket, "data/a.wav") == 1


def test_references_read_at_once_share_one_get_and_each_error_names_its_own_key(
    s3_server: S3Server, bucket: str, audio_dir: Path, tmp_path: Path
) -> None:
    """Two references to one object version, read together (as one row's clips are, or rows
    on other threads): one GET, as the server's cache does; a failed read's error is the
    same for both, each worded with its own key."""
    config = load_config(
        write_toml(tmp_path / "check.toml", settings_for(s3_server, bucket, audio_dir))
    )
    names = ["a.wav", "fake.wav", "a.wav", "fake.wav"]
    key = "metadata.audio_paths"
    refs = [PathAudio(f"s3://{bucket}/data/{n}", key, f"{key}[{i}]") for i, n in enumerate(names)]
    checks = ObjectChecks(config)
    try:
        clips = [clip for clip in checks.clips(refs) if isinstance(clip, ObjectClip)]
        heads = checks.heads(clips)
    finally:
        checks.close()

    assert heads[0] == heads[2] and heads[0][0] == "audio/wav"  # type: ignore[index]
    for index in (1, 3):
        error = heads[index]
        assert isinstance(error, GatewayError)
        assert (error.code, error.param) == ("not_audio", key)
        assert f"{key}[{index}]" in error.message and f"{key}[{4 - index}]" not in error.message
    assert s3_server.gets(bucket, "data/a.wav") == 1
    assert s3_server.gets(bucket, "data/fake.wav") == 1


def test_relative_paths_join_an_object_audio_root(
    s3_server: S3Server, bucket: str, tmp_path: Path
) -> None:
    rows = [path("a.wav"), path("nope.wav"), path("/etc/a.wav")]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    config = write_toml(tmp_path / "s3.toml", {"storage.s3": s3_config(s3_server)})

    argv = ["check", str(data), "--config", str(config), "--audio-root", f"s3://{bucket}/data/"]
    status, summary = run_json(*argv)

    assert status == 1
    assert summary["clips"] == 1 and summary["audio_seconds"] == pytest.approx(0.25)
    assert {code: [e["line"] for e in g["examples"]] for code, g in summary["errors"].items()} == {
        "audio_not_found": [2],
        "audio_path_forbidden": [3],
    }


@pytest.mark.parametrize("failure", ["credentials refused", "store hangs"])
async def test_store_failures_are_reported_as_the_server_reports_them(
    make_gateway: GatewayFactory,
    s3_server: S3Server,
    silent_store: str,
    bucket: str,
    audio_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    failure: str,
) -> None:
    if failure == "store hangs":
        bucket = "hanging-bucket"
        s3 = {"endpoint_url": silent_store, "allow_http": True, "region": REGION}
        settings = settings_for(s3_server, bucket, audio_dir)
        settings["storage.s3"] = {**s3, "timeout_seconds": 0.5}
        code = "audio_storage_timeout"
    else:
        settings = settings_for(s3_server, bucket, audio_dir)
        # moto checks signatures against its IAM users from now on: our key is unknown to it.
        monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
        code = "audio_storage_error"
    given = f"s3://{bucket}/data/a.wav"
    rows = [path("a.wav"), path(given)]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    config = write_toml(tmp_path / "check.toml", settings)

    status, summary = run_json("check", str(data), "--config", str(config))

    assert status == 1 and list(summary["errors"]) == [code]
    (example,) = summary["errors"][code]["examples"]
    assert (example["line"], example["key"], example["path"]) == (2, P, given)
    assert given in example["message"]
    assert SECRET_ACCESS_KEY not in example["message"]
    assert ACCESS_KEY_ID not in example["message"]
    if failure == "credentials refused":
        assert "InvalidAccessKeyId" in example["message"]
    assert await server_answers(make_gateway, settings, [rows[1]]) == [(code, P)]


def test_convert_inline_gives_the_objects_bytes(
    s3_server: S3Server, bucket: str, audio_dir: Path, tmp_path: Path
) -> None:
    s3 = f"s3://{bucket}/data"
    rows = [
        chat({"audio_paths": ["a.wav", f"{s3}/b.wav"]}),
        nemo_gym({"audio_path": f"{s3}/c.wav"}),
        chat({"audio_path": f"{s3}/nope.wav"}),
        chat(),
    ]
    source = write_jsonl(tmp_path / "paths.jsonl", rows)
    config = write_toml(tmp_path / "convert.toml", settings_for(s3_server, bucket, audio_dir))
    target = tmp_path / "inline.jsonl"

    status, summary = run_json(
        "convert", str(source), str(target), "--inline", "--config", str(config)
    )

    assert status == 1  # the missing object's row, reported and copied unchanged
    assert [e["line"] for e in summary["errors"]["audio_not_found"]["examples"]] == [3]
    out = read_jsonl(target)
    clip = {name: (audio_dir / name).read_bytes() for name in ("a.wav", "b.wav", "c.wav")}
    assert audio_of(out[0]) == [clip["a.wav"], clip["b.wav"]]
    assert audio_of(out[1]) == [clip["c.wav"]]
    assert out[1]["expected_answer"] == rows[1]["expected_answer"]
    assert "metadata" not in out[0] or "audio_paths" not in out[0]["metadata"]
    assert out[2:] == rows[2:]
