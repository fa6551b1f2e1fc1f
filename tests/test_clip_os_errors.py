"""Every OS error met while resolving or reading a clip names its cause, for `serve` and
`check` alike, and the answer names the first rule a path breaks: inside the roots, then
exists, then a regular file, then its extension and content. None is a 5xx or says "retry";
409 `audio_file_changed` is only for a file whose identity changed between check and read.

Permission cases run the gateway in a child process without root's permission bypass
(`tests/unprivileged.py`): as root, it would read the files they lock."""

from __future__ import annotations

import asyncio
import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from hypothesis import given
from hypothesis import strategies as st

from gateway.audio.encoder import open_checked_file, read_whole_clip
from gateway.audio.os_errors import READING, RESOLVING, clip_os_error
from gateway.audio.policy import PathPolicy
from gateway.audio.samples import write_tone
from gateway.errors import GatewayError
from gateway.naming.sidechannel import PathAudio
from gateway.stub_upstream import StubState
from tests.conftest import GatewayFactory, chat_body, gateway_error
from tests.test_cache import SerialExecutor, eventually, serial_executor  # noqa: F401
from tests.tools_helpers import run_json, write_jsonl
from tests.unprivileged import run_unprivileged, serve_unprivileged

CHAT = "/v1/chat/completions"
P = "metadata.audio_path"
LONG_NAME = "n" * 300 + ".wav"  # one name over NAME_MAX (255 bytes)
LONG_PATH = "/".join(["d" * 100] * 45) + ".wav"  # every name short, the path over PATH_MAX


@pytest.fixture
def odd_paths(audio_dir: Path, tmp_path: Path) -> Path:
    """Beside a.wav: a symlink loop, a directory without an extension, files with bad ones."""
    (audio_dir / "loop.wav").symlink_to("loop.wav")
    (audio_dir / "folder").mkdir()
    (audio_dir / "notes.txt").write_text("a regular file with an unsupported extension\n")
    (tmp_path / "outside.txt").write_text("outside the root\n")
    return audio_dir


# (audio_path, status, code, a fragment of the message)
CASES: list[tuple[str, int, str, str]] = [
    ("loop.wav", 400, "not_a_regular_file", "symbolic links loop"),
    ("a.wav/x.wav", 404, "audio_not_found", "a part of its path is a file, not a directory"),
    (LONG_NAME, 400, "invalid_audio_reference", "too long for the file system"),
    (LONG_PATH, 400, "invalid_audio_reference", "too long for the file system"),
    # the first rule broken is the one named
    ("folder", 400, "not_a_regular_file", "is not a regular file"),
    ("/etc/passwd", 403, "audio_path_forbidden", "outside the allowed audio roots"),
    ("../outside.txt", 403, "audio_path_forbidden", "outside the allowed audio roots"),
    ("missing.txt", 404, "audio_not_found", "does not exist"),
    ("notes.txt", 400, "unsupported_audio_format", "unsupported extension '.txt'"),
]
IDS = [case[0][:24] for case in CASES]


@pytest.mark.parametrize(("given", "status", "code", "fragment"), CASES, ids=IDS)
async def test_serve_names_the_cause(
    make_gateway: GatewayFactory,
    stub: StubState,
    odd_paths: Path,
    given: str,
    status: int,
    code: str,
    fragment: str,
) -> None:
    gateway = await make_gateway()
    response = await gateway.post(CHAT, json=chat_body({"audio_path": given}))
    error = await gateway_error(response, status, P)
    assert error["code"] == code
    assert fragment in error["message"] and "retry" not in error["message"]
    assert stub.request_count == 0


def test_check_names_the_same_causes(odd_paths: Path, tmp_path: Path) -> None:
    rows = [chat_body({"audio_path": given}) for given, *_ in CASES]
    data = write_jsonl(tmp_path / "rows.jsonl", rows)
    code, summary = run_json("check", str(data), "--audio-root", str(odd_paths))
    assert code == 1
    found = {
        example["line"]: (error_code, example["message"])
        for error_code, group in summary["errors"].items()
        for example in group["examples"]
    }
    for line, (_, _, expected_code, fragment) in enumerate(CASES, start=1):
        got_code, message = found[line]
        assert got_code == expected_code and fragment in message, (line, message)


async def test_a_file_removed_between_its_check_and_its_read_is_404(
    serial_executor: SerialExecutor,  # noqa: F811  (the fixture imported from test_cache)
    gateway: Any,
    stub: StubState,
    audio_dir: Path,
) -> None:
    gate = serial_executor.park()  # the read's first file operation (its open) waits here
    jobs = serial_executor.jobs
    request = asyncio.create_task(gateway.post(CHAT, json=chat_body({"audio_path": "b.wav"})))
    await serial_executor.until_jobs(jobs + 1)  # checked; its open is queued behind the gate
    (audio_dir / "b.wav").unlink()
    gate.set()
    error = await gateway_error(await request, 404, P)
    assert error["code"] == "audio_not_found" and "retry" not in error["message"]
    assert stub.request_count == 0


def test_check_opens_a_removed_file_as_404_and_a_rewritten_one_as_409(audio_dir: Path) -> None:
    """`check` opens files with the server's opener: the same answers after the checks."""
    policy = PathPolicy(str(audio_dir), [str(audio_dir)], 1 << 20)
    removed = policy.resolve(PathAudio("a.wav", P, P))
    rewritten = policy.resolve(PathAudio("b.wav", P, P))
    (audio_dir / "a.wav").unlink()
    write_tone(audio_dir / "b.wav", 0.3, 440.0)
    with pytest.raises(GatewayError) as gone:
        open_checked_file(removed)
    with pytest.raises(GatewayError) as changed:
        open_checked_file(rewritten)
    assert (gone.value.status, gone.value.code) == (404, "audio_not_found")
    assert (changed.value.status, changed.value.code) == (409, "audio_file_changed")


def test_the_one_trip_read_answers_as_the_chunked_one(audio_dir: Path) -> None:
    """A small clip is opened, read and closed in one executor trip: the checked file's bytes,
    and the same 404 / 409 as an open through aiofiles."""
    policy = PathPolicy(str(audio_dir), [str(audio_dir)], 1 << 20)
    clip = policy.resolve(PathAudio("c.wav", P, P))
    assert read_whole_clip(clip, clip.size) == (audio_dir / "c.wav").read_bytes()
    assert read_whole_clip(clip, 12) == (audio_dir / "c.wav").read_bytes()[:12]
    removed = policy.resolve(PathAudio("a.wav", P, P))
    rewritten = policy.resolve(PathAudio("b.wav", P, P))
    (audio_dir / "a.wav").unlink()
    write_tone(audio_dir / "b.wav", 0.3, 440.0)
    with pytest.raises(GatewayError) as gone:
        read_whole_clip(removed, removed.size)
    with pytest.raises(GatewayError) as changed:
        read_whole_clip(rewritten, rewritten.size)
    assert (gone.value.status, gone.value.code) == (404, "audio_not_found")
    assert (changed.value.status, changed.value.code) == (409, "audio_file_changed")


@given(code=st.sampled_from(sorted(errno.errorcode)), stage=st.sampled_from([RESOLVING, READING]))
def test_no_errno_is_a_5xx_or_a_retry(code: int, stage: str) -> None:
    ref = PathAudio("clips/x.wav", P, P)
    error = clip_os_error(ref, OSError(code, os.strerror(code)), stage)
    assert 400 <= error.status < 500 and error.status != 409
    assert error.code != "audio_file_changed" and "retry" not in error.message.lower()
    assert (error.param, error.message.split(":")[0]) == (P, P)
    assert "'clips/x.wav'" in error.message


# --- as a user the permissions apply to ------------------------------------------------------


@pytest.fixture
def locked_root(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A root with a readable clip, a clip nobody may read, a clip in a directory nobody may
    enter and one in a directory that may be listed but not entered."""
    root = tmp_path / "locked"
    root.mkdir()
    write_tone(root / "ok.wav", 0.25, 440.0)
    write_tone(root / "locked.wav", 0.25, 440.0)
    locked = [(root / "locked.wav", 0o000), (root / "private", 0o000), (root / "listed", 0o644)]
    for directory, _ in locked[1:]:
        directory.mkdir()
        write_tone(directory / "inner.wav", 0.25, 440.0)
    for path, mode in locked:
        path.chmod(mode)
    yield tmp_path, root
    for path, _ in locked:
        path.chmod(0o755)


DENIED = [
    ("locked.wav", "cannot be read: permission denied"),
    ("private/inner.wav", "cannot be read: permission denied on a directory of its path"),
    ("listed/inner.wav", "cannot be read: permission denied on a directory of its path"),
]


async def test_serve_as_an_unprivileged_user_answers_403_for_what_it_may_not_read(
    stub_server: TestServer, stub: StubState, locked_root: tuple[Path, Path]
) -> None:
    shared, root = locked_root
    upstream = str(stub_server.make_url("")).rstrip("/")
    config = f'[upstream]\nurl = "{upstream}"\n[audio]\nroot = "{root}"\n'
    async with serve_unprivileged(config, shared) as served, aiohttp.ClientSession() as session:
        ok = await session.post(f"{served.url}{CHAT}", json=chat_body({"audio_path": "ok.wav"}))
        assert ok.status == 200, await ok.text()  # the child can read what it should
        for given, fragment in DENIED:
            body = chat_body({"audio_path": given})
            for _ in range(2):  # a second try gets the same answer: nothing to retry
                response = await session.post(f"{served.url}{CHAT}", json=body)
                error = await gateway_error(response, 403, P)
                assert error["code"] == "audio_path_forbidden", error
                assert fragment in error["message"] and repr(given) in error["message"]
                assert "retry" not in error["message"]
    assert stub.audio_requests == 1


def test_check_as_an_unprivileged_user_names_the_same_403(locked_root: tuple[Path, Path]) -> None:
    shared, root = locked_root
    rows = [chat_body({"audio_path": given}) for given in ("ok.wav", *(g for g, _ in DENIED))]
    data = shared / "rows.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = run_unprivileged("check", str(data), "--audio-root", str(root), "--json")
    assert result.returncode == 1, result.stderr
    errors = json.loads(result.stdout)["errors"]
    assert list(errors) == ["audio_path_forbidden"]
    examples = errors["audio_path_forbidden"]["examples"]
    assert [example["line"] for example in examples] == [2, 3, 4]
    for example, (_, fragment) in zip(examples, DENIED, strict=True):
        assert fragment in example["message"]
