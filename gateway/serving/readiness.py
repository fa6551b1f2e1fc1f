"""`GET /gateway/ready`: whether this gateway should get traffic (a readiness probe).

Ready means: no drain has started, every worker of the gateway serves (`[server] workers`:
`peers.py`), every local audio root is still a directory the gateway may list and enter (an
unmounted volume is not ready: `audio_root_unreadable`), and the upstream answered its own
`GET /health` with 200. The upstream probe is the gateway's own request, built
here with no header of the prober's (the pool adds `Host` and, when configured,
`upstream.api_key`). A probe's result is kept for `RESULT_TTL_SECONDS`, and at most one probe
is in flight: concurrent readiness calls share it, so a burst of probers costs the upstream one
request and the disk one look at each root.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aiohttp import web

from ..audio.roots import LocalRoot, unreadable_roots
from ..upstream.pool import UpstreamPool

RESULT_TTL_SECONDS = 1.0  # an upstream answer stands for this long
PROBE_TIMEOUT_SECONDS = 5.0  # no answer by then: not ready (Kubernetes' own default is 1 s)


@dataclass(frozen=True, slots=True)
class Verdict:
    """A readiness answer: `reason` is "ready" or a code saying what is wrong."""

    ready: bool
    reason: str
    message: str

    def response(self) -> web.Response:
        body: dict[str, str] = {"status": "ready" if self.ready else "not_ready"}
        if not self.ready:
            body |= {"reason": self.reason, "message": self.message}
        return web.json_response(
            body, status=200 if self.ready else 503, headers={"Cache-Control": "no-store"}
        )


READY = Verdict(True, "ready", "the upstream answers GET /health")
DRAINING = Verdict(
    False, "draining", "the gateway is shutting down (drain started by SIGTERM or SIGINT)"
)


class Readiness:
    """The readiness check over one upstream pool and the local audio `roots`; `draining()`
    says whether a drain started, `peers()` (with workers) whether the other workers serve."""

    def __init__(
        self,
        pool: UpstreamPool,
        draining: Callable[[], bool],
        roots: Sequence[LocalRoot] = (),
        peers: Callable[[], Verdict | None] | None = None,
    ) -> None:
        self._pool = pool
        self._draining = draining
        self._peers = peers
        self._roots = tuple(roots)
        self._verdict: Verdict | None = None
        self._verdict_at = 0.0
        self._probe: asyncio.Task[Verdict] | None = None

    async def check(self) -> Verdict:
        if self._draining():
            return DRAINING
        if self._peers is not None and (verdict := self._peers()) is not None:
            return verdict
        if self._verdict is not None and time.monotonic() - self._verdict_at < RESULT_TTL_SECONDS:
            return self._verdict
        if self._probe is None:
            self._probe = asyncio.create_task(self._run_probe())
        # Shielded: a prober that hangs up must not cancel the probe the others wait for.
        verdict = await asyncio.shield(self._probe)
        return DRAINING if self._draining() else verdict

    async def _run_probe(self) -> Verdict:
        try:
            verdict = await self._probe_roots() or await self._probe_upstream()
            self._verdict, self._verdict_at = verdict, time.monotonic()
            return verdict
        finally:
            self._probe = None

    async def _probe_roots(self) -> Verdict | None:
        """Not ready while a local root is not a readable directory; None when all are."""
        if not self._roots:
            return None
        problems = await asyncio.to_thread(unreadable_roots, self._roots)  # blocking stats
        if not problems:
            return None
        return Verdict(False, "audio_root_unreadable", "; ".join(problems))

    async def _probe_upstream(self) -> Verdict:
        pool = self._pool
        label = pool.origin.label
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_SECONDS):
                response = await pool.request("GET", f"{pool.path_prefix}/health", [], None)
                try:
                    await response.read()
                finally:
                    response.close()
        except TimeoutError:  # the pool's own UpstreamTimedOut included
            message = f"the upstream {label} did not answer GET /health within"
            return Verdict(False, "upstream_timeout", f"{message} {PROBE_TIMEOUT_SECONDS:g} s")
        except (ConnectionError, OSError) as exc:
            message = f"the upstream {label} is unreachable: {exc.__class__.__name__}: {exc}"
            return Verdict(False, "upstream_unreachable", message)
        if response.status != 200:
            message = f"the upstream {label} answered GET /health with {response.status}"
            return Verdict(False, "upstream_status", message)
        return READY

    def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
