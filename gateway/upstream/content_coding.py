"""Request content codings (RFC 9110 8.4) on the rewritten routes, undone before the JSON is read.

The server never decodes request bodies (`auto_decompress` is off): passthrough bodies and their
Content-Encoding reach the upstream untouched, as nginx passes them. Only a route that must read
the JSON decodes it, here; the rewritten body then goes upstream without Content-Encoding.
"""

from __future__ import annotations

import asyncio
import zlib

from aiohttp import web

from ..errors import InvalidRequest, PayloadTooLarge, UnsupportedMediaType

_GZIP_WBITS = 16 + zlib.MAX_WBITS
_WBITS = {"gzip": _GZIP_WBITS, "x-gzip": _GZIP_WBITS, "deflate": zlib.MAX_WBITS}
SUPPORTED_CODINGS = ("gzip", "x-gzip", "deflate", "identity")
THREAD_FROM_BYTES = 256 * 1024  # bodies at least this big are inflated off the event loop


async def read_decoded_body(request: web.Request, limit: int) -> bytes:
    """The whole body with its content codings undone, at most `limit` bytes once decoded."""
    raw = await request.read()
    header = request.headers.get("Content-Encoding")
    if header is None:
        return raw
    if len(raw) < THREAD_FROM_BYTES:
        return decode_content(raw, header, limit=limit)
    return await asyncio.to_thread(decode_content, raw, header, limit=limit)


def decode_content(body: bytes, header: str, *, limit: int) -> bytes:
    """`body` with the codings a Content-Encoding `header` lists undone, the last applied first.

    Raises UnsupportedMediaType (415) for a coding other than gzip, x-gzip, deflate or
    identity; InvalidRequest (400) for bytes that do not decode; PayloadTooLarge (413) when a
    decoding step would yield more than `limit` bytes (none is ever inflated past that).
    """
    codings = [coding.strip().lower() for coding in header.split(",") if coding.strip()]
    for coding in codings:
        if coding not in SUPPORTED_CODINGS:
            raise UnsupportedMediaType(
                f"Content-Encoding {coding!r} is not supported on this route; "
                f"send the body plain or as {', '.join(SUPPORTED_CODINGS[:-1])}",
                code="unsupported_content_encoding",
            )
    for coding in reversed(codings):
        if coding != "identity":
            body = _inflate(body, coding, limit)
    return body


def _inflate(data: bytes, coding: str, limit: int) -> bytes:
    wbits = _WBITS[coding]
    if coding == "deflate" and data[:1] and data[0] & 0x0F != 8:
        wbits = -zlib.MAX_WBITS  # raw deflate without the zlib wrapper, as some clients send
    out: list[bytes] = []
    size = 0
    while data:  # gzip allows several members one after another
        inflater = zlib.decompressobj(wbits)
        try:
            piece = inflater.decompress(data, limit - size + 1)
        except zlib.error as exc:
            raise _corrupt(coding, str(exc)) from None
        size += len(piece)
        if size > limit:
            raise PayloadTooLarge(
                f"the decoded request body exceeds server.max_body_bytes ({limit} bytes)",
                code="request_too_large",
            )
        if not inflater.eof:
            raise _corrupt(coding, "the data ends before the compressed stream does")
        out.append(piece)
        data = inflater.unused_data if wbits == _GZIP_WBITS else _no_trailing(inflater, coding)
    if not out:
        raise _corrupt(coding, "the body is empty")
    return b"".join(out)


def _no_trailing(inflater: zlib._Decompress, coding: str) -> bytes:
    if inflater.unused_data:
        raise _corrupt(coding, "bytes follow the end of the compressed stream")
    return b""


def _corrupt(coding: str, reason: str) -> InvalidRequest:
    return InvalidRequest(
        f"the request body is not valid {coding} data: {reason}", code="invalid_content_encoding"
    )
