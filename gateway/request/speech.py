"""The speech-to-text routes (`/v1/audio/transcriptions`, `/v1/audio/translations`): the
multipart upload vLLM expects, built from the audio sidechannel.

- multipart with a `file` part: relayed untouched, streamed (only its first part headers are
  looked at, to find that part);
- JSON whose `metadata` names one clip (`audio_path`, `audio_data`, legacy `audio_url`), or a
  multipart form with such a field and no `file`: the clip becomes the `file` part (raw bytes,
  never base64), the other fields stay form fields;
- anything else: relayed untouched, for vLLM to answer.

Paths are loaded by the chat routes' `ClipLoader` (`load_raw`: policy, resolver, [normalize],
the audio store's raw-byte entries with the same budget and single-flight); clips over
`cache.max_item_bytes` are streamed from disk.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import parse_qsl

import pybase64
from aiohttp import web
from aiohttp.helpers import parse_mimetype

from ..affinity import bytes_digest, clip_key
from ..audio.encoder import StreamedAudio
from ..clips.loaded import LoadedClip, check_clip_limits, clip_digest, close_streams
from ..config import AudioConfig
from ..errors import InvalidRequest, PayloadTooLarge
from ..naming.formats import EXTENSION_BY_MIME, checked_mime
from ..naming.sidechannel import LEGACY_INLINE_KEY, InlineAudio, PathAudio
from ..upstream.body import SegmentedPayload
from ..upstream.content_coding import read_decoded_body
from ..upstream.multipart import (
    FILE_FIELD,
    AudioUpload,
    FormPart,
    FormScanner,
    build_form,
    form_fields,
    text_part,
)
from ..upstream.relay import request_body_chunks, request_body_length, request_headers_for_upstream
from .pipeline import RewritePipeline
from .shapes import parse_json_object

log = logging.getLogger("gateway.speech")  # the name the docs give

RequestBody = bytes | SegmentedPayload | AsyncIterator[bytes]
TOLD_MODELS = 1024


@dataclass(frozen=True, slots=True)
class Outgoing:
    """What to send upstream; `rewritten` when the gateway built the body."""

    headers: list[tuple[str, str]]
    body: RequestBody
    content_length: int | None = None
    rewritten: bool = False


class SpeechUploads:
    """Turns a speech-to-text request into the request for vLLM; `prepare` returns None for a
    body that is neither multipart nor JSON (the plain passthrough relays it)."""

    def __init__(self, pipeline: RewritePipeline, audio: AudioConfig, max_body: int) -> None:
        self.pipeline = pipeline  # its sources (local files, objects), store and key names
        self.keys = pipeline.keys
        self.audio = audio
        self.max_clip_bytes = audio.max_file_bytes
        self.max_body_bytes = max_body
        self._legacy_key_logged = False
        self._told: set[str | None] = set()  # models told not to translate

    async def prepare(self, request: web.Request) -> Outgoing | None:
        boundary = request.content_type == "multipart/form-data" and _boundary(request)
        if boundary and "Content-Encoding" in request.headers:
            return None  # an encoded upload cannot be scanned: relayed untouched, as nginx would
        if boundary:
            return await self._from_form(request, boundary)
        if request.content_type == "application/json":
            return await self._from_json(request)
        if request.content_type == "application/x-www-form-urlencoded":
            return await self._from_urlencoded(request)
        return None

    async def _from_json(self, request: web.Request) -> Outgoing:
        raw = await read_decoded_body(request, self.max_body_bytes)
        body = parse_json_object(raw)
        metadata = body.get("metadata")
        ref = self._reference(metadata if isinstance(metadata, dict) else {}, "metadata.")
        if ref is None:
            return Outgoing(request_headers_for_upstream(request, decoded=True), raw)
        if FILE_FIELD in body:
            raise InvalidRequest(
                f"file and {ref.param} both give the audio; give one",
                param=FILE_FIELD,
                code="conflicting_audio_keys",
            )
        parts = [text_part(name, value) for name, value in form_fields(body)]
        return await self._rewritten(request, ref, parts)

    async def _from_form(self, request: web.Request, boundary: str) -> Outgoing:
        """Untouched and streamed once a `file` part shows; else read whole (up to
        server.max_body_bytes) and rewritten when a field names the clip."""
        scanner = FormScanner(boundary)
        while chunk := await request.content.readany():
            if scanner.feed(chunk):
                body = _chained(bytes(scanner.buffer), request_body_chunks(request))
                headers = request_headers_for_upstream(request)
                return Outgoing(headers, body, request_body_length(request))
            if len(scanner.buffer) > self.max_body_bytes:
                raise PayloadTooLarge(
                    f"the request body exceeds server.max_body_bytes ({self.max_body_bytes})",
                    code="request_too_large",
                )
        raw = bytes(scanner.buffer)
        parts = scanner.parts()
        fields = self._sidechannel_fields(parts or [])
        ref = self._reference(fields, "") if parts else None
        if ref is None:
            return Outgoing(request_headers_for_upstream(request), raw)
        kept = [part for part in parts or [] if not self._is_sidechannel_field(part)]
        return await self._rewritten(request, ref, kept)

    async def _from_urlencoded(self, request: web.Request) -> Outgoing:
        """`curl -d audio_path=...`: a form that cannot carry a file, read whole."""
        raw = await read_decoded_body(request, self.max_body_bytes)
        pairs = parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True)
        fields = [FormPart(b"", value.encode(), name, None) for name, value in pairs]
        ref = self._reference(self._sidechannel_fields(fields), "")
        if ref is None:
            return Outgoing(request_headers_for_upstream(request, decoded=True), raw)
        kept = [p for p in fields if not self._is_sidechannel_field(p)]
        parts = [text_part(p.name or "", p.text()) for p in kept]
        return await self._rewritten(request, ref, parts)

    def _reference(self, fields: dict[str, object], prefix: str) -> InlineAudio | PathAudio | None:
        """The one clip `fields` name; `audio_paths` is refused (one clip per request)."""
        keys = self.keys
        if [name for name in keys.names if name in fields] == [keys.name("audio_paths")]:
            raise InvalidRequest(
                f"{prefix}{keys.name('audio_paths')}: a transcription or translation takes one "
                f"clip; give {prefix}{keys.name('audio_path')}",
                param=f"{prefix}{keys.name('audio_paths')}",
                code="invalid_audio_reference",
            )
        sidechannel = keys.read_fields(fields, 1, self.max_clip_bytes, prefix=prefix)
        if sidechannel is None:
            return None
        if sidechannel.kind == LEGACY_INLINE_KEY and not self._legacy_key_logged:
            self._legacy_key_logged = True
            log.warning(
                "%s is the deprecated name of %s; rename it (logged once)",
                sidechannel.key,
                keys.name("audio_data"),
            )
        return sidechannel.clips[0]

    def _is_sidechannel_field(self, part: FormPart) -> bool:
        return part.filename is None and part.name in self.keys.kinds

    def _sidechannel_fields(self, parts: list[FormPart]) -> dict[str, object]:
        """The sidechannel fields of a form; a key given twice is refused (which one was
        meant?)."""
        fields: dict[str, object] = {}
        for part in filter(self._is_sidechannel_field, parts):
            assert part.name is not None
            if part.name in fields:
                raise InvalidRequest(
                    f"{part.name} is given more than once; a request takes one clip",
                    param=part.name,
                    code="invalid_audio_reference",
                )
            fields[part.name] = part.text()
        return fields

    async def _rewritten(
        self, request: web.Request, ref: InlineAudio | PathAudio, parts: list[FormPart]
    ) -> Outgoing:
        if request.path.endswith("/translations"):
            await self._tell_translation(parts)
        upload, digest = await self._upload(ref)
        try:
            boundary = f"audio-gateway-{os.urandom(16).hex()}"
            key = clip_key([digest]) if self.pipeline.keyed else None
            payload = SegmentedPayload(build_form(boundary, upload, parts), key)
        except BaseException:
            await _close(upload)
            raise
        content_type = f"multipart/form-data; boundary={boundary}"
        headers = request_headers_for_upstream(request, content_type=content_type, decoded=True)
        return Outgoing(headers, payload, rewritten=True)

    async def _tell_translation(self, parts: list[FormPart]) -> None:
        """A translation sent to a model whose profile says it does not translate (Voxtral,
        Kimi-Audio, ... answer a transcription there): relayed as asked, logged once a model."""
        model = next((part.text() for part in parts if part.name == "model"), None)
        rules = await self.pipeline.models.rules({"model": model})
        what = rules.profile.translations
        if rules.placed and what in ("transcribes", "none") and model not in self._told:
            if len(self._told) >= TOLD_MODELS:
                self._told.clear()  # a client naming ever new models: told again, not kept
            self._told.add(model)
            answer = "a transcription" if what == "transcribes" else "an error"
            log.warning(
                "model %r (%s) does not translate: vLLM answers /v1/audio/translations with %s "
                "for it (its profile; logged once per model)",
                model,
                rules.architecture,
                answer,
            )

    async def _upload(self, ref: InlineAudio | PathAudio) -> tuple[AudioUpload, str]:
        """The clip as a file part, within vLLM's decode limits (its speech-to-text routes
        apply VLLM_MAX_AUDIO_DECODE_DURATION_S / _BYTES as chat does), and its digest in the
        clip key (the chat routes' digest of the same clip)."""
        keyed = self.pipeline.keyed
        if isinstance(ref, InlineAudio):
            upload = inline_upload(ref)
            self._check_limits(ref)
            data = upload.segments[0]
            assert isinstance(data, bytes)  # decoded whole
            return upload, bytes_digest(data) if keyed else ""
        clip = await self.pipeline.loader.load_raw(ref)
        try:
            self._check_limits(clip)
        except BaseException:
            await close_streams([clip])
            raise
        audio = clip.audio
        segments = (audio,) if isinstance(audio, StreamedAudio) else audio.pieces
        name = os.path.basename(ref.given)
        if audio.converted:  # [normalize]: the WAV the gateway made of the clip
            name = os.path.splitext(name)[0] + ".wav"
        return AudioUpload(name, audio.mime, segments), clip_digest(clip) if keyed else ""

    def _check_limits(self, clip: LoadedClip) -> None:
        check_clip_limits(clip, self.audio.max_duration_seconds, self.audio.max_decode_bytes)


def inline_upload(ref: InlineAudio) -> AudioUpload:
    """Inline audio as a file part: its bytes decoded, named `audio.<ext>` by its content."""
    data = pybase64.b64decode(ref.payload)  # read_sidechannel checked it is strict base64
    mime = checked_mime(data, ref.mime, label=ref.param, given=ref.given, param=ref.param)
    return AudioUpload(f"audio{EXTENSION_BY_MIME[mime]}", mime, (data,))


def _boundary(request: web.Request) -> str:
    return parse_mimetype(request.headers.get("Content-Type", "")).parameters.get("boundary", "")


async def _chained(prefix: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield prefix
    async for chunk in rest:
        yield chunk


async def _close(upload: AudioUpload) -> None:
    for segment in upload.segments:
        if isinstance(segment, StreamedAudio):
            await segment.aclose()
