"""Several vLLM API servers, a layout that defeats references, for tests and the bench.

With `--api-server-count N` (or data parallelism with its internal load balancer) vLLM 0.32
gives each API-server process a processor cache of its own (`multimodal/cache/factories.py`:
IPC caching only with one API process), and the processes share one port, the kernel handing
each new connection to one of them. `ApiServers` holds one `MmProcessorCache` per process and
gives each connection the next process in turn (with `per_request`, each request: a proxy
balancing requests over N servers). The other layout that defeats them, a model refusing
uuid-only parts (`--tokenizer-mode mistral`), is `served.py`'s.
"""

from __future__ import annotations

from collections.abc import Iterator

from aiohttp import web

from .mm_cache import MmProcessorCache


class ApiServers:
    """One processor cache per API-server process; a connection stays with its process."""

    def __init__(self, caches: list[MmProcessorCache], *, per_request: bool = False) -> None:
        self.caches = caches
        self.per_request = per_request
        self._turn = 0
        self._by_connection: dict[int, MmProcessorCache] = {}

    def __iter__(self) -> Iterator[MmProcessorCache]:
        return iter(self.caches)

    def cache_for(self, request: web.Request) -> MmProcessorCache:
        """The cache of the process this request reached."""
        if len(self.caches) == 1:
            return self.caches[0]
        if self.per_request:
            return self._next()
        connection = id(request.protocol)
        cache = self._by_connection.get(connection)
        if cache is None:
            if len(self._by_connection) > 4096:  # closed connections' ids: forget them
                self._by_connection.clear()
            self._by_connection[connection] = cache = self._next()
        return cache

    def _next(self) -> MmProcessorCache:
        cache = self.caches[self._turn % len(self.caches)]
        self._turn += 1
        return cache
