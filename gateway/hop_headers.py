"""The header names one HTTP hop owns, for every part of the gateway that handles headers. Pure.

- `HOP_BY_HOP_HEADERS`: meaningful for one connection only (RFC 9110 section 7.6.1, and the
  older `Trailers`, `Proxy-Connection` some clients still send); never relayed.
- `FRAMING_HEADERS`: what the relay recomputes for the body it writes (aiohttp has already
  answered any `Expect: 100-continue`).

The relay drops both, with the names a `Connection` header lists (`named_in_connection`); the
clip key's header names (`affinity.headers`) may be none of them.
"""

from __future__ import annotations

from collections.abc import Iterable

HOP_BY_HOP_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
FRAMING_HEADERS = frozenset({"host", "content-length", "expect"})


def named_in_connection(values: Iterable[str]) -> set[str]:
    """The header names a `Connection` header lists: hop-by-hop for this hop only."""
    return {token.strip().lower() for value in values for token in value.split(",")}
