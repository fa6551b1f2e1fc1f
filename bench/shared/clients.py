"""How the bench's HTTP clients hold their connections, and a count of the ones they open.

`keep-alive` (the default) is what NeMo Gym's aiohttp sessions and the openai SDK's httpx
client do: a pool whose connections serve request after request. `per-request` opens a
connection for every request and closes it after the answer (aiohttp's `force_close`, which
also sends `Connection: close`), so the server under test pays an accept and a close each time,
which a vLLM behind the gateway's own pool never pays. Every session counts the connections it
opens, so a result can show the pool was reused (a handful per run) or not (one per request).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp

AIOHTTP_IDLE_S = 15.0  # aiohttp's own keep-alive idle timeout: NeMo Gym's sessions use it
# vLLM's uvicorn closes a connection idle 5 s (VLLM_HTTP_TIMEOUT_KEEP_ALIVE); a client that
# keeps it longer may send on a connection the server is closing, and get a broken pipe.
VLLM_IDLE_S = 4.0
KEEP_ALIVE = "keep-alive"
PER_REQUEST = "per-request"
CLIENT_CONNECTIONS = (KEEP_ALIVE, PER_REQUEST)
DESCRIPTIONS = {
    KEEP_ALIVE: "keep-alive (a pool that reuses its connections, as aiohttp and httpx keep theirs)",
    PER_REQUEST: "one connection per request (--connection-per-request)",
}


def connections_mode(per_request: bool) -> str:
    return PER_REQUEST if per_request else KEEP_ALIVE


@dataclass
class ConnectionCount:
    """Connections a session opened (a trace of aiohttp's connection creation)."""

    opened: int = 0

    def trace(self) -> aiohttp.TraceConfig:
        config = aiohttp.TraceConfig()
        config.on_connection_create_end.append(self._opened)
        return config

    async def _opened(self, *_: Any) -> None:
        self.opened += 1


def client_session(
    connections: str,
    limit: int = 0,
    timeout_s: float = 300.0,
    idle_s: float = AIOHTTP_IDLE_S,
    **kwargs: Any,
) -> tuple[aiohttp.ClientSession, ConnectionCount]:
    """A session holding its connections as `connections` says, and its connection count.
    `limit` caps the pool (0: no cap), `idle_s` is how long a kept connection may sit idle;
    extra keyword arguments go to the session."""
    if connections not in CLIENT_CONNECTIONS:
        raise ValueError(f"unknown client connections mode {connections!r}")
    count = ConnectionCount()
    if connections == PER_REQUEST:
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, force_close=True)
    else:
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=0, keepalive_timeout=idle_s)
    session = aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=timeout_s),
        trace_configs=[count.trace()],
        **kwargs,
    )
    return session, count


def describe(connections: str, opened: int, requests: int) -> dict[str, Any]:
    """The result fields every bench writes about its clients."""
    return {
        "connections": connections,
        "description": DESCRIPTIONS[connections],
        "connections_opened": opened,
        "requests": requests,
        "connections_per_request": opened / requests if requests else None,
    }


class ClientPools:
    """One client session per target (each its own pool, as separate clients have), made on
    first use; `opened` counts the connections all of them opened."""

    def __init__(self, connections: str, timeout_s: float) -> None:
        self.connections = connections
        self.timeout_s = timeout_s
        self._sessions: dict[str, tuple[aiohttp.ClientSession, ConnectionCount]] = {}

    def session(self, target: str, idle_s: float = AIOHTTP_IDLE_S) -> aiohttp.ClientSession:
        if target not in self._sessions:
            self._sessions[target] = client_session(
                self.connections, timeout_s=self.timeout_s, idle_s=idle_s
            )
        return self._sessions[target][0]

    def restart_count(self) -> None:
        """Count from now on (after a warm-up, say); the pools keep their connections."""
        for _, count in self._sessions.values():
            count.opened = 0

    @property
    def opened(self) -> int:
        return sum(count.opened for _, count in self._sessions.values())

    async def close(self) -> None:
        for session, _ in self._sessions.values():
            await session.close()
