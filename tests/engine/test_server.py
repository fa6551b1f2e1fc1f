"""engine/server.py's failure paths against the real vLLM: a server that cannot start fails
with vLLM's own log tail within its deadline, and leaves no process behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.server import EngineServer, EngineSpec, EngineStartError, group_pids

from .conftest import QWEN, Engines

pytestmark = pytest.mark.timeout(360, func_only=True)


def test_a_server_that_exits_fails_with_its_log_tail(venv: Path, tmp_path: Path) -> None:
    server = EngineServer(EngineSpec("broken", tmp_path / "no-such-model"), venv, tmp_path)
    server.start()
    assert server.process is not None
    group = server.process.pid
    with pytest.raises(EngineStartError) as raised:
        server.wait_healthy(deadline_s=300)
    message = str(raised.value)
    assert "vLLM broken exited with status" in message
    assert "no-such-model" in message.split("\n", 1)[1]  # vLLM's own words, from its log
    server.stop()
    assert group_pids(group) == []


def test_a_server_past_its_deadline_is_stopped(
    venv: Path, tmp_path: Path, engines: Engines
) -> None:
    spec = engines.servers[QWEN].spec
    server = EngineServer(spec, venv, tmp_path)
    server.start()
    assert server.process is not None
    group = server.process.pid
    with pytest.raises(EngineStartError) as raised:
        server.wait_healthy(deadline_s=2)
    assert "not healthy after 2 s" in str(raised.value)
    assert server.process is None  # stopped
    assert group_pids(group) == []
