"""The built image, run for real (.ci/image-check builds it and sets AUDIO_GATEWAY_IMAGE; without
it these tests skip): as the pod runs it (uid 10001, read-only root, no capabilities, no new
privileges), its default command serves the mounted config, relays a chat request with a clip
from the read-only audio mount through a vLLM-like Unix socket (owner 10001, mode 0700, as
vLLM binds it under the pod's umask), is ready while the upstream is, logs JSON lines, and
stops on SIGTERM within its drain."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import socket
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from gateway.stub_upstream import create_stub_app, stub_state_key
from tests.conftest import sha256_of

IMAGE = os.environ.get("AUDIO_GATEWAY_IMAGE", "")
PODMAN = shlex.split(os.environ.get("AUDIO_GATEWAY_PODMAN", "podman"))
POD_UID = 10001
START_TIMEOUT_SECONDS = 60
DRAIN_SECONDS = 1
SHUTDOWN_TIMEOUT_SECONDS = 5

pytestmark = pytest.mark.skipif(not IMAGE, reason="set AUDIO_GATEWAY_IMAGE (.ci/image-check)")


async def podman(*args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        *PODMAN, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, output.decode()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
async def vllm_socket() -> AsyncIterator[tuple[Path, web.Application]]:
    """The stub upstream on a Unix socket as vLLM leaves it in the pod: owner 10001, 0700."""
    folder = Path(tempfile.mkdtemp(prefix="vllm-socket-"))
    folder.chmod(0o777)  # an emptyDir's mode
    path = folder / "vllm.sock"
    app = create_stub_app(None)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.UnixSite(runner, str(path))
    await site.start()
    os.chown(path, POD_UID, POD_UID)
    path.chmod(0o700)
    yield folder, app
    await runner.cleanup()
    path.unlink(missing_ok=True)
    folder.rmdir()


async def wait_until_up(session: aiohttp.ClientSession, origin: str) -> None:
    for _ in range(START_TIMEOUT_SECONDS * 10):
        try:
            async with session.get(f"{origin}/gateway/health") as response:
                if response.status == 200:
                    return
        except aiohttp.ClientConnectionError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError("the container's gateway did not come up")


async def test_the_image_serves_as_the_pod_runs_it(
    vllm_socket: tuple[Path, web.Application], audio_dir: Path, tmp_path: Path
) -> None:
    socket_folder, stub = vllm_socket
    port = free_port()
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'[server]\nhost = "127.0.0.1"\nport = {port}\nlog_format = "json"\naccess_log = true\n'
        f"drain_seconds = {DRAIN_SECONDS}\nshutdown_timeout_seconds = {SHUTDOWN_TIMEOUT_SECONDS}\n"
        '[upstream]\nurl = "unix:///run/vllm/vllm.sock"\n[audio]\nroot = "/data/audio"\n'
    )
    config.chmod(0o644)
    tmp_path.chmod(0o755)
    code, container = await podman(
        "run", "--detach", "--network", "host", "--user", f"{POD_UID}:{POD_UID}",
        "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096",
        "--volume", f"{config}:/etc/audio-gateway/gateway.toml:ro",
        "--volume", f"{audio_dir}:/data/audio:ro",
        "--volume", f"{socket_folder}:/run/vllm",
        IMAGE,
    )  # fmt: skip
    assert code == 0, container
    container = container.strip().splitlines()[-1]
    try:
        origin = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as session:
            await wait_until_up(session, origin)
            async with session.get(f"{origin}/gateway/ready") as response:
                assert response.status == 200, await response.text()
            body = {
                "model": "stub-audio-model",
                "messages": [{"role": "user", "content": "Transcribe."}],
                "metadata": {"audio_path": "a.wav"},
            }
            async with session.post(f"{origin}/v1/chat/completions", json=body) as response:
                assert response.status == 200, await response.text()
                (clip,) = (await response.json())["stub"]["clips"]
            assert clip["sha256"] == sha256_of(audio_dir / "a.wav")  # from the read-only mount
        assert stub[stub_state_key].requests[-1].path == "/v1/chat/completions"
        grace = DRAIN_SECONDS + SHUTDOWN_TIMEOUT_SECONDS + 10
        code, output = await podman("stop", "--time", str(grace), container)  # SIGTERM
        assert code == 0, output
        code, state = await podman("inspect", "--format", "{{.State.ExitCode}}", container)
        assert state.strip() == "0", state
        code, logs = await podman("logs", container)
        lines = [json.loads(line) for line in logs.splitlines() if line.strip()]
        assert lines and all({"time", "level", "message"} <= line.keys() for line in lines)
        assert any(line.get("route") == "chat_completions" for line in lines)
    finally:
        await podman("rm", "--force", container)
