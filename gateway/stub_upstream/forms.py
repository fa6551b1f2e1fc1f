"""The speech routes' forms, read from the body's bytes as Starlette (so vLLM) reads them.

The recording middleware has already read the body, so the form is parsed from those bytes
by python-multipart, the parser Starlette itself uses: a part with a `filename` is a file, any
other part a text field of at most `MAX_FIELD_BYTES`; items keep the order they came in. Any
size up to the route's own limit parses alike (a body is never replayed into a stream reader,
whose flow control wants a live connection).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

MAX_FIELD_BYTES = 1024 * 1024  # Starlette's max_part_size for text fields


@dataclass(frozen=True)
class UploadedFile:
    filename: str
    content_type: str | None
    data: bytes


FormItems = list[tuple[str, "str | UploadedFile"]]


class FormError(Exception):
    def __init__(self, message: str) -> None:
        self.message = message


def parse_form(body: bytes, content_type: str) -> FormItems:
    """The form's items in order; an empty form for a body that is no form (as Starlette).
    `content_type` is the request's whole Content-Type header."""
    mime, params = parse_options_header(content_type)
    if mime == b"application/x-www-form-urlencoded":
        return list(parse_qsl(body.decode("latin-1"), keep_blank_values=True))
    if mime != b"multipart/form-data":
        return []
    boundary = params.get(b"boundary")
    if not boundary:
        raise FormError("Missing boundary in multipart.")
    reader = _PartCollector()
    parser = MultipartParser(boundary, reader.callbacks())
    try:
        parser.write(body)
        parser.finalize()
    except MultipartParseError as exc:
        raise FormError("Invalid multipart data.") from exc
    if not reader.complete:
        raise FormError("Invalid multipart data.")
    return reader.items


@dataclass
class _PartCollector:
    """python-multipart's callbacks, collecting each part's headers and data."""

    items: FormItems = field(default_factory=list)
    complete: bool = False
    _headers: dict[bytes, bytes] = field(default_factory=dict)
    _field: bytes = b""
    _value: bytes = b""
    _data: bytearray = field(default_factory=bytearray)

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self._begin,
            "on_header_field": self._header_field,
            "on_header_value": self._header_value,
            "on_header_end": self._header_end,
            "on_part_data": self._part_data,
            "on_part_end": self._part_end,
            "on_end": self._end,
        }

    def _begin(self) -> None:
        self._headers, self._field, self._value, self._data = {}, b"", b"", bytearray()

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._field += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def _header_end(self) -> None:
        self._headers[self._field.lower()] = self._value
        self._field, self._value = b"", b""

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        self._data += data[start:end]

    def _part_end(self) -> None:
        self.items.append(_item(self._headers, bytes(self._data)))

    def _end(self) -> None:
        self.complete = True


def _item(headers: dict[bytes, bytes], data: bytes) -> tuple[str, str | UploadedFile]:
    _, params = parse_options_header(headers.get(b"content-disposition", b""))
    if b"name" not in params:
        raise FormError('The Content-Disposition header field "name" must be provided.')
    name = _decoded(params[b"name"])
    if b"filename" in params:
        content_type = headers.get(b"content-type")
        mime = None if content_type is None else content_type.decode("latin-1")
        return name, UploadedFile(_decoded(params[b"filename"]), mime, data)
    if len(data) > MAX_FIELD_BYTES:
        raise FormError(f"Part exceeded maximum size of {MAX_FIELD_BYTES // 1024}KB.")
    return name, _decoded(data)


def _decoded(data: bytes) -> str:
    """UTF-8, else Latin-1 (Starlette's `_user_safe_decode`)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")
