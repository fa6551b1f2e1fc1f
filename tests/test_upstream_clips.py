"""The record of clips the upstream holds: bounded LRU, keyed with the request's kwargs,
seeds in flight that followers wait for, forgetting on a miss and on a cache clear."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from gateway.metrics import GatewayMetrics
from gateway.references.held import NO_KWARGS, ClipKey, UpstreamClips, kwargs_key


def key(name: str, kwargs: bytes = NO_KWARGS) -> ClipKey:
    return (name, kwargs)


def record(max_clips: int = 100, wait_seconds: float = 0.0) -> UpstreamClips:
    return UpstreamClips(max_clips, wait_seconds, GatewayMetrics())


class TestKwargsKey:
    def test_no_kwargs_and_empty_kwargs_are_the_same(self) -> None:
        empty = [{}, {"mm_processor_kwargs": {}}, {"media_io_kwargs": None}]
        assert {kwargs_key(body) for body in empty} == {NO_KWARGS}

    @given(
        st.dictionaries(st.text(max_size=5), st.integers(), min_size=1),
        st.dictionaries(st.text(max_size=5), st.integers()),
    )
    def test_key_order_does_not_matter_but_values_do(
        self, processor: dict[str, int], media: dict[str, int]
    ) -> None:
        body = {"mm_processor_kwargs": processor, "media_io_kwargs": {"audio": media}}
        reversed_body = {
            "media_io_kwargs": {"audio": dict(reversed(media.items()))},
            "mm_processor_kwargs": dict(reversed(processor.items())),
        }
        assert kwargs_key(body) == kwargs_key(reversed_body) != NO_KWARGS
        changed = {**body, "mm_processor_kwargs": {**processor, "extra": "x"}}
        assert kwargs_key(changed) != kwargs_key(body)


class TestRecord:
    async def test_a_clip_is_held_once_its_data_succeeded(self) -> None:
        clips = record()
        references, sending = await clips.plan([key("a")])
        assert references == frozenset()
        sending.succeeded()
        references, sending = await clips.plan([key("a"), key("a", b"[1]")])
        assert references == {key("a")}  # the same clip under other kwargs is another key
        sending.ended()
        assert len(clips) == 1

    async def test_a_failed_request_records_nothing(self) -> None:
        clips = record()
        _, sending = await clips.plan([key("a")])
        sending.ended()
        sending.succeeded()  # too late: the request was over
        assert not clips.holds(key("a"))

    @given(st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=60))
    def test_lru_bound(self, names: list[str]) -> None:
        clips = record(max_clips=3)

        async def run() -> None:
            for name in names:
                _, sending = await clips.plan([key(name)])
                sending.succeeded()
            assert len(clips) == min(3, len(set(names)))
            assert clips.holds(key(names[-1]))

        asyncio.run(run())

    async def test_forget_and_forget_all(self) -> None:
        clips = record()
        _, sending = await clips.plan([key("a"), key("b")])
        sending.succeeded()
        clips.forget([key("a")])
        assert (clips.holds(key("a")), clips.holds(key("b"))) == (False, True)
        clips.forget_all()
        assert len(clips) == 0

    async def test_a_seed_sent_before_a_cache_clear_records_nothing(self) -> None:
        clips = record()
        _, sending = await clips.plan([key("a")])
        clips.forget_all()
        sending.succeeded()
        assert not clips.holds(key("a"))


class TestSeeds:
    async def test_without_wait_followers_send_data(self) -> None:
        clips = record(wait_seconds=0)
        _, seed = await clips.plan([key("a")])
        references, follower = await clips.plan([key("a")])
        assert references == frozenset()
        seed.ended()
        follower.ended()

    async def test_follower_goes_by_reference_as_soon_as_the_seed_succeeds(self) -> None:
        clips = record(wait_seconds=30)
        _, seed = await clips.plan([key("a")])
        follower = asyncio.create_task(clips.plan([key("a")]))
        await asyncio.sleep(0.01)
        assert not follower.done()  # waiting for the seed
        seed.succeeded()
        references, sending = await asyncio.wait_for(follower, 5)
        assert references == {key("a")}
        sending.ended()

    async def test_follower_goes_by_reference_when_the_wait_runs_out(self) -> None:
        clips = record(wait_seconds=0.05)
        _, seed = await clips.plan([key("a")])
        loop = asyncio.get_running_loop()
        started = loop.time()
        references, sending = await clips.plan([key("a")])
        assert references == {key("a")}  # the seed is still in flight: vLLM has it by now
        assert loop.time() - started >= 0.04
        seed.ended()
        sending.ended()

    async def test_follower_sends_data_when_the_seed_failed(self) -> None:
        clips = record(wait_seconds=30)
        _, seed = await clips.plan([key("a")])
        follower = asyncio.create_task(clips.plan([key("a")]))
        await asyncio.sleep(0.01)
        seed.ended()  # failed: nothing recorded
        references, sending = await asyncio.wait_for(follower, 5)
        assert references == frozenset()
        # ... and the follower is now the seed others wait for
        third = asyncio.create_task(clips.plan([key("a")]))
        await asyncio.sleep(0.01)
        assert not third.done()
        sending.succeeded()
        assert (await asyncio.wait_for(third, 5))[0] == {key("a")}

    async def test_the_wait_counts_from_when_the_seed_was_sent(self) -> None:
        clips = record(wait_seconds=0.05)
        _, seed = await clips.plan([key("a")])
        await asyncio.sleep(0.06)
        loop = asyncio.get_running_loop()
        started = loop.time()
        references, _ = await clips.plan([key("a")])
        assert references == {key("a")}
        assert loop.time() - started < 0.04  # no wait left
        seed.ended()
