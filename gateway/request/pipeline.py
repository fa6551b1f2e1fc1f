"""One rewritten request: parse -> sidechannel + path parts -> audio -> splice -> segmented body.

`RewritePipeline.rewrite` returns the original bytes when the request carries no sidechannel
and no content part naming a path (forwarded byte-for-byte), else the spliced body as a
`SegmentedPayload`. Every clip, whatever carried it, goes through the same sources, checks,
cache and limits; the sidechannel's clips come first, then the parts in message order.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

from ..affinity import clip_key, part_digests
from ..audio.cache import AudioStore
from ..audio.policy import BatchedResolver, PathPolicy
from ..audio.recent import RecentPaths
from ..audio.sources import AudioSource
from ..audio.sources.objects import ObjectSources
from ..chunking.bodies import ChunkedRequest
from ..clips.inline import client_digests, inline_body, inline_parts
from ..clips.loaded import (
    LoadedClip,
    base64_bytes,
    check_clip_limits,
    clip_digest,
    clips_key,
    close_streams,
    referable,
)
from ..clips.over_window import OverWindowWatch
from ..config import AudioConfig, SpliceConfig
from ..metrics import GatewayMetrics
from ..naming.content_parts import PartClip, PartRoots, Place, check_clip_count, part_clips
from ..naming.sidechannel import (
    DEFAULT_KEYS,
    LEGACY_INLINE_KEY,
    InlineAudio,
    PathAudio,
    Sidechannel,
    SidechannelKeys,
    strip_sidechannel,
)
from ..normalize.form import TargetForm
from ..normalize.source import Normalizer
from ..references.body import ReferencedBody
from ..splice import Part, splice_clips
from ..upstream.body import Placeholders, SegmentedPayload
from .loading import ClipLoader
from .long_audio import split_long_clip
from .model_rules import ModelSettings
from .parts import audio_part
from .shapes import RouteShape, parse_json_object

if TYPE_CHECKING:  # imported when chunking is on (numpy, libsndfile)
    from ..chunking import Chunker

log = logging.getLogger("gateway.pipeline")  # the name the docs give


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
        parts: PartRoots | None = None,
        metrics: GatewayMetrics | None = None,
        keyed: bool = False,
        *,
        normalizer: Normalizer,
        models: ModelSettings,
    ):
        """`models`: each request's model's profile; `normalizer` converts the clips a model
        needs in another form (`[normalize]`, or mono for one that refuses stereo)."""
        self.config = config
        self.keyed = keyed  # bodies carry their clips' key ([routing] affinity_headers)
        # Inline audio's sha256 is wanted (key, uuid): its check hashes it, one decode for both.
        self.hash_inline = keyed or config.part_uuid or config.repeats == "reference"
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
        self.normalizer = normalizer
        self.models = models
        self.loader = ClipLoader(
            self.resolver,
            store,
            objects,
            normalizer,
            file_urls=self.file_urls,
            default_form=models.default_form(),
        )
        self._legacy_key_logged = False

    def close(self) -> None:
        """Stop the worker threads (path checks, cuts); at shutdown."""
        self.resolver.close()
        if self.chunker is not None:
            self.chunker.close()
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
        sidechannel = self.keys.read(
            body, self.max_clips, self.max_clip_bytes, sha256=self.hash_inline
        )
        in_parts = self.part_clips(body, shape, part_params)
        # the digests of the audio parts the client inlined itself, before any splice moves
        # them: hashed once, for the key and for their uuids by reference (clips/inline.py)
        own = client_digests(body.get(shape.items), in_parts) if shape.references else None
        if sidechannel is None and not in_parts:
            inline_only = own and inline_body(body, body.get(shape.items), own, keyed=self.keyed)
            if inline_only:
                await self.models.rules(body)  # placed before the relay asks whether it may
            return inline_only or raw
        rules = await self.models.rules(body)
        refs = self._take(body, sidechannel, in_parts)
        params = [ref.param for ref in refs]
        self.models.check_clips(rules, params, body.get(shape.items), in_parts)
        clips = await self._load(refs, shape, self.models.form(rules))
        if self.metrics is not None:
            self.metrics.count_clips(len(refs) - len(in_parts), len(in_parts))
        try:
            for clip in clips:
                check_clip_limits(clip, self.max_duration_seconds, self.max_decode_bytes)
            cuts = self.models.cuts(rules, self.chunker.config) if self.chunker else None
            if split and self.chunker and cuts and shape.chunkable and len(clips) == 1:
                place = in_parts[0].place if in_parts else None
                chunked = await split_long_clip(
                    self.chunker,
                    body,
                    shape,
                    clips[0],
                    place,
                    part=lambda piece, placeholders: self._part(piece, shape, placeholders),
                    keyed=self.keyed,
                    cuts=cuts,
                )
                if chunked is not None:
                    await close_streams(clips)  # the pieces are what goes upstream
                    return chunked
            if split and self.over_window is not None:
                self.over_window.see(clips, self.models.window(rules))
            digests = [clip_digest(clip) for clip in clips] if self.keyed else None
            key = self._clip_key(body, shape, digests, in_parts, own)
            placeholders = Placeholders()
            parts = [
                self._part(clip, shape, placeholders, digests[i] if digests else None)
                for i, clip in enumerate(clips)
            ]
            # The gateway's own parts decide whether the clips may go by reference: a uuid a
            # client put on its path part is kept, but never makes its clip go by reference.
            # (A model that refuses uuid-only parts gets every part with its data and uuid: the
            # reference relay asks its profile, ModelSettings.refuses_uuid_only.)
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
        self, refs: tuple[InlineAudio | PathAudio, ...], shape: RouteShape, form: TargetForm | None
    ) -> list[LoadedClip]:
        # input_audio has no URL form: there, objects go as bytes even in presigned mode.
        presigned = self.presigned and not shape.input_audio_parts
        return await self.loader.load(refs, presigned=presigned, form=form)

    async def sources(self, refs: Sequence[PathAudio], *, presigned: bool) -> list[AudioSource]:
        """The checked sources of `refs`, seen through [normalize] when it is on."""
        return await self.loader.sources(refs, presigned=presigned, form=self.loader.default_form)

    def _part(
        self,
        clip: LoadedClip,
        shape: RouteShape,
        placeholders: Placeholders,
        digest: str | None = None,
    ) -> Part:
        return audio_part(clip, shape, placeholders, digest, part_uuid=self.config.part_uuid)

    def _log_legacy_key_once(self, sidechannel: Sidechannel) -> None:
        if not self._legacy_key_logged:
            self._legacy_key_logged = True
            log.warning(
                "%s is the deprecated name of metadata.%s; it works, but rename it in your "
                "data (logged once)",
                sidechannel.param,
                self.keys.name("audio_data"),
            )
