"""`--record-bodies PATH`: every chat-completions body the stub receives, one JSON object a line,
in arrival order (the input of `bench/vllm_frontend_cpu/`). The file is truncated at start."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import BinaryIO

from aiohttp import web


class BodyLog:
    def __init__(self, path: str) -> None:
        self.path = path
        self._file: BinaryIO | None = None
        self._lock = asyncio.Lock()  # one writer at a time keeps lines whole and in order

    async def append(self, body: bytes) -> None:
        # JSON strings hold no raw CR/LF, so these are whitespace between tokens.
        line = body.replace(b"\r", b" ").replace(b"\n", b" ") + b"\n"
        async with self._lock:
            assert self._file is not None, "the app's cleanup context opens the log"
            await asyncio.to_thread(_write_line, self._file, line)

    async def lifetime(self, app: web.Application) -> AsyncIterator[None]:
        self._file = await asyncio.to_thread(open, self.path, "wb")
        try:
            yield
        finally:
            await asyncio.to_thread(self._file.close)
            self._file = None


def _write_line(handle: BinaryIO, line: bytes) -> None:
    """Blocking: runs on a worker thread. Flushed, so a stub killed mid-run keeps its lines."""
    handle.write(line)
    handle.flush()
