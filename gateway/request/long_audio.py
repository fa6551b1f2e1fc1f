"""A row's one long clip split into pieces ([chunking]): one body per piece, for the fan-out."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING, Any

from ..chunking.bodies import ChunkedRequest, MakePart, chunked_request
from ..chunking.refusals import refuse_unmergeable
from ..clips.loaded import LoadedClip, clip_names, piece_key
from ..config import ChunkingConfig
from ..naming.content_parts import Place
from ..naming.formats import input_audio_format
from ..splice import Part, splice_in_place
from .shapes import RouteShape

if TYPE_CHECKING:  # imported when chunking is on (numpy, libsndfile)
    from ..chunking import Chunker


async def split_long_clip(
    chunker: Chunker,
    body: dict[str, Any],
    shape: RouteShape,
    clip: LoadedClip,
    place: Place | None,
    *,
    part: MakePart,
    keyed: bool,
    cuts: ChunkingConfig | None = None,
) -> ChunkedRequest | None:
    """The clip's pieces as one body each, or None when it is not long enough to split;
    400 `chunking_unsupported` for a request whose answers cannot be merged. A clip from
    a content part (at `place`) has each piece where the part stood. `part` makes a piece's
    audio part; `keyed`: bodies carry their clips' key; `cuts`: where the model's clips are cut
    (by default the chunker's own `[chunking]`)."""
    found = await chunker.split(clip, cuts)
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
        part=part,
        release=found.close,
        key=piece_key(body.get(shape.items), place) if keyed else None,
    )


def _splice_at(place: Place, body: dict[str, Any], parts: list[Part]) -> None:
    splice_in_place(body, [place], parts)
