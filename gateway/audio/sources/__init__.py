"""Where a clip's bytes come from: one module per kind behind the `AudioSource` interface.

The pipeline decides a reference's kind once (a local path, or an object URL such as
`s3://bucket/key`), checks it with that kind's policy and hands the cache an `AudioSource`;
the cache and the splice never ask which kind it is.

    local.py   a checked local file (`policy.ResolvedClip`), read by `encoder`
    s3.py      the object-store client: HEAD identity, GET streams, presigned URLs, errors
    objects.py object clips: the `AudioSource` of one object, and the lookups that make them

Object URLs and prefixes themselves are pure rules in `gateway.naming.object_names`.
May import: the rest of `audio`, `config`, `errors`, `metrics`, `naming`.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ...naming.sidechannel import PathAudio
    from ..encoder import EncodedAudio, StreamedAudio


class AudioSource(Protocol):
    """One checked clip, ready to be read.

    `cache_key` names this content (a new version is a new key); `identity` names the thing a
    newer version replaces (a real path, an object's bucket and key). `encoded_size` is the
    base64 size the cache weighs against `cache.max_item_bytes`, 0 when no bytes are needed
    (the clip goes upstream as a URL)."""

    @property
    def ref(self) -> PathAudio: ...

    @property
    def cache_key(self) -> Hashable: ...

    @property
    def identity(self) -> Hashable: ...

    @property
    def key_identity(self) -> Hashable:
        """What names this content in the clip key (`gateway.affinity`) when its bytes were
        not hashed: the same in every process and on every host that sees the same file or
        object (no device, inode or ctime, which a copy or another mount changes)."""
        ...

    @property
    def size(self) -> int: ...

    @property
    def encoded_size(self) -> int: ...

    async def load(self, *, encode: bool, digest: bool, raw: bool = False) -> EncodedAudio:
        """Read the clip once: sniff it, and base64-encode and/or hash it as asked (with `raw`,
        keep its own bytes instead: the speech-to-text uploads)."""

    async def open_stream(self, *, digest: bool, raw: bool = False) -> StreamedAudio:
        """Sniff the clip and hand back its base64 (with `raw`, its bytes) as a stream, for
        clips too big to cache."""

    async def read_head(self, nbytes: int) -> bytes:
        """The clip's first `nbytes` bytes (fewer when it is shorter), not sniffed."""

    async def upstream_url(self) -> str | None:
        """The URL vLLM should fetch the clip from, or None to send its bytes."""
