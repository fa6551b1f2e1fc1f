"""API keys: the gateway as the front door, and the key it shows the upstream.

With `server.api_keys` set, every request under /v1 (WebSocket upgrades included) must carry
`Authorization: Bearer <one of them>`. The check is a middleware, so it runs before any handler
reads a body or touches a file: an anonymous client cannot learn which audio paths exist.
Like vLLM's own `--api-key`: routes outside /v1 (`/health`, `/metrics`, `/gateway/...`) stay
open, OPTIONS (CORS preflight, which carries no credentials) passes, and both sides are hashed
with sha256 before `hmac.compare_digest` runs over every key, so neither a key's length nor
which key matched shows in the timing.
"""

from __future__ import annotations

import hashlib
import hmac
import posixpath
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web
from aiohttp.typedefs import Middleware
from pydantic import SecretStr

from .errors import AuthenticationFailed

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# vLLM 0.33's `--api-key` guards /v1, /v2, /inference and /cohere; its docs warn that
# /invocations runs the same inference unguarded. The gateway is the front door: it guards both.
GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere", "/invocations")


def is_protected(method: str, path: str) -> bool:
    """Whether a request needs a key: anything under a guarded prefix (however many slashes
    lead, and before or after its dot segments are resolved: aiohttp keeps `/x/../v1/...` as
    it came, and an upstream may resolve it) but OPTIONS."""
    if method == "OPTIONS":
        return False
    trimmed = "/" + path.lstrip("/")
    # Without a dot, normalising cannot move a path under a prefix: skip it on the common path.
    return _guarded(trimmed) or ("." in trimmed and _guarded(posixpath.normpath(trimmed)))


def _guarded(path: str) -> bool:
    return any(path == prefix or path.startswith(prefix + "/") for prefix in GUARDED_PREFIXES)


def bearer_credential(authorization: str | None) -> str | None:
    """The credential of an `Authorization: Bearer <credential>` header (scheme in any case)."""
    if authorization is None:
        return None
    scheme, _, credential = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        return None
    return credential.strip()


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()


class ApiKeys:
    """The accepted keys, held as digests only."""

    def __init__(self, keys: Iterable[SecretStr]) -> None:
        self._digests = [_digest(key.get_secret_value()) for key in keys]

    def __bool__(self) -> bool:
        return bool(self._digests)

    def accept(self, authorization: str | None) -> bool:
        """Whether the header carries one of the keys; compares against every key, always."""
        credential = bearer_credential(authorization)
        offered = _digest(credential or "")
        matched = False
        for digest in self._digests:
            matched |= hmac.compare_digest(offered, digest)
        return matched and credential is not None


def require_api_key(keys: ApiKeys) -> Middleware:
    """The middleware refusing protected requests without a valid key (401, nothing read)."""

    @web.middleware
    async def api_key_check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if is_protected(request.method, request.path) and not keys.accept(
            request.headers.get("Authorization")
        ):
            message = _refusal(request.headers.get("Authorization"))
            raise AuthenticationFailed(message, code="invalid_api_key")
        return await handler(request)

    return api_key_check


def _refusal(authorization: str | None) -> str:
    if bearer_credential(authorization) is None:
        return "missing API key: send 'Authorization: Bearer <key>' (server.api_keys is set)"
    return "invalid API key: the Bearer credential is not one of server.api_keys"


def with_upstream_key(headers: list[tuple[str, str]], key: SecretStr) -> list[tuple[str, str]]:
    """The headers to send upstream: with `upstream.api_key` set, its Bearer credential in
    place of whatever Authorization the client sent; unchanged otherwise."""
    secret = key.get_secret_value()
    if not secret:
        return headers
    kept = [(name, value) for name, value in headers if name.lower() != "authorization"]
    kept.append(("Authorization", f"Bearer {secret}"))
    return kept
