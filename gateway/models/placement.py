"""`Placement`: the rules of each served model name a request names.

Where a `[models."<name>"]` table names the `architecture`, that is the model's (an architecture
without a built-in profile is warned about at start-up and gets the global settings). Where
the operator is silent, the gateway looks, in this order (`[placement]`):

1. the upstream's `GET /v1/models` (`ask_upstream`): the card of the served name gives the model
   vLLM loaded (`root`; a LoRA adapter's base model's). A root that is a directory the gateway
   can read (`read_model_dirs`) gives its `config.json` or `params.json`; any other root is
   matched against the known repo names (`known.py`);
2. the served name itself against the known repo names (vLLM serves a model under its repo id
   unless `--served-model-name` says otherwise).

What is found is kept (at most `MAX_NAMES` names, the oldest dropped first); a name not placed
is looked for again after `retry_seconds`. A request never waits more than
`PLACE_WAIT_SECONDS` for a lookup (the lookup goes on, for the next ones) and a lookup never
fails one: a model not placed gets the global settings, and a debug line says so.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from ..config import Config
from .builtin import PROFILES
from .known import architecture_in_config, architecture_in_params, architecture_of_name, root_of
from .profile import ModelRules, resolve

log = logging.getLogger("gateway.models")

FetchModels = Callable[[], Awaitable[Any]]  # the upstream's /v1/models answer, parsed
PLACE_WAIT_SECONDS = 2.0  # the longest a request waits for its model's first lookup
CARDS_MIN_AGE_SECONDS = 5.0  # /v1/models is asked at most this often
MAX_NAMES = 1024
SHOWN_UNPLACED = 16  # names looked up in vain that /gateway/health lists (the latest)
MODEL_FILE_MAX_BYTES = 1024 * 1024  # config.json / params.json larger than this are not read

Found = tuple[str, str]  # (architecture, how it was placed)


class Placement:
    def __init__(self, config: Config, fetch_models: FetchModels | None = None) -> None:
        self._config = config
        self._fetch = fetch_models if config.placement.ask_upstream else None
        self._retry_seconds = config.placement.retry_seconds
        self._kept: OrderedDict[str, tuple[ModelRules, float | None]] = OrderedDict()
        self._looking: dict[str, asyncio.Task[ModelRules]] = {}
        self._cards: tuple[float, Any] | None = None  # (when, the answer)
        self._cards_task: asyncio.Task[Any] | None = None
        self._configured: dict[str, ModelRules] = {}
        for name, table in config.models.items():
            if table.architecture:
                self._configured[name] = self._configured_rules(name, table.architecture)

    def _configured_rules(self, name: str, architecture: str) -> ModelRules:
        if architecture not in PROFILES:
            log.warning(
                'models."%s".architecture = "%s": the gateway has no profile of that '
                "architecture; the model gets the global settings (and this table's values)",
                name,
                architecture,
            )
        return resolve(name, self._config, (architecture, "config"), PROFILES)

    def known(self) -> dict[str, ModelRules]:
        """The names with rules now, for /gateway/health: the configured ones, every one placed
        by a lookup, and the last `SHOWN_UNPLACED` looked up in vain."""
        kept = [(name, rules) for name, (rules, _) in self._kept.items()]
        placed = {name: rules for name, rules in kept if rules.placed}
        unplaced = [(name, rules) for name, rules in kept if not rules.placed]
        return {**dict(unplaced[-SHOWN_UNPLACED:]), **placed, **self._configured}

    async def rules(self, name: Any) -> ModelRules:
        """The rules of served model `name` (a request's `model`; anything but a string gets
        the global settings)."""
        if not isinstance(name, str):
            return resolve("", self._config, None, PROFILES)
        if (configured := self._configured.get(name)) is not None:
            return configured
        if (kept := self._kept_rules(name)) is not None:
            return kept
        task = self._looking.get(name)
        if task is None:
            task = asyncio.create_task(self._place(name))
            self._looking[name] = task
            task.add_done_callback(lambda _: self._looking.pop(name, None))
        try:
            async with asyncio.timeout(PLACE_WAIT_SECONDS):
                return await asyncio.shield(task)
        except TimeoutError:
            log.debug("model %r: not placed yet; this request gets the global settings", name)
            return resolve(name, self._config, None, PROFILES)

    def rules_offline(self, name: Any) -> ModelRules:
        """The rules of served model `name` as far as they are known without asking the
        upstream (the dataset tools): its `[models]` table, else the served name against the
        known repo names, else the global settings."""
        if not isinstance(name, str):
            return resolve("", self._config, None, PROFILES)
        if (configured := self._configured.get(name)) is not None:
            return configured
        return resolve(name, self._config, _by_served_name(name), PROFILES)

    def refuses_uuid_only(self, name: str) -> bool:
        """Whether model `name`'s profile (configured, or found for an earlier request) says
        it takes no uuid-only parts: the reference relay sends its clips with data."""
        rules = self._configured.get(name) or self._kept_rules(name)
        return rules is not None and not rules.profile.accepts_uuid_only_parts

    def _kept_rules(self, name: str) -> ModelRules | None:
        kept = self._kept.get(name)
        if kept is None:
            return None
        rules, expires = kept
        if expires is not None and time.monotonic() >= expires:
            del self._kept[name]
            return None
        return rules

    async def _place(self, name: str) -> ModelRules:
        try:
            found = await self._find(name)
        except Exception as exc:  # a lookup never fails a request
            log.debug("model %r: the lookup failed (%s: %s)", name, type(exc).__name__, exc)
            found = None
        rules = resolve(name, self._config, found, PROFILES)
        if rules.placed:
            log.info("model %r is %s (placed by %s)", name, rules.architecture, rules.placed_by)
        else:
            why = f"{found[0]} has no profile" if found else "its architecture was not found"
            log.debug("model %r: not placed (%s); it gets the global settings", name, why)
        expires = None if rules.placed else time.monotonic() + self._retry_seconds
        self._kept[name] = (rules, expires)
        self._kept.move_to_end(name)
        while len(self._kept) > MAX_NAMES:
            self._kept.popitem(last=False)
        return rules

    async def _find(self, name: str) -> Found | None:
        root = root_of(await self._upstream_cards(), name) if self._fetch is not None else None
        if root is not None:
            if self._config.placement.read_model_dirs and os.path.isabs(root):
                in_dir = await asyncio.to_thread(architecture_in_dir, root)
                if in_dir is not None:
                    return in_dir, f"model directory {root}"
            if (by_root := architecture_of_name(root)) is not None:
                return by_root, f"upstream root {root}"
        return _by_served_name(name)

    async def _upstream_cards(self) -> Any:
        """The upstream's /v1/models answer, asked at most every `CARDS_MIN_AGE_SECONDS`
        (one request for every lookup waiting); None when it could not be had."""
        now = time.monotonic()
        if self._cards is not None and now - self._cards[0] < CARDS_MIN_AGE_SECONDS:
            return self._cards[1]
        if self._cards_task is None or self._cards_task.done():
            self._cards_task = asyncio.create_task(self._fetch_cards())
        return await asyncio.shield(self._cards_task)

    async def _fetch_cards(self) -> Any:
        assert self._fetch is not None
        try:
            cards = await self._fetch()
        except Exception as exc:  # unreachable, an error status, not JSON: not placed now
            log.debug("GET /v1/models failed (%s: %s)", type(exc).__name__, exc)
            cards = None
        self._cards = (time.monotonic(), cards)
        return cards


def _by_served_name(name: str) -> Found | None:
    """Step 2: the served name itself against the known repo names."""
    by_name = architecture_of_name(name)
    return (by_name, "served name") if by_name is not None else None


def architecture_in_dir(root: str) -> str | None:
    """Blocking: the architecture a model directory's `config.json` (HF format) or
    `params.json` (Mistral format) says; None when neither is there, readable or telling."""
    found = architecture_in_config(_read_json(os.path.join(root, "config.json")), PROFILES)
    return found or architecture_in_params(_read_json(os.path.join(root, "params.json")))


def _read_json(path: str) -> Any:
    """A regular file's JSON (never a FIFO or device: opened without blocking, checked after
    opening), None when it is not there, not a regular file, too large or not JSON."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            data = handle.read(MODEL_FILE_MAX_BYTES + 1)
    except OSError:
        return None
    if len(data) > MODEL_FILE_MAX_BYTES:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None
