"""A checked local file as an `AudioSource`: `audio.PathPolicy` checked it, `encoder` reads it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...naming.sidechannel import PathAudio
from ..encoder import (
    EncodedAudio,
    StreamedAudio,
    base64_size,
    encode_clip,
    open_streamed_clip,
    read_clip_head,
)
from ..policy import ResolvedClip


@dataclass(frozen=True, slots=True)
class LocalClip:
    """`file_url`: the clip goes upstream as a file:// URL (only sniffed here, no base64)."""

    clip: ResolvedClip
    file_url: bool

    @property
    def ref(self) -> PathAudio:
        return self.clip.ref

    @property
    def cache_key(self) -> tuple[str, int, int, int, int, int]:
        return self.clip.cache_key

    @property
    def identity(self) -> str:
        return self.clip.real_path

    @property
    def key_identity(self) -> tuple[str, str, int, int]:
        return ("file", self.clip.real_path, self.clip.mtime_ns, self.clip.size)

    @property
    def size(self) -> int:
        return self.clip.size

    @property
    def encoded_size(self) -> int:
        return base64_size(self.clip.size)

    async def load(self, *, encode: bool, digest: bool, raw: bool = False) -> EncodedAudio:
        return await encode_clip(self.clip, encode=encode, digest=digest, raw=raw)

    async def open_stream(self, *, digest: bool, raw: bool = False) -> StreamedAudio:
        return await open_streamed_clip(self.clip, digest=digest, raw=raw)

    async def read_head(self, nbytes: int) -> bytes:
        return await read_clip_head(self.clip, nbytes)

    async def upstream_url(self) -> str | None:
        return Path(self.clip.real_path).as_uri() if self.file_url else None
