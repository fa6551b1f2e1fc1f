"""The port check before any worker starts: free, and resolved when it is 0.

Sockets with SO_REUSEPORT share a port with any other socket of the same user that sets it too,
so a second gateway started on the same port would silently take half the connections. The
supervisor binds the port first without SO_REUSEPORT (it fails if anything listens there), and
closes it again before the workers bind theirs.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence
from typing import Any

from ..config import ConfigError, ServerConfig


def check_port(server: ServerConfig) -> int:
    """The port the workers are to share (`server.port`, or a free one for 0); ConfigError
    naming the keys when it cannot be listened on, or SO_REUSEPORT cannot share it."""
    if sys.platform != "linux" or not hasattr(socket, "SO_REUSEPORT"):
        raise ConfigError(
            f"server.workers = {server.workers}: several workers share one port through Linux's "
            "SO_REUSEPORT, which this platform does not balance; use workers = 1"
        )
    where = f"{server.host}:{server.port}"
    try:
        addresses = socket.getaddrinfo(
            server.host or None, server.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        return _bind_all(addresses, server.port)
    except OSError as exc:
        raise ConfigError(f"server.host/port: cannot listen on {where}: {exc}") from exc


def _bind_all(addresses: Sequence[tuple[Any, ...]], port: int) -> int:
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in addresses:
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's listener
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address[0], port, *address[2:]))
            port = sock.getsockname()[1]  # port 0: the rest bind the port the first got
        return port
    finally:
        for sock in sockets:
            sock.close()
