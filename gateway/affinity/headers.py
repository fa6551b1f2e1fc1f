"""The headers that carry the clip key upstream (`[routing] affinity_headers`). Pure.

A name must be an HTTP token (RFC 9110 `tchar`s) and not one whose value the relay or the
HTTP framing owns, nor one a client relies on passing untouched:

- framing and hop-by-hop, as the relay drops them (`gateway.hop_headers`): Host,
  Content-Length, Expect, Transfer-Encoding, Connection, Keep-Alive, Upgrade, TE, Trailer,
  Trailers;
- what describes the body the gateway writes: Content-Type, Content-Encoding;
- credentials: Authorization, Cookie, and every `Proxy-*` header.

Names are compared in any case, and one name given twice in different cases is refused too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ..hop_headers import FRAMING_HEADERS, HOP_BY_HOP_HEADERS

TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110 section 5.6.2
# The relay's own (framing, hop-by-hop), the body's description, and credentials.
BODY_AND_CREDENTIALS = frozenset({"content-type", "content-encoding", "authorization", "cookie"})
REFUSED_NAMES = HOP_BY_HOP_HEADERS | FRAMING_HEADERS | BODY_AND_CREDENTIALS
REFUSED_PREFIX = "proxy-"


def check_header_names(names: Sequence[str]) -> Sequence[str]:
    """`names` if every one may carry the key; else ValueError saying which and why."""
    seen: dict[str, str] = {}
    for name in names:
        if not TOKEN.fullmatch(name):
            raise ValueError(f"{name!r} is not an HTTP header name (RFC 9110 token characters)")
        lowered = name.lower()
        if lowered in REFUSED_NAMES or lowered.startswith(REFUSED_PREFIX):
            raise ValueError(
                f"{name!r} is a header the relay or the client owns (framing, hop-by-hop, the "
                "body's type or encoding, or credentials); name another, e.g. 'X-Session-ID'"
            )
        if lowered in seen:
            raise ValueError(f"{seen[lowered]!r} and {name!r} name one header; give it once")
        seen[lowered] = name
    return names


def with_clip_key(
    headers: Iterable[tuple[str, str]], names: Sequence[str], key: str
) -> list[tuple[str, str]]:
    """`headers` with each of `names` set to `key`, once: a header of that name the client
    sent, in any case, is dropped."""
    dropped = {name.lower() for name in names}
    kept = [(name, value) for name, value in headers if name.lower() not in dropped]
    kept.extend((name, key) for name in names)
    return kept
