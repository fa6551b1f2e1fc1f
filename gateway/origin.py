"""Where the upstream lives: `upstream.url` parsed once into what every client of it needs.

http://host:port[/prefix]     plain TCP
https://host:port[/prefix]    TLS, verified against the system store (+ `upstream.ca_file`)
unix:///path/to/vllm.sock     vLLM's --uds mode: HTTP over a Unix socket, no TCP hop
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

UNIX_HOST_HEADER = "localhost"  # what curl --unix-socket sends; uvicorn does not check it


@dataclass(frozen=True, slots=True)
class UpstreamOrigin:
    """The parsed upstream. `socket_path` is set for unix://, `host`/`port` otherwise."""

    url: str
    scheme: str  # "http", "https" or "unix"
    host: str
    port: int
    socket_path: str | None
    path_prefix: str  # an origin like http://host/prefix: prepended to every request path
    host_header: str
    ca_file: str

    @property
    def label(self) -> str:
        """The origin as error messages name it (never with credentials: URLs here have none)."""
        return self.socket_path if self.socket_path else f"{self.host}:{self.port}"

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    def ssl_context(self) -> ssl.SSLContext | None:
        """A verifying client context for https (system store plus `ca_file`), else None.

        Blocking (reads the CA files): call it once at start-up, not per request."""
        if not self.tls:
            return None
        context = ssl.create_default_context()
        if self.ca_file:
            context.load_verify_locations(cafile=self.ca_file)
        return context


class OriginError(ValueError):
    """An `upstream.url` that names no usable origin; the message says what is wrong."""


def parse_origin(url: str, ca_file: str = "") -> UpstreamOrigin:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "unix":
        if parts.netloc or not parts.path.startswith("/") or parts.path == "/":
            raise OriginError(
                "a unix socket origin is unix:///absolute/path/to.sock (three slashes)"
            )
        if parts.query or parts.fragment:
            raise OriginError("a unix socket origin takes no query or fragment")
        return UpstreamOrigin(
            url, scheme, UNIX_HOST_HEADER, 0, parts.path, "", UNIX_HOST_HEADER, ca_file
        )
    if scheme not in ("http", "https") or not parts.hostname:
        raise OriginError(
            "must be an http(s) origin such as 'http://127.0.0.1:8000', or unix:///path.sock"
        )
    if parts.query or parts.fragment or parts.username or parts.password:
        raise OriginError("an upstream origin takes no query, fragment or credentials")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError as exc:
        raise OriginError(f"bad port: {exc}") from None
    host = parts.hostname
    default_port = port == (443 if scheme == "https" else 80)
    host_in_header = f"[{host}]" if ":" in host else host
    host_header = host_in_header if default_port else f"{host_in_header}:{port}"
    return UpstreamOrigin(
        url, scheme, host, port, None, parts.path.rstrip("/"), host_header, ca_file
    )
