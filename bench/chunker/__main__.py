"""`python -m bench.chunker`: see run.py."""

from __future__ import annotations

from bench.chunker.run import main

main()
