"""The local audio roots, checked where the operator looks: a root that is not a readable
directory stops `serve` at start-up (exit 2, naming the key and the path), the start-up log
names the roots, `/gateway/ready` turns 503 when a root stops being readable while serving,
and `check` names the root it resolved against (or, with none, the flag that sets it)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from hypothesis import given
from hypothesis import strategies as st

from gateway.serving.readiness import RESULT_TTL_SECONDS
from gateway.stub_upstream import StubState
from gateway.tools.results import RowError
from gateway.tools.root_hints import with_root_named
from tests.conftest import GatewayFactory, chat_body
from tests.test_config import run_cli
from tests.test_drain import serve
from tests.test_readiness import ready_answer
from tests.tools_helpers import run_json, run_tool, write_jsonl
from tests.unprivileged import run_unprivileged

START_ERROR_EXIT = 2


def serve_config(tmp_path: Path, audio: dict[str, Any]) -> Path:
    lines = ["[upstream]", 'url = "http://127.0.0.1:9"', "[audio]"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in audio.items()]
    config = tmp_path / "gateway.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


@pytest.fixture
def locked_dir(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "locked"
    directory.mkdir()
    directory.chmod(0o000)
    yield directory
    directory.chmod(0o755)


class TestStartUp:
    def test_a_missing_root_is_a_start_up_error_naming_the_key_and_path(
        self, tmp_path: Path
    ) -> None:
        result = run_cli("serve", "--config", str(serve_config(tmp_path, {})), "--audio-root",
                         str(tmp_path / "not-mounted"))  # fmt: skip
        assert result.returncode == START_ERROR_EXIT, result.stderr
        assert f"audio.root: '{tmp_path / 'not-mounted'}' is not a readable directory" in (
            result.stderr
        )
        assert "does not exist" in result.stderr and "Traceback" not in result.stderr

    def test_an_allowed_root_that_is_a_file_is_named_by_its_index(
        self, tmp_path: Path, audio_dir: Path
    ) -> None:
        a_file = audio_dir / "a.wav"
        audio = {"root": str(audio_dir), "allowed_roots": [str(audio_dir), str(a_file)]}
        result = run_cli("serve", "--config", str(serve_config(tmp_path, audio)))
        assert result.returncode == START_ERROR_EXIT, result.stderr
        assert f"audio.allowed_roots[1]: '{a_file}' is not a readable directory" in result.stderr
        assert "not a directory" in result.stderr

    def test_a_root_the_gateway_may_not_read_is_a_start_up_error(
        self, tmp_path: Path, locked_dir: Path
    ) -> None:
        config = serve_config(tmp_path, {"root": str(locked_dir)})
        result = run_unprivileged("serve", "--config", str(config))
        assert result.returncode == START_ERROR_EXIT, result.stderr
        assert f"audio.root: '{locked_dir}' is not a readable directory" in result.stderr
        assert "permission denied" in result.stderr

    async def test_the_start_up_log_names_the_roots(
        self, stub_server: TestServer, tmp_path: Path, audio_dir: Path
    ) -> None:
        extra = tmp_path / "more"
        extra.mkdir()
        audio = {"root": str(audio_dir), "allowed_roots": [str(audio_dir), str(extra)]}
        async with serve(stub_server, tmp_path, sections={"audio": audio}) as gateway:
            pass
        line = next(line for line in gateway.log if "audio-gateway on" in line)
        assert f"audio roots {audio_dir}, {extra}; relative paths under {audio_dir}" in line


class TestReadiness:
    async def test_a_root_that_goes_away_while_serving_is_503_and_back(
        self, make_gateway: GatewayFactory, stub: StubState, tmp_path: Path
    ) -> None:
        root = tmp_path / "volume"
        root.mkdir()
        gateway = await make_gateway(audio={"root": str(root)})
        assert await ready_answer(gateway) == (200, {"status": "ready"})
        root.rename(tmp_path / "unmounted")
        await asyncio.sleep(RESULT_TTL_SECONDS + 0.1)  # past the kept result
        status, body = await ready_answer(gateway)
        assert (status, body["reason"]) == (503, "audio_root_unreadable")
        assert f"audio.root: '{root}' is not a readable directory" in body["message"]
        probes = len([request for request in stub.requests if request.path == "/health"])
        (tmp_path / "unmounted").rename(root)
        await asyncio.sleep(RESULT_TTL_SECONDS + 0.1)
        assert await ready_answer(gateway) == (200, {"status": "ready"})
        assert probes == 1  # while a root was unreadable the upstream was not asked

    async def test_concurrent_probers_all_get_the_roots_503(
        self, make_gateway: GatewayFactory, tmp_path: Path
    ) -> None:
        root = tmp_path / "volume"
        root.mkdir()
        gateway = await make_gateway(audio={"root": str(root)})
        root.rmdir()
        answers = await asyncio.gather(*(ready_answer(gateway) for _ in range(20)))
        assert {(status, body["reason"]) for status, body in answers} == {
            (503, "audio_root_unreadable")
        }


class TestCheck:
    def test_not_found_names_the_root_it_looked_under(
        self, audio_dir: Path, tmp_path: Path
    ) -> None:
        data = write_jsonl(tmp_path / "rows.jsonl", [chat_body({"audio_path": "zz.wav"})])
        code, summary = run_json("check", str(data), "--audio-root", str(audio_dir))
        assert code == 1 and summary["audio_root"] == str(audio_dir)
        [example] = summary["errors"]["audio_not_found"]["examples"]
        assert f"looked for under the audio root {audio_dir}" in example["message"]
        code, out, _ = run_tool("check", str(data), "--audio-root", str(audio_dir))
        assert f"audio root        {audio_dir}" in out

    def test_with_no_root_it_names_the_flag(self, tmp_path: Path) -> None:
        data = write_jsonl(tmp_path / "rows.jsonl", [chat_body({"audio_path": "zz.wav"})])
        code, summary = run_json("check", str(data))
        assert code == 1 and summary["audio_root"] is None
        [example] = summary["errors"]["audio_root_unset"]["examples"]
        assert "--audio-root DIR" in example["message"]
        _, out, _ = run_tool("check", str(data))
        assert "none: relative paths are refused (--audio-root DIR sets one)" in out

    def test_a_config_root_that_is_not_a_directory_is_a_usage_error(self, tmp_path: Path) -> None:
        data = write_jsonl(tmp_path / "rows.jsonl", [chat_body({"audio_path": "zz.wav"})])
        config = serve_config(tmp_path, {"root": str(tmp_path / "not-mounted")})
        code, _, err = run_tool("check", str(data), "--config", str(config))
        assert code == START_ERROR_EXIT
        assert f"audio.root: '{tmp_path / 'not-mounted'}' is not a readable directory" in err


codes = st.sampled_from(["audio_not_found", "audio_root_unset", "not_audio", "audio_too_large"])
texts = st.text(st.characters(blacklist_categories=["Cs"]), max_size=30)


@given(code=codes, path=st.none() | texts, root=st.just("") | texts.map(lambda t: "/r/" + t))
def test_check_adds_to_a_message_never_changes_it(code: str, path: str | None, root: str) -> None:
    error = RowError("rows.jsonl", 3, code, "metadata.audio_path", path, "the server's message")
    named = with_root_named(error, root)
    assert dataclasses.replace(named, message=error.message) == error
    assert named.message.startswith(error.message)
    relative = path is not None and not path.startswith("/")
    if code == "audio_not_found" and relative and root:
        assert f"the audio root {root};" in named.message
    elif code == "audio_root_unset":
        assert "--audio-root DIR" in named.message
    else:
        assert named == error
