"""The "Many replicas" guide's configs, read back from docs/guides/many-replicas.md so the
two-replica tests run what the page says: the gateway's config (```toml title="gateway.toml"```),
vllm-router's command (```bash title="start vllm-router"```) and SMG's (```bash title="start
SMG"```). A test run fills in only what it must choose itself (its ports, the replicas' URLs, the
clip root); the rest comes from the page."""

from __future__ import annotations

import shlex
import tomllib
from dataclasses import dataclass
from typing import Any

from tests.litellm.recipe import REPO_ROOT, blocks

GUIDE = REPO_ROOT / "docs" / "guides" / "many-replicas.md"
GATEWAY_TITLE = "gateway.toml"
ROUTER_TITLE = "start vllm-router"
SMG_TITLE = "start SMG"
PROGRAMS = {ROUTER_TITLE: ["vllm-router"], SMG_TITLE: ["smg", "launch"]}  # each block's command
RUN_CHOSEN_FLAGS = frozenset({"--host", "--port", "--prometheus-port"})  # each takes one value
WORKERS_FLAG = "--worker-urls"  # takes the list of replicas


def gateway_sections(*, key: bool = True) -> dict[str, Any]:
    """The page's gateway config less what a test server chooses itself (`[server]`, the
    upstream URL, the audio root); `key=False`: the same gateway without `[routing]`."""
    config = tomllib.loads(blocks(GUIDE.read_text())[GATEWAY_TITLE])
    del config["server"], config["upstream"]["url"], config["audio"]["root"]
    if not key:
        del config["routing"]
    return {section: values for section, values in config.items() if values}


@dataclass(frozen=True)
class RouterCommand:
    """A router command of the page: its policy and its other flags, less the run's own."""

    policy: str
    flags: list[str]


def router_command(title: str = ROUTER_TITLE) -> RouterCommand:
    """The one command of the start block `title` (vllm-router's or SMG's), split as a shell
    would: `--worker-urls` and the run's own flags dropped, `--policy` taken apart, every other
    flag kept with its value."""
    text = blocks(GUIDE.read_text())[title]
    argv = shlex.split(text.replace("\\\n", " "), comments=True)
    program = PROGRAMS[title]
    assert argv[: len(program)] == program, f"the page's command changed: {shlex.join(argv)}"
    options: dict[str, list[str]] = {}
    for word in argv[len(program) :]:
        if word.startswith("--"):
            options[word] = []
        else:
            options[next(reversed(options))].append(word)
    policy = options.pop("--policy", [""])[0]
    assert policy, f"no --policy in the {title!r} block of {GUIDE}"
    flags = [
        part
        for flag, values in options.items()
        if flag not in RUN_CHOSEN_FLAGS and flag != WORKERS_FLAG
        for part in (flag, *values)
    ]
    return RouterCommand(policy, flags)
