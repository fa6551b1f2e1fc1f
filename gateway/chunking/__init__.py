"""Long audio: clips longer than the model's window cut into pieces (`[chunking]`).

plan.py     pure: where the cuts go (quiet or fixed), in frames
cutter.py   blocking: one streaming decode pass that cuts and writes WAV pieces
reading.py  where the cutter reads a clip's bytes (base64 in memory, a file, a spool)
pieces.py   `Chunker.split(clip)`: the pieces, cached in the audio store, single-flighted

May import: `audio`, `bridge`, `clips`, `config`, `errors`, `metrics`, `naming`, `splice`,
`upstream`. The pipeline imports it, never the other way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .pieces import AudioPiece, Chunker, ClipPieces

__all__ = ["AudioPiece", "Chunker", "ClipPieces"]


def __getattr__(name: str) -> Any:
    """The cutter's names, imported on first use: numpy and libsndfile (~12 MiB of RSS) load
    only in a gateway that splits clips, not in every one that imports the fan-out's modules."""
    if name in __all__:
        from . import pieces

        return getattr(pieces, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
