"""The workers' port: checked, bound and listened on by the supervisor, before any worker starts.

Sockets with SO_REUSEPORT share a port with any other socket of the same user that sets it too,
so a second gateway on the same port would silently take part of the connections. Three steps
keep that from happening, with no window between a check and the bind it stands for:

1. A probe binds the port without SO_REUSEPORT and closes it again: it fails if anything
   listens there (a gateway already serving, any other program), and touches no one's
   connections.
2. The supervisor binds and listens on the sockets of its first worker, with SO_REUSEPORT.
3. It then lists the port's listening sockets (`/proc/net/tcp`, `/proc/net/tcp6`, this network
   namespace): one on an address that overlaps ours and that is not ours means another process
   bound it between the probe and now (two gateways started in the same instant). Whichever of
   two such gateways checks last sees the other's sockets, since each bound before it looked;
   so at most one of them serves (both refuse when both bound before either looked).

The supervisor binds every worker's sockets (`bind_sockets`) and hands them over open
(`pass_fds`): a worker never binds, so `port = 0` gives every worker the one port the first
bind got, and connections that arrive before a worker's loop runs wait in its socket's queue.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import ConfigError, ServerConfig

BACKLOG = 128  # aiohttp's TCPSite default
LISTEN_STATE = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column
PROC_TABLES = ((socket.AF_INET, Path("/proc/net/tcp")), (socket.AF_INET6, Path("/proc/net/tcp6")))
Address = tuple[Any, ...]  # (family, type, proto, sockaddr) of one getaddrinfo answer


@dataclass(frozen=True, slots=True)
class Listener:
    """One listening socket as /proc/net/tcp* shows it."""

    family: int
    address: bytes  # the packed IP address (4 or 16 bytes)
    port: int
    inode: int


@dataclass(frozen=True)
class Port:
    """The workers' port: where it is, and the addresses each worker's sockets bind."""

    number: int
    addresses: tuple[Address, ...]

    def bind_sockets(self) -> list[socket.socket]:
        """A worker's sockets: one per address, SO_REUSEPORT, bound and listening (OSError
        when they cannot be)."""
        return _bind_all(self.addresses, self.number)


def open_port(server: ServerConfig) -> tuple[Port, list[socket.socket]]:
    """The port the workers are to share (`server.port`, or a free one for 0) and the first
    worker's sockets on it (steps 1 to 3); ConfigError naming the keys when it cannot be
    listened on, is listened on by another process, or SO_REUSEPORT cannot share it."""
    port = probed_port(server)
    try:
        sockets = port.bind_sockets()
    except OSError as exc:
        raise ConfigError(
            f"server.host/port: {_cannot_listen(server, port.number)}: {exc}"
        ) from exc
    port = Port(sockets[0].getsockname()[1], port.addresses)
    refuse_shared(server, sockets)
    return port, sockets


def probed_port(server: ServerConfig) -> Port:
    """Step 1: where the workers' sockets are to bind, nothing listening there (ConfigError
    naming the keys otherwise); port 0 is left for the first bind to choose."""
    if sys.platform != "linux" or not hasattr(socket, "SO_REUSEPORT"):
        raise ConfigError(
            f"server.workers = {server.workers}: several workers share one port through Linux's "
            "SO_REUSEPORT, which this platform does not balance; use workers = 1"
        )
    try:
        found = socket.getaddrinfo(
            server.host or None, server.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        addresses = tuple(
            (family, kind, proto, address) for family, kind, proto, _, address in found
        )
        if server.port:
            _probe(addresses, server.port)
    except OSError as exc:
        where = _cannot_listen(server, server.port)
        raise ConfigError(f"server.host/port: {where}: {exc}") from exc
    return Port(server.port, addresses)


def refuse_shared(server: ServerConfig, ours: Sequence[socket.socket]) -> None:
    """Step 3, once `ours` listen: ConfigError naming the keys (`ours` closed) when another
    process's socket listens on the port too, on an address that overlaps ours."""
    port = ours[0].getsockname()[1]
    others = foreign_listeners(ours, read_listeners(port))
    if not others:
        return
    for sock in ours:
        sock.close()
    raise ConfigError(
        f"server.host/port: {_cannot_listen(server, port)}: another process listens on it too "
        "with SO_REUSEPORT (another gateway started at the same time?): "
        + ", ".join(describe(listener) for listener in others)
    )


def _cannot_listen(server: ServerConfig, port: int) -> str:
    return f"cannot listen on {server.host}:{port}"


def _probe(addresses: Sequence[Address], port: int) -> None:
    """Bind every address without SO_REUSEPORT, and close again: OSError if anyone listens."""
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, address in addresses:
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's listener
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address[0], port, *address[2:]))
    finally:
        for sock in sockets:
            sock.close()


def _bind_all(addresses: Sequence[Address], port: int) -> list[socket.socket]:
    """Listening SO_REUSEPORT sockets, as asyncio's `create_server(reuse_port=True)` makes
    them; with port 0 the rest bind the port the first got."""
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, address in addresses:
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address[0], port, *address[2:]))
            sock.listen(BACKLOG)
            port = sock.getsockname()[1]
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def read_listeners(port: int) -> list[Listener]:
    """The listening TCP sockets on `port` in this network namespace (no IPv6: none of it)."""
    found = []
    for family, table in PROC_TABLES:
        try:
            text = table.read_text()
        except FileNotFoundError:
            continue
        found += [one for one in parse_table(family, text) if one.port == port]
    return found


def parse_table(family: int, text: str) -> Iterator[Listener]:
    """The listening sockets of a /proc/net/tcp or tcp6 table (pure). Each 32-bit word of an
    address is printed as the hex of its value in this machine's byte order."""
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != LISTEN_STATE:
            continue
        address_hex, port_hex = fields[1].split(":")
        words = [address_hex[i : i + 8] for i in range(0, len(address_hex), 8)]
        address = b"".join(int(word, 16).to_bytes(4, sys.byteorder) for word in words)
        yield Listener(family, address, int(port_hex, 16), int(fields[9]))


def foreign_listeners(
    ours: Sequence[socket.socket], listeners: Sequence[Listener]
) -> list[Listener]:
    """The `listeners` that are not `ours` and share an address with one of ours (the same,
    or either one the wildcard of their family): those the kernel would give our connections."""
    inodes = {os.fstat(sock.fileno()).st_ino for sock in ours}
    addresses = {(sock.family, _packed(sock)) for sock in ours}
    return [
        one
        for one in listeners
        if one.inode not in inodes
        and any(family == one.family and overlaps(mine, one.address) for family, mine in addresses)
    ]


def overlaps(mine: bytes, theirs: bytes) -> bool:
    """Whether two addresses of one family take the same connections (pure)."""
    return mine == theirs or not any(mine) or not any(theirs)


def describe(listener: Listener) -> str:
    address = ipaddress.ip_address(listener.address)
    shown = f"[{address}]" if address.version == 6 else str(address)
    return f"{shown}:{listener.port} (socket inode {listener.inode})"


def _packed(sock: socket.socket) -> bytes:
    return socket.inet_pton(sock.family, sock.getsockname()[0])
