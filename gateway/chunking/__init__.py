"""Long audio: clips longer than the model's window cut into pieces (`[chunking]`).

plan.py     pure: where the cuts go (quiet or fixed), in frames
cutter.py   blocking: one streaming decode pass that cuts and writes WAV pieces
reading.py  where the cutter reads a clip's bytes (base64 in memory, a file, a spool)
pieces.py   `Chunker.split(clip)`: the pieces, cached in the audio store, single-flighted
"""

from __future__ import annotations

from .pieces import AudioPiece, Chunker, ClipPieces

__all__ = ["AudioPiece", "Chunker", "ClipPieces"]
