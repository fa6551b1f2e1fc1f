"""One LiteLLM proxy for the whole session, in front of real gateway processes in front of the
stub upstream, all started from docs/guides/litellm.md's recipe (tests/litellm/recipe.py).

    client (openai SDK) -> LiteLLM proxy -> gateway (server.api_keys set) -> stub upstream
                                         -> gateway whose upstream is down (the 5xx model)

LiteLLM runs from its own venv (`.ci/litellm/install`; another one with LITELLM_VENV). The
stub writes every chat body it receives to a JSONL file, which is what the tests read to say
what reached the upstream; the gateways' /gateway/metrics say what reached them."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.audio.samples import write_tone
from tests.litellm import recipe
from tests.litellm.processes import (
    LOG_TAIL_LINES,
    Server,
    free_port,
    gateway,
    litellm_proxy,
    python_env,
    running,
)
from tests.litellm.venv import require_litellm

STUB_READY_SECONDS = 60.0  # guards against hangs on a loaded machine, never assertions
DOWN_MODEL = "qwen2-audio-down"  # the suite's own model group: a gateway with no upstream


@dataclass(frozen=True)
class Deployment:
    """What a test needs of the running chain."""

    litellm_url: str
    master_key: str
    model: str
    down_model: str
    gateway_url: str
    down_gateway_url: str
    gateway_key: str
    audio_root: Path
    outside: Path  # a directory beside the root, not under it
    body_log: Path
    litellm: Server


@pytest.fixture(scope="session")
def litellm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("litellm")


@pytest.fixture(scope="session")
def audio_root(litellm_home: Path) -> Path:
    root = litellm_home / "audio"
    root.mkdir()
    write_tone(root / "a.wav", 0.25, 440.0)
    write_tone(root / "b.wav", 0.5, 660.0)
    outside = litellm_home / "outside"
    outside.mkdir()
    write_tone(outside / "secret.wav", 0.25, 550.0)
    return root


@pytest.fixture(scope="session")
def stub(litellm_home: Path, audio_root: Path) -> Iterator[tuple[str, Path]]:
    """`python -m gateway.stub_upstream`, recording the chat bodies it receives."""
    port, body_log = free_port(), litellm_home / "stub-bodies.jsonl"
    argv = [sys.executable, "-m", "gateway.stub_upstream", "--port", str(port)]
    argv += ["--record-bodies", str(body_log)]
    url = f"http://127.0.0.1:{port}"
    log = litellm_home / "stub.log"
    with running("the stub upstream", argv, log=log, ready_url=f"{url}/health",
                 ready_seconds=STUB_READY_SECONDS, env=python_env()):  # fmt: skip
        yield url, body_log


@pytest.fixture(scope="session")
def deployment(
    litellm_home: Path, audio_root: Path, stub: tuple[str, Path], litellm_executable: Path
) -> Iterator[Deployment]:
    """The whole chain, started once: two gateways, then LiteLLM with the page's config plus
    the suite's DOWN_MODEL group."""
    stub_url, body_log = stub
    key, master_key = secrets.token_hex(32), "sk-" + secrets.token_hex(32)
    dead_upstream = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with (
        gateway(litellm_home, "gateway", stub_url, audio_root, key) as gateway_url,
        gateway(litellm_home, "gateway-down", dead_upstream, audio_root, key) as down_url,
    ):
        config = recipe.litellm_config()
        model = config["model_list"][0]["model_name"]
        config["model_list"].append(_down_group(config["model_list"][0], down_url))
        with litellm_proxy(litellm_executable, litellm_home, config, gateway_url=gateway_url,
                           gateway_key=key, master_key=master_key) as (url, proxy):  # fmt: skip
            yield Deployment(
                litellm_url=url,
                master_key=master_key,
                model=model,
                down_model=DOWN_MODEL,
                gateway_url=gateway_url,
                down_gateway_url=down_url,
                gateway_key=key,
                audio_root=audio_root,
                outside=audio_root.parent / "outside",
                body_log=body_log,
                litellm=proxy,
            )


def _down_group(group: dict[str, Any], api_base: str) -> dict[str, Any]:
    """The page's model group again, under DOWN_MODEL, in front of the gateway with no upstream
    (api_key stays the page's os.environ/ reference)."""
    params = {**group["litellm_params"], "api_base": f"{api_base}/v1"}
    return {**group, "model_name": DOWN_MODEL, "litellm_params": params}


@pytest.fixture(scope="session")
def litellm_executable() -> Path:
    return require_litellm()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report carries the tail of each server's log (LiteLLM's first)."""
    report = yield
    deployment = getattr(item, "funcargs", {}).get("deployment")
    if report.failed and isinstance(deployment, Deployment):
        home = deployment.body_log.parent
        for name in ("litellm", "gateway", "gateway-down", "stub"):
            log = home / f"{name}.log"
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
            report.sections.append((f"{name}.log (tail)", tail))
    return report
