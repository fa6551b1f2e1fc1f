"""Per upstream model: whether its clips go by reference, learned from how its references fare.

A model's clips go by reference while that works. Two things switch it to data (every part
keeps its data and its uuid, so a vLLM that can use the uuid still caches by it):

- **misses**: of the last `WINDOW` references to clips whose data the model accepted moments
  before (`held.RECENT_SECONDS`), `miss_ratio` or more missed (once `MIN_SAMPLES` are in): the
  layout forgets clips at once (a router that drops the uuid of parts with data, several vLLM
  API servers each with its own cache, a processor cache of 0 GB);
- **a refusal**: a request with uuid-only parts got a 400 that is not a cache miss, and the
  same request with the data succeeded (Voxtral's mistral-common validation, a proxy that
  refuses them). A client's own bad request fails with data too, and switches nothing.

A switch by misses is tried again after `retry_seconds`, doubled each time a trial trips it
again (at most `MAX_RETRY_SECONDS`). In a trial each clip goes by reference until it misses
once, so a trial costs at most one miss per clip; the trial ends when `MIN_SAMPLES` references
are in below the ratio. A refusal is kept for the run, as is a model `refuses_uuid_only` names
(a model known up front to refuse uuid-only parts: its clips never go by reference).

State is per process (per worker with `[server] workers`), touched only from the event loop.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from cachetools import LRUCache

from ..metrics import GatewayMetrics
from .held import ClipKey

log = logging.getLogger("gateway.references")

WINDOW = 32  # references a model's miss ratio is taken over
MIN_SAMPLES = 8  # references needed before the ratio can switch a model
MAX_RETRY_SECONDS = 3600.0
MAX_MODELS = 1024  # models with state (a client names the model: bounded)
MAX_TRIAL_CLIPS = 100_000  # clips that missed in one trial, remembered to send their data

Mode = Literal["reference", "data", "trial"]
Reason = Literal["misses", "refused", "profile"]

CHECK_MISSES = (
    "check: a router or proxy in front of vLLM that rewrites request bodies (SMG drops the "
    "uuid of parts with data unless started with --max-buffered-request-bytes 0), vLLM's "
    "API-server count (each API server keeps its own cache: --api-server-count 1, or one port "
    "per API server behind a router with the clip key), and --mm-processor-cache-gb "
    "(0 turns the cache off); a vLLM replica that just restarted or left a router's ring misses "
    "the references to the clips it held too, and then references come back with the retry"
)
CHECK_REFUSED = (
    "check: the model's tokenizer mode (--tokenizer-mode mistral refuses uuid-only parts), "
    "--mm-processor-cache-gb (0 turns the cache off), a proxy that validates audio parts"
)


def never(model: str) -> bool:
    """The default `refuses_uuid_only`: no model is known up front to refuse them."""
    return False


@dataclass
class _Model:
    mode: Mode = "reference"
    reason: Reason | None = None
    detail: str = ""
    retry_at: float = 0.0  # the clock's time a switch by misses is tried again
    retry_seconds: float = 0.0  # the wait before the next trial (0: no switch yet)
    switches: int = 0
    samples: deque[bool] = field(default_factory=lambda: deque(maxlen=WINDOW))  # True: missed
    missed: set[ClipKey] = field(default_factory=set)  # in this trial: they go with data


class ModelReferences:
    """Which models' clips may go by reference now; told how each reference fared."""

    def __init__(
        self,
        metrics: GatewayMetrics,
        *,
        miss_ratio: float,
        retry_seconds: float,
        refuses_uuid_only: Callable[[str], bool] = never,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.miss_ratio = miss_ratio
        self.retry_seconds = retry_seconds
        self.refuses_uuid_only = refuses_uuid_only
        self._clock = clock
        self._models: LRUCache[str, _Model] = LRUCache(maxsize=MAX_MODELS)
        self._switches = metrics.reference_switches
        metrics.reference_data_models.set_function(self.data_models)

    def references(self, model: str, keys: Iterable[ClipKey]) -> frozenset[ClipKey]:
        """Those of `keys` (clips the record holds) that may go by reference to `model` now."""
        if self.refuses_uuid_only(model):
            return frozenset()
        state = self._models.get(model)
        if state is None:
            return frozenset(keys)
        if state.mode == "data" and state.reason == "misses" and self._clock() >= state.retry_at:
            self._start_trial(model, state)
        if state.mode == "data":
            return frozenset()
        return frozenset(key for key in keys if key not in state.missed)

    def fared(self, model: str, keys: Iterable[ClipKey], *, missed: bool) -> None:
        """A request sent these clips (each recorded moments before) by reference to `model`:
        it missed, or it did not."""
        state = self._state(model)
        if state.mode == "data":
            return  # sent before the switch
        state.samples.append(missed)
        if missed and state.mode == "trial" and len(state.missed) < MAX_TRIAL_CLIPS:
            state.missed.update(keys)
        if len(state.samples) < MIN_SAMPLES:
            return
        misses = sum(state.samples)
        if misses >= self.miss_ratio * len(state.samples):
            detail = f"{misses} of its last {len(state.samples)} references missed"
            self._switch(model, state, "misses", detail)
        elif state.mode == "trial":
            self._end_trial(model, state)

    def refused(self, model: str, message: str) -> None:
        """`model` answered uuid-only parts with `message` (a 400 that is not a cache miss),
        and the same request with the data succeeded."""
        state = self._state(model)
        if state.reason != "refused":
            self._switch(model, state, "refused", f"it answered uuid-only parts: {message!r}")

    def data_models(self) -> int:
        """Models whose clips go with data now (for the metrics' gauge)."""
        return sum(state.mode == "data" for state in self._models.values())

    def status(self) -> dict[str, dict[str, Any]]:
        """Each model the gateway switched at least once, for `/gateway/health`."""
        now = self._clock()
        shown: dict[str, dict[str, Any]] = {}
        for model, state in self._models.items():
            if not state.switches:
                continue
            entry: dict[str, Any] = {"mode": state.mode, "reason": state.reason}
            entry |= {"detail": state.detail, "switches": state.switches}
            if state.mode == "data" and state.reason == "misses":
                entry["retry_in_seconds"] = max(0, round(state.retry_at - now))
            shown[model] = entry
        return shown

    def _state(self, model: str) -> _Model:
        state = self._models.get(model)
        if state is None:
            self._models[model] = state = _Model()
        return state

    def _switch(self, model: str, state: _Model, reason: Reason, detail: str) -> None:
        state.mode, state.reason, state.detail = "data", reason, detail
        state.switches += 1
        state.samples.clear()
        state.missed.clear()
        self._switches.labels("data", reason).inc()
        if reason == "refused":
            log.warning(
                "model %r: clips go with their data (and uuid) from now on, for this run: %s, "
                "and the same request with the data succeeded; %s",
                model,
                detail,
                CHECK_REFUSED,
            )
            return
        wait = self.retry_seconds if not state.retry_seconds else 2 * state.retry_seconds
        state.retry_seconds = min(wait, MAX_RETRY_SECONDS)
        state.retry_at = self._clock() + state.retry_seconds
        log.warning(
            "model %r: clips go with their data (and uuid) instead of by reference: %s moments "
            "after vLLM accepted their data, so this layout forgets clips; %s. References are "
            "tried again in %.0f s",
            model,
            detail,
            CHECK_MISSES,
            state.retry_seconds,
        )

    def _start_trial(self, model: str, state: _Model) -> None:
        state.mode = "trial"
        self._switches.labels("trial", "misses").inc()
        log.info("model %r: trying references again (each clip until it misses once)", model)

    def _end_trial(self, model: str, state: _Model) -> None:
        state.mode, state.reason, state.detail = "reference", None, ""
        state.retry_seconds = 0.0
        state.missed.clear()
        self._switches.labels("reference", "misses").inc()
        log.warning("model %r: references work again; clips go by reference", model)
