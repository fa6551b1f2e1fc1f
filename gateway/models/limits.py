"""A model's own limits, applied before any clip is read. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from ..config import ChunkingConfig
from ..errors import InvalidRequest
from .profile import ModelRules


def check_clips_per_prompt(rules: ModelRules, params: Sequence[str], own_parts: int) -> None:
    """400 `too_many_clips` when the gateway's clips (`params` names each, in order) and the
    audio parts the client inlined itself (`own_parts`) are more than the model takes in one
    prompt: vLLM would refuse them after every clip was read and sent."""
    limit = rules.profile.clips_per_prompt
    total = len(params) + own_parts
    if limit is None or total <= limit or not params:
        return
    param = params[min(max(limit - own_parts, 0), len(params) - 1)]
    model = f"model {rules.name!r}" + (f" ({rules.architecture})" if rules.architecture else "")
    inlined = f", {own_parts} of them inlined by the client" if own_parts else ""
    raise InvalidRequest(
        f"{param}: the request carries {total} audio clips{inlined}, over the limit of {limit} "
        f"per prompt of {model}, which refuses more (its profile; set "
        f'[models."{rules.name}"] clips_per_prompt if the served model takes more)',
        param=param,
        code="too_many_clips",
    )


def chunking_for(rules: ModelRules, chunking: ChunkingConfig) -> ChunkingConfig | None:
    """`[chunking]` as it cuts this model's clips: past the longest clip it hears whole, into
    pieces `rules.piece_seconds` long; None for a model whose clips are never cut. The global
    settings' own section is returned as it is."""
    longest, pieces = rules.profile.max_clip_seconds, rules.piece_seconds
    if longest is None or pieces is None:
        return None
    if (longest, pieces) == (chunking.threshold_seconds, chunking.max_chunk_seconds):
        return chunking
    # A model's pieces may be shorter than the quiet search or the shortest tail: scaled down.
    return chunking.model_copy(
        update={
            "threshold_seconds": longest,
            "max_chunk_seconds": min(pieces, longest),
            "quiet_search_seconds": min(chunking.quiet_search_seconds, pieces / 2),
            "min_tail_seconds": min(chunking.min_tail_seconds, pieces / 2),
        }
    )
