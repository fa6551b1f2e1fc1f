"""What a supervisor and its worker say to each other, over the worker's stdin and stdout.

stdin, supervisor to worker: first the worker's `WorkerSpec`, pickled, after its length (4 bytes,
big-endian); then a line `serving N` each time the number of serving workers changes, and
`cleared` when another worker relayed a request that emptied the upstream's caches (this
worker's record of the clips vLLM holds is then wrong). Its end (EOF) means the supervisor is
gone: the worker drains as on SIGTERM.
stdout, worker to supervisor: the line `serving`, once its port is open; `cleared`, when it
relayed such a request.

Pickle is safe here: both ends are this gateway's own processes, over pipes no one else holds.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass

from ..config import Config

SERVING = b"serving"
CLEARED = b"cleared"
LENGTH_BYTES = 4


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs: `index` is its number (1 to `workers`), kept by the worker
    started in its place; `restart` says it replaces one that died; `fds` are its listening
    sockets, inherited open (the supervisor bound them: port.py)."""

    config: Config
    index: int
    workers: int
    metrics_dir: str
    log_level: str
    restart: bool = False
    fds: tuple[int, ...] = ()


def encode_spec(spec: WorkerSpec) -> bytes:
    data = pickle.dumps(spec)
    return len(data).to_bytes(LENGTH_BYTES, "big") + data


def read_spec(fd: int) -> WorkerSpec:
    """The spec at the head of `fd` (blocking: a worker reads it before its event loop runs);
    nothing after it is consumed."""
    length = int.from_bytes(_read_exactly(fd, LENGTH_BYTES), "big")
    spec = pickle.loads(_read_exactly(fd, length))
    if not isinstance(spec, WorkerSpec):
        raise TypeError(f"expected a WorkerSpec, got {type(spec).__name__}")
    return spec


def _read_exactly(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    while size:
        chunk = os.read(fd, size)
        if not chunk:
            raise EOFError("the supervisor closed the pipe before the worker's spec")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def serving_line(count: int) -> bytes:
    return SERVING + b" %d\n" % count


def parse_serving(line: bytes) -> int | None:
    """N of a `serving N` line; None for any other line."""
    name, _, count = line.strip().partition(b" ")
    return int(count) if name == SERVING and count.isdigit() else None
