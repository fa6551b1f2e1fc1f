"""The per-model switch between references and data (`references/models.py`), with a clock
the test moves: misses right after the data was accepted switch a model to data, a trial after
`retry_seconds` costs at most one miss per clip, a refusal and a model known to refuse are
kept on data."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from gateway.metrics import GatewayMetrics
from gateway.references.held import NO_KWARGS, ClipKey
from gateway.references.models import MAX_RETRY_SECONDS, MIN_SAMPLES, WINDOW, ModelReferences

RATIO = 0.25
RETRY = 300.0
M = "model"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def models(clock: Clock | None = None, **kwargs: object) -> ModelReferences:
    return ModelReferences(
        GatewayMetrics(),
        miss_ratio=RATIO,
        retry_seconds=RETRY,
        clock=clock or Clock(),
        **kwargs,  # type: ignore[arg-type]
    )


def key(name: str) -> ClipKey:
    return (name, NO_KWARGS)


KEYS = frozenset({key("a"), key("b")})


def switched(state: ModelReferences) -> bool:
    return not state.references(M, KEYS)


@given(st.lists(st.booleans(), max_size=3 * WINDOW))
def test_the_switch_is_the_miss_ratio_of_the_last_references(outcomes: list[bool]) -> None:
    state = models()
    for index, missed in enumerate(outcomes):
        state.fared(M, KEYS, missed=missed)
        window = outcomes[max(0, index + 1 - WINDOW) : index + 1]
        tripped = len(window) >= MIN_SAMPLES and sum(window) >= RATIO * len(window)
        if tripped:
            assert switched(state)
            return
        assert not switched(state)


@given(st.permutations([True] * 3 + [False] * 5))
def test_a_third_missing_trips_it(first: list[bool]) -> None:
    """Two vLLM API servers miss about 45%: a third must be caught within MIN_SAMPLES."""
    assert sum(first) >= math.ceil(MIN_SAMPLES / 3)
    state = models()
    for missed in first:
        state.fared(M, KEYS, missed=missed)
    assert switched(state)


def switch_by_misses(state: ModelReferences, keys: frozenset[ClipKey] = KEYS) -> None:
    for _ in range(MIN_SAMPLES):
        state.fared(M, keys, missed=True)
    assert switched(state)


def test_a_switch_by_misses_is_tried_again_after_retry_seconds_doubling() -> None:
    clock = Clock()
    state = models(clock)
    switch_by_misses(state)
    clock.now += RETRY - 1
    assert switched(state)
    assert state.status()[M]["retry_in_seconds"] == 1
    clock.now += 1
    assert state.references(M, KEYS) == KEYS  # the trial
    assert state.status()[M]["mode"] == "trial"
    switch_by_misses(state)  # fails again: twice as long
    clock.now += 2 * RETRY - 1
    assert switched(state)
    clock.now += 1
    assert not switched(state)


def test_the_wait_before_a_trial_is_bounded() -> None:
    clock = Clock()
    state = models(clock)
    for _ in range(20):
        switch_by_misses(state)
        clock.now += MAX_RETRY_SECONDS
        assert not switched(state)


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.booleans()), max_size=60))
def test_a_trial_costs_at_most_one_miss_per_clip(outcomes: list[tuple[str, bool]]) -> None:
    clock = Clock()
    state = models(clock)
    switch_by_misses(state)
    clock.now += RETRY
    misses: dict[str, int] = {}
    for name, missed in outcomes:
        if state.status()[M]["mode"] == "reference":
            break  # the trial went well: references are back
        if key(name) not in state.references(M, {key(name)}):
            continue  # goes with its data: cannot miss
        state.fared(M, {key(name)}, missed=missed)
        misses[name] = misses.get(name, 0) + missed
    assert all(count <= 1 for count in misses.values())


def test_a_good_trial_brings_references_back() -> None:
    clock = Clock()
    state = models(clock)
    switch_by_misses(state)
    clock.now += RETRY
    for _ in range(MIN_SAMPLES):
        assert state.references(M, KEYS) == KEYS
        state.fared(M, KEYS, missed=False)
    assert state.status()[M]["mode"] == "reference"
    switch_by_misses(state)  # the wait starts over at retry_seconds
    clock.now += RETRY
    assert not switched(state)


def test_outcomes_of_references_sent_before_the_switch_are_ignored() -> None:
    state = models()
    switch_by_misses(state)
    for _ in range(WINDOW):
        state.fared(M, KEYS, missed=False)
    assert switched(state)


def test_a_refusal_is_kept_for_the_run() -> None:
    clock = Clock()
    state = models(clock)
    state.refused(M, "2 validation errors for AudioURLChunk")
    clock.now += 10 * MAX_RETRY_SECONDS
    assert switched(state)
    assert state.status()[M]["reason"] == "refused"
    assert state.data_models() == 1


def test_a_model_known_to_refuse_never_gets_a_reference() -> None:
    state = models(refuses_uuid_only=lambda model: model == "voxtral")
    assert state.references("voxtral", KEYS) == frozenset()
    assert state.references("qwen", KEYS) == KEYS


def test_models_are_apart() -> None:
    state = models()
    switch_by_misses(state)
    assert state.references("other", KEYS) == KEYS
