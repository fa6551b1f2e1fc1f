"""Where every benchmark writes its results by default: bench/results/ (docs quote the files)."""

from __future__ import annotations

from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"
