"""The pipeline of a config: path policy, object sources, store, chunker or over-window watch,
[normalize], as `serve` and the dataset tools both build it."""

from __future__ import annotations

import asyncio

from ..audio.cache import AudioStore
from ..audio.policy import PathPolicy
from ..audio.sources.objects import object_sources
from ..clips.over_window import OverWindowWatch
from ..config import CacheConfig, Config
from ..metrics import GatewayMetrics
from ..models.placement import Placement
from ..naming.sidechannel import SidechannelKeys
from ..normalize.source import Normalizer
from .model_rules import ModelSettings
from .pipeline import RewritePipeline


async def build_pipeline(
    config: Config,
    metrics: GatewayMetrics,
    cache: CacheConfig | None = None,
    placement: Placement | None = None,
) -> RewritePipeline:
    """The pipeline of `config`: path policy, object sources, store and splice, as `serve` and
    the dataset tools both use it (`cache` overrides `config.cache`; `placement` finds each
    request's model, by default from the `[models]` tables only). Close its resolver."""
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
    # Always there: a model that refuses stereo gets mono clips with [normalize] off too.
    normalizer = Normalizer(config.normalize, config.audio, metrics)
    models = ModelSettings(placement or Placement(config), config.normalize)
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
        models=models,
    )
