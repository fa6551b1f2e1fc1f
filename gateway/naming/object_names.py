"""Object URLs (`s3://bucket/key`) and the prefixes they must lie under. Pure: no I/O.

S3 takes a key literally: `a/../b` is a key of its own, not `b`. So rather than normalise and
guess, a key with `.` or `..` segments, empty segments or a backslash is refused (400), and
containment is a plain prefix test on a key that is already in normal form.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..errors import AudioOutsideRoots, InvalidRequest
from .sidechannel import PathAudio

OBJECT_SCHEMES = ("s3",)
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", re.DOTALL)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")  # S3 bucket naming rules


class MalformedName(ValueError):
    """Why an object URL or key is malformed (the caller turns it into its own error)."""


@dataclass(frozen=True, slots=True)
class ObjectName:
    """One object: a bucket and a key in normal form."""

    bucket: str
    key: str

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


@dataclass(frozen=True, slots=True)
class ObjectPrefix:
    """An allowed prefix: `""` (the whole bucket) or a key prefix ending in `/`."""

    bucket: str
    prefix: str

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def contains(self, name: ObjectName) -> bool:
        return name.bucket == self.bucket and name.key.startswith(self.prefix)


def url_scheme(text: str) -> str | None:
    """The lower-cased scheme of `scheme://...` text, or None for a plain path."""
    match = _URL.match(text)
    return match.group(1).lower() if match else None


def is_object_url(text: str) -> bool:
    return url_scheme(text) in OBJECT_SCHEMES


def check_key(key: str) -> str:
    """`key` when it is in normal form; else MalformedName saying why."""
    if not key:
        raise MalformedName("names no object key")
    if "\\" in key:
        raise MalformedName("has a backslash in its key")
    for segment in key.split("/"):
        if not segment:
            raise MalformedName("has an empty segment in its key (a leading, trailing or double /)")
        if segment in (".", ".."):
            raise MalformedName(f"has a {segment!r} segment in its key")
    return key


def split_object_url(url: str) -> tuple[str, str]:
    """(bucket, rest) of an `s3://bucket/rest` URL, the bucket checked, the rest as given."""
    match = _URL.match(url)
    if match is None or match.group(1).lower() not in OBJECT_SCHEMES:
        raise MalformedName(f"is not an s3:// URL (supported schemes: {', '.join(OBJECT_SCHEMES)})")
    bucket, _, rest = match.group(2).partition("/")
    if not _BUCKET.match(bucket):
        raise MalformedName(f"has an invalid bucket name {bucket!r}")
    return bucket, rest


def parse_object_url(url: str) -> ObjectName:
    bucket, key = split_object_url(url)
    return ObjectName(bucket, check_key(key))


def parse_prefix(url: str) -> ObjectPrefix:
    """An `s3://bucket/prefix/` root; a prefix without its trailing `/` gets one (a prefix is
    a directory, so `s3://b/data` does not admit `s3://b/database/...`)."""
    bucket, prefix = split_object_url(url)
    if prefix:
        prefix = check_key(prefix.rstrip("/")) + "/"
    return ObjectPrefix(bucket, prefix)


class ObjectPolicy:
    """Which references are objects, and whether each may be read.

    `root` is `audio.root` when it is an object prefix (relative paths join it); `allowed` are
    the object prefixes of `audio.allowed_roots` (default: the root)."""

    def __init__(self, root: ObjectPrefix | None, allowed: tuple[ObjectPrefix, ...]) -> None:
        self.root = root
        self.allowed = allowed

    @property
    def buckets(self) -> tuple[str, ...]:
        """Every bucket an allowed object can be in: the only stores the gateway talks to."""
        return tuple(dict.fromkeys(prefix.bucket for prefix in self.allowed))

    def claims(self, ref: PathAudio) -> bool:
        """Whether `ref` names an object: an object URL, or a relative path under an object
        root. Other URLs are claimed too, so that `resolve` refuses them by name."""
        if url_scheme(ref.location) is not None:
            return True
        return self.root is not None and not os.path.isabs(ref.location)

    def resolve(self, ref: PathAudio) -> ObjectName:
        """The object `ref` names; 400 for a malformed name, 403 outside every allowed prefix
        (decided on the name alone, so the answer does not depend on the object existing)."""
        try:
            name = self._name(ref.location)
        except MalformedName as exc:
            raise InvalidRequest(
                f"{ref.label}: {ref.given!r} {exc}",
                param=ref.param,
                code="invalid_audio_reference",
            ) from None
        if not any(prefix.contains(name) for prefix in self.allowed):
            raise AudioOutsideRoots(
                f"{ref.label}: {ref.given!r} is outside the allowed audio roots",
                param=ref.param,
                code="audio_path_forbidden",
            )
        return name

    def _name(self, given: str) -> ObjectName:
        if url_scheme(given) is not None:
            return parse_object_url(given)
        assert self.root is not None  # claims() let only relative paths under a root through
        return ObjectName(self.root.bucket, self.root.prefix + check_key(given))
