"""One rewritten request: parse -> sidechannel + path parts -> audio -> splice -> segmented body.

`RewritePipeline.rewrite` returns the original bytes when the request carries no sidechannel
and no content part naming a path (forwarded byte-for-byte), else the spliced body as a
`SegmentedPayload`. Every clip, whatever carried it, goes through the same sources, checks,
cache and limits; the sidechannel's clips come first, then the parts in message order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, overload

import msgspec

from ..affinity import clip_key, part_digests, placed_digests
from ..audio.cache import AudioStore
from ..audio.durations import check_decode_limits
from ..audio.policy import BatchedResolver, PathPolicy
from ..audio.recent import RecentPaths
from ..audio.sources import AudioSource
from ..audio.sources.objects import ObjectSources, object_sources
from ..chunking.bodies import ChunkedRequest, chunked_request
from ..chunking.refusals import refuse_unmergeable
from ..clips.inline import inline_parts
from ..clips.loaded import (
    LoadedClip,
    PathClip,
    base64_bytes,
    base64_segments,
    clip_digest,
    clip_header,
    clip_names,
    clips_key,
    close_streams,
    content_sha256,
    piece_key,
    referable,
    reference_uuid,
)
from ..clips.over_window import OverWindowWatch
from ..config import AudioConfig, CacheConfig, Config, SpliceConfig
from ..errors import InvalidRequest
from ..metrics import GatewayMetrics
from ..naming.content_parts import PartClip, PartRoots, Place, check_clip_count, part_clips
from ..naming.formats import input_audio_format
from ..naming.sidechannel import (
    DEFAULT_KEYS,
    LEGACY_INLINE_KEY,
    InlineAudio,
    PathAudio,
    Sidechannel,
    SidechannelKeys,
    strip_sidechannel,
)
from ..normalize.source import Normalizer
from ..references.body import ReferencedBody
from ..splice import Part, splice_chat, splice_clips, splice_in_place, splice_responses
from ..upstream.body import Placeholders, SegmentedPayload
from .loading import ClipLoader

if TYPE_CHECKING:  # imported when chunking is on (numpy, libsndfile)
    from ..chunking import Chunker

log = logging.getLogger("gateway.pipeline")  # the name the docs give


@dataclass(frozen=True, slots=True)
class RouteShape:
    """How one rewritten route takes its audio."""

    name: str
    splice: Callable[[dict[str, Any], list[Part]], None]
    input_audio_parts: bool
    # How to send a clip that input_audio cannot carry (told in the 400 refusing it).
    input_audio_fix: str = ""
    # Whether a long clip may be split ([chunking]): routes whose answers the gateway can merge.
    chunkable: bool = False
    # [splice] repeats = "reference": the body comes back as a `ReferencedBody`.
    references: bool = False
    # Chat bodies: audio_url parts naming a path are clips ([sidechannel] content_parts).
    content_parts: bool = False
    # Where the body's messages are, with the audio parts a client put there itself.
    items: str = "messages"


CHAT_AUDIO_URL = RouteShape(
    "chat", splice_chat, input_audio_parts=False, chunkable=True, content_parts=True
)
CHAT_INPUT_AUDIO = RouteShape(
    "chat",
    splice_chat,
    input_audio_parts=True,
    chunkable=True,
    content_parts=True,
    input_audio_fix='set [splice] chat_part = "audio_url" to send it as an audio_url data URI',
)
RESPONSES = RouteShape(
    "responses",
    splice_responses,
    input_audio_parts=True,
    items="input",
    input_audio_fix='send it through the chat bridge ([responses] audio = "chat_bridge")',
)


def parse_json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise InvalidRequest(
            f"the request body is not valid JSON: {exc}", code="invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object", code="invalid_json")
    return body


async def build_pipeline(
    config: Config, metrics: GatewayMetrics, cache: CacheConfig | None = None
) -> RewritePipeline:
    """The pipeline of `config`: path policy, object sources, store and splice, as `serve` and
    the dataset tools both use it (`cache` overrides `config.cache`). Close its resolver."""
    policy = await asyncio.to_thread(PathPolicy.from_config, config.audio)
    references = config.splice.repeats == "reference"
    keyed = bool(config.routing.affinity_headers)
    store = AudioStore(
        cache or config.cache,
        metrics,
        encode=config.splice.mode == "data_uri",
        digest=config.splice.part_uuid or references,
        digest_urls=not references,  # reference mode names presigned objects by identity
        digest_read=keyed,  # the clip key: the sha256 of what is read anyway
    )
    objects = await asyncio.to_thread(object_sources, config, metrics)  # blocking: credentials
    keys = SidechannelKeys(config.sidechannel.key_prefix)
    chunker = over_window = None
    if config.chunking.enabled:
        from ..chunking import Chunker

        chunker = Chunker(config.chunking, store, config.audio)
    else:
        over_window = OverWindowWatch(config.chunking.threshold_seconds, metrics)
    normalizer = None
    if config.normalize.enabled:
        normalizer = Normalizer(config.normalize, config.audio, metrics)
    parts = config.content_part_roots()
    return RewritePipeline(
        config.splice,
        config.audio,
        policy,
        store,
        objects,
        keys,
        chunker=chunker,
        over_window=over_window,
        normalizer=normalizer,
        parts=parts,
        metrics=metrics,
        keyed=keyed,
    )


class RewritePipeline:
    def __init__(
        self,
        config: SpliceConfig,
        audio: AudioConfig,
        policy: PathPolicy,
        store: AudioStore,
        objects: ObjectSources | None = None,
        keys: SidechannelKeys = DEFAULT_KEYS,
        chunker: Chunker | None = None,
        over_window: OverWindowWatch | None = None,
        normalizer: Normalizer | None = None,
        parts: PartRoots | None = None,
        metrics: GatewayMetrics | None = None,
        keyed: bool = False,
    ):
        self.config = config
        self.keyed = keyed  # bodies carry their clips' key ([routing] affinity_headers)
        self.keys = keys  # the sidechannel's key names under [sidechannel] key_prefix
        self.parts = parts  # None: [sidechannel] content_parts = "pass"
        self.metrics = metrics
        self.max_clips = audio.max_clips
        self.max_clip_bytes = audio.max_file_bytes
        self.max_duration_seconds = audio.max_duration_seconds
        self.max_decode_bytes = audio.max_decode_bytes
        self.resolver = BatchedResolver(
            policy, threads=audio.resolver_threads, recent=RecentPaths.for_policy(policy)
        )
        self.store = store
        self.objects = objects
        self.file_urls = config.mode == "file_url"
        self.presigned = config.remote == "presigned_url"
        self.chunker = chunker  # None unless [chunking] is enabled
        self.over_window = over_window  # with [chunking] off: long clips sent whole, told
        self.normalizer = normalizer  # None unless [normalize] is enabled
        self.loader = ClipLoader(
            self.resolver, store, objects, normalizer, file_urls=self.file_urls
        )
        self._legacy_key_logged = False

    def close(self) -> None:
        """Stop the worker threads (path checks, cuts); at shutdown."""
        self.resolver.close()
        if self.chunker is not None:
            self.chunker.close()
        if self.normalizer is not None:
            self.normalizer.close()

    @overload
    async def rewrite(
        self,
        raw: bytes,
        shape: RouteShape,
        body: dict[str, Any] | None = None,
        *,
        split: Literal[False] = False,
        part_params: Mapping[Place, str] | None = None,
    ) -> bytes | SegmentedPayload | ReferencedBody: ...
    @overload
    async def rewrite(
        self,
        raw: bytes,
        shape: RouteShape,
        body: dict[str, Any] | None = None,
        *,
        split: bool,
        part_params: Mapping[Place, str] | None = None,
    ) -> bytes | SegmentedPayload | ReferencedBody | ChunkedRequest: ...
    async def rewrite(
        self,
        raw: bytes,
        shape: RouteShape,
        body: dict[str, Any] | None = None,
        *,
        split: bool = False,
        part_params: Mapping[Place, str] | None = None,
    ) -> bytes | SegmentedPayload | ReferencedBody | ChunkedRequest:
        """`body` is `raw` parsed, when the caller already has it (it may be rewritten, as the
        Responses bridge's chat body is); the pipeline then modifies that dict in place.
        `part_params` names content parts in errors where the body is not the client's own.

        With `split` (the server's routes), a row whose one clip is longer than the chunker's
        threshold becomes a `ChunkedRequest`: one body per piece, for the fan-out; with
        `[chunking]` off, clips past that threshold are counted and logged (over_window.py)."""
        if body is None:
            body = parse_json_object(raw)
        sidechannel = self.keys.read(body, self.max_clips, self.max_clip_bytes)
        in_parts = self.part_clips(body, shape, part_params)
        own = self._own_digests(body, shape, in_parts)
        if sidechannel is None and not in_parts:
            return self._inline_only(raw, body, shape, own)
        refs = self._take(body, sidechannel, in_parts)
        clips = await self._load(refs, shape)
        if self.metrics is not None:
            self.metrics.count_clips(len(refs) - len(in_parts), len(in_parts))
        try:
            for clip in clips:
                self._check_length(clip)
            if split and self.chunker is not None and shape.chunkable and len(clips) == 1:
                place = in_parts[0].place if in_parts else None
                chunked = await self._split(body, shape, clips[0], place)
                if chunked is not None:
                    await close_streams(clips)  # the pieces are what goes upstream
                    return chunked
            if split and self.over_window is not None:
                self.over_window.see(clips)
            digests = [clip_digest(clip) for clip in clips] if self.keyed else None
            key = self._clip_key(body, shape, digests, in_parts, own)
            placeholders = Placeholders()
            parts = [
                self._part(clip, shape, placeholders, digests[i] if digests else None)
                for i, clip in enumerate(clips)
            ]
            # The gateway's own parts decide whether the clips may go by reference: a uuid a
            # client put on its path part is kept, but never makes its clip go by reference.
            by_reference = shape.references and referable(clips, parts)
            # the client's own inline parts, found where the client put them (before the splice)
            inline = inline_parts(body.get(shape.items), own) if by_reference and own else []
            parts = splice_clips(body, shape.splice, parts, [found.place for found in in_parts])
            if by_reference:
                sizes = [base64_bytes(clip) for clip in clips]
                return ReferencedBody.of(body, placeholders, parts, sizes, key, inline)
            return SegmentedPayload(placeholders.render(body), key)
        except BaseException:
            await close_streams(clips)
            raise

    def passed(
        self, raw: bytes, body: dict[str, Any], shape: RouteShape
    ) -> bytes | SegmentedPayload:
        """A body `rewrite` left as it was (`raw`, parsed as `body`): as it is, or, when the
        client's own audio parts are keyed, with their key."""
        key = self.unchanged_key(body, shape)
        return raw if key is None else SegmentedPayload([raw], key)

    def unchanged_key(self, body: dict[str, Any], shape: RouteShape) -> str | None:
        """The key of the audio parts a client inlined itself in `body`; None when bodies are
        not keyed or it has none."""
        return clip_key(part_digests(body.get(shape.items), {})) if self.keyed else None

    def _clip_key(
        self,
        body: dict[str, Any],
        shape: RouteShape,
        digests: Sequence[str] | None,
        in_parts: Sequence[PartClip],
        own: Mapping[Place, str | None] | None,
    ) -> str | None:
        """The request's clip key from its clips' digests, taken before the splice (every
        part still where the client put it); None when bodies are not keyed."""
        if digests is None:
            return None
        places = [found.place for found in in_parts]
        return clips_key(digests, places, body.get(shape.items), own or {})

    def _own_digests(
        self, body: dict[str, Any], shape: RouteShape, in_parts: Sequence[PartClip]
    ) -> dict[Place, str | None] | None:
        """The digests of the audio parts the client put in `body` itself (not the path parts
        the gateway reads), by place, before any splice moves them: hashed once, for the key
        and for inline audio going by reference. None unless clips go by reference (the key
        alone hashes them where it is taken)."""
        if not shape.references:
            return None
        return placed_digests(body.get(shape.items), {found.place for found in in_parts})

    def _inline_only(
        self,
        raw: bytes,
        body: dict[str, Any],
        shape: RouteShape,
        own: Mapping[Place, str | None] | None,
    ) -> bytes | ReferencedBody:
        """A body with no clip to read: as it came, unless it carries audio the client inlined
        itself and clips go by reference (`clips/inline.py`)."""
        if not shape.references or own is None:
            return raw
        inline = inline_parts(body.get(shape.items), own)
        if not inline:
            return raw
        key = clip_key(part_digests(body.get(shape.items), own)) if self.keyed else None
        return ReferencedBody.of(body, Placeholders(), [], [], key, inline)

    def part_clips(
        self, body: dict[str, Any], shape: RouteShape, params: Mapping[Place, str] | None = None
    ) -> list[PartClip]:
        """The content parts of `body` that name a clip, when this route and the
        `[sidechannel] content_parts` switch read them; else none."""
        if self.parts is None or not shape.content_parts:
            return []
        return part_clips(body.get("messages"), self.parts, params)

    def _take(
        self, body: dict[str, Any], sidechannel: Sidechannel | None, in_parts: list[PartClip]
    ) -> tuple[InlineAudio | PathAudio, ...]:
        """Every clip the request names, in clip order (the sidechannel's, then the parts'),
        held to `audio.max_clips`; the sidechannel is taken out of the body."""
        side_refs = sidechannel.clips if sidechannel is not None else ()
        refs = (*side_refs, *(found.ref for found in in_parts))
        side_key = sidechannel.param if sidechannel is not None else None
        check_clip_count([ref.param for ref in refs], len(in_parts), side_key, self.max_clips)
        if sidechannel is not None:
            if sidechannel.kind == LEGACY_INLINE_KEY:
                self._log_legacy_key_once(sidechannel)
            strip_sidechannel(body, sidechannel.key)
        return refs

    async def _load(
        self, refs: tuple[InlineAudio | PathAudio, ...], shape: RouteShape
    ) -> list[LoadedClip]:
        # input_audio has no URL form: there, objects go as bytes even in presigned mode.
        return await self.loader.load(
            refs, presigned=self.presigned and not shape.input_audio_parts
        )

    async def sources(self, refs: Sequence[PathAudio], *, presigned: bool) -> list[AudioSource]:
        """The checked sources of `refs`, seen through [normalize] when it is on."""
        return await self.loader.sources(refs, presigned=presigned)

    async def _split(
        self, body: dict[str, Any], shape: RouteShape, clip: LoadedClip, place: Place | None
    ) -> ChunkedRequest | None:
        """The clip's pieces as one body each, or None when it is not long enough to split;
        400 `chunking_unsupported` for a request whose answers cannot be merged. A clip from
        a content part (at `place`) has each piece where the part stood."""
        assert self.chunker is not None
        found = await self.chunker.split(clip)
        if found is None:
            return None
        try:
            refuse_unmergeable(body, shape.name)
            label, given, param = clip_names(clip)
            if shape.input_audio_parts:  # refused now, not once per piece: wav or mp3 only
                mime, fix = found.pieces[0].mime, shape.input_audio_fix
                input_audio_format(mime, label=label, given=given, param=param, fix=fix)
        except BaseException:
            if found.close is not None:
                await asyncio.to_thread(found.close)
            raise
        return chunked_request(
            body,
            found.pieces,
            clip=f"{label} {given!r}",
            param=param,
            splice=shape.splice if place is None else partial(_splice_at, place),
            part=lambda piece, placeholders: self._part(piece, shape, placeholders),
            release=found.close,
            key=piece_key(body.get(shape.items), place) if self.keyed else None,
        )

    def _part(
        self,
        clip: LoadedClip,
        shape: RouteShape,
        placeholders: Placeholders,
        digest: str | None = None,
    ) -> Part:
        """The clip's audio part; `digest` (its `clip_digest`, when the key was taken) spares
        hashing inline audio again for its uuid."""
        part: Part
        if isinstance(clip, PathClip) and clip.url is not None:
            # input_audio has no URL form: a clip vLLM fetches is an audio_url part.
            part = {"type": "audio_url", "audio_url": {"url": clip.url}}
        else:
            mime, lead, segments = base64_segments(clip)
            if shape.input_audio_parts:
                label, given, param = clip_names(clip)
                fmt = input_audio_format(
                    mime, label=label, given=given, param=param, fix=shape.input_audio_fix
                )
                token = placeholders.add(b"", segments)
                data = {"data": token, "format": fmt}
                part = {"type": "input_audio", "input_audio": data}
            else:
                token = placeholders.add(lead, segments)
                part = {"type": "audio_url", "audio_url": {"url": token}}
        if shape.references:
            if (uuid := reference_uuid(clip, digest)) is not None:
                part["uuid"] = uuid
        elif self.config.part_uuid:
            part["uuid"] = content_sha256(clip, digest)
        return part

    def _check_length(self, clip: LoadedClip) -> None:
        """vLLM's decode limits, from the clip's header: 413 before anything is sent."""
        label, given, param = clip_names(clip)
        header = clip_header(clip)
        check_decode_limits(
            header,
            self.max_duration_seconds,
            self.max_decode_bytes,
            label=label,
            given=given,
            param=param,
        )

    def _log_legacy_key_once(self, sidechannel: Sidechannel) -> None:
        if not self._legacy_key_logged:
            self._legacy_key_logged = True
            log.warning(
                "%s is the deprecated name of metadata.%s; it works, but rename it in your "
                "data (logged once)",
                sidechannel.param,
                self.keys.name("audio_data"),
            )


def _splice_at(place: Place, body: dict[str, Any], parts: list[Part]) -> None:
    splice_in_place(body, [place], parts)
