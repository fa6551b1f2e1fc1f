"""The recipe and the lock, checked without LiteLLM (these run everywhere): the page's blocks
are there and say what the suite relies on, the gateway config is one the gateway accepts, and
the lock installs exactly the pinned LiteLLM, every file hash-checked."""

from __future__ import annotations

import re
from pathlib import Path

from gateway.config import Config
from tests.litellm import recipe
from tests.litellm.venv import PINNED_VERSION

LOCK = recipe.REPO_ROOT / ".ci" / "litellm" / "requirements.lock"
REQUIREMENTS_IN = recipe.REPO_ROOT / ".ci" / "litellm" / "requirements.in"
NEVER = {"1.82.7", "1.82.8"}


def test_the_litellm_config_is_one_hosted_vllm_group_with_cooldowns_off() -> None:
    config = recipe.litellm_config()
    [group] = config["model_list"]
    params = group["litellm_params"]
    assert params["model"].startswith("hosted_vllm/"), params
    assert params["api_base"] == "os.environ/GATEWAY_API_BASE", params
    assert params["api_key"] == "os.environ/GATEWAY_API_KEY", params
    assert config["router_settings"]["disable_cooldowns"] is True, config


def test_the_gateway_config_is_valid() -> None:
    Config.model_validate(recipe.gateway_config())


def test_the_start_block_exports_what_the_suite_sets_and_starts_litellm_on_loopback() -> None:
    start = recipe.start_command()
    assert set(start.exports) >= recipe.RUN_CHOSEN, start.exports
    argv = recipe.litellm_argv("/venv/bin/litellm", Path("/tmp/c.yaml"), 4001)
    assert argv == ["/venv/bin/litellm", "--config", "/tmp/c.yaml", "--host", "127.0.0.1",
                    "--port", "4001"]  # fmt: skip


def test_the_gateway_starts_as_the_suite_starts_it() -> None:
    lines = recipe.blocks()[recipe.GATEWAY_START_TITLE].splitlines()
    assert recipe.GATEWAY_START in lines, lines


def test_the_lock_pins_the_one_litellm_every_file_hashed() -> None:
    text = LOCK.read_text()
    pins = dict(re.findall(r"^([a-z0-9][a-z0-9._-]*)==(\S+) \\$", text, re.MULTILINE))
    assert pins["litellm"] == PINNED_VERSION
    assert f"litellm[proxy]=={PINNED_VERSION}" in REQUIREMENTS_IN.read_text()
    assert pins["litellm"] not in NEVER
    entries = re.split(r"^(?=[a-z0-9])", text, flags=re.MULTILINE)[1:]
    assert len(entries) == len(pins), "an entry without `name==version \\`"
    for entry in entries:
        assert "--hash=sha256:" in entry, entry.splitlines()[0]
