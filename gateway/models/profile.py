"""A model's profile, and an operator's overrides merged over it. Pure.

A profile says what the gateway must know of a model to send it audio it takes whole:

- `window_seconds`: the audio it processes at a time (None: no fixed window), told only;
- `max_clip_seconds`: the longest clip it hears whole; a longer one is cut into pieces that
  long by `[chunking]` (for a model that keeps only its window, the window). None: no maximum,
  a clip is never cut;
- `clips_per_prompt`: the most clips one prompt may carry (None: no limit of its own);
- `sample_rate`, `accepts_stereo`: the rate `[normalize]` sends at, and whether a stereo clip
  is refused (then the gateway sends it mono, `[normalize]` on or off);
- `accepts_uuid_only_parts`: whether a part naming a held clip by its uuid alone is taken
  (`[splice] repeats = "reference"`); if not, every part keeps its data and uuid;
- `chat`, `transcriptions`, `translations`: the routes it serves, and what its translations
  route does.

Models the gateway cannot place get `global_profile(config)`: today's settings (`[chunking]`,
`[normalize]`), so nothing changes for them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..config import ChunkingConfig, Config, ModelConfig, NormalizeConfig, Translations


@dataclass(frozen=True, slots=True)
class ModelProfile:
    window_seconds: float | None
    max_clip_seconds: float | None
    clips_per_prompt: int | None
    sample_rate: int
    accepts_stereo: bool
    accepts_uuid_only_parts: bool
    chat: bool
    transcriptions: bool
    translations: Translations

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class ModelRules:
    """What one served model name gets: its profile, and how the gateway placed it.

    `architecture` is "" and `placed_by` "" for a model not placed (the global settings, with
    the operator's overrides if any). `piece_seconds`: how long `[chunking]`'s pieces are."""

    name: str
    architecture: str
    placed_by: str
    profile: ModelProfile
    piece_seconds: float | None
    overrides: frozenset[str] = frozenset()  # the profile values the operator replaced

    @property
    def placed(self) -> bool:
        return bool(self.architecture)

    def as_json(self) -> dict[str, Any]:
        return {
            "architecture": self.architecture or None,
            "placed_by": self.placed_by or None,
            "overrides": sorted(self.overrides),
            **self.profile.as_json(),
        }


def global_profile(chunking: ChunkingConfig, normalize: NormalizeConfig) -> ModelProfile:
    """The profile of a model the gateway cannot place: the global settings, as before
    profiles existed (clips over `[chunking] threshold_seconds` are cut or told, `[normalize]`
    sends at its own rate and channels, uuid-only parts are sent)."""
    return ModelProfile(
        window_seconds=None,
        max_clip_seconds=chunking.threshold_seconds,
        clips_per_prompt=None,
        sample_rate=normalize.sample_rate,
        accepts_stereo=True,
        accepts_uuid_only_parts=True,
        chat=True,
        transcriptions=True,
        translations="unknown",
    )


def with_overrides(profile: ModelProfile, overrides: Mapping[str, Any]) -> ModelProfile:
    """`profile` with the operator's values (`ModelConfig.overrides()`) in place of its own;
    `max_clip_seconds = 0` is no maximum."""
    values = dict(overrides)
    if values.get("max_clip_seconds") == 0:
        values["max_clip_seconds"] = None
    return dataclasses.replace(profile, **values)


def resolve(
    name: str,
    config: Config,
    found: tuple[str, str] | None,
    builtin: Mapping[str, ModelProfile],
) -> ModelRules:
    """The rules of served model `name`: `found` is (architecture, how it was placed) when the
    operator or the gateway placed it; an architecture with no built-in profile is not placed.
    The operator's `[models."<name>"]` overrides go over the profile (or the global one)."""
    table = config.models.get(name, ModelConfig())
    overrides = table.overrides()
    architecture, placed_by = found if found is not None else ("", "")
    base = builtin.get(architecture)
    if base is None:
        architecture, placed_by = "", ""
        base = global_profile(config.chunking, config.normalize)
    profile = with_overrides(base, overrides)
    # Pieces as long as the longest clip heard whole; with the global settings (and no
    # max_clip_seconds of the operator's), [chunking] max_chunk_seconds as before.
    pieces = profile.max_clip_seconds
    if not architecture and "max_clip_seconds" not in overrides:
        pieces = config.chunking.max_chunk_seconds
    return ModelRules(name, architecture, placed_by, profile, pieces, frozenset(overrides))
