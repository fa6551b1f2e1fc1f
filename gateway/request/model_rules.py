"""What one request's model changes on its path: the model's profile (gateway.models) turned
into the pipeline's settings for this request.

- its clips-per-prompt limit, checked before any clip is read;
- the form its clips are loaded in: its rate with `[normalize]` on, mono where it refuses
  stereo (`[normalize]` on or off);
- where `[chunking]` cuts its clips, or, with `[chunking]` off, the window the over-window
  log uses.

Whether its parts may go by uuid alone (`[splice] repeats = "reference"`) the reference relay
asks the placement itself (`Placement.refuses_uuid_only`, wired by the app).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..clips.over_window import ModelWindow
from ..config import ChunkingConfig, NormalizeConfig
from ..models.limits import check_clips_per_prompt, chunking_for
from ..models.placement import Placement
from ..models.profile import ModelRules
from ..naming.content_parts import PartClip, content_parts
from ..normalize.form import TargetForm

AUDIO_PART_TYPES = ("audio_url", "input_audio")


class ModelSettings:
    """The profiles (`placement`) and the global sections they refine."""

    def __init__(self, placement: Placement, normalize: NormalizeConfig) -> None:
        self.placement = placement
        self.normalize = normalize

    async def rules(self, body: dict[str, Any]) -> ModelRules:
        """The rules of the body's `model` (the global settings when the gateway cannot
        place it); never fails."""
        return await self.placement.rules(body.get("model"))

    def check_clips(
        self,
        rules: ModelRules,
        params: Sequence[str],
        items: Any,
        in_parts: Sequence[PartClip],
    ) -> None:
        """400 `too_many_clips` past the model's limit: the gateway's clips (`params`) and
        the audio parts the client inlined itself in `items` (not the path parts)."""
        if rules.profile.clips_per_prompt is None:
            return
        ours = {found.place for found in in_parts}
        own = sum(
            1
            for place, part in content_parts(items)
            if place not in ours and type(part) is dict and part.get("type") in AUDIO_PART_TYPES
        )
        check_clips_per_prompt(rules, params, own)

    def default_form(self) -> TargetForm | None:
        """`[normalize]`'s own form (None: off), where no model says otherwise."""
        return TargetForm.of(self.normalize) if self.normalize.enabled else None

    def form(self, rules: ModelRules) -> TargetForm | None:
        profile = rules.profile
        return TargetForm.for_model(self.normalize, profile.sample_rate, profile.accepts_stereo)

    @staticmethod
    def cuts(rules: ModelRules, chunking: ChunkingConfig) -> ChunkingConfig | None:
        return chunking_for(rules, chunking)

    @staticmethod
    def window(rules: ModelRules) -> ModelWindow:
        """The window the over-window log holds the model's clips to, and its source."""
        longest = rules.profile.max_clip_seconds
        if "max_clip_seconds" in rules.overrides:
            return ModelWindow(longest, f'[models."{rules.name}"] max_clip_seconds')
        if rules.placed:
            return ModelWindow(longest, f"the longest clip {rules.architecture} hears whole")
        return ModelWindow(longest)
