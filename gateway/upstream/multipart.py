"""multipart/form-data both ways, for the speech-to-text routes. Pure: no I/O.

Reading: `FormScanner` follows a client's body as it arrives, far enough to tell whether a part
named `file` has begun (the body is then relayed untouched) and, once a body without one is
whole, splits it into its parts, each kept byte for byte.

Writing: `form_fields` turns a JSON request's top-level fields into form fields the way the
openai SDK sends them, and `build_form` lays the parts out after the audio part, whose bytes
stay the segments they are (cached pieces, or a clip streamed from disk) and are never copied.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from .body import Segment

CRLF = b"\r\n"
FILE_FIELD = "file"
_PARAM = re.compile(r';\s*([A-Za-z0-9_*-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;]*)', re.DOTALL)
_QUOTED_PAIR = re.compile(r"\\(.)", re.DOTALL)
# What cannot stand inside a quoted header parameter; `"` and `\` are escaped as quoted pairs
# (which Starlette's parser, vLLM's, undoes), line breaks and NUL percent-encoded as browsers do.
_HEADER_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\r": "%0D", "\n": "%0A", "\x00": "%00"})


@dataclass(frozen=True, slots=True)
class FormPart:
    """One part of a form: its header lines as sent (without the blank line ending them), its
    data, and from its Content-Disposition the field `name` and the `filename` of a file part."""

    head: bytes
    data: bytes
    name: str | None
    filename: str | None

    def text(self) -> str:
        """The value of a text field, decoded as Starlette decodes it (UTF-8, else Latin-1)."""
        return _decode(self.data)


@dataclass(frozen=True, slots=True)
class AudioUpload:
    """The `file` part to build: its filename, Content-Type and the audio bytes as segments."""

    filename: str
    mime: str
    segments: tuple[Segment, ...]


# --- reading a client's form --------------------------------------------------------------------


class FormScanner:
    """Follows a multipart body chunk by chunk until a part named `file` begins.

    Only part headers are looked at while the body streams in; each byte is searched once.
    """

    def __init__(self, boundary: str) -> None:
        self.buffer = bytearray()
        self.file_part_seen = False
        # aiohttp decoded the header as UTF-8 with surrogateescape: these are its bytes as sent.
        self._delimiter = b"--" + boundary.encode("utf-8", "surrogateescape")
        self._search_from = 0
        self._delimiter_at = -1  # a delimiter found whose part headers have not all arrived

    def feed(self, data: bytes) -> bool:
        """Append `data`; True once the headers of a part named `file` have arrived."""
        self.buffer += data
        while not self.file_part_seen:
            if self._delimiter_at < 0:
                self._delimiter_at = _find_delimiter(
                    self.buffer, self._delimiter, self._search_from
                )
                if self._delimiter_at < 0:
                    # A delimiter cut by the chunk's end starts no earlier than this.
                    self._search_from = max(0, len(self.buffer) - len(self._delimiter))
                    break
            found = _part_head(self.buffer, self._delimiter_at, self._delimiter)
            if found is None:
                break
            head, self._search_from = found
            self._delimiter_at = -1
            self.file_part_seen = _disposition(head)[0] == FILE_FIELD
        return self.file_part_seen

    def parts(self) -> list[FormPart] | None:
        """Every part of the whole body; None when it is no well-formed multipart body."""
        return split_form(bytes(self.buffer), self._delimiter)


def split_form(body: bytes, delimiter: bytes) -> list[FormPart] | None:
    """The parts of a complete body whose boundary delimiter is `delimiter` (`--` + boundary);
    None unless it holds at least one part and ends with the closing delimiter."""
    parts: list[FormPart] = []
    at = _find_delimiter(body, delimiter, 0)
    while at >= 0 and (found := _part_head(body, at, delimiter)) is not None:
        head, data_start = found
        end = body.find(CRLF + delimiter, data_start)
        if end < 0:
            return None
        name, filename = _disposition(head)
        parts.append(FormPart(bytes(head), body[data_start:end], name, filename))
        at = end + 2
    closed = at >= 0 and body.startswith(delimiter + b"--", at)
    return parts if parts and closed else None


def _find_delimiter(buffer: bytes | bytearray, delimiter: bytes, start: int) -> int:
    """Where the first delimiter at the start of a line lies at or after `start`; -1: none."""
    at = buffer.find(delimiter, start)
    while at > 0 and buffer[at - 2 : at] != CRLF:
        at = buffer.find(delimiter, at + 1)
    return at


def _part_head(
    buffer: bytes | bytearray, at: int, delimiter: bytes
) -> tuple[bytes | bytearray, int] | None:
    """The header block of the part whose delimiter lies at `at`, and where its data begins;
    None when they have not fully arrived or this is the closing delimiter."""
    after = at + len(delimiter)
    if len(buffer) < after + 2 or buffer.startswith(b"--", after):
        return None
    line_end = buffer.find(CRLF, after)
    if line_end < 0:
        return None
    heads_start = line_end + 2
    if buffer.startswith(CRLF, heads_start):
        return b"", heads_start + 2  # a part without headers
    heads_end = buffer.find(CRLF + CRLF, heads_start)
    if heads_end < 0:
        return None
    return buffer[heads_start:heads_end], heads_end + 4


def _disposition(head: bytes | bytearray) -> tuple[str | None, str | None]:
    """`name` and `filename` of a part's Content-Disposition, parsed as Starlette does."""
    for line in bytes(head).split(CRLF):
        field, _, value = line.partition(b":")
        if field.strip().lower() == b"content-disposition":
            params = dict(_params(value.decode("latin-1")))
            return params.get("name"), params.get("filename")
    return None, None


def _params(value: str) -> Iterable[tuple[str, str]]:
    for match in _PARAM.finditer(value):
        key, raw = match.group(1).lower(), match.group(2).strip()
        if "*" in key:
            continue  # RFC 7578 forbids the extended syntax; Starlette ignores it too
        if len(raw) >= 2 and raw[0] == raw[-1] == '"':
            raw = _QUOTED_PAIR.sub(r"\1", raw[1:-1])
        yield key, _decode(raw.encode("latin-1"))


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


# --- writing the form vLLM receives ---------------------------------------------------------------


def form_fields(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A JSON request's top-level fields as form fields, in order, the way the openai SDK sends
    them: strings as they are, numbers as their JSON text, booleans `true`/`false`, objects as
    JSON text, lists as one `<name>[]` field per item. `metadata` is the gateway's own and is
    not sent; a null is left out (the form's way of not giving a field)."""
    fields: list[tuple[str, str]] = []
    for name, value in body.items():
        if name == "metadata" or value is None:
            continue
        if isinstance(value, list):
            item_name = name if name.endswith("[]") else f"{name}[]"
            fields.extend((item_name, field_text(item)) for item in value if item is not None)
        else:
            fields.append((name, field_text(value)))
    return fields


def field_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return msgspec.json.encode(value).decode()


def text_part(name: str, value: str) -> FormPart:
    head = b"Content-Disposition: form-data; name=" + _quoted(name)
    return FormPart(head, value.encode("utf-8", "surrogatepass"), name, None)


def build_form(boundary: str, upload: AudioUpload, parts: Iterable[FormPart]) -> list[Segment]:
    """The body: the `file` part first, then `parts` in order, each with its header lines as
    they are; the audio segments stand on their own between the byte runs."""
    delimiter = b"--" + boundary.encode("latin-1")
    file_head = (
        b"Content-Disposition: form-data; name=" + _quoted(FILE_FIELD)
        + b"; filename=" + _quoted(upload.filename)
        + b"\r\nContent-Type: " + upload.mime.encode("latin-1")
    )  # fmt: skip
    tail = [b""]
    for part in parts:
        tail += [CRLF, delimiter, CRLF, part.head + CRLF if part.head else b"", CRLF, part.data]
    tail += [CRLF, delimiter, b"--", CRLF]
    return [delimiter + CRLF + file_head + CRLF + CRLF, *upload.segments, b"".join(tail)]


def _quoted(text: str) -> bytes:
    return b'"' + text.translate(_HEADER_ESCAPES).encode("utf-8", "surrogatepass") + b'"'
