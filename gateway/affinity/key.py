"""A clip's digest, and the key of a request's clips. Pure.

A digest is a short ASCII string naming one clip by what the gateway knows of it:

    sha256:<hex>         the sha256 of the audio bytes (inline audio decoded, a file or
                         object the gateway read whole, a converted WAV, a long clip's piece)
    <kind>:<hex>         the sha256 of an identity, for a clip whose bytes were not hashed
                         before its request went (a streamed file: its real path, mtime_ns and
                         size; an object: bucket, key, ETag and size; a URL: its text)

The key is the first `KEY_HEX_CHARS` hex digits of the sha256 of a fixed domain prefix and
the length-prefixed digests in order. Nothing in it is per process (no salt, no
`hash()`), so every gateway in a fleet computes the same key for the same clips.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Iterable

from ..naming.strict_base64 import strict_base64_sha256

KEY_DOMAIN = b"audio-gateway clip key v1\x00"  # a key is never a hash of anything else
KEY_HEX_CHARS = 32  # 128 bits: no two clip lists a fleet sees collide


SHA256_PREFIX = "sha256:"


def sha256_digest(hexdigest: str) -> str:
    """A clip whose bytes' sha256 the gateway already holds."""
    return SHA256_PREFIX + hexdigest


def bytes_digest(data: bytes | memoryview) -> str:
    """A clip whose bytes the gateway holds."""
    return sha256_digest(hashlib.sha256(data).hexdigest())


def base64_digest(text: str, start: int = 0) -> str:
    """Audio inlined as base64 (`text[start:]`, e.g. a data URI's payload after its lead): the
    digest of its bytes, as if they came from a file, decoded and hashed piece by piece (a
    payload of megabytes is never copied whole); a payload that is not strict base64 (vLLM
    refuses it) by its text."""
    hexdigest = strict_base64_sha256(text, start)
    return identity_digest("text", text[start:]) if hexdigest is None else sha256_digest(hexdigest)


def identity_digest(kind: str, identity: Hashable) -> str:
    """A clip named by what identifies it rather than by its bytes; `identity` is made of
    strings and numbers (its `repr` is the same in every process)."""
    return f"{kind}:" + hashlib.sha256(repr(identity).encode()).hexdigest()


def clip_key(digests: Iterable[str]) -> str | None:
    """The key of these clips, in order; None for no clips (a request without audio)."""
    hasher = hashlib.sha256(KEY_DOMAIN)
    count = 0
    for digest in digests:
        encoded = digest.encode()
        hasher.update(b"%d:" % len(encoded))  # length-prefixed: no two lists concatenate alike
        hasher.update(encoded)
        count += 1
    return hasher.hexdigest()[:KEY_HEX_CHARS] if count else None
