"""A request's clips loaded: every path checked by its kind's policy (local files through the
resolver's worker threads, objects HEADed concurrently), seen through [normalize] when it is
on, then read or taken from the cache. Inline clips pass as they are.

The one place that tells local files and objects apart; `pipeline.py` and `speech.py` ask it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ..audio.cache import AudioStore
from ..audio.encoder import StreamedAudio
from ..audio.policy import BatchedResolver
from ..audio.sources import AudioSource
from ..audio.sources.local import LocalClip
from ..audio.sources.objects import ObjectClip, ObjectSources
from ..clips.loaded import LoadedClip, PathClip, close_streams
from ..naming.sidechannel import InlineAudio, PathAudio
from ..normalize.form import TargetForm
from ..normalize.source import Normalizer, as_sent


class ClipLoader:
    """Loads clips for one pipeline; `file_urls`: local clips go upstream as `file://` URLs."""

    def __init__(
        self,
        resolver: BatchedResolver,
        store: AudioStore,
        objects: ObjectSources | None,
        normalizer: Normalizer,
        *,
        file_urls: bool,
        default_form: TargetForm | None = None,
    ):
        self.resolver = resolver
        self.store = store
        self.objects = objects
        self.normalizer = normalizer
        self.file_urls = file_urls
        self.default_form = default_form  # [normalize]'s, where no model says otherwise

    async def load(
        self,
        refs: Sequence[InlineAudio | PathAudio],
        *,
        presigned: bool,
        form: TargetForm | None,
    ) -> list[LoadedClip]:
        """The audio of every clip, in order: inline clips as they are, every path checked by
        its kind's policy, seen in `form` (None: as stored), then read or cached (objects as
        URLs with `presigned`)."""
        paths = [ref for ref in refs if isinstance(ref, PathAudio)]
        if not paths:
            return list(refs)  # type: ignore[arg-type]  # all InlineAudio
        loaded = await self._load_paths(paths, presigned, form)
        if len(paths) == len(refs):
            return loaded
        read = iter(loaded)
        return [next(read) if isinstance(ref, PathAudio) else ref for ref in refs]

    async def _load_paths(
        self, refs: list[PathAudio], presigned: bool, form: TargetForm | None
    ) -> list[LoadedClip]:
        sources = await self.sources(refs, presigned=presigned, form=form)
        if len(sources) == 1:
            return [await self._loaded(sources[0])]
        results = await asyncio.gather(*map(self._loaded, sources), return_exceptions=True)
        loaded: list[LoadedClip] = [r for r in results if not isinstance(r, BaseException)]
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:
            await close_streams(loaded)
            raise failure
        return loaded

    async def sources(
        self, refs: Sequence[PathAudio], *, presigned: bool, form: TargetForm | None
    ) -> list[AudioSource]:
        """The checked sources of `refs` (`_checked_sources`), seen in `form` (the model's:
        [normalize], or mono for a model that refuses stereo; None: as they are)."""
        found = await self._checked_sources(refs, presigned=presigned)
        if form is None:
            return found
        return [self.normalizer.wrap(source, form) for source in found]

    async def _checked_sources(
        self, refs: Sequence[PathAudio], *, presigned: bool
    ) -> list[AudioSource]:
        """Local paths resolved in one worker-thread hop, objects checked and HEADed
        concurrently (with `presigned`, to go upstream as URLs)."""
        objects = self.objects
        claimed = [objects is not None and objects.policy.claims(ref) for ref in refs]
        if not any(claimed):  # the common case: local files only
            return [
                LocalClip(clip, self.file_urls) for clip in await self.resolver.resolve(list(refs))
            ]
        local_refs = [ref for ref, is_object in zip(refs, claimed, strict=True) if not is_object]
        local = iter(await self.resolver.resolve(local_refs) if local_refs else [])
        object_refs = [ref for ref, is_object in zip(refs, claimed, strict=True) if is_object]
        remote = iter(await self._object_sources(object_refs, presigned))
        return [
            next(remote) if is_object else LocalClip(next(local), self.file_urls)
            for is_object in claimed
        ]

    async def _object_sources(self, refs: list[PathAudio], presigned: bool) -> list[ObjectClip]:
        if not refs:
            return []
        assert self.objects is not None
        lookups = (self.objects.source(r, presigned=presigned) for r in refs)
        results = await asyncio.gather(*lookups, return_exceptions=True)
        for result in results:  # the first failure in clip order, as `check` reports it
            if isinstance(result, BaseException):
                raise result
        return results  # type: ignore[return-value]

    async def load_raw(self, ref: PathAudio) -> PathClip:
        """One path's clip as its bytes, never base64 nor a URL (a speech-to-text upload):
        checked, seen through [normalize], read or cached (or streamed) as `load` does."""
        source = (await self.sources([ref], presigned=False, form=self.default_form))[0]
        return await self._loaded(source, raw=True)

    async def _loaded(self, source: AudioSource, *, raw: bool = False) -> PathClip:
        audio = await self.store.get(source, raw=raw)
        try:
            source = as_sent(source, audio)
            return PathClip(source, audio, None if raw else await source.upstream_url())
        except BaseException:
            if isinstance(audio, StreamedAudio):
                await audio.aclose()
            raise
