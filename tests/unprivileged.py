"""Running the gateway as a process file permissions apply to.

Root reads a `chmod 000` file (CAP_DAC_OVERRIDE), and the tests run as root here and in CI, so
a permission test runs `python -m gateway ...` in a child process that, when the tests are
root, first drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from its capability bounding set
and then execs the gateway: still uid 0 (it can run the interpreter under a private /root),
but held to the permission bits like any user. As any other user the child runs as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from tests.test_config import REPO_ROOT, free_port

START_SECONDS = 60.0  # a guard against hangs on a loaded machine, never an assertion
# prctl(PR_CAPBSET_DROP = 24, cap): CAP_DAC_OVERRIDE = 1, CAP_DAC_READ_SEARCH = 2; an exec then
# leaves root without them (root's permitted set is capped by the bounding set).
DROP_DAC_CAPABILITIES = (
    "import ctypes, os, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "for cap in (1, 2):\n"
    "    if libc.prctl(24, cap, 0, 0, 0):\n"
    "        raise OSError(ctypes.get_errno(), 'prctl(PR_CAPBSET_DROP)')\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n"
)


def gateway_argv(*argv: str) -> list[str]:
    """`python -m gateway ARGV`, without root's file-permission bypass."""
    command = ["-m", "gateway", *argv]
    if os.geteuid() == 0:
        return [sys.executable, "-c", DROP_DAC_CAPABILITIES, *command]
    return [sys.executable, *command]


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONDONTWRITEBYTECODE": "1"}


def run_unprivileged(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`python -m gateway ARGV` as an unprivileged user; its exit status and output."""
    return subprocess.run(
        gateway_argv(*argv),
        capture_output=True,
        text=True,
        cwd="/",
        env=child_env(),
        timeout=timeout,
    )


@dataclass
class ServedGateway:
    process: asyncio.subprocess.Process
    port: int
    log: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.asynccontextmanager
async def serve_unprivileged(config_text: str, directory: Path) -> AsyncIterator[ServedGateway]:
    """`python -m gateway serve` with `config_text` (TOML, written into `directory`) as an
    unprivileged user, up and answering `/gateway/health`."""
    config = directory / "gateway.toml"
    await asyncio.to_thread(config.write_text, "[server]\nmalloc_tuning = false\n" + config_text)
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        *gateway_argv("serve", "--config", str(config), "--port", str(port)),
        cwd="/",
        env=child_env(),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    gateway = ServedGateway(process, port)
    reader = asyncio.create_task(_collect(process, gateway.log))
    try:
        await _wait_until_up(gateway)
        yield gateway
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()
        await reader


async def _collect(process: asyncio.subprocess.Process, log: list[str]) -> None:
    assert process.stderr is not None
    async for line in process.stderr:
        log.append(line.decode(errors="replace").rstrip("\n"))


async def _wait_until_up(gateway: ServedGateway) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + START_SECONDS
    async with aiohttp.ClientSession() as session:
        while True:
            assert gateway.process.returncode is None, "\n".join(gateway.log)
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"{gateway.url}/gateway/health") as response:
                    if response.status == 200:
                        return
            assert loop.time() < deadline, "serve never came up"
            await asyncio.sleep(0.05)
