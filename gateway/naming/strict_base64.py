"""Strict, padded base64 (what vLLM decodes), checked and decoded piece by piece. Pure.

A payload of megabytes is never decoded whole: each piece's bytes are dropped, or hashed, as
they come. One walk serves the sidechannel's check and the clip key's digest, so a data URI
checked with its sha256 (`strict_base64_sha256`) is decoded once.
"""

from __future__ import annotations

import binascii
import hashlib
from collections.abc import Callable, Iterator

import pybase64

DECODE_CHUNK_CHARS = 1024 * 1024  # a multiple of 4: base64 quanta never straddle pieces


def strict_base64_pieces(text: str, start: int = 0) -> Iterator[bytes]:
    """The bytes of `text[start:]`, piece by piece; ValueError as soon as it is not strict,
    padded base64 (a length not a multiple of 4, padding before the end, any other character)."""
    end = len(text)
    if (end - start) % 4:
        raise ValueError("base64 comes in quanta of 4 characters")
    for offset in range(start, end, DECODE_CHUNK_CHARS):
        chunk = text[offset : offset + DECODE_CHUNK_CHARS]
        if offset + DECODE_CHUNK_CHARS < end and "=" in chunk:
            raise ValueError("padding only at the very end")
        yield pybase64.b64decode(chunk, validate=True)  # binascii.Error is a ValueError


def is_strict_base64(text: str, start: int = 0) -> bool:
    """Whether `text[start:]` is strict, padded base64."""
    return _walk(text, start, None)


def strict_base64_sha256(text: str, start: int = 0) -> str | None:
    """The sha256 (hex) of the bytes `text[start:]` holds; None when it is not strict base64."""
    hasher = hashlib.sha256()
    return hasher.hexdigest() if _walk(text, start, hasher.update) else None


def _walk(text: str, start: int, sink: Callable[[bytes], object] | None) -> bool:
    try:
        for piece in strict_base64_pieces(text, start):
            if sink is not None:
                sink(piece)
    except (binascii.Error, ValueError):
        return False
    return True
