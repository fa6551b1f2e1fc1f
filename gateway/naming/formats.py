"""Audio container formats: the extension table, content sniffing and wire names. Pure."""

from __future__ import annotations

import os

from ..errors import InvalidRequest

MIME_BY_EXTENSION: dict[str, str] = {
    ".wav": "audio/wav",
    ".flac": "audio/flac",
    ".mp3": "audio/mpeg",
    ".m4a": "audio/mp4",
    ".ogg": "audio/ogg",
    ".opus": "audio/opus",
}
SUPPORTED_EXTENSIONS = ", ".join(MIME_BY_EXTENSION)
EXTENSION_BY_MIME = {mime: extension for extension, mime in MIME_BY_EXTENSION.items()}

# The `format` field of an `input_audio` part, by MIME type (aliases included for inline data).
# The OpenAI type of that field is the literal "wav" | "mp3", and vLLM 0.33 validates requests
# against it (400 for anything else), so no other container may travel as `input_audio`.
INPUT_AUDIO_FORMAT_BY_MIME: dict[str, str] = {
    "audio/wav": "wav",
    "audio/wave": "wav",
    "audio/x-wav": "wav",
    "audio/vnd.wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
}

SNIFF_BYTES = 12


def mime_for_extension(path: str, param: str, label: str) -> str:
    """The MIME type the extension promises; 400 for an unsupported one."""
    extension = os.path.splitext(path)[1].lower()
    try:
        return MIME_BY_EXTENSION[extension]
    except KeyError:
        raise InvalidRequest(
            f"{label}: {path!r} has an unsupported extension {extension or '(none)'!r}; "
            f"supported: {SUPPORTED_EXTENSIONS}",
            param=param,
            code="unsupported_audio_format",
        ) from None


def sniff_mime(head: bytes, claimed_mime: str) -> str | None:
    """The MIME type the first bytes show, or None when they are no audio container.

    Where the content is ambiguous between formats sharing a container (Ogg holds Vorbis or
    Opus), the extension's claim decides.
    """
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wav"
    if head[:4] == b"fLaC":
        return "audio/flac"
    if head[:4] == b"OggS":
        return claimed_mime if claimed_mime in ("audio/ogg", "audio/opus") else "audio/ogg"
    if head[4:8] == b"ftyp":
        return "audio/mp4"
    if head[:3] == b"ID3" or (len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "audio/mpeg"
    return None


def checked_mime(head: bytes, claimed_mime: str, *, label: str, given: str, param: str) -> str:
    """The sniffed MIME type of a file whose first bytes are `head`; 400 `not_audio` when they
    show no audio container (the server and the dataset tools share this verdict)."""
    mime = sniff_mime(head[:SNIFF_BYTES], claimed_mime)
    if mime is None:
        raise InvalidRequest(
            f"{label}: {given!r} is not an audio file (no {SUPPORTED_EXTENSIONS} "
            "container signature in its first bytes)",
            param=param,
            code="not_audio",
        )
    return mime


def input_audio_format(mime: str, *, label: str, given: str, param: str, fix: str) -> str:
    """The `input_audio.format` of a clip of type `mime` ("wav" or "mp3"); for any other
    container a 400 `unsupported_audio_format` naming the clip as given and `fix` (the setting
    that sends it in a form that carries every container)."""
    try:
        return INPUT_AUDIO_FORMAT_BY_MIME[mime.lower()]
    except KeyError:
        raise InvalidRequest(
            f"{label}: {given!r} is {mime}, but an input_audio part carries only wav or "
            f"mp3 (its format field allows nothing else, and vLLM refuses other values); {fix}",
            param=param,
            code="unsupported_audio_format",
        ) from None
