"""What a content part's audio URL names: a local path, an object, or nothing for us. Pure.

    file:///abs, file://localhost/abs, file:/abs   the local absolute path /abs, percent-decoded
                                                   (as vLLM reads file URLs)
    /abs (no scheme)                               the absolute path /abs, as written
    a/b.wav (no scheme)                            a relative path (the caller joins audio.root)
    s3://bucket/key                                the object URL itself
    data:, http(s)://, any other scheme            None: the URL is vLLM's to judge

A `file:` URL with a host, a query, a fragment or a relative path, and a NUL anywhere (raw or
percent-encoded), is malformed (`MalformedFileURL`, the caller's 400). `..` segments are left
in the path: the path policy resolves them like any path and refuses (403) what ends outside
the roots.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote_to_bytes

from .object_names import OBJECT_SCHEMES

# RFC 3986: scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) followed by ":".
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
LOCAL_HOSTS = ("", "localhost")  # RFC 8089: an empty host or "localhost" is this machine
OURS = frozenset({"file", *OBJECT_SCHEMES})  # the schemes whose URLs the gateway reads


class MalformedFileURL(ValueError):
    """Why a `file:` URL names no local file (the caller turns it into its own 400)."""


def named_path(url: str) -> str | None:
    """The path or object URL that `url` names for the gateway to read, or None when it is a
    URL for vLLM (data:, http(s)://, any scheme but file and s3); MalformedFileURL for a
    `file:` URL that names no local file, or for a NUL."""
    match = _SCHEME.match(url)
    if match is not None and match.group(1).lower() not in OURS:
        return None  # checked first: a multi-megabyte data: URI is never scanned here
    if "\x00" in url:
        raise MalformedFileURL("contains a NUL byte")
    if match is None:
        return url  # a plain path, absolute or relative
    if match.group(1).lower() in OBJECT_SCHEMES:
        return url
    return _file_url_path(url[match.end() :])


def _file_url_path(rest: str) -> str:
    """The local path of a `file:` URL, given what follows `file:`."""
    if "?" in rest:
        raise MalformedFileURL("has a query ('?'): a file URL names a path only")
    if "#" in rest:
        raise MalformedFileURL("has a fragment ('#'): write a '#' in a file name as %23")
    if rest.startswith("//"):
        host, slash, path = rest[2:].partition("/")
        if host.lower() not in LOCAL_HOSTS:
            raise MalformedFileURL(
                f"names the host {host!r}: only local files (file:///path or "
                "file://localhost/path) can be read"
            )
        if not slash:
            raise MalformedFileURL("names no path")
        rest = "/" + path
    elif not rest.startswith("/"):
        raise MalformedFileURL(
            "is a relative file URL (file:name): use file:///absolute/path, or the relative "
            "path itself without a scheme"
        )
    # Bytes first, then the file system's own decoding: any file name percent-encodes.
    path = os.fsdecode(unquote_to_bytes(rest))
    if "\x00" in path:
        raise MalformedFileURL("contains a percent-encoded NUL byte (%00)")
    return path
