"""The real vLLM 0.32.0 (CPU build) behind in-process gateways: each engine configuration is
started once per test run, all of them at once in the background when the first engine test
needs one, and stopped at the end of the run (or by engine/server.py's atexit hook).

Three servers, chosen to need as few start-ups (~50 s each) as the tests allow:
- `qwen_engine`, the tiny Qwen2-Audio on a TCP port of 127.0.0.1, with what every chat test
  needs at once: `--allowed-local-media-path` on the clip root (file_url mode),
  `VLLM_SERVER_DEV_MODE=1` (`/reset_mm_cache`) and a processor cache of about two clips
  (`--mm-processor-cache-gb`), so that evictions are real, and tool calls (xgrammar without
  free whitespace, `--enable-auto-tool-choice --tool-call-parser pythonic`: the Responses
  bridge's function calls); the restart test restarts this one.
- `whisper_engine`, the tiny Whisper, on a Unix socket (`--uds`): the speech-to-text tests are
  also the tests of a Unix-socket upstream.
- the replica: `qwen_engine` again (same model, flags and served name) on a port of its own;
  `qwen_replicas` is the pair, and `make_router` starts a real vllm-router in front of it
  (its venv: `.ci/router/install`, ROUTER_VENV), stopped at the end of the test; `smg_venv`
  is SMG's (`.ci/smg/install`, SMG_VENV), whose tests start SMG once per module.

Voxtral, Audio Flamingo 3 and GLM-ASR are not among them: test_audio_models.py starts one
server of each in turn for its own tests and stops it after (tests/engine/audio_models.py).

Without the engine's venv (`engine/install`) the tests are skipped with the command to run,
except in CI (`CI=true`) or with `AUDIO_GATEWAY_ENGINE=required`, where they fail. An engine
that is installed but does not start fails its tests with vLLM's own log tail.

Every clip is 16 kHz: this vLLM has no resampler (torchaudio is left out of its venv).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from engine import router as engine_router
from engine.router import RouterServer
from engine.server import (
    EngineServer,
    EngineStartError,
    build_models,
    engine_venv,
    venv_problem,
)
from engine.smg import smg_problem
from engine.smg import smg_venv as find_smg_venv
from tests.engine.specs import MM_CACHE_GB as MM_CACHE_GB  # the tests' import of it
from tests.engine.specs import QWEN, QWEN_REPLICA, WHISPER, special_tokens, specs

ENGINE_REQUIRED = (
    os.environ.get("CI", "").lower() == "true"
    or os.environ.get("AUDIO_GATEWAY_ENGINE") == "required"
)


@dataclass
class Engines:
    """The engine servers of this run, started together and each watched by a thread until it
    is healthy; `media_root` is the directory `--allowed-local-media-path` names (each test's
    clips go in a folder under it)."""

    servers: dict[str, EngineServer]
    media_root: Path
    models: dict[str, Path]
    failures: dict[str, str] = field(default_factory=dict)
    watchers: dict[str, threading.Thread] = field(default_factory=dict)

    def start(self) -> None:
        for name, server in self.servers.items():
            server.start()
            self.watchers[name] = threading.Thread(target=self._watch, args=(name,), daemon=True)
            self.watchers[name].start()

    def _watch(self, name: str) -> None:
        try:
            self.servers[name].wait_healthy()
        except EngineStartError as error:
            self.failures[name] = str(error)

    def healthy(self, name: str) -> EngineServer:
        """The server, once healthy; a failed start fails the test with vLLM's log tail."""
        self.watchers[name].join()
        if name in self.failures:
            pytest.fail(self.failures[name], pytrace=False)
        return self.servers[name]


engine_report_key = pytest.StashKey[list[str]]()


def report(config: pytest.Config, servers: dict[str, EngineServer]) -> None:
    """Keep one line per server for pytest's summary: its start-up time and its RSS now."""
    config.stash[engine_report_key] = [
        f"engine {name}: healthy {server.healthy_after_s:.1f} s after its (last) start, "
        f"RSS {server.rss_bytes() / 2**30:.2f} GiB"
        for name, server in servers.items()
        if server.process is not None and server.healthy_after_s
    ]


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    for line in config.stash.get(engine_report_key, []):
        terminalreporter.write_line(line)


NO_ENGINE_HINT = "run .ci/engine (or engine/install, then pytest tests/engine)"
SKIP_LINE = 1 + next(
    number for number, line in enumerate(Path(__file__).read_text().splitlines())
    if line.strip() == "pytest.skip(message)"
)  # fmt: skip


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Every test skipped for want of the engine's venv is reported at one place, so pytest's
    summary folds them into one line."""
    report = yield
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and longrepr[2].endswith(NO_ENGINE_HINT):
        report.longrepr = (__file__, SKIP_LINE, longrepr[2])
    return report


@pytest.fixture(scope="session")
def venv() -> Path:
    """The engine's venv; without it the test is skipped, or failed where it is required."""
    path = engine_venv()
    problem = venv_problem(path)
    if problem is not None:
        message = f"{problem}: {NO_ENGINE_HINT}"
        if ENGINE_REQUIRED:
            pytest.fail(f"the real-engine suite is required here, but {message}", pytrace=False)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def tiny_models(venv: Path) -> dict[str, Path]:
    """Every tiny model directory engine/models.py builds, by name (built once, reused)."""
    return build_models(venv, venv / "tiny-models")


@pytest.fixture(scope="session")
def engines(
    venv: Path,
    tiny_models: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
    pytestconfig: pytest.Config,
) -> Iterator[Engines]:
    models = tiny_models
    # A directory of its own (not the pytest tmp tree) and resolved: vLLM compares real paths.
    media_root = Path(tempfile.mkdtemp(prefix="engine-audio-")).resolve()
    workdir = tmp_path_factory.mktemp("engines")
    servers = {
        name: EngineServer(spec, venv, workdir / name)
        for name, spec in specs(models, media_root).items()
    }
    engines = Engines(servers, media_root, models)
    engines.start()
    try:
        yield engines
    finally:
        report(pytestconfig, servers)
        for server in servers.values():
            server.stop()
        shutil.rmtree(media_root, ignore_errors=True)


@pytest.fixture(scope="session")
def qwen_engine(engines: Engines) -> EngineServer:
    return engines.healthy(QWEN)


@pytest.fixture(scope="session")
def whisper_engine(engines: Engines) -> EngineServer:
    return engines.healthy(WHISPER)


@pytest.fixture(scope="session")
def qwen_replicas(engines: Engines) -> tuple[EngineServer, EngineServer]:
    """Two replicas of the tiny Qwen2-Audio: `qwen_engine` and a second server like it."""
    return engines.healthy(QWEN), engines.healthy(QWEN_REPLICA)


@pytest.fixture(scope="session")
def router_venv() -> Path:
    """vllm-router's venv; without it the test is skipped, or failed where it is required."""
    path = engine_router.router_venv()
    problem = engine_router.router_problem(path)
    if problem is not None:
        if ENGINE_REQUIRED:
            pytest.fail(f"the real-engine suite is required here, but {problem}", pytrace=False)
        pytest.skip(problem)
    return path


@pytest.fixture(scope="session")
def smg_venv() -> Path:
    """SMG's venv; without it the test is skipped, or failed where it is required."""
    path = find_smg_venv()
    problem = smg_problem(path)
    if problem is not None:
        if ENGINE_REQUIRED:
            pytest.fail(f"the real-engine suite is required here, but {problem}", pytrace=False)
        pytest.skip(problem)
    return path


RouterFactory = Callable[..., Awaitable[RouterServer]]


@pytest.fixture
async def make_router(
    qwen_replicas: tuple[EngineServer, EngineServer], router_venv: Path, tmp_path: Path
) -> AsyncIterator[RouterFactory]:
    """`await make_router(policy, flags)`: a started vllm-router in front of both replicas."""
    routers: list[RouterServer] = []

    async def start(
        policy: str, flags: Sequence[str] = engine_router.RECOVERY_FLAGS
    ) -> RouterServer:
        urls = [replica.url for replica in qwen_replicas]
        router = RouterServer(router_venv, urls, policy, tmp_path, flags)
        routers.append(router)
        return await asyncio.to_thread(router.start)

    yield start
    for router in routers:
        await asyncio.to_thread(router.stop)


@pytest.fixture(scope="session")
def qwen_tokens(engines: Engines) -> dict[str, int]:
    """The tiny Qwen2-Audio's special tokens by name (`<|AUDIO|>` is 415), from its tokenizer."""
    return special_tokens(engines.models["qwen2-audio"])


@pytest.fixture
def clip_dir(engines: Engines, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A folder of the test's own under the engine's allowed media root (the gateway's root)."""
    path = Path(tempfile.mkdtemp(prefix="t-", dir=engines.media_root))
    yield path
    shutil.rmtree(path, ignore_errors=True)
