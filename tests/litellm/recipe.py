"""The "Behind LiteLLM" recipe as docs/guides/litellm.md gives it, read back so the suite runs
exactly what the page says: its code blocks are found by their titles (```yaml
title="litellm.yaml"``` and so on), the suite fills in only what a test run must choose itself
(ports, paths, secrets), and everything else comes from the page unchanged."""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
GUIDE = REPO_ROOT / "docs" / "guides" / "litellm.md"

LITELLM_CONFIG_TITLE = "litellm.yaml"
GATEWAY_CONFIG_TITLE = "gateway.toml"
START_TITLE = "start LiteLLM"
GATEWAY_START_TITLE = "start the gateway"
# How the suite starts each gateway (its key in the variable the page names, then `serve`).
GATEWAY_START = "AUDIO_GATEWAY_API_KEYS=$GATEWAY_API_KEY audio-gateway serve --config gateway.toml"
# The variables a run sets itself (a fresh secret, the gateway it started); every other
# `export` of the start block is taken as the page writes it.
RUN_CHOSEN = frozenset({"LITELLM_MASTER_KEY", "GATEWAY_API_BASE", "GATEWAY_API_KEY"})

_BLOCK = re.compile(r'^```(\w+) title="([^"]+)"\n(.*?)^```$', re.MULTILINE | re.DOTALL)
_EXPORT = re.compile(r"export ([A-Z_][A-Z0-9_]*)=(.+)")


@dataclass(frozen=True)
class StartCommand:
    """The start block: its exported variables and the `litellm` command's arguments."""

    exports: dict[str, str]
    argv: list[str]


def blocks(text: str | None = None) -> dict[str, str]:
    """The page's titled code blocks, {title: body}."""
    found = _BLOCK.findall(GUIDE.read_text() if text is None else text)
    return {title: body for _lang, title, body in found}


def litellm_config() -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(blocks()[LITELLM_CONFIG_TITLE])
    return config


def gateway_config() -> dict[str, Any]:
    return tomllib.loads(blocks()[GATEWAY_CONFIG_TITLE])


def start_command() -> StartCommand:
    """The start block's `export NAME=VALUE` lines (a trailing `# comment` dropped) and its
    one `litellm ...` line, split as a shell would."""
    exports: dict[str, str] = {}
    argv: list[str] = []
    for line in blocks()[START_TITLE].splitlines():
        line = line.split(" #", 1)[0].strip()
        if match := _EXPORT.fullmatch(line):
            exports[match[1]] = match[2]
        elif line.startswith("litellm "):
            argv = shlex.split(line)
    assert argv, f"no `litellm ...` line in the {START_TITLE!r} block of {GUIDE}"
    return StartCommand(exports, argv)


def litellm_environment(chosen: dict[str, str]) -> dict[str, str]:
    """The start block's variables: the page's literal values, and `chosen` for RUN_CHOSEN."""
    exports = start_command().exports
    assert set(chosen) == RUN_CHOSEN, sorted(chosen)
    missing = RUN_CHOSEN - set(exports)
    assert not missing, f"the start block no longer exports {sorted(missing)}"
    return {**{k: v for k, v in exports.items() if k not in RUN_CHOSEN}, **chosen}


def litellm_argv(executable: str, config: Path, port: int) -> list[str]:
    """The page's `litellm` command with its config file and port replaced."""
    argv = start_command().argv
    expected = ["litellm", "--config", LITELLM_CONFIG_TITLE, "--host", "127.0.0.1", "--port"]
    assert argv[:-1] == expected, f"the page's command changed: {shlex.join(argv)}"
    return [executable, "--config", str(config), *argv[3:-1], str(port)]
