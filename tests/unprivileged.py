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
from pathlib import Path

from tests.test_config import REPO_ROOT, free_port
from tests.test_drain import Gateway, collect_stderr, wait_until_up

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


@contextlib.asynccontextmanager
async def serve_unprivileged(config_text: str, directory: Path) -> AsyncIterator[Gateway]:
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
    gateway = Gateway(process, port)
    reader = asyncio.create_task(collect_stderr(process, gateway.log))
    try:
        await wait_until_up(gateway)
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
