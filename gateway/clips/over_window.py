"""Clips longer than the model's window sent whole, made visible (`[chunking]` off).

With `[chunking] enabled = false`, a clip whose header says it runs past `threshold_seconds`
goes upstream unsplit: the model hears its first window only (or refuses it). Each such clip
sent counts in `audio_gateway_clips_over_window_total`, and is logged at WARNING once per clip
identity (a file's real path, an object's bucket and key, inline audio's bytes), not once per
request: a dataset sent with 16 seeds a row logs each long clip once. The identities logged
are remembered up to `REMEMBERED_CLIPS` (oldest forgotten first). A clip whose length its
header does not say (MP3, Ogg, M4A) is not counted.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from ..metrics import GatewayMetrics
from ..naming.sidechannel import InlineAudio
from .loaded import LoadedClip, clip_header, clip_names

log = logging.getLogger("gateway.over_window")  # the name the docs give

REMEMBERED_CLIPS = 4096  # identities already logged; a forgotten one is logged again


@dataclass(frozen=True, slots=True)
class ModelWindow:
    """The longest clip a model hears whole (None: any), and where that number comes from."""

    seconds: float | None
    source: str = "[chunking] threshold_seconds"


class OverWindowWatch:
    """Counts and logs clips over `threshold_seconds` that go upstream whole."""

    def __init__(self, threshold_seconds: float, metrics: GatewayMetrics) -> None:
        self.threshold_seconds = threshold_seconds
        self._counter = metrics.clips_over_window
        self._logged: dict[Hashable, None] = {}  # insertion-ordered: the oldest first

    def see(self, clips: Sequence[LoadedClip], window: ModelWindow | None = None) -> None:
        """Called with every clip of a request that goes upstream unsplit; `window` is the
        model's (by default `threshold_seconds`)."""
        window = window or ModelWindow(self.threshold_seconds)
        if window.seconds is None:
            return  # the model hears clips of any length whole
        for clip in clips:
            header = clip_header(clip)
            if header is not None and header.seconds > window.seconds:
                self._counter.inc()
                self._log_once(clip, header.seconds, window)

    def _log_once(self, clip: LoadedClip, seconds: float, window: ModelWindow) -> None:
        identity = _identity(clip)
        if identity in self._logged:
            return
        if len(self._logged) >= REMEMBERED_CLIPS:
            del self._logged[next(iter(self._logged))]
        self._logged[identity] = None
        label, given, _ = clip_names(clip)
        named = label if isinstance(clip, InlineAudio) else f"{label} {given!r}"
        log.warning(
            "%s is %.1f s of audio, longer than %s (%g s, the model's window), and was sent "
            "whole because [chunking] enabled = false: the model may hear only its first window "
            "or refuse it. Set [chunking] enabled = true to split such clips and merge the "
            "answers (logged once per clip; counted in audio_gateway_clips_over_window_total)",
            named,
            seconds,
            window.source,
            window.seconds,
        )


def _identity(clip: LoadedClip) -> Hashable:
    if isinstance(clip, InlineAudio):
        return ("inline", hash(clip.payload))
    return clip.source.identity
